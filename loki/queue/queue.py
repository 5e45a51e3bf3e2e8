"""The task queue: atomic claims with leases, retries with backoff, dependencies, priorities.

Tasks live in the task store (:mod:`loki.storage.tasks`: one file per state under ``queue/`` on files,
rows on PostgreSQL, dicts in memory). Every operation is one unit of work of that store, so several
agents calling ``claim`` at the same moment each get a different task, and a crash at any instant
leaves every task in exactly one state. Time comes from the store's clock: nothing here reads the wall
clock itself.

Library use::

    from loki import Queue
    queue = Queue.open()                       # the nearest .loki/
    task = queue.add("Write the login endpoint", priority="high")   # the task, like claim's
    task = queue.claim("agent-1")              # raises NothingToDo (exit 3) when nothing is ready
    queue.complete(task["id"], "agent-1", token=task["claim_token"], result={"commit": "abc123"})
"""

from __future__ import annotations

import re

from loki.clock import add_seconds, format_ts, parse_ts, ts_before_or_at
from loki.config import setting
from loki.errors import Conflict, InvalidArgument, InvalidInput, NotFound, NothingToDo
from loki.storage import jsonio, layout
from loki.storage.opening import open_store
from loki.storage.paths import check_id
from loki.tasks import history
from loki.tasks.compat import RUNTIME_HOLDER
from loki.tasks.deadentry import make_entry
from loki.tasks.readiness import DEAD_STATES, DependencyIndex, behind_dead_letter, never_ready, select_ready
from loki.tasks.record import (
    DEFAULT_TYPE,
    ERROR_TYPES,
    LONGEST_LEASE_SECONDS,
    PRIORITIES,
    PRIORITY_RANK,
    TASK_STATES,
    State,
    TaskAnswer,
    add_note,
    attempts_in_budget,
    backoff_seconds,
    clear_claim,
    make_attempt,
    make_task,
    new_claim_token,
    new_task_id,
    plausible_lease,
    redact_task_text,
    start_fresh_budget,
    summary,
)
from loki.wording import plural

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Sequence
    from datetime import datetime
    from typing import Any, Protocol

    from loki.storage.state import StateStore as Store
    from loki.storage.tasks import TaskStore, TaskTxn

    class BudgetVerdict(Protocol):
        """What the budgets allow one claim (loki/spend/budgets.py's ``Gate``): refused outright, or kept off
        types and labels; each a standing with ``describe()``."""

        blocking: list[Any]
        types: dict[str, Any]
        labels: dict[str, Any]

        def excludes(self, task: dict[str, Any]) -> Any: ...

    class ClaimGate(Protocol):
        """The budgets' part of a claim (loki/spend/budgets.py's ``ClaimGate``)."""

        def inside(self, unit: TaskTxn) -> BudgetVerdict: ...
        def refusal(self, standing: Any, extra: str) -> Exception: ...


PENDING, IN_PROGRESS, BLOCKED = State.PENDING.value, State.IN_PROGRESS.value, State.BLOCKED.value
LANDING = State.LANDING.value
COMPLETED, FAILED, CANCELLED = State.COMPLETED.value, State.FAILED.value, State.CANCELLED.value
DEAD_LETTER, ABANDONED = State.DEAD_LETTER.value, State.ABANDONED.value
HOT_STATES = tuple(s.value for s in TASK_STATES)
ACTIVE_STATES = (PENDING, IN_PROGRESS, BLOCKED)
MAX_LEASE_SECONDS = LONGEST_LEASE_SECONDS
SKEW_TOLERANCE_SECONDS = 60
"""How far a lease's claim may lie in a clock's future before it is taken for clock skew (files): a
minute covers machines kept by NTP, and is far shorter than a lease."""
MAX_SKEW_FOLLOWED_SECONDS = 24 * 3600
"""A newer claim further ahead than this is not followed (a clock set to another day, LOKI_NOW): a
clock a day off is a wrong date, not drift, and following it would push every lease that far."""
"""States whose tasks may still run; a dependency on a task in any other state is settled."""
LIVE_STATES = (*HOT_STATES, DEAD_LETTER, ABANDONED)
"""Every state in which a task id is taken, short of the archive."""


