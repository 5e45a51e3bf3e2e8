"""A person's changes to a task: ``loki queue edit``, ``close`` and ``defer`` (docs/queue.md, "Changing a task").

Each is one unit of work over the queue, recorded in the task's history with who made it. None of
them touches the claim of a task an agent holds, unless asked with ``force``:

* ``edit`` of a held task is refused (exit 4, naming the holder) unless ``force``; the holder itself
  may edit its own task. Even forced, an edit changes only the fields asked for: the holder keeps its
  lease and token and finishes the task it has.
* ``close`` of a held task is refused likewise; forced, the claim ends (the task is closed) and the
  holder's next ``complete``/``fail``/``heartbeat`` gets exit 4.
* ``defer`` is for a pending task; an in-progress one only with ``force`` (or by its holder), which
  ends the claim and puts the task back to pending, deferred.

What ``close`` does, by state (a person says "done" or "won't do"):

======================  ==========================  ==============================================
from                    done                        won't do (``wont_do``)
======================  ==========================  ==============================================
pending, blocked,       completed                   cancelled (tasks depending on it are reported,
in-progress, failed,                                as ``cancel`` reports them)
landing
dead-letter             completed (a recovery)      abandoned
completed, cancelled,   refused (exit 4: already closed)
abandoned
======================  ==========================  ==============================================

Functions here take the :class:`~loki.queue.queue.Queue` they work for (``Queue.edit`` and friends
call them); they import no ``Queue`` (a protocol names the five members they use), so the queue module
stays the head of the family.
"""

from __future__ import annotations

import re

from loki.clock import add_seconds, format_ts, parse_ts, ts_before_or_at
from loki.errors import Conflict, InvalidArgument
from loki.tasks import history
from loki.tasks.record import PRIORITIES, add_note, clear_claim

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime
    from typing import Any, Protocol

    from loki.storage.state import StateStore
    from loki.storage.tasks import TaskStore, TaskTxn

    class Queue(Protocol):
        """What these functions ask of :class:`loki.queue.queue.Queue`: named here, not imported, so the
        two modules form no circle even for the type checker (docs/design.md, "Layers")."""

        @property
        def store(self) -> StateStore: ...
        @property
        def tasks(self) -> TaskStore: ...
        def where(self, unit: TaskTxn, task_id: str) -> str: ...
        def rotate_hot(self, unit: TaskTxn, state: str) -> None: ...
        def dependents(self, unit: TaskTxn, task_id: str) -> list[str]: ...
        def task_paths(self, paths: Any, where: str = ...) -> list[str]: ...
        def check_new_dependencies(self, unit: TaskTxn, task: dict[str, Any], deps: list[str],
                                   option: str) -> None: ...
        def path_holders(self, unit: Any, lease_now: datetime) -> Any: ...

EDITABLE = ("pending", "in-progress", "blocked", "failed")
"""The queue states whose tasks ``edit`` changes; a dead-letter entry's task too."""
CLOSABLE = ("pending", "in-progress", "blocked", "failed", "landing")
EDIT_OPTIONS = ("--title", "--description", "--type", "--priority", "--add-label", "--remove-label",
                "--add-dependency", "--remove-dependency", "--max-attempts", "--verify", "--no-verify", "--paths",
                "--clear-paths", "--land", "--no-land")


def edit(queue: Queue, task_id: str, *, by: str | None = None, force: bool = False, title: str | None = None,
         description: str | None = None, type: str | None = None, priority: str | None = None,
         add_labels: Sequence[str] = (), remove_labels: Sequence[str] = (), add_dependencies: Sequence[str] = (),
         remove_dependencies: Sequence[str] = (), max_attempts: int | None = None,
         verify: Sequence[str] | None = None, paths: Sequence[str] | None = None,
         land: str | bool | None = None) -> dict[str, Any]:
    """Change the named fields of a pending, in-progress, blocked, failed or dead-letter task.

    Returns ``{"task", "state", "changed"}``: ``changed`` maps each field that changed to
    ``{"from", "to"}`` (empty: every value was already so, and nothing was written). Adding a label
    or dependency the task has, or removing one it lacks, changes nothing. Raises
    :class:`InvalidArgument` (exit 2) for a value its own rules refuse or an edit that asks for
    nothing (``land``: the branch to land on, False none whatever the type's default, docs/verify.md);
    :class:`InvalidInput` (exit 1) for a dependency that does not exist, will never
    complete, or closes a cycle; :class:`Conflict` (exit 4) for a task another agent holds (unless
    ``force``) or one that is finished.
    """
    from loki.storage.paths import check_id
    from loki.tasks.record import redact_task_text
    from loki.text.textsafe import check_name

    check_id(task_id, "task id")
    asked = {"title": title, "description": description, "type": type, "priority": priority,
             "max_attempts": max_attempts, "verify": None if verify is None else list(verify), "land": land}
    if all(v is None for v in asked.values()) and not (add_labels or remove_labels or add_dependencies
                                                      or remove_dependencies) and paths is None:
        raise InvalidArgument(f"nothing to edit: give at least one of {', '.join(EDIT_OPTIONS)}", field="edit")
    if title is not None and (not title.strip() or len(title.strip()) > 500):
        raise InvalidArgument("--title must be 1 to 500 characters, not only spaces", field="title")
    if type is not None:
        check_name(type, "task type", 100)
    if priority is not None and priority not in PRIORITIES:
        raise InvalidArgument(f"--priority must be one of {', '.join(PRIORITIES)} (got {priority!r})",
                              field="priority")
    if max_attempts is not None and (isinstance(max_attempts, bool) or not isinstance(max_attempts, int)
                                     or not 1 <= max_attempts <= 1000):
        raise InvalidArgument("--max-attempts must be an integer from 1 to 1000", field="max_attempts")
    if verify is not None:  # the task's checks, replacing its list (or its type's default); [] none
        from loki.tasks.verify import check_commands

        asked["verify"] = check_commands(list(verify))
    if land is not None and land is not False:  # False: no landing, whatever the type's default
        from loki.tasks.landing import check_branch

        asked["land"] = check_branch(land)
    for label in [*add_labels, *remove_labels]:
        check_name(label, "label", 100)
    for dep in [*add_dependencies, *remove_dependencies]:
        check_id(dep, "dependency id")
    for option, items, other in (("label", add_labels, remove_labels),
                                 ("dependency", add_dependencies, remove_dependencies)):
        both = sorted(set(items) & set(other))
        if both:
            raise InvalidArgument(f"--add-{option} and --remove-{option} both name {both[0]!r}", field=option)
    if by is not None:
        check_name(by, "name")
    new_paths = queue.task_paths(list(paths)) if paths is not None else None
    with queue.tasks.transaction() as unit:
        now = format_ts(queue.store.clock.now())  # inside the lock: timestamps follow the commit order
        state, task, entry = _locate(queue, unit, task_id, EDITABLE, "edited", with_dead_letter=True)
        holder = refuse_held(task, state, now, force=force, by=by, verb="edit")
        new: dict[str, Any] = {key: value for key, value in asked.items() if value is not None}
        if title is not None:
            new["title"] = title.strip()
        labels = [label for label in task.get("labels", []) if label not in remove_labels]
        new["labels"] = labels + [label for label in dict.fromkeys(add_labels) if label not in labels]
        redact_task_text(new)  # the same free text as `add`'s, redacted the same way
        adding = [dep for dep in dict.fromkeys(add_dependencies) if dep not in task["dependencies"]]
        if adding:
            queue.check_new_dependencies(unit, task, adding, "--add-dependency")
        new["dependencies"] = [d for d in task["dependencies"] if d not in remove_dependencies] + adding
        if new_paths is not None and (new_paths or task.get("paths")):
            new["paths"] = new_paths
            if state == "in-progress" and new_paths and new_paths != task.get("paths"):
                _refuse_held_paths(queue, unit, task, new_paths)
        changed = history.changes(task, new)
        if not changed:
            return {"task": task, "state": state, "changed": {}}
        before = {"type": task.get("type"), "labels": list(task.get("labels") or [])}
        task.update(new)
        task["updated_at"] = now
        if task.get("usage") and ("type" in changed or "labels" in changed):
            _rescope_spend(unit, before, task)
        held = f"while held by {holder} (--force); the claim is unchanged" if holder and holder != by else None
        history.record(task, "edited", now, by=by, changes=changed, detail=held)
        if entry is not None:
            unit.update_dead_letter(entry)
        else:
            unit.update(state, task)
    if state == "in-progress" and "paths" in changed:
        _claim_moved(queue, {"paths": True})  # its old paths, or its new ones: the holders changed
    return {"task": task, "state": state, "changed": changed}