class Queue:
    """The task queue of one ``.loki/`` tree."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @classmethod
    def open(cls, root: str | None = None) -> Queue:
        return cls(open_store(root))

    # -- settings ------------------------------------------------------------------------------

    def _setting(self, key: str) -> Any:
        return setting(self.store.config, "queue", key)

    def _now(self) -> datetime:
        return self.store.clock.now()

    def _lease_now(self) -> datetime:
        """The clock leases are given and judged by: the database's on PostgreSQL (``store.lease_clock``,
        one clock for every machine), this machine's elsewhere (bounded: :meth:`_bounded_leases`).
        Read inside the unit, after its lock, like every other "now"."""
        clock = getattr(self.store, "lease_clock", None) or self.store.clock
        when: datetime = clock.now()
        return when

    def _shared_lease_clock(self) -> bool:
        return getattr(self.store, "lease_clock", None) is not None

    @property
    def tasks(self) -> TaskStore:
        """The queue's storage (files, or memory in tests): every change goes through one of its units."""
        return self.store.tasks()

    # -- adding --------------------------------------------------------------------------------

    def add(
        self,
        title: str,
        *,
        description: str = "",
        type: str | None = None,
        priority: str = "medium",
        depends_on: Sequence[str] = (),
        labels: Sequence[str] = (),
        payload: dict[str, Any] | None = None,
        task_id: str | None = None,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
        verify: Sequence[str] | None = None,
        paths: Sequence[str] = (),
        land: str | None = None,
    ) -> TaskAnswer:
        """Add one task and return it, as ``claim`` returns the task it took.

        With an ``idempotency_key`` seen before, nothing is added and the task that has the key is
        returned, its ``created`` attribute False (``add_many`` answers ``{"created", "task"}`` per item).
        """
        spec = {"title": title, "description": description, "type": type, "priority": priority,
                "dependencies": list(depends_on), "labels": list(labels), "payload": payload, "id": task_id,
                "idempotency_key": idempotency_key, "max_attempts": max_attempts}
        if verify is not None:
            spec["verify"] = list(verify)
        if land is not None:  # absent: the type's default (docs/verify.md, "Landing")
            spec["land"] = land
        if paths:
            spec["paths"] = self.task_paths(list(paths))  # refused here: a bad spec with an id reads as Loki Mode's
        result = self.add_many([spec], where="")[0]
        return TaskAnswer.of(result["task"], created=result["created"])

    def add_from_file(self, path: str) -> list[dict[str, Any]]:
        """``add_many`` of a batch file: a JSON array, ``{"tasks": [...]}`` or JSON lines.

        The file must be a regular file no larger than a state file may be (the batch goes into
        ``queue/pending.json``, which may not be larger either): ``/dev/zero`` would fill memory,
        a FIFO or ``/dev/urandom`` would never end.
        """
        return self.add_many(read_batch(path, self.store.max_file_bytes), where=path)

    def add_many(self, specs: Sequence[dict[str, Any]], *, where: str = "input") -> list[dict[str, Any]]:
        """Add several tasks in one transaction: all are added, or none (the first error is raised).

        Each spec uses ``add``'s keyword names (``dependencies`` or ``depends_on``), or is a task in
        Loki Mode's runtime format (see :mod:`loki.tasks.compat`). Dependencies may refer to tasks of the
        same batch, in any order.
        """
        with self.tasks.transaction() as unit:
            now = format_ts(self._now())  # inside the lock: timestamps follow the commit order
            results: list[dict[str, Any]] = []
            batch: dict[str, dict[str, Any]] = {}
            batch_keys: dict[str, dict[str, Any]] = {}
            for index, spec in enumerate(specs):
                task = self.task_from_spec(spec, now, f"{where} at /{index}" if where else "")
                key = task.get("idempotency_key")
                if key is not None:
                    holder = batch_keys.get(key) or _task_or_none(unit.find_by_key(key))
                    if holder is not None:
                        results.append({"created": False, "task": holder})
                        continue
                if task["id"] in batch or _known(unit, task["id"]) or (
                        spec.get("id") is not None and unit.find_archived(task["id"]) is not None):
                    raise Conflict(f"task id {task['id']!r} already exists", task_id=task["id"])
                batch[task["id"]] = task
                if key is not None:
                    batch_keys[key] = task
                results.append({"created": True, "task": task})
            explicit = {str(spec["id"]) for spec in specs if isinstance(spec, dict) and spec.get("id") is not None}
            self._check_dependencies(unit, batch, where, explicit)
            for task in batch.values():
                history.record(task, "added", now, to=PENDING)
                unit.put(PENDING, task)
        return results

    def task_from_spec(self, spec: Any, now: str, where: str = "") -> dict[str, Any]:
        """A new pending task from ``spec`` (``add``'s names or Loki Mode's format), checked; not stored."""
        try:
            return self._build_task(spec, now, where)
        except InvalidInput as exc:
            if where:  # the spec came from a file: a bad file is exit 1, not a usage error
                message = exc.message if exc.message.startswith(where) else f"{where}: {exc.message}"
                raise InvalidInput(message, **exc.details) from None
            raise

    def _build_task(self, spec: Any, now: str, where: str) -> dict[str, Any]:
        from loki.storage.layout import task_keys
        from loki.tasks.compat import is_loki_task

        if not isinstance(spec, dict):
            raise InvalidArgument(f"{_at(where)}a task must be a JSON object, got {type(spec).__name__}")
        if spec.get("verify") is not None:  # whichever shape it turns out to be, its checks are checks
            from loki.tasks.verify import check_commands

            spec = {**spec, "verify": check_commands(spec["verify"], f"{_at(where)}verify" if where else "--verify")}
        if spec.get("land") is not None:  # a branch name as git allows one, in every shape
            from loki.tasks.landing import check_branch

            spec = {**spec, "land": check_branch(spec["land"], f"{_at(where)}land" if where else "--land")}
        if spec.get("paths") is not None:  # and its paths are paths: normalised, or refused, in every shape
            spec = {**spec, "paths": self.task_paths(spec["paths"], where)}
        if is_loki_task(spec, task_keys()):
            task = self._foreign_task(spec, now)
        else:
            try:
                task = self._spec_task(spec, now, where)
            except InvalidInput:
                # Not `add`'s shape: a task as Loki Mode (or its PRD, GitHub, BMAD, OpenSpec imports)
                # writes it, read by the same reader as a queue file in place. Such a task always has
                # an id; without one, what was wrong with it as `add`'s shape is the error.
                if not isinstance(spec.get("id"), str):
                    raise
                _refuse_misspelt_fields(spec, where)
                task = self._foreign_task(spec, now)
        task["status"] = PENDING
        return self._checked(task, where)

    def _foreign_task(self, spec: dict[str, Any], now: str) -> dict[str, Any]:
        from loki.storage.layout import task_keys
        from loki.tasks.compat import import_task

        check_id(str(spec["id"]), "task id")
        task = import_task(dict(spec), now, task_keys())
        if spec.get("paths"):
            # Normalised by _build_task already: they are the task's paths, not a foreign field to keep aside.
            task["paths"] = list(spec["paths"])
            kept = task["payload"].get("loki_mode")
            if isinstance(kept, dict):
                kept.pop("paths", None)
                if not kept:
                    del task["payload"]["loki_mode"]
        clear_claim(task)
        return task

    def _spec_task(self, spec: dict[str, Any], now: str, where: str) -> dict[str, Any]:
        """A task from ``add``'s keyword names, checked strictly (a misspelt field is an error)."""
        unknown = set(spec) - ADD_FIELDS
        if unknown:
            raise InvalidArgument(f"{_at(where)}unknown field(s) {', '.join(sorted(unknown))}",
                                  field=sorted(unknown)[0])
        title = spec.get("title")
        if not isinstance(title, str) or not title.strip():
            raise InvalidArgument(f"{_at(where)}title must be a non-empty string", field="title")
        priority = spec.get("priority") or "medium"
        if priority not in PRIORITIES:
            raise InvalidArgument(f"{_at(where)}priority must be one of high, medium, low (got {priority!r})",
                                  field="priority")
        task_id = new_task_id() if spec.get("id") is None else spec["id"]
        if not isinstance(task_id, str):
            raise InvalidArgument(f"{_at(where)}id must be a string", field="id")
        check_id(task_id, "task id")
        deps = spec.get("dependencies") or spec.get("depends_on") or []
        if not isinstance(deps, list):
            raise InvalidArgument(f"{_at(where)}dependencies must be a list of task ids", field="dependencies")
        for dep in deps:
            check_id(dep, "dependency id")
        payload = spec.get("payload")
        if payload is not None and not isinstance(payload, dict):
            raise InvalidArgument(f"{_at(where)}payload must be a JSON object", field="payload")
        max_attempts = spec.get("max_attempts")
        if max_attempts is None:
            max_attempts = self._setting("max_attempts")
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or not 1 <= max_attempts <= 1000:
            raise InvalidArgument(f"{_at(where)}max_attempts must be an integer from 1 to 1000", field="max_attempts")
        task = make_task(
            task_id=task_id, title=title.strip(), now=now, description=spec.get("description") or "",
            type=spec.get("type") or "general", priority=priority, dependencies=deps,
            labels=list(spec.get("labels") or []), payload=payload, max_attempts=max_attempts,
            idempotency_key=spec.get("idempotency_key"),
        )
        # Checked and normalised by _build_task, whatever the shape (absent verify: the type's default checks)
        for key in ("verify", "paths", "land"):
            if spec.get(key) is not None:
                task[key] = spec[key]
        return task

    def repo_root(self) -> str | None:
        """The repository's top (the directory holding ``.loki/``): where task paths are relative to."""
        import os

        local = self.store.local_root
        return os.path.dirname(os.path.abspath(local)) if local else None

    def task_paths(self, paths: Any, where: str = "") -> list[str]:
        """A task's ``paths``, normalised (docs/leases.md); a bad pattern is refused naming it."""
        from loki.leases.patterns import normalise

        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise InvalidArgument(f"{_at(where)}paths must be a list of patterns", field="paths")
        if len(paths) > 100:
            raise InvalidArgument(f"{_at(where)}a task declares at most 100 paths, not {len(paths)}", field="paths")
        return list(dict.fromkeys(normalise(p, self.repo_root()).text for p in paths))

    def path_holders(self, unit: Any, lease_now: datetime) -> Any:
        """Who holds which paths at ``lease_now``: the live path leases, the claims of tasks with paths and the
        landing tasks with paths (:class:`loki.leases.holders.PathHolders`), read in ``unit``."""
        from loki.leases.holders import PathHolders, task_holders
        from loki.leases.leases import PathLeases

        stamp = format_ts(lease_now)
        return PathHolders(PathLeases(self.store).live(lease_now),
                           task_holders(unit.tasks(IN_PROGRESS), stamp, unit.tasks(LANDING)))

    def _checked(self, task: dict[str, Any], where: str) -> dict[str, Any]:
        from loki.text.textsafe import check_name

        redact_task_text(task)
        # Names reach terminals: whichever shape the task came in, no control or bidi characters.
        check_name(task["type"], "task type")
        for label in task["labels"]:
            check_name(label, "label")
        if task["id"] in task["dependencies"]:
            raise InvalidArgument(f"{_at(where)}task {task['id']!r} depends on itself (a cycle)", field="dependencies")
        found = self.store.schemas.problems("task.json", task)
        if found:
            pointer, reason = found[0]
            raise InvalidArgument(f"{where}{pointer}: {reason}", field=pointer)
        return task

    def _state_lookup(self, unit: TaskTxn) -> Callable[[str], str | None]:
        """id -> the state it is in (queue files, dead-letter, abandoned, then the archive), looked up
        one id at a time and remembered."""
        states: dict[str, str | None] = {}

        def state_of(task_id: str) -> str | None:
            if task_id not in states:
                found = unit.find(task_id, LIVE_STATES) or unit.find_archived(task_id)
                states[task_id] = found[0] if found is not None else None
            return states[task_id]

        return state_of

    def _refuse_dead_dependencies(self, unit: TaskTxn, deps: Iterable[str], named: str, at: str = "") -> None:
        """A dependency that is cancelled or abandoned (or waits on one) would never complete."""
        state_of = self._state_lookup(unit)
        deps = list(deps)
        waiting = [dep for dep in deps if state_of(dep) in (PENDING, BLOCKED)]
        # Only what those waiting dependencies wait on decides whether they ever become ready.
        stuck = never_ready(unit.waiting_chain(waiting), state_of) if waiting else {}
        for dep in deps:
            state = state_of(dep)
            root = dep  # the cancelled or abandoned task at the end of the chain: the one to retry
            if state in DEAD_STATES:
                reason = f"which is {state}"
            elif state in (PENDING, BLOCKED):
                if dep not in stuck:
                    continue
                reason = f"which can never be ready (it {stuck[dep]['why']})"
                root = stuck[dep]["root"]
            else:
                continue
            raise InvalidInput(f"{at}{named} depends on {dep!r}, {reason}: it would never be ready; retry {root!r} "
                               "first (`loki queue retry`) or leave the dependency out", field="dependencies",
                               dependency=dep, state=state)

    def _check_dependencies(self, unit: TaskTxn, batch: dict[str, dict[str, Any]], where: str,
                            explicit_ids: set[str]) -> None:
        for index, task in enumerate(batch.values()):
            for dep in task["dependencies"]:
                if dep not in batch and not _known(unit, dep) and unit.find_archived(dep) is None:
                    # Name the task as the user wrote it: a generated id means nothing to them yet.
                    named = (f"task {task['id']!r}" if task["id"] in explicit_ids
                             else f"the new task {task['title']!r}")
                    at = f"{where} at /{index}: " if where else ""
                    raise InvalidInput(f"{at}{named} depends on {dep!r}, which does not exist",
                                       field="dependencies", dependency=dep)
            outside = [dep for dep in task["dependencies"] if dep not in batch]
            if outside:
                named = f"task {task['id']!r}" if task["id"] in explicit_ids else f"the new task {task['title']!r}"
                self._refuse_dead_dependencies(unit, outside, named, f"{where} at /{index}: " if where else "")
        # A cycle can only run through the new tasks (existing tasks cannot depend on them,
        # unless an imported file had dangling ids): walk the graph from each new task.
        if not any(task["dependencies"] for task in batch.values()):
            return
        deps_of = _dependency_lookup(unit, {tid: t["dependencies"] for tid, t in batch.items()})
        for start in batch:
            path = _find_cycle(deps_of, start)
            if path:
                raise InvalidInput(f"{_at(where)}dependency cycle {' -> '.join(path)}", field="dependencies",
                                   cycle=path)

    # -- reading -------------------------------------------------------------------------------

    def list_tasks(self, state: str = PENDING, *, type: str | None = None, label: str | None = None,
                   limit: int | None = None, agent: str | None = None) -> dict[str, Any]:
        """Summaries of the tasks in ``state`` (or ``"all"``), with the total before the limit.

        Pending tasks come in the order ``claim`` takes them: the ready ones first, then the rest,
        each with ``ready`` and, when not, ``why`` (the first reason; ``ready --explain`` gives all).
        A blocked task's ``why`` is its reason and deadline. ``agent``: only the tasks it holds now,
        and the completed ones it completed.
        """
        states = [*HOT_STATES, DEAD_LETTER, ABANDONED] if state == "all" else [state]
        for name in states:
            if name not in (*HOT_STATES, DEAD_LETTER, ABANDONED):
                known = ", ".join((*HOT_STATES, DEAD_LETTER, ABANDONED))
                raise InvalidArgument(f"unknown state {name!r}; one of {known} or all", field="state")
        if agent is not None:
            _check_agent(agent)
        limit = self._setting("list_limit") if limit is None else limit
        if limit < 0:
            raise InvalidArgument("--limit must be 0 or more", field="limit")
        docs = self.tasks.view([name for name in states if name != PENDING])  # pending: _pending_rows reads it
        rows: list[dict[str, Any]] = []

        def fits(task: dict[str, Any], state: str) -> bool:
            if type is not None and task.get("type") != type:
                return False
            if label is not None and label not in task.get("labels", []):
                return False
            return agent is None or task.get("claimed_by") == agent or (
                state == COMPLETED and history.completed_by(task) == agent)

        for name in states:
            if name == PENDING:
                rows += self._pending_rows(lambda t: fits(t, PENDING))
                continue
            tasks = [e["task_data"] for e in docs[name]] if name in (DEAD_LETTER, ABANDONED) else docs[name]
            rows += [summary(task, name) | {"ready": None, "why": _why(task, name)}
                     for task in tasks if fits(task, name)]
        return {"state": state, "total": len(rows), "shown": min(len(rows), limit), "limit": limit,
                "tasks": rows[:limit]}

    def _pending_rows(self, fits: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        from loki.queue.explain import ready_rows
        from loki.tasks.readiness import short_reason

        now = format_ts(self._now())
        report = ready_rows(self.tasks, self.store, now=now, not_after=self._skew_bound(now), fits=fits)
        rows = report["rows"]
        return [summary(r["task"], PENDING) | {"ready": r["ready"], "why": None if r["ready"] else
                                                 short_reason(r["reasons"])}
                for r in [*(r for r in rows if r["ready"]), *(r for r in rows if not r["ready"])]]

    def ready(self, *, types: Sequence[str] = (), labels: Sequence[str] = (),
              priorities: Sequence[str] = ()) -> dict[str, Any]:
        """What an agent would get next, in claim order, and why every other pending task is not ready.

        Returns ``{"now", "pending"`` (all pending tasks), ``"matching"`` (those the filters keep),
        ``"ready"`` (summaries in claim order, each with its ``position``), ``"not_ready"``
        (summaries in claim order, each with ``reasons``: see :func:`loki.tasks.readiness.explain`),
        ``"expired_leases"`` (in-progress tasks the next claim requeues first)``}``. Reads without
        the lock and changes nothing (a HALF_OPEN breaker's probe slot included).
        """
        from loki.queue.explain import ready_rows

        wanted = Wanted(types, labels, priorities)
        now = format_ts(self._now())
        report = ready_rows(self.tasks, self.store, now=now, not_after=self._skew_bound(now),
                            fits=lambda t: wanted.matches(t, with_type=True), lease_now=format_ts(self._lease_now()))
        ready = [summary(r["task"], PENDING) | {"position": n}
                 for n, r in enumerate((r for r in report["rows"] if r["ready"]), start=1)]
        not_ready = [summary(r["task"], PENDING) | {"reasons": r["reasons"]} for r in report["rows"] if not r["ready"]]
        return {"now": now, "pending": report["pending"], "matching": len(report["rows"]), "ready": ready,
                "not_ready": not_ready, "expired_leases": report["expired"]}

    def show(self, task_id: str) -> dict[str, Any]:
        """``{"state", "task", "completed_by"}`` wherever the task is (queue files, dead-letter, abandoned,
        archive); ``completed_by``: who completed it (None when not completed, or not recorded)."""
        found = self._find_anywhere(task_id)
        return found | {"completed_by": history.completed_by(found["task"]) if found["state"] == COMPLETED else None,
                        "spent": _spent(found["task"])}

    def _find_anywhere(self, task_id: str) -> dict[str, Any]:
        check_id(task_id, "task id")
        docs = self.tasks.view([*HOT_STATES, DEAD_LETTER, ABANDONED])
        for state in HOT_STATES:
            for task in docs[state]:
                if task["id"] == task_id:
                    return {"state": state, "task": task}
        for state in (DEAD_LETTER, ABANDONED):
            for entry in docs[state]:
                if entry["task_id"] == task_id:
                    return {"state": state, "task": entry["task_data"], "entry": entry}
        found = self.tasks.find_archived(task_id)
        if found is not None:
            return {"state": found[0], "task": found[1], "archived": True}
        raise NotFound(f"no task {task_id!r}", task_id=task_id)

    def history(self, task_id: str) -> dict[str, Any]:
        """``{"task_id", "title", "state", "recorded", "events"}``: every change to the task, oldest first
        (docs/queue.md, "History"); ``recorded`` False when the task predates its history and the
        events are rebuilt from its attempts and completion."""
        found = self._find_anywhere(task_id)
        events, recorded = history.events_of(found["task"])
        return {"task_id": task_id, "title": found["task"].get("title"), "state": found["state"],
                "archived": bool(found.get("archived")), "recorded": recorded, "events": events,
                "spent": _spent(found["task"])}

    # -- a person's changes (loki/queue/edits.py) -------------------------------------------------

    def edit(self, task_id: str, *, by: str | None = None, force: bool = False, **changes: Any) -> dict[str, Any]:
        """Change a task's title, description, type, priority, labels, dependencies or max_attempts.

        See :func:`loki.queue.edits.edit` for the keywords and what is refused.
        """
        from loki.queue.edits import edit

        return edit(self, task_id, by=by, force=force, **changes)

    def close(self, task_id: str, *, reason: str, wont_do: bool = False, by: str | None = None,
              force: bool = False) -> dict[str, Any]:
        """A person marks a task done, or won't-do (see :func:`loki.queue.edits.close`)."""
        from loki.queue.edits import close

        return close(self, task_id, reason=reason, wont_do=wont_do, by=by, force=force)

    def defer(self, task_id: str, *, until: str | None, by: str | None = None, reason: str | None = None,
              force: bool = False) -> dict[str, Any]:
        """Keep a pending task from being claimed until a time (see :func:`loki.queue.edits.defer`)."""
        from loki.queue.edits import defer

        return defer(self, task_id, until=until, by=by, reason=reason, force=force)

    # -- claiming ------------------------------------------------------------------------------

    def claim(self, agent: str, *, types: Sequence[str] = (), labels: Sequence[str] = (),
              priorities: Sequence[str] = (), lease_seconds: float | None = None, task_id: str | None = None,
              reuse: bool = False, gate: ClaimGate | None = None) -> TaskAnswer:
        """Take the best ready task: priority (high, medium, low), then oldest; return it.

        Ready means pending, not deferred, ``available_at`` reached, not claimed in place, every
        dependency completed, and its type's breaker letting a call through (docs/queue.md).
        ``types`` (any of), ``labels`` (all of) and ``priorities`` (any of) narrow the choice;
        ``task_id`` claims that task, or raises :class:`NothingToDo` saying why it is not ready
        (:class:`Conflict` if another agent holds it, or it is not pending). ``reuse``: if ``agent``
        already holds a live claim that fits (the reply to its last claim was lost), return that
        claim as it is, token and lease unchanged, with ``reused`` True, instead of a second task.
        Leases that expired meanwhile are requeued first, in the same transaction. Raises
        :class:`NothingToDo` (exit 3) with a one-line reason when nothing is ready.

        ``gate``: the budgets' check (loki/spend/budgets.py), asked inside this unit of work, so that it and
        the claim are one step: it refuses the claim, or keeps it off some types and labels (a claim with a
        gate takes the queue's lock on every store).
        """
        _check_agent(agent)
        lease = self._lease(lease_seconds)
        wanted = Wanted(types, labels, priorities)
        if task_id is not None:
            check_id(task_id, "task id")
            if wanted:
                raise InvalidArgument("--id names the task to claim; --type, --label and --priority choose among "
                                      "tasks: give one or the other", field="id")
        # A plain claim unit takes no queue-wide lock on PostgreSQL: claimers skip each other's rows.
        # --id, --reuse, --label and --priority read tasks the store's claim query does not choose
        # (by id, held, filtered in Python): they take the queue lock and lock what they read.
        # A budgeted claim reads the running attempts and totals under the lock: on PostgreSQL too.
        plain = task_id is None and not reuse and not wanted.labels and not wanted.priorities and gate is None
        try:
            best, reason, held, unit, refused = self._claim_unit(agent, wanted, lease, task_id, reuse, plain, gate)
        except _PathsNeedTheLock:
            # A task with paths is claimed under the queue lock on every store (docs/leases.md): two claims
            # of overlapping paths then see each other; the lock-free unit that picked one changed nothing.
            best, reason, held, unit, refused = self._claim_unit(agent, wanted, lease, task_id, reuse, False, gate)
        self.report_dead_letters(unit.dead_lettered)
        if refused is not None:
            assert gate is not None
            raise gate.refusal(*refused)  # after the unit: the signal and escalation take their own locks
        if best is None:
            raise NothingToDo(reason, reason=reason, **({"task_id": task_id} if task_id is not None else {}))
        self._paths_moved(best)
        return TaskAnswer.of(best, reused=held is not None)

    def _claim_unit(self, agent: str, wanted: Wanted, lease: float, task_id: str | None, reuse: bool,
                    plain: bool, gate: ClaimGate | None = None
                    ) -> tuple[dict[str, Any] | None, str, dict[str, Any] | None, TaskTxn, tuple[Any, str] | None]:
        refused: tuple[Any, str] | None = None
        with self.tasks.transaction(claim=plain) as unit:
            now_dt = self._now()  # inside the unit: timestamps follow the commit order
            now = format_ts(now_dt)
            lease_dt = self._lease_now()
            lease_dt = self._requeue_expired(unit, now_dt, lease_dt)
            held = self._live_claim(unit.tasks(IN_PROGRESS), agent, format_ts(lease_dt), task_id,
                                    wanted) if reuse else None
            # The claim held is given back whatever the budgets say: it is not new work.
            verdict = gate.inside(unit) if gate is not None and held is None else None
            best: dict[str, Any] | None
            if held is not None:
                best, reason = held, ""
            elif verdict is not None and verdict.blocking:
                best, reason, refused = None, "", (verdict.blocking[0], "")
            elif task_id is not None:
                best, reason = self._chosen(unit, task_id, agent, now, lease_dt)
                hit = verdict.excludes(best) if verdict is not None and best is not None else None
                if hit is not None:
                    best, refused = None, (hit, f" ({task_id} is in its scope)")
            else:
                best, reason = self._select(unit, now, wanted, agent=agent, lease_dt=lease_dt, plain=plain,
                                            budget=verdict)
                if best is None and verdict is not None and (verdict.types or verdict.labels):
                    # nothing else to claim: a pending task kept off by a spent budget makes it "not now"
                    hit = next((found for task in unit.tasks(PENDING) if wanted.matches(task, with_type=True)
                                for found in [verdict.excludes(task)] if found is not None), None)
                    if hit is not None:
                        refused = (hit, " (every ready task is in its scope)")
            if best is not None and held is None:
                self._take(unit, best, agent, now_dt, lease, lease_dt)
            # requeued leases are committed even when nothing is ready
        return best, reason, held, unit, refused

    def live_claim(self, agent: str, *, task_id: str | None = None, types: Sequence[str] = (),
                   labels: Sequence[str] = (), priorities: Sequence[str] = ()) -> dict[str, Any] | None:
        """The claim ``claim(..., reuse=True)`` would give back now, if any (read without the lock)."""
        in_progress = self.store.tasks().view([IN_PROGRESS])[IN_PROGRESS]
        return self._live_claim(in_progress, agent, format_ts(self._lease_now()), task_id,
                                Wanted(types, labels, priorities))

    def _live_claim(self, in_progress: Iterable[dict[str, Any]], agent: str, now: str, task_id: str | None,
                    wanted: Wanted) -> dict[str, Any] | None:
        """The newest claim ``agent`` holds that fits the request and whose lease runs (``--reuse``)."""
        mine = [t for t in in_progress if t.get("claimed_by") == agent
                and t.get("lease_until") and ts_before_or_at(now, t["lease_until"])
                and (t["id"] == task_id if task_id is not None else wanted.matches(t, with_type=True))]
        return max(mine, key=lambda t: str(t.get("claimed_at") or ""), default=None)

    def _chosen(self, unit: TaskTxn, task_id: str, agent: str, now: str,
                lease_dt: datetime) -> tuple[dict[str, Any] | None, str]:
        """``claim --id``: the task if it is pending and ready; else why not (or a refusal)."""
        found = unit.find(task_id, HOT_STATES)
        if found is None:
            where = self.where(unit, task_id)  # NotFound when it is nowhere
            raise Conflict(f"{task_id} is {where}; only a pending task can be claimed; nothing changed",
                           task_id=task_id, state=where)
        state, task = found
        if state == IN_PROGRESS:
            holder, lease = task.get("claimed_by"), task.get("lease_until")
            until = f" (lease until {lease})" if lease else ""
            if holder == agent:
                raise Conflict(f"{task_id} is already held by {agent} (you){until}; `--reuse` returns your claim "
                               "with its token; nothing changed", task_id=task_id, holder=holder, state=state)
            raise Conflict(f"{task_id} is already claimed by {holder!r}{until}; nothing changed", task_id=task_id,
                           holder=holder, state=state)
        if state != PENDING:
            raise Conflict(f"{task_id} is {state}; only a pending task can be claimed; nothing changed",
                           task_id=task_id, state=state)
        reasons = self._not_ready(unit, task, now, agent=agent, lease_dt=lease_dt)
        if reasons:
            return None, f"{task_id} is not ready: {'; '.join(reasons)}"
        return task, ""

    def _not_ready(self, unit: TaskTxn, task: dict[str, Any], now: str, *, agent: str | None = None,
                   lease_dt: datetime | None = None) -> list[str]:
        """Why one pending task cannot be claimed now (empty: it can), by the rule ``ready`` explains."""
        from loki.tasks.readiness import explain

        deps = DependencyIndex(unit)
        stuck: dict[str, dict[str, str]] = {}
        behind: dict[str, dict[str, str]] = {}
        if task["dependencies"] and not deps.all_completed(task["dependencies"]):
            # Only the chain it waits on decides whether it can ever be ready: read that, not every task.
            chain = unit.waiting_chain([task["id"]])
            stuck = never_ready(chain, deps.state_of)
            behind = behind_dead_letter(chain, deps.state_of)
        gate = _TypeBreakers(self.store)
        # The breaker is asked last, and only for a task otherwise ready: in HALF_OPEN the check
        # takes the single probe slot, which belongs to the claim that takes the task.
        holders = self.path_holders(unit, lease_dt or self._lease_now()) if task.get("paths") else None
        rows = explain([task], now=now, not_after=self._skew_bound(now), deps=deps, stuck=stuck,
                       refusal=lambda type_, first: gate.refusal(type_) if first else None, behind=behind,
                       paths=(lambda t: holders.reason(t, agent)) if holders is not None else None)
        return [reason["text"] for reason in rows[0]["reasons"]]

    def _take(self, unit: TaskTxn, best: dict[str, Any], agent: str, now_dt: datetime, lease: float,
              lease_dt: datetime) -> None:
        now = format_ts(now_dt)
        if not ts_before_or_at(best["available_at"], now):  # only past the skew bound (see _select)
            add_note(best, f"available_at {best['available_at']} was further ahead than the longest backoff "
                           f"({float(self._setting('backoff_max')):g}s): clock skew, so it was claimable at once", now)
        best["claimed_by"] = agent
        # claimed_at and lease_until on the lease clock both: a heartbeat measures the lease between them
        best["claimed_at"] = format_ts(lease_dt)
        best["lease_until"] = format_ts(add_seconds(lease_dt, lease))
        best["claim_token"] = new_claim_token()
        best["updated_at"] = now
        history.record(best, "claimed", now, by=agent, to=IN_PROGRESS, until=best["lease_until"])
        unit.move(best, PENDING, IN_PROGRESS)

    def _lease(self, lease_seconds: float | None) -> float:
        lease = float(self._setting("lease_seconds") if lease_seconds is None else lease_seconds)
        if not 0 < lease <= MAX_LEASE_SECONDS:
            raise InvalidArgument(f"--lease must be a positive number of seconds, at most {MAX_LEASE_SECONDS:,} "
                                  "(a year)", field="lease")
        return lease

    def _skew_bound(self, now: str) -> str:
        """No rule sets available_at further ahead than the longest backoff: a later one was written
        under a clock that has since gone back (LOKI_NOW, a clock set ahead), and is not waited for."""
        from loki.tasks.readiness import skew_bound

        return skew_bound(now, float(self._setting("backoff_max")))

    def _next_ready(self, unit: TaskTxn, wanted: Wanted, now: str, refused: dict[str, str],
                    avoid: Collection[str] = ()) -> tuple[Any, Any, int]:
        """The store's best ready task of the wanted types, and its census; labels and priorities, which
        the store does not filter on, are applied here to the pending tasks first (and counted), and so are
        the labels ``avoid`` names (a spent label budget's)."""
        if not wanted.labels and not wanted.priorities and not avoid:
            task, census = unit.next_ready(wanted.types, now, not_after=self._skew_bound(now), skip_types=refused)
            return task, census, 0
        pending = unit.tasks(PENDING)
        fitting = [t for t in pending if wanted.matches(t) and not _labelled(t, avoid)]
        task, census = select_ready(fitting, wanted.types, now, self._skew_bound(now), refused, DependencyIndex(unit))
        return task, census, len(pending) - len(fitting)

    def _select(self, unit: TaskTxn, now: str, wanted: Wanted, *, agent: str | None = None,
                lease_dt: datetime | None = None, plain: bool = False,
                budget: BudgetVerdict | None = None) -> tuple[dict[str, Any] | None, str]:
        """The task to claim, or why there is none. The store picks the best ready task
        (:meth:`TaskTxn.next_ready`); a type whose breaker refuses is skipped and the store asked again.
        A task whose paths another agent holds is skipped too (the rest are then chosen here, in Python,
        by the same rule); a lock-free unit that picks a task with paths gives way to a locked one."""
        gate = _TypeBreakers(self.store)
        # a spent type budget keeps its type off as an open breaker does; a spent label budget, its labels
        refused: dict[str, str] = {t: standing.describe() for t, standing in budget.types.items()} if budget else {}
        avoid = set(budget.labels) if budget else set()
        held_back: dict[str, str] = {}
        holders: Any = None
        while True:
            if held_back:
                task, census, unfit = self._next_ready_without(unit, wanted, now, refused, held_back, avoid)
            else:
                task, census, unfit = self._next_ready(unit, wanted, now, refused, avoid)
            if task is None:
                break
            if task.get("paths"):
                if plain and getattr(self.store, "backend", None) == "postgresql":
                    raise _PathsNeedTheLock  # only PostgreSQL's claim unit takes no queue-wide lock
                if holders is None:
                    holders = self.path_holders(unit, lease_dt or self._lease_now())
                blocked = holders.reason(task, agent)
                if blocked is not None:
                    held_back[task["id"]] = blocked["text"]
                    continue
            refusal = gate.refusal(task.get("type"))
            if refusal is None:
                return task, ""
            refused[task["type"]] = refusal
        if not held_back:
            return None, self._nothing_ready(unit, census, refused, unfit, wanted)
        first_id, first = next(iter(held_back.items()))
        more = f"; and {len(held_back) - 1} more" if len(held_back) > 1 else ""
        held = f"{len(held_back)} held back by path leases ({first_id}: {first}{more})"
        if not census.pending and not unfit:
            return None, f"nothing ready among {len(held_back)} pending: {held}"
        return None, f"{self._nothing_ready(unit, census, refused, unfit, wanted)}, {held}"

    def _next_ready_without(self, unit: TaskTxn, wanted: Wanted, now: str, refused: dict[str, str],
                            skipped: dict[str, str], avoid: Collection[str] = ()) -> tuple[Any, Any, int]:
        """:meth:`_next_ready` leaving out the ``skipped`` tasks (their paths are held), chosen in Python."""
        pending = unit.tasks(PENDING)
        fitting = [t for t in pending if wanted.matches(t) and t["id"] not in skipped and not _labelled(t, avoid)]
        task, census = select_ready(fitting, wanted.types, now, self._skew_bound(now), refused, DependencyIndex(unit))
        return task, census, len(pending) - len(fitting) - len(skipped)

    def _nothing_ready(self, unit: TaskTxn, census: Any, refused: dict[str, str], unfit: int, wanted: Wanted) -> str:
        """The one-line reason nothing could be claimed, from the store's census."""
        if not census.pending and not unfit:
            return "nothing to claim: the pending queue is empty"
        parts = []
        on_deps = len(census.on_dependencies)
        if on_deps:
            # Only now, with nothing to hand out, is it worth asking which of them wait for ever.
            counted = set(census.on_dependencies)
            on_hold = unit.waiting_chain(census.on_dependencies)  # a chain may run through a blocked task
            stuck = {task_id: info for task_id, info in never_ready(on_hold, self._state_lookup(unit)).items()
                     if task_id in counted}
            if on_deps > len(stuck):
                parts.append(f"{on_deps - len(stuck)} waiting on dependencies")
            if stuck:
                shown = [f"{task_id} {info['why']}" for task_id, info in list(stuck.items())[:3]]
                more = f"; and {len(stuck) - 3} more" if len(stuck) > 3 else ""
                parts.append(f"{len(stuck)} can never be ready ({'; '.join(shown)}{more})")
        waiting, next_time = census.waiting, census.next_time
        if waiting:
            parts.append(f"{waiting} backing off until {next_time} or later" if waiting > 1
                         else f"1 backing off until {next_time}")
        if census.deferred:
            parts.append(f"{census.deferred} deferred until {census.deferred_until} or later" if census.deferred > 1
                         else f"1 deferred until {census.deferred_until}")
        if census.held:
            parts.append(f"{census.held} claimed in pending.json by Loki Mode's agents")
        if census.busy:
            parts.append(f"{census.busy} being claimed or changed by another process at this instant (try again)")
        parts.extend(f"{census.skipped[type_]} held back: {why}" for type_, why in refused.items()
                     if census.skipped.get(type_))
        if census.other_type:
            parts.append(f"{census.other_type} of other types")
        if unfit:
            parts.append(f"{unfit} without the asked {wanted.describe()}")
        return f"nothing ready among {census.pending + unfit} pending: " + ", ".join(parts)

    # -- the holder's operations -----------------------------------------------------------------

    def heartbeat(self, task_id: str, agent: str, *, token: str | None = None,
                  lease_seconds: float | None = None) -> dict[str, Any]:
        """Extend the holder's lease to now + lease (default: as long as the claim's own lease)."""
        if lease_seconds is not None:
            self._lease(lease_seconds)
        with self.tasks.transaction() as unit:
            now_dt = self._now()  # inside the lock: timestamps follow the commit order
            task = self._held(unit, task_id, agent, token)
            if lease_seconds is None and task.get("claimed_at") and task.get("lease_until"):
                lease_seconds = (parse_ts(task["lease_until"]) - parse_ts(task["claimed_at"])).total_seconds()
            lease = self._lease(lease_seconds)
            lease_until = format_ts(add_seconds(self._bounded_leases(unit, self._lease_now()), lease))
            history.heartbeat(task, format_ts(now_dt), agent, lease_until)
            task["lease_until"] = lease_until
            task["updated_at"] = format_ts(now_dt)
            unit.update(IN_PROGRESS, task)
        self._paths_moved(task)
        return task

    def complete(self, task_id: str, agent: str, *, token: str | None = None, result: Any = None,
                 evidence: Sequence[dict[str, Any]] | None = None, head: str | None = None,
                 forced_by: str | None = None, usage: dict[str, Any] | None = None,
                 work_branch: str | None = None) -> dict[str, Any]:
        """Complete the task ``agent`` holds. With ``token``, a repeat of a completion that was committed
        (its acknowledgement lost with a dropped connection) returns the completed task and changes nothing.
        ``usage``: what this claim spent (loki/tasks/usage.py), kept in the task's ``usage`` with the outcome.

        A task with checks (``verify``, or its type's default: loki/tasks/verify.py) completes only with
        ``evidence``, its checks' results, every one passed on ``head`` (the commit they ran on, which
        the caller read: loki/queue/verified.py), or ``forced_by``, a person's name, kept in its history;
        else :class:`loki.tasks.verify.Unverified` (exit 1, naming the checks). The evidence is kept
        under the result's ``verification``.

        A task that must land (``land``, or its type's default: loki/tasks/landing.py) moves to
        ``landing`` instead, waiting for ``head`` (the commit its checks ran on; the caller reads it) to
        be reachable from its branch; ``work_branch``, the branch ``head`` was on, tells the watcher when
        the work was deleted unmerged (loki/queue/landing.py). Without ``head`` it is refused
        (:class:`loki.tasks.verify.Unverified`, exit 1): there is no commit to wait for. A forced
        completion (``forced_by``) completes: the person's word stands for the landing too."""
        from loki.queue import verified
        from loki.tasks import landing, verify

        if forced_by is not None:
            from loki.text.textsafe import check_name

            check_name(forced_by, "name")
        _checked_usage(usage)
        with self.tasks.transaction() as unit:
            now = format_ts(self._now())  # inside the lock: timestamps follow the commit order
            done = self._completed_by_this_claim(unit, task_id, agent, token)
            if done is not None:
                return done
            task = self._held(unit, task_id, agent, token)
            result, forced = verified.verified_result(task, self.store.config, result, evidence, head, forced_by)
            target = None if forced_by is not None else landing.land_branch(task, self.store.config)
            if target is not None and not head:
                raise verify.Unverified(
                    f"task {task_id} must land on {target} and no commit names its work (HEAD names none here): "
                    "commit the work in a git work tree, or --force --by NAME", task_id=task_id, branch=target)
            if target is not None and not _COMMIT.fullmatch(str(head)):
                raise InvalidArgument(f"head must be a commit id (7 to 64 hex digits), got {str(head)[:70]!r}",
                                      field="head")
            held_token = task.get("claim_token")
            clear_claim(task)
            # The token of the claim that completed it stays: a retried complete with it is recognised.
            task["claim_token"] = held_token
            task["result"] = _redacted(result)  # an agent's result quotes what it ran and saw
            _add_usage(unit, task, usage, now, agent, len(task.get("attempts") or []) + 1, "completed")
            task["completed_by"] = agent  # the claim is cleared: who did it stays (loki agents counts it)
            task["updated_at"] = now
            if target is not None:
                assert head is not None
                deadline = format_ts(add_seconds(parse_ts(now), landing.deadline_seconds(self.store.config)))
                task["landing"] = {"branch": target, "commit": head, "work_branch": work_branch, "since": now,
                                   "deadline": deadline}
                waits = f"waiting to land {head[:12]} on {target}"
                history.record(task, "completed", now, by=agent, to=LANDING, until=deadline,
                               detail=f"{forced}; {waits}" if forced else waits)
                unit.move(task, IN_PROGRESS, LANDING)
            else:
                task["completed_at"] = now
                history.record(task, "completed", now, by=agent, to=COMPLETED, detail=forced)
                unit.move(task, IN_PROGRESS, COMPLETED)
                self.rotate_hot(unit, COMPLETED)
        self._paths_moved(task)  # landing or completed, its claim ended: this machine's copy follows
        return task

    def fail(self, task_id: str, agent: str, *, error: str, error_type: str = "other", approach: str = "",
             token: str | None = None, final: bool = False, depends_on: Sequence[str] = (),
             usage: dict[str, Any] | None = None) -> dict[str, Any]:
        """Record a failed attempt. Returns ``{"task", "state", "retry_at"}``.

        Below ``max_attempts`` the task goes back to pending with exponential backoff; at
        ``max_attempts`` it moves to the dead-letter queue; ``final`` moves it to failed.
        ``depends_on``: tasks this attempt found it needs (a ``dependency`` failure); they join
        the task's dependencies, so it is not ready again before they complete, and the
        dead-letter review can retry it once they have.
        """
        if error_type not in ERROR_TYPES:
            raise InvalidArgument(f"--error-type must be one of {', '.join(ERROR_TYPES)} (got {error_type!r})",
                                  field="error_type")
        if not error.strip():
            raise InvalidArgument("--error must say what went wrong: the dead-letter review groups failures by it",
                                  field="error")
        for dep in depends_on:
            check_id(dep, "dependency id")
        _checked_usage(usage)
        with self.tasks.transaction() as unit:
            now_dt = self._now()  # inside the lock: timestamps follow the commit order
            task = self._held(unit, task_id, agent, token)
            new_deps = [d for d in depends_on if d not in task["dependencies"]]
            if new_deps:
                self._add_discovered_dependencies(unit, task, new_deps, format_ts(now_dt), agent)
            attempt = make_attempt(task, now=format_ts(now_dt), agent_id=agent, approach=approach,
                                   error_type=error_type, error_message=error)
            _add_usage(unit, task, usage, format_ts(now_dt), agent, attempt["attempt_number"], "failed")
            outcome = self.record_failure(unit, task, attempt, now_dt, final=final)
        self._paths_moved(task)
        self.report_dead_letters(unit.dead_lettered)
        from loki.queue import tasklog

        # After the commit, for the live view's feed: the failure and where it sent the task.
        tasklog.append(self.store, [tasklog.failure_event(outcome, attempt, format_ts(now_dt))])
        return outcome

    def _add_discovered_dependencies(self, unit: TaskTxn, task: dict[str, Any], deps: list[str], now: str,
                                     agent: str) -> None:
        self.check_new_dependencies(unit, task, deps, "--depends-on")
        before = list(task["dependencies"])
        task["dependencies"].extend(deps)
        add_note(task, f"attempt found it depends on {', '.join(deps)}", now, agent)
        history.record(task, "edited", now, by=agent, detail="dependencies found by a failed attempt",
                       changes={"dependencies": {"from": before, "to": list(task["dependencies"])}})

    def check_new_dependencies(self, unit: TaskTxn, task: dict[str, Any], deps: list[str], option: str) -> None:
        """Within ``unit``: refuse dependencies ``task`` may not gain: itself (exit 2), a task that does not
        exist, one that will never complete, or one that closes a cycle (exit 1, naming ``option``)."""
        field = option.lstrip("-").replace("-", "_")
        for dep in deps:
            if dep == task["id"]:
                raise InvalidArgument(f"task {task['id']!r} cannot depend on itself", field=field)
            if not _known(unit, dep) and unit.find_archived(dep) is None:
                raise InvalidInput(f"{option} {dep!r}: no such task", field=field, dependency=dep)
        self._refuse_dead_dependencies(unit, deps, f"task {task['id']!r}")
        deps_of = _dependency_lookup(unit, {task["id"]: [*task["dependencies"], *deps]})
        cycle = _find_cycle(deps_of, task["id"])
        if cycle:
            raise InvalidInput(f"{option} would make a dependency cycle {' -> '.join(cycle)}", field=field,
                               cycle=cycle)

    def release(self, task_id: str, agent: str, *, token: str | None = None,
                usage: dict[str, Any] | None = None) -> dict[str, Any]:
        """Give a claimed task back, untouched and immediately claimable (no attempt is recorded; what the
        claim spent, ``usage``, is: the money is gone even when the work is not done)."""
        _checked_usage(usage)
        with self.tasks.transaction() as unit:
            now = format_ts(self._now())  # inside the lock: timestamps follow the commit order
            task = self._held(unit, task_id, agent, token)
            _add_usage(unit, task, usage, now, agent, len(task.get("attempts") or []) + 1, "released")
            clear_claim(task)
            task["updated_at"] = now
            add_note(task, "released by its holder", now, agent)
            history.record(task, "released", now, by=agent, to=PENDING)
            unit.move(task, IN_PROGRESS, PENDING)
        self._paths_moved(task)
        return task

    def _paths_moved(self, task: dict[str, Any]) -> None:
        """A claim of a task with paths began, was renewed or ended here: on a database tree this machine's
        copy of the path holders, which the PreToolUse hook reads, is refreshed (docs/leases.md). A file
        tree's hook reads ``queue/in-progress.json`` itself."""
        from loki.leases.leases import claim_moved

        claim_moved(self.store, task)

    def _completed_by_this_claim(self, unit: TaskTxn, task_id: str, agent: str,
                                 token: str | None) -> dict[str, Any] | None:
        """The completed task, if ``agent`` completed it under the claim ``token`` names (else None)."""
        if token is None:
            return None
        check_id(task_id, "task id")
        found = unit.find(task_id, (COMPLETED, LANDING)) or unit.find_outside(task_id)
        if found is None or found[0] not in (COMPLETED, LANDING):
            return None
        task = found[1]
        if task.get("completed_by") == agent and task.get("claim_token") == token:
            return task
        return None

    def _held(self, unit: TaskTxn, task_id: str, agent: str, token: str | None) -> dict[str, Any]:
        """The in-progress task ``task_id`` if ``agent`` (and ``token``) hold it; else exit 4 / not found."""
        check_id(task_id, "task id")
        _check_agent(agent)
        found = unit.find(task_id, (IN_PROGRESS,))
        if found is None:
            elsewhere = unit.find(task_id, HOT_STATES) or unit.find_outside(task_id)
            if elsewhere is None:
                raise NotFound(f"no task {task_id!r}", task_id=task_id)
            state, task = elsewhere
            last = (task.get("attempts") or [{}])[-1]
            if state == PENDING and last.get("error_type") == "timeout" and last.get("agent_id") == agent:
                raise Conflict(f"lease lost: {task_id} was requeued at {last.get('timestamp')} after the lease of "
                               f"{agent} expired; nothing changed", task_id=task_id, state=state)
            raise Conflict(f"{task_id} is {state}, not in progress; nothing changed", task_id=task_id, state=state)
        task = found[1]
        if task.get("claimed_by") != agent:
            raise Conflict(f"{task_id} is held by {task.get('claimed_by')!r}, not {agent!r}; nothing changed",
                           task_id=task_id, holder=task.get("claimed_by"))
        if token is not None and token != task.get("claim_token"):
            raise Conflict(f"{task_id}: the claim token does not match the current claim (it was re-claimed?); "
                           "nothing changed", task_id=task_id)
        return task

    # -- building blocks for changes that span the queue and something else ------------------------
    # (the signal rules apply a signal's effect and record its id in the same unit of work)

    def where(self, unit: TaskTxn, task_id: str) -> str:
        """Where a task is, for a refusal's message (NotFound when it is nowhere)."""
        found = unit.find(task_id, HOT_STATES)
        if found is not None:
            return found[0]
        outside = unit.find_outside(task_id)
        if outside is None:
            raise NotFound(f"no task {task_id!r}", task_id=task_id)
        if outside[0] in (DEAD_LETTER, ABANDONED):
            return outside[0]
        return f"{outside[0]} and archived"

    def record_failure(self, unit: TaskTxn, task: dict[str, Any], attempt: dict[str, Any], now_dt: datetime,
                       *, final: bool, event: str = "failed") -> dict[str, Any]:
        """Within ``unit``: the in-progress ``task`` failed ``attempt``; back off, dead-letter or fail it.

        ``event`` names it in the task's history: ``failed`` (by the attempt's agent), or
        ``lease_expired`` (by nobody: the lease ran out).
        """
        now = format_ts(now_dt)
        unit.remove(IN_PROGRESS, task)
        clear_claim(task)
        task["attempts"].append(attempt)
        task["last_error"] = attempt["error_message"]
        task["updated_at"] = now
        by = attempt["agent_id"] if event == "failed" else None
        detail = (f"{attempt['error_type']}: {attempt['error_message']}" if event == "failed"
                  else attempt["error_message"])
        if final:
            add_note(task, "failed with --final: no retry", now, attempt["agent_id"])
            history.record(task, event, now, by=by, to=FAILED, attempt=attempt["attempt_number"],
                           detail=f"{detail} (--final: no retry)")
            unit.put(FAILED, task)
            return {"task": task, "state": FAILED, "retry_at": None}
        if attempts_in_budget(task) >= task["max_attempts"]:
            history.record(task, event, now, by=by, to=DEAD_LETTER, attempt=attempt["attempt_number"],
                           detail=f"{detail} (attempt {attempts_in_budget(task)} of {task['max_attempts']}: "
                                  "moved to the dead-letter queue)")
            entry = make_entry(task, IN_PROGRESS)
            unit.dead_letter(entry)
            unit.dead_lettered.append(task)
            return {"task": task, "state": DEAD_LETTER, "retry_at": None, "entry": entry}
        delay = backoff_seconds(attempts_in_budget(task), float(self._setting("backoff_initial")),
                                float(self._setting("backoff_multiplier")), float(self._setting("backoff_max")))
        task["available_at"] = format_ts(add_seconds(now_dt, delay))
        history.record(task, event, now, by=by, to=PENDING, attempt=attempt["attempt_number"],
                       until=task["available_at"], detail=detail)
        unit.put(PENDING, task)
        return {"task": task, "state": PENDING, "retry_at": task["available_at"]}

    # -- maintenance ---------------------------------------------------------------------------

    def requeue_stale(self) -> dict[str, list[str]]:
        """Requeue every in-progress task whose lease has expired (a ``timeout`` attempt each)."""
        with self.tasks.transaction() as unit:
            outcome: dict[str, list[str]] = {"requeued": [], "dead_lettered": []}
            self._requeue_expired(unit, self._now(), self._lease_now(), outcome)
        self.report_dead_letters(unit.dead_lettered)
        return outcome

    def report_dead_letters(self, tasks: list[dict[str, Any]]) -> None:
        """After the commit: each task a transaction dead-lettered is a failure of its type's breaker.

        Loki Mode's reference (its task-queue ``handle_failure``) counts a dead-lettered task
        against a circuit breaker named after the task's type, and its ``claim_task`` skips the
        types whose breaker is open (:meth:`_select`): docs/breakers.md, "Breakers by task type".
        """
        # Untyped tasks (the default type) are not a class of work with a dependency of its own:
        # three unrelated failures must not stop the whole queue for a cooldown.
        typed = [t for t in tasks if t.get("type") and t.get("type") != DEFAULT_TYPE]
        if not typed:
            return
        from loki.breakers.breakers import Breakers

        breakers = Breakers(self.store)
        for task in typed:
            breakers.record_failure(task["type"],
                                    f"task {task['id']} moved to the dead-letter queue: {task.get('last_error') or ''}")

    def _requeue_expired(self, unit: TaskTxn, now_dt: datetime, lease_dt: datetime,
                         outcome: dict[str, list[str]] | None = None) -> datetime:
        """Requeue the leases that ended before ``lease_dt`` (the lease clock's now); returns the time new
        leases start from (:meth:`_bounded_leases`)."""
        now = format_ts(now_dt)
        requeued: list[str] = [] if outcome is None else outcome["requeued"]
        dead: list[str] = [] if outcome is None else outcome["dead_lettered"]
        for task in unit.expired(format_ts(lease_dt)):
            lease_until = task.get("lease_until")
            # No lease at all (an imported or hand-made in-progress task) never expires by itself:
            # treat it as expired, or the task would be stuck for ever -- unless Loki Mode's runner
            # holds it (run.sh's iteration record): the runner moves it on itself, and it is not work.
            if lease_until is None and task.get("claimed_by") == RUNTIME_HOLDER:
                continue
            holder = task.get("claimed_by") or "unknown"
            why = f"lease expired at {lease_until}" if lease_until else "in progress without a lease"
            if lease_until and not plausible_lease(task):
                why = (f"lease from {task.get('claimed_at')} until {lease_until} is not one loki gives (at most "
                       f"{MAX_LEASE_SECONDS}s, ending after it starts)")
                add_note(task, f"{why}: it ended at once", now)
            attempt = make_attempt(task, now=now, agent_id=holder, approach="(lease expired)", error_type="timeout",
                                   error_message=f"{why} while held by {holder}")
            moved = self.record_failure(unit, task, attempt, now_dt, final=False, event="lease_expired")
            (dead if moved["state"] == DEAD_LETTER else requeued).append(task["id"])
        return self._bounded_leases(unit, lease_dt)

    def _bounded_leases(self, unit: TaskTxn, lease_dt: datetime) -> datetime:
        """The time a lease given now starts from: the lease clock's now, bounded on a machine's own clock
        (files, memory) against a clock behind the tree (docs/queue.md, "Leases and clock skew").

        A claim or heartbeat on a clock behind (a live lease in progress claimed or renewed more than
        :data:`SKEW_TOLERANCE_SECONDS`, and at most :data:`MAX_SKEW_FOLLOWED_SECONDS`, ahead of it) starts
        its lease from that newest moment instead (the holders on the right time keep it moving): a lease
        written on a clock hours behind would look expired to every other machine at once. Leases err on
        the side of living longer: a wrong clock can delay the recovery of a dead holder's task, never
        make a live holder's lease end early.
        (A lease no claim could have given ends at once: :func:`loki.tasks.record.plausible_lease`.)
        On PostgreSQL every lease is on the database's clock: nothing to bound.
        """
        if self._shared_lease_clock():
            return lease_dt
        newest = unit.newest_in_progress()
        if newest is None:
            return lease_dt
        try:
            newest_dt = parse_ts(newest)
        except (ValueError, OverflowError):
            return lease_dt
        behind = (newest_dt - lease_dt).total_seconds()
        return newest_dt if SKEW_TOLERANCE_SECONDS < behind <= MAX_SKEW_FOLLOWED_SECONDS else lease_dt

    def land_check(self, *, repo: str | None = None) -> list[dict[str, Any]]:
        """Resolve the tasks in ``landing`` now, as the watcher's tick does (loki/queue/landing.py), in
        ``repo`` (default: the repository that holds ``.loki/``). One event per task: ``{"action":
        "landed"|"unlanded"|"landing_overdue"|"waiting", "task_id", "detail"}``."""
        from loki.queue.landing import Landing

        return Landing(self.store, repo).resolve(include_waiting=True)

    def cancel(self, task_id: str, *, cascade: bool = False, reason: str | None = None, force: bool = False,
               by: str | None = None) -> dict[str, Any]:
        """Cancel a task. Tasks that depend on it are reported, and cancelled too with ``cascade``.

        ``cascade`` on a task already cancelled cancels what still depends on it (what the first
        cancel reported). A task an agent holds (other than ``by``) is refused with :class:`Conflict`
        naming the holder unless ``force``, which ends the claim: the holder's next call gets exit 4.
        """
        check_id(task_id, "task id")
        with self.tasks.transaction() as unit:
            now = format_ts(self._now())  # inside the lock: timestamps follow the commit order
            found = unit.find(task_id, (PENDING, BLOCKED, IN_PROGRESS, FAILED, LANDING))
            if found is None and not (cascade and unit.find(task_id, (CANCELLED,))):
                where = self.where(unit, task_id)
                raise Conflict(f"{task_id} is {where}; only pending, blocked, in-progress, landing or failed tasks "
                               "can be cancelled", task_id=task_id, state=where)
            dependents = self.dependents(unit, task_id)
            targets = ([found] if found else []) + (
                [unit.find(d, ACTIVE_STATES) for d in dependents] if cascade else [])
            cancelled = []
            freed = []  # the held ones: their paths are free now
            answered: list[tuple[str, str]] = []  # a landing task's overdue escalation: its option 2 was taken
            from loki.queue.edits import refuse_held

            for state, task in (t for t in targets if t is not None):
                holder = refuse_held(task, state, now, force=force, by=by, verb="cancel")
                clear_claim(task)
                task["updated_at"] = now
                why = reason or "no reason given"
                text = (f"cancelled: {why}" if task["id"] == task_id else
                        f"cancelled with {task_id} (--cascade): {why}")
                if state == LANDING:  # verified, not landed: where its work was stays in the notes
                    waited = task.pop("landing", None) or {}
                    text += f" (it was landing: its work was commit {waited.get('commit')} for {waited.get('branch')})"
                    if waited.get("escalation"):
                        answered.append((str(waited["escalation"]), text))
                ended = f" (the claim of {holder} ended: --force)" if holder and holder != by else ""
                add_note(task, text + ended, now, by)
                history.record(task, "cancelled", now, by=by, to=CANCELLED, detail=text + ended)
                unit.move(task, state, CANCELLED)
                cancelled.append(task["id"])
                if state in (IN_PROGRESS, LANDING):  # a landing task holds its paths too (docs/leases.md)
                    freed.append(task)
            self.rotate_hot(unit, CANCELLED)
        for task in freed:
            self._paths_moved(task)
        if answered:
            from loki.queue.escalations import mark_resolved

            for file_name, text in answered:
                mark_resolved(self.store, file_name, text)
        return {"cancelled": cancelled, "dependents": dependents, "cascade": cascade}

    def dependents(self, unit: TaskTxn, task_id: str) -> list[str]:
        """Active tasks that depend on ``task_id``, directly or through each other."""
        active = [t for state in ACTIVE_STATES for t in unit.tasks(state)]
        found: list[str] = []
        frontier = {task_id}
        while frontier:
            nxt = {t["id"] for t in active if t["id"] not in found and t["id"] != task_id
                   and frontier.intersection(t["dependencies"])}
            found.extend(sorted(nxt))
            frontier = nxt
        return found

    def retry(self, task_id: str, *, approach: str | None = None, reset_count: bool = False,
              fix_commit: str | None = None, by: str | None = None) -> dict[str, Any]:
        """Back to pending from failed, dead-letter or cancelled, keeping the attempt history.

        ``approach`` documents the new approach; ``reset_count`` resets the attempt count: a fresh
        budget of ``max_attempts`` failures (the history stays, the maximum is unchanged);
        ``fix_commit`` records the commit that fixed
        the blocking bug. From dead-letter it counts as a recovery in the file's metadata.
        ``by``: who retried it (kept in the task's history).
        """
        check_id(task_id, "task id")
        check_fix_commit(fix_commit)
        if approach:
            approach = _redacted(approach)  # stored as the next attempts' approach, and shown
        with self.tasks.transaction() as unit:
            now = format_ts(self._now())  # inside the lock: timestamps follow the commit order
            found = unit.find(task_id, (FAILED, CANCELLED))
            if found is not None:
                source, task = found
                unit.remove(source, task)
            else:
                entry = unit.find_dead_letter(task_id)
                if entry is None:
                    where = self.where(unit, task_id)
                    raise Conflict(f"{task_id} is {where}; only failed, dead-letter or cancelled tasks can "
                                   "be retried", task_id=task_id, state=where)
                source, task = DEAD_LETTER, unit.recover(entry)
            clear_claim(task)
            task["available_at"] = now
            task["updated_at"] = now
            task["completed_at"] = None
            note = f"retried from {source}"
            if approach:
                task["recovery_strategy"] = "new_approach"
                task["new_approach"] = approach.strip()  # the next attempts' approach (loki work records it)
                note += f" with a new approach: {approach}"
            if fix_commit:
                task["recovery_strategy"] = "fix_committed"
                task["fix_commit"] = fix_commit
                note += f" after fix commit {fix_commit}"
            if not approach and not fix_commit:
                task["recovery_strategy"] = "manual_retry"
            if reset_count:
                start_fresh_budget(task)
                note += f" (attempt count reset: {plural(task['max_attempts'], 'attempt')} allowed again)"
            add_note(task, note, now, by)
            history.record(task, "retried", now, by=by, to=PENDING, detail=note)
            unit.put(PENDING, task)
        return {"task": task, "from": source}

    def rotate_hot(self, unit: TaskTxn, state: str) -> None:
        """Within ``unit``: move the oldest completed/cancelled tasks beyond the bound to the archive."""
        unit.rotate(state, int(self._setting("completed_hot_limit")))


def _labelled(task: dict[str, Any], labels: Collection[str]) -> bool:
    return bool(labels) and any(label in labels for label in task.get("labels") or [])


def _known(unit: TaskTxn, task_id: str) -> bool:
    """Whether ``task_id`` is taken outside the archive (the queue files, dead-letter, abandoned)."""
    return unit.find(task_id, LIVE_STATES) is not None


def _task_or_none(found: tuple[str, dict[str, Any]] | None) -> dict[str, Any] | None:
    return found[1] if found is not None else None


class _TypeBreakers:
    """Which task types a circuit breaker of the same name holds back (Loki Mode's ``claim_task``).

    The breakers file is read once per claim, and only when it exists; a type is checked
    through :meth:`Breakers.check` only when a claim is about to take a task of it (so a
    HALF_OPEN breaker's single probe slot goes to the claim that takes the task).
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._names: set[str] | None = None
        self._refusals: dict[str, str | None] = {}

    def refusal(self, type_: Any) -> str | None:
        if self._names is None:
            self._names = set(self.store.read(layout.BREAKERS))  # an absent file reads as {}
        if not isinstance(type_, str) or type_ not in self._names:
            return None
        if type_ not in self._refusals:
            from loki.breakers.breakers import Breakers

            decision = Breakers(self.store).check(type_)
            self._refusals[type_] = None if decision.allowed else f"type {type_}: {decision.reason}"
        return self._refusals[type_]


def check_fix_commit(fix_commit: str | None) -> None:
    if fix_commit is not None and re.fullmatch(r"[0-9a-fA-F]{4,64}", fix_commit) is None:
        raise InvalidArgument(f"--fix-commit {fix_commit!r} is not a commit hash (4-64 hex digits)", field="fix_commit")


class _PathsNeedTheLock(Exception):
    """A lock-free claim unit picked a task with paths: it gives way (nothing written) to a locked one."""


_COMMIT = re.compile(r"[0-9a-f]{7,64}")
"""A commit id as git prints one (a landing task's ``landing.commit``, schemas/task.json)."""

ADD_FIELDS = frozenset({"title", "description", "type", "priority", "dependencies", "depends_on", "labels", "payload",
                        "id", "idempotency_key", "max_attempts", "verify", "paths", "land"})
"""The fields of a task as ``add`` takes it (``--from-file`` items in loki's own shape)."""


def _refuse_misspelt_fields(spec: dict[str, Any], where: str) -> None:
    """Refuse a field that looks like a typo of one loki or Loki Mode reads (``priorty``).

    A task with an id that is not ``add``'s shape is read as Loki Mode writes it, keeping fields
    loki has no use for under ``payload.loki_mode`` (its PRD and GitHub imports carry many). A
    near miss of a known name is no such field: taking it would silently drop what the user meant.
    """
    import difflib

    from loki.tasks.compat import KNOWN_FIELDS

    known = sorted(ADD_FIELDS | KNOWN_FIELDS)
    for key in sorted(set(spec) - ADD_FIELDS - KNOWN_FIELDS):
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
        if close:
            raise InvalidArgument(f"{_at(where)}unknown field {key!r} (did you mean {close[0]!r}?)", field=key)


def _at(where: str) -> str:
    """Message prefix naming where bad input came from (a file and JSON pointer), if anywhere."""
    return f"{where}: " if where else ""


def _why(task: dict[str, Any], state: str) -> str | None:
    """What a listing says about a task that waits outside pending: a blocked task's reason and deadline,
    a landing task's commit, branch and deadline."""
    landing = task.get("landing") if state == LANDING else None
    if isinstance(landing, dict):
        escalated = ", escalated" if landing.get("escalation") else ""
        return (f"waiting for {str(landing.get('commit'))[:12]} to reach {landing.get('branch')} "
                f"(until {landing.get('deadline')}{escalated})")
    blocked = task.get("blocked") if state == BLOCKED else None
    if not blocked:
        return None
    until = f" (until {blocked['deadline']})" if blocked.get("deadline") else ""
    return f"{blocked.get('reason') or 'blocked'}{until}"


def _check_agent(agent: str) -> None:
    from loki.text.textsafe import check_name

    check_name(agent, "agent name")


class Wanted:
    """What a claim (or a listing of ready tasks) asks for: types (any of), labels (all of), priorities (any of)."""

    __slots__ = ("labels", "priorities", "types")

    def __init__(self, types: Iterable[str] = (), labels: Iterable[str] = (), priorities: Iterable[str] = ()) -> None:
        self.types = set(types)
        self.labels = list(dict.fromkeys(labels))
        self.priorities = set(priorities)
        if self.labels:
            from loki.text.textsafe import check_name

            for label in self.labels:
                check_name(label, "label")
        for priority in self.priorities:
            if priority not in PRIORITIES:
                raise InvalidArgument(f"--priority must be one of {', '.join(PRIORITIES)} (got {priority!r})",
                                      field="priority")

    def __bool__(self) -> bool:
        return bool(self.types or self.labels or self.priorities)

    def matches(self, task: dict[str, Any], *, with_type: bool = False) -> bool:
        """Labels and priorities (and the type too with ``with_type``: the store filters types itself)."""
        if with_type and self.types and task.get("type") not in self.types:
            return False
        if self.priorities and task.get("priority") not in self.priorities:
            return False
        return all(label in task.get("labels", ()) for label in self.labels)

    def describe(self) -> str:
        asked = [f"label {', '.join(self.labels)}" if self.labels else "",
                 f"priority {' or '.join(sorted(self.priorities, key=PRIORITY_RANK.__getitem__))}"
                 if self.priorities else ""]
        return " and ".join(a for a in asked if a)


def _dependency_lookup(unit: TaskTxn, overrides: dict[str, list[str]]) -> Callable[[str], list[str]]:
    """The dependencies of a task that may still run, one lookup at a time: ``overrides`` (new tasks,
    new dependencies) first, then the queue files and the dead-letter entries (a failed, cancelled or
    dead-letter task can be retried, so a cycle through it would bind)."""
    def deps_of(task_id: str) -> list[str]:
        if task_id in overrides:
            return overrides[task_id]
        found = unit.find(task_id, (*HOT_STATES, DEAD_LETTER))
        return list(found[1].get("dependencies") or []) if found is not None else []

    return deps_of


def _find_cycle(deps_of: Callable[[str], list[str]], start: str) -> list[str] | None:
    """A dependency path from ``start`` back to itself, if there is one (only what it reaches is read)."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for dep in deps_of(node):
            if dep == start:
                return [*path, dep]
            if dep not in seen:
                seen.add(dep)
                stack.append((dep, [*path, dep]))
    return None


def parse_json_option(value: str | None, option: str, *, want_object: bool = False) -> Any:
    """Strictly parse a JSON command-line value, naming the option when it is wrong."""
    if value is None:
        return None
    try:
        parsed = jsonio.loads_strict(value, max_depth=jsonio.INPUT_DEPTH)
    except jsonio.JsonError as exc:
        raise InvalidArgument(f"{option}: {exc.reason}", field=option) from None
    if want_object and not isinstance(parsed, dict):
        raise InvalidArgument(f"{option}: expected a JSON object, got {type(parsed).__name__}", field=option)
    return parsed


def read_batch(path: str, limit: int) -> list[Any]:
    """The task specs of a batch file (see :meth:`Queue.add_from_file`), read with a bound."""
    import os
    import stat

    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read: {exc.strerror}", file=path) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file (a FIFO, socket or device)"
            raise InvalidInput(f"{path}: is {what}; --from-file reads a regular file", file=path)
        too_big = f"over the {limit}-byte limit for a batch (the queue file it goes into may be no larger)"
        if st.st_size > limit:
            raise InvalidInput(f"{path}: is {st.st_size} bytes, {too_big}", file=path, limit=limit)
        chunks: list[bytes] = []
        total = 0
        while True:  # bounded even if the file grows while it is read
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise InvalidInput(f"{path}: is {too_big}", file=path, limit=limit)
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read: {exc.strerror}", file=path) from None
    finally:
        os.close(fd)
    return parse_batch(path, b"".join(chunks))


def parse_batch(path: str, data: bytes) -> list[Any]:
    """A batch's task specs: a JSON array, an object with ``tasks``, one object, or JSON lines."""
    try:
        doc = jsonio.loads_strict(data, max_depth=jsonio.INPUT_DEPTH)
    except jsonio.JsonError as whole:
        items = []
        for number, line in enumerate(data.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items.append(jsonio.loads_strict(line, max_depth=jsonio.INPUT_DEPTH))
            except jsonio.JsonError as exc:
                reason = whole.reason if number == 1 else exc.reason
                raise InvalidInput(f"{path}: line {number}: {reason} (expected a JSON array, an object with "
                                   "'tasks', or one JSON object per line)") from None
        return items
    if isinstance(doc, dict) and isinstance(doc.get("tasks"), list):
        return list(doc["tasks"])
    if isinstance(doc, list):
        return doc
    if isinstance(doc, dict):
        return [doc]
    raise InvalidInput(f"{path}: expected a JSON array of tasks, an object with 'tasks', or JSON lines")


def _spent(task: dict[str, Any]) -> dict[str, Any] | None:
    """The sums of a task's usage entries (docs/spend.md), None when it kept none."""
    from loki.tasks.usage import sum_entries

    entries = [entry for entry in task.get("usage") or [] if isinstance(entry, dict)]
    return sum_entries(entries) if entries else None


def _checked_usage(usage: dict[str, Any] | None) -> None:
    """Refuse a usage entry before anything is locked (exit 2, naming the field)."""
    if usage is None:
        return
    from loki.tasks.usage import BadUsage, check_entry

    try:
        check_entry(usage)
    except BadUsage as exc:
        raise InvalidArgument(str(exc), field="usage") from None


def _add_usage(unit: TaskTxn, task: dict[str, Any], usage: dict[str, Any] | None, now: str, agent: str,
               attempt: int, outcome: str) -> None:
    """Keep what one claim spent in the task, once: the write it joins is recognised when repeated. ``usage``
    was checked by the caller (:func:`_checked_usage`) before anything was locked. The running totals the
    budgets read (loki/tasks/totals.py), when the tree keeps them, count it in the same unit of work."""
    if usage is None:
        return
    entry = {**usage, "attempt": attempt, "agent": agent, "at": now, "outcome": outcome}
    task.setdefault("usage", []).append(entry)
    totals = unit.spend_totals()
    if totals is not None:
        from loki.tasks import totals as running

        running.add(totals, task, entry)
        unit.set_spend_totals(totals)


def _redacted(value: Any) -> Any:
    from loki.text.redact import redact_obj

    return redact_obj(value)