def _refuse_held_paths(queue: Queue, unit: Any, task: dict[str, Any], paths: list[str]) -> None:
    """A claimed task's new paths are checked as its claim's were (and as ``lease acquire`` checks): under
    the queue's lock, none may overlap what another agent holds, a live lease or a claim; else Conflict
    (exit 4) naming the holder."""
    from loki.leases.leases import describe_holder

    lease_now = (getattr(queue.store, "lease_clock", None) or queue.store.clock).now()  # the claims' clock
    holders = queue.path_holders(unit, lease_now)
    holder = holders.blocker(paths, task.get("claimed_by"), skip_task=task["id"])
    if holder is not None:
        raise Conflict(f"cannot give {task['id']} these paths: {describe_holder(holder)}; nothing changed",
                       task_id=task["id"], holder=holder["agent"], lease_id=holder["lease_id"],
                       task=holder.get("task"), expires_at=holder["expires_at"], overlap=holder["overlap"])


def close(queue: Queue, task_id: str, *, reason: str, wont_do: bool = False, by: str | None = None,
          force: bool = False) -> dict[str, Any]:
    """A person closes a task: done (-> completed) or won't do (-> cancelled, or abandoned from the
    dead-letter queue); the table in this module's docstring. ``reason`` is kept in the history and
    the notes, and answers the task's open escalations.

    Returns ``{"task", "from", "state", "dependents", "resolved"}`` (``dependents``: active tasks that
    wait on a task closed as won't do; ``resolved``: the escalation files it closed). Raises
    :class:`Conflict` (exit 4) for a task another agent holds (unless ``force``) or already closed.
    """
    from loki.storage.paths import check_id
    from loki.text.textsafe import check_name

    check_id(task_id, "task id")
    if not reason or not reason.strip():
        raise InvalidArgument("--reason must say why the task is closed", field="reason")
    if by is not None:
        check_name(by, "name")
    from loki.text.redact import redact

    outcome = "won't do" if wont_do else "done"
    # redacted here: it is also a dead-letter entry's abandon reason and an escalation's resolution
    text = redact(f"closed as {outcome} by {by or 'someone'}: {' '.join(reason.split())}")
    with queue.tasks.transaction() as unit:
        now = format_ts(queue.store.clock.now())  # inside the lock: timestamps follow the commit order
        state, task, entry = _locate(queue, unit, task_id, CLOSABLE, "closed", with_dead_letter=True)
        holder = refuse_held(task, state, now, force=force, by=by, verb="close")
        ended = f" (the claim of {holder} ended: --force)" if holder and holder != by else ""
        clear_claim(task)
        task.pop("blocked", None)
        task["updated_at"] = now
        add_note(task, text + ended, now, by)
        target = ("abandoned" if entry is not None else "cancelled") if wont_do else "completed"
        history.record(task, "closed", now, by=by, to=target, detail=text + ended)
        dependents: list[str] = []
        if entry is not None and wont_do:
            unit.abandon(entry, text, now)
        else:
            if entry is not None:
                unit.recover(entry)
            else:
                unit.remove(state, task)
            if not wont_do:
                task["completed_at"] = now
                task["completed_by"] = by  # who says it is done (loki agents and show read it)
            unit.put(target, task)
            queue.rotate_hot(unit, target)
            if wont_do:
                dependents = queue.dependents(unit, task_id)
    if state in ("in-progress", "landing"):  # its claim, or its landing, held its paths
        _claim_moved(queue, task)
    return {"task": task, "from": state, "state": target, "dependents": dependents,
            "resolved": _resolve_escalations(queue, task_id, text)}


def defer(queue: Queue, task_id: str, *, until: str | None, by: str | None = None, reason: str | None = None,
          force: bool = False) -> dict[str, Any]:
    """Keep a task from being claimed before ``until``; ``until`` None (or ``"now"``) lifts a deferral.

    ``until``: an ISO 8601 time (``2026-01-26T09:00:00Z``, a date ``2026-01-26`` meaning its
    midnight UTC) or a duration from now (``90s``, ``30m``, ``2h``, ``3d``, ``1w``); it must be in the
    future. The task must be pending; an in-progress one only by its holder or with ``force``, which
    ends the claim and puts the task back to pending (no attempt is recorded). A deferral is kept
    across retries and approvals until its time, and a new ``defer`` replaces it.

    Returns ``{"task", "state", "deferred_until", "released", "changed"}``. Raises
    :class:`InvalidArgument` (exit 2) for a time it cannot read or one in the past; :class:`Conflict`
    (exit 4) for a task in another state, or held by another agent without ``force``.
    """
    from loki.storage.paths import check_id
    from loki.text.textsafe import check_name

    check_id(task_id, "task id")
    if by is not None:
        check_name(by, "name")
    with queue.tasks.transaction() as unit:
        now_dt = queue.store.clock.now()  # inside the lock: timestamps follow the commit order
        now = format_ts(now_dt)
        when = parse_until(until, now_dt)
        state, task, _ = _locate(queue, unit, task_id, ("pending", "in-progress"), "deferred",
                                 with_dead_letter=False)
        holder = refuse_held(task, state, now, force=force, by=by, verb="defer")
        released = None
        if state == "in-progress":
            released = holder
            clear_claim(task)
            add_note(task, f"claim of {holder} ended to defer it", now, by)
        current = (task.get("deferred") or {}).get("until")
        if when is None:
            if current is None and released is None:
                return {"task": task, "state": state, "deferred_until": None, "released": None, "changed": False}
            task.pop("deferred", None)
            history.record(task, "undeferred", now, by=by, to="pending" if released else None,
                           detail=_why(reason, released))
        else:
            task["deferred"] = {"until": when, "since": now, **({"by": by} if by else {}),
                                **({"reason": history.clip(reason)} if reason and reason.strip() else {})}
            history.record(task, "deferred", now, by=by, until=when, to="pending" if released else None,
                           detail=_why(reason, released))
        task["updated_at"] = now
        if released is not None:
            unit.move(task, "in-progress", "pending")
        else:
            unit.update("pending", task)
    if released is not None:
        _claim_moved(queue, task)
    return {"task": task, "state": "pending", "deferred_until": when, "released": released, "changed": True}


_DURATION = re.compile(r"\+?(\d{1,9})([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_until(text: str | None, now: Any) -> str | None:
    """``--until`` as a canonical timestamp (None: lift the deferral); see :func:`defer`."""
    if text is None or text.strip().lower() == "now":
        return None
    value = text.strip()
    duration = _DURATION.fullmatch(value)
    try:
        if duration:
            when = add_seconds(now, int(duration.group(1)) * _UNITS[duration.group(2)])
        elif re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
            when = parse_ts(value + "T00:00:00Z")
        else:
            when = parse_ts(value)
    except OverflowError:
        raise InvalidArgument(f"--until {text!r}: the year must be between 2000 and 9998", field="until") from None
    except ValueError:
        raise InvalidArgument(f"--until {text!r}: not a time; give an ISO 8601 time (2026-01-26T09:00:00Z), a "
                              "date (2026-01-26), a duration from now (90s, 30m, 2h, 3d, 1w) or `now` to lift the "
                              "deferral", field="until") from None
    if not 2000 <= when.year <= 9998:
        raise InvalidArgument(f"--until {text!r}: the year must be between 2000 and 9998", field="until")
    stamp = format_ts(when)
    if ts_before_or_at(stamp, format_ts(now)):
        raise InvalidArgument(f"--until {text!r} is not in the future (now is {format_ts(now)}); `--until now` lifts "
                              "a deferral", field="until")
    return stamp


# -- inside ------------------------------------------------------------------------------------------


def _locate(queue: Queue, unit: TaskTxn, task_id: str, states: Sequence[str], verb: str, *,
            with_dead_letter: bool) -> tuple[str, dict[str, Any], dict[str, Any] | None]:
    """``(state, task, dead-letter entry or None)``; NotFound (exit 1) or Conflict (exit 4) otherwise."""
    found = unit.find(task_id, states)
    if found is not None:
        return found[0], found[1], None
    entry = unit.find_dead_letter(task_id) if with_dead_letter else None
    if entry is not None:
        return "dead-letter", entry["task_data"], entry
    where = queue.where(unit, task_id)  # NotFound when it is nowhere
    names = [*states, *(["dead-letter"] if with_dead_letter else [])]
    allowed = f"{', '.join(names[:-1])} or {names[-1]}"
    already = " already" if where.split(" ")[0] in ("completed", "cancelled", "abandoned") else ""
    raise Conflict(f"{task_id} is{already} {where}; only {allowed} tasks can be {verb}; nothing changed",
                   task_id=task_id, state=where)


def holder_of(task: dict[str, Any], state: str, now: str) -> str | None:
    """Who holds ``task`` now: the holder of an in-progress task (its lease expired or not: until the
    task is requeued, nobody else has it), or a Loki Mode claim in place in pending.json while it runs."""
    holder = task.get("claimed_by")
    if not holder:
        return None
    if state == "in-progress":
        return str(holder)
    if state == "pending" and task.get("lease_until") and ts_before_or_at(now, task["lease_until"]):
        return str(holder)
    return None


def refuse_held(task: dict[str, Any], state: str, now: str, *, force: bool, by: str | None, verb: str) -> str | None:
    """Refuse (exit 4, naming the holder) to ``verb`` a task another agent holds, unless ``force``.

    The holder itself (``by``) needs no force. Returns the holder (None when nobody holds it).
    """
    holder = holder_of(task, state, now)
    if holder is not None and holder != by and not force:
        lease = f" (lease until {task['lease_until']})" if task.get("lease_until") else ""
        raise Conflict(f"{task['id']} is held by {holder!r}{lease}; {verb} it anyway with --force; nothing changed",
                       task_id=task["id"], holder=holder, state=state)
    return holder


def _rescope_spend(unit: TaskTxn, before: dict[str, Any], task: dict[str, Any]) -> None:
    """The task's type or labels changed after it spent: the running totals the budgets read count its entries
    in its new scopes, in this unit of work (loki/tasks/totals.py), as a rebuild from the tasks would."""
    totals = unit.spend_totals()
    if totals is not None:
        from loki.tasks import totals as running

        if running.rescope(totals, before, task):
            unit.set_spend_totals(totals)


def _claim_moved(queue: Queue, task: dict[str, Any]) -> None:
    """The claim of a task with paths ended or changed its paths: this machine's copy of the holders follows."""
    from loki.leases.leases import claim_moved

    claim_moved(queue.store, task)


def _why(reason: str | None, released: str | None) -> str | None:
    parts = [" ".join(reason.split())] if reason and reason.strip() else []
    if released:
        parts.append(f"the claim of {released} ended")
    return "; ".join(parts) or None


def _resolve_escalations(queue: Queue, task_id: str, text: str) -> list[str]:
    """A task closed by a person needs no human decision any more: its open escalations say so."""
    from loki.queue.escalations import list_escalations, mark_resolved

    files = [row["file"] for row in list_escalations(queue.store, open_only=True) if row["task_id"] == task_id]
    for name in files:
        mark_resolved(queue.store, name, text)
    return files
