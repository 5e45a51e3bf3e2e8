"""Escalation files for humans (reference: 001 Troubleshooting, Escalation Format).

``escalate`` renders ``templates/escalation.md`` into ``escalations/<UTC-ts>-<task_id>.md``
(a name that never overwrites another: a second one in the same second gets ``-2``),
moves the task to ``blocked`` (a dead-letter entry stays where it is, marked
``requires_human_review``) and emits HUMAN_REVIEW_NEEDED. ``resolve`` applies a human's
decision (what HUMAN_APPROVED carries) and appends it to every open escalation file of the
task; ``close`` resolves one file without deciding anything about its task.

The template is a real file: ``loki init`` copies it to ``.loki/templates/escalation.md``,
which wins over the shipped one. Placeholders are ``{name}``; an unknown one is an error
that names it. Each escalation file starts with one machine-readable HTML comment
(task, trigger, time, and its ``state``) that Markdown viewers hide.

An escalation's state is that recorded ``state`` (``open``, then ``resolved`` with the
``resolution`` and ``resolved_at`` loki wrote), never what the Markdown below it says: the
title, the analysis and the options are an agent's (or an imported issue's) text, and a
``### Resolution`` heading inside them would otherwise close the escalation at birth. That
text is escaped on the way into the file (:func:`markdown_text`) so that it cannot pose as a
heading either. Files written before the field existed are read by the rule loki followed
when it wrote them: resolved when their last section is the ``### Resolution`` loki appended.
"""

from __future__ import annotations

import os
import re

from loki.clock import add_seconds, format_ts
from loki.config import setting
from loki.errors import Conflict, InvalidArgument, InvalidInput, NotFound, StateFileError
from loki.signals import emit as signals
from loki.signals import types as signaltypes
from loki.storage import jsonio, layout
from loki.storage.paths import check_id, resource_dir
from loki.tasks import history
from loki.tasks.deadentry import error_summary
from loki.tasks.record import TASK_STATES, add_note, clear_claim, start_fresh_budget
from loki.wording import shorten

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from loki.storage.state import StateStore as Store


TEMPLATE_NAME = "escalation.md"
USER_TEMPLATE = layout.ESCALATION_TEMPLATE
HOT_STATES = tuple(s.value for s in TASK_STATES)
PLACEHOLDERS = {
    "task_title": "the task's title",
    "task_id": "the task's id",
    "failure_count": "how many attempts failed",
    "trigger": "why it was escalated (--trigger)",
    "error_summary": "the failure pattern in one line",
    "attempts_log": "every attempt, as a Markdown table",
    "agent_analysis": "what was tried and why it failed (--analysis)",
    "recommended_options": "numbered options with their trade-offs (--option ...)",
    "timestamp": "when the escalation was written (UTC)",
    "agent": "who escalated",
}
DECISIONS = ("approve", "cancel", "clarify")
SYSTEMIC_PREFIX = "systemic-"
"""The header task of an escalation the dead-letter review wrote for several entries with one root cause."""
DECIDED = {"approve": "approved", "cancel": "cancelled", "clarify": "clarified"}
"""A decision as the event in the task's history."""
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_HEADER = re.compile(r"^<!-- loki-escalation (\{.*\}) -->$")
RESOLUTION_HEADING = "### Resolution"
STATES = ("open", "resolved")
"""An escalation's ``state`` as its header records it."""
_HEADING_LIKE = re.compile(r"^([ \t]{0,3})(#|```|~~~|[-=]+[ \t]*$)", re.MULTILINE)


def template(store: Store) -> tuple[str, str]:
    """(text, name to show): the tree's own template if it has one, else the shipped one.

    The tree's copy is state like any other and is read through the store, so it gets the store's
    rules: a symbolic link is refused (exit 1, as `loki validate` reports it), not followed out of
    ``.loki/``. The shipped template lives in the package, outside any tree.
    """
    own = store.read_text(USER_TEMPLATE)
    if own is not None:
        return own, f".loki/{USER_TEMPLATE}"
    shipped = os.path.join(resource_dir("templates"), TEMPLATE_NAME)
    try:
        with open(shipped, encoding="utf-8") as f:
            return f.read(), shipped
    except OSError as exc:
        raise StateFileError(shipped, f"cannot read the escalation template: {exc.strerror}") from None


def render(template: str, values: dict[str, str], template_name: str) -> str:
    """Fill ``{placeholder}``s; an unknown placeholder is an error naming it and its line."""
    for number, line in enumerate(template.splitlines(), start=1):
        for match in _PLACEHOLDER.finditer(line):
            if match.group(1) not in values:
                raise InvalidInput(
                    f"{template_name} line {number}: unknown placeholder {{{match.group(1)}}}; known: "
                    + ", ".join("{" + k + "}" for k in PLACEHOLDERS),
                    file=template_name, placeholder=match.group(1), line=number,
                )
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def attempts_table(attempts: list[dict[str, Any]]) -> str:
    if not attempts:
        return "(no failed attempts recorded)"
    rows = ["| # | When | Agent | Approach | Error type | Error |", "|---|---|---|---|---|---|"]
    for a in attempts:
        message = shorten(str(a.get("error_message", "")), 300)  # on a word boundary
        cells = [str(a.get("attempt_number")), a.get("timestamp", ""), a.get("agent_id", ""), a.get("approach", ""),
                 a.get("error_type", ""), message]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)


def markdown_text(text: str) -> str:
    """Free text as it goes into an escalation's Markdown: shown as written, never structure.

    A line that would start a heading (``#``, or a ``---``/``===`` line under text), a code fence (which
    would swallow the sections after it) gets a backslash, and ``<`` is escaped (an HTML comment or tag
    would hide what follows in a viewer). Markdown drops the backslashes when it renders.
    """
    return _HEADING_LIKE.sub(lambda m: m.group(1) + "\\" + m.group(2), text.replace("<", "\\<"))


def header_line(fields: dict[str, Any]) -> str:
    """The machine-readable first line: JSON in an HTML comment. ``<`` and ``>`` are written as JSON escapes
    (the same string once parsed), so no value can end the comment early (``-->``) in a Markdown viewer."""
    document = jsonio.dumps_compact(fields).replace("<", "\\u003c").replace(">", "\\u003e")
    return f"<!-- loki-escalation {document} -->\n"


def _default_options(strategy: str | None) -> list[str]:
    if strategy == "dependency_blocked":
        return ["Resolve the blocking dependency, then approve: the task goes back to pending.",
                "Cancel: the task is dropped, and whatever depends on it is reported."]
    return ["Approve a retry with a simpler approach or a clarified spec (add it with --note).",
            "Cancel the task: nothing more is spent on it; dependents are reported."]


def write_file(store: Store, *, task_id: str, values: dict[str, str], now: str,
               fields: dict[str, Any] | None = None, stamped: str | None = None) -> str:
    """Render the template and publish the escalation file; returns its path under ``.loki/``.

    Every value is redacted here, whoever escalates (the 3-strike protocol, the dead-letter review,
    ``loki escalate``, drift, a spent budget): the attempts table and the analysis quote errors and commands.
    ``fields``: more header fields (a budget escalation's ``budget`` and window). ``stamped``: the time its
    name starts with, when that is not ``now`` (a budget's names its window, so a second writer finds it).
    """
    from loki.text.redact import redact

    values = {key: redact(value) for key, value in values.items()}
    text, name = template(store)
    body = render(text, {key: markdown_text(value) for key, value in values.items()}, name)
    header = header_line({"task_id": task_id, "trigger": values["trigger"], "created_at": now, "state": "open",
                          **(fields or {})})
    return store.create_unique(layout.ESCALATIONS_DIR, file_stem(task_id, stamped or now),
                               (header + body).encode("utf-8"), suffix=".md")


def file_stem(task_id: str, at: str) -> str:
    """``<UTC-ts>-<task_id>``: an escalation file's name before any ``-2`` and the ``.md``."""
    return f"{at.replace('-', '').replace(':', '')}-{task_id}"


def escalate(
    store: Store,
    task_id: str,
    trigger: str,
    *,
    analysis: str | None = None,
    options: Sequence[str] = (),
    agent: str | None = None,
    severity: str = "high",
) -> dict[str, Any]:
    """Write the escalation file, park the task for a human, emit HUMAN_REVIEW_NEEDED.

    The task's state is decided inside the queue lock (a task completed meanwhile is not
    escalated), and the file is written there too, so it exists only if the task was parked.
    """
    from loki.text.redact import redact

    check_id(task_id, "task id")
    if agent is not None:
        from loki.text.textsafe import check_name

        check_name(agent, "agent name")
    if not trigger.strip():
        raise InvalidArgument("--trigger must say why (e.g. security_decision, 3+ failures)", field="trigger")
    trigger = redact(trigger)  # it also becomes the blocked task's reason
    hours = float(setting(store.config, "signals", "human_review_timeout_hours"))
    parkable = ("pending", "in-progress", "blocked", "failed")
    with store.tasks().transaction() as unit:
        now_dt = store.clock.now()
        now = format_ts(now_dt)
        deadline = format_ts(add_seconds(now_dt, hours * 3600))
        located = unit.find(task_id, parkable)
        entry = unit.find_dead_letter(task_id)
        if located is None and entry is None:
            elsewhere = unit.find(task_id, HOT_STATES) or unit.find_outside(task_id)
            if elsewhere is None:
                raise NotFound(f"no task {task_id!r}", task_id=task_id)
            raise Conflict(f"{task_id} is {elsewhere[0]}; only pending, in-progress, blocked, failed or dead-letter "
                           "tasks can be escalated", task_id=task_id, state=elsewhere[0])
        task = located[1] if located is not None else entry["task_data"]  # type: ignore[index]
        attempts = (entry or task).get("attempts", [])
        option_list = list(options) or _default_options(entry.get("recovery_strategy") if entry else None)
        values = {
            "task_title": task["title"],
            "task_id": task_id,
            "failure_count": str(len(attempts)),
            "trigger": trigger,
            "error_summary": entry["error_summary"] if entry else (error_summary(attempts) if attempts else
                                                                     "No failed attempts; escalated before acting."),
            "attempts_log": attempts_table(attempts),
            "agent_analysis": analysis or _default_analysis(attempts),
            "recommended_options": "\n".join(f"{n}. {text}" for n, text in enumerate(option_list, start=1)),
            "timestamp": now,
            "agent": agent or "loki",
        }
        rel = write_file(store, task_id=task_id, values=values, now=now)
        file_name = rel.rsplit("/", 1)[-1]
        try:
            if located is None:
                assert entry is not None
                entry["recovery_strategy"] = "requires_human_review"
                entry["escalated_at"] = now
                entry["escalation"] = file_name
                history.record(entry["task_data"], "escalated", now, by=agent,
                               detail=f"{trigger}: escalations/{file_name}")
                unit.update_dead_letter(entry)
            else:
                source, current = located
                clear_claim(current)
                previous = (current.get("blocked") or {}).get("previous_status") if source == "blocked" else source
                current["blocked"] = {"reason": trigger, "since": now, "deadline": deadline,
                                      "signal": signaltypes.HUMAN_REVIEW_NEEDED, "escalation": file_name,
                                      "previous_status": previous or source}
                current["updated_at"] = now
                add_note(current, f"escalated ({trigger}): see escalations/{file_name}", now, agent)
                history.record(current, "blocked", now, by=agent, to="blocked", until=deadline,
                               detail=f"escalated ({trigger}): escalations/{file_name}")
                unit.move(current, source, "blocked")
        except BaseException:
            store.remove(rel)  # nothing was staged: no file may claim the task was parked
            raise
    if located is not None and located[0] == "in-progress":
        from loki.leases.leases import claim_moved

        claim_moved(store, located[1])  # its claim ended: this machine's copy of the path holders follows
    emitted = signals.emit(
        store, signaltypes.HUMAN_REVIEW_NEEDED,
        {"reason": trigger, "context": values["error_summary"], "blocking": True,
         "alternatives_considered": option_list, "escalation": file_name},
        task_id=task_id, severity=severity, agent=agent,
    )
    state = "blocked" if located is not None else "dead-letter"
    return {"file": rel, "task_id": task_id, "state": state,
            "deadline": deadline if located is not None else None, "signal": emitted["name"]}


def _default_analysis(attempts: list[dict[str, Any]]) -> str:
    if not attempts:
        return "The agent stopped before acting: the decision needs a human."
    approaches = sorted({a.get("approach") or "(unspecified)" for a in attempts})
    types = sorted({a.get("error_type", "other") for a in attempts})
    return (f"{len(attempts)} attempt(s) with {len(approaches)} approach(es) ({'; '.join(approaches)}) all failed "
            f"({', '.join(types)}). Repeating them is unlikely to succeed without a human decision.")


def read_header(store: Store, rel: str) -> dict[str, Any]:
    """The machine-readable first line of an escalation file, plus whether it is resolved."""
    return _row(rel, store.read_text(rel) or "")


def _header_fields(first_line: str) -> dict[str, Any]:
    """The fields of the header line (an empty dict when the line is not one, or its JSON is not an object)."""
    match = _HEADER.match(first_line)
    if match:
        try:
            parsed = jsonio.loads_strict(match.group(1))
        except jsonio.JsonError:
            return {}
        if isinstance(parsed, dict):
            return parsed
    return {}


def _row(rel: str, text: str) -> dict[str, Any]:
    """:func:`read_header` of the file at ``rel`` whose text is ``text``."""
    info = _header_fields(text.split("\n", 1)[0])
    name = rel.rsplit("/", 1)[-1]
    info.setdefault("task_id", None)
    info.setdefault("trigger", None)
    info.setdefault("created_at", None)
    title = next((line[len("## Escalation: "):] for line in text.splitlines() if line.startswith("## Escalation: ")),
                 None)
    if info.get("state") in STATES:  # what loki recorded; the Markdown below is never read for it
        resolution = str(info.get("resolution") or "resolved") if info["state"] == "resolved" else None
    else:
        resolution = _legacy_resolution(text)
    info["state"] = "open" if resolution is None else "resolved"
    return {"id": name.removesuffix(".md"), "file": name, **info, "title": title,
            "open": resolution is None, "resolution": resolution}


def _legacy_resolution(text: str) -> str | None:
    """A file written before the header recorded its state: resolved when its last section is the
    ``### Resolution`` loki appended (the first line of that section), else open. A heading in the middle
    of the file was never loki's: the shipped template's own sections follow every free-text field."""
    lines = text.rstrip("\n").split("\n")
    marks = [index for index, line in enumerate(lines) if line == RESOLUTION_HEADING]
    if not marks or any(line.startswith("#") for line in lines[marks[-1] + 1:]):
        return None
    rest = [line.strip() for line in lines[marks[-1] + 1:] if line.strip()]
    return rest[0] if rest else "resolved"


def list_escalations(store: Store, *, open_only: bool = False) -> list[dict[str, Any]]:
    # By stem: "<ts>-t1.md" before "<ts>-t1-2.md" (written second), which plain names would reverse.
    names = sorted((n for n in store.list(layout.ESCALATIONS_DIR) if n.endswith(".md")),
                   key=lambda n: n.removesuffix(".md"))
    rows = [read_header(store, f"{layout.ESCALATIONS_DIR}/{n}") for n in names]
    return [r for r in rows if r["open"] or not open_only]


def find(store: Store, spec: str) -> str:
    """The id of the escalation ``spec`` names: its id (the file name without ``.md``, as ``escalations
    list`` shows it), its file name, or what it escalates (a task id, ``systemic-<hash>``) when exactly
    one escalation ends with it -- else :class:`~loki.errors.NotFound` (exit 1) listing the candidates."""
    stem = spec.removesuffix(".md")
    check_id(stem, "escalation id")
    ids = [n.removesuffix(".md") for n in store.list(layout.ESCALATIONS_DIR) if n.endswith(".md")]
    if stem in ids:
        return stem
    # "<UTC-ts>-<task_id>" and "<UTC-ts>-<task_id>-2": the task id alone names it when it is unique
    matches = sorted(i for i in ids if i.partition("-")[2] == stem
                     or (i.partition("-")[2].rsplit("-", 1)[0] == stem and i.rsplit("-", 1)[1].isdigit()))
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise NotFound(f"{stem!r} names {len(matches)} escalations: {', '.join(matches)}; give one of them",
                       escalation=stem, candidates=matches)
    known = [row["id"] for row in list_escalations(store, open_only=True)][-5:]
    raise NotFound(f"no escalation {stem!r} (open: {', '.join(known) or 'none'}; see `loki escalations list`)",
                   escalation=stem)


def tasks_of(store: Store, file_name: str, header_task: str | None) -> list[str]:
    """The tasks an escalation is about: its header's task, or for a systemic one (several dead-letter entries
    with one root cause, escalated in one file) every entry and blocked task that points to the file."""
    if header_task is not None and not header_task.startswith(SYSTEMIC_PREFIX):
        return [header_task]
    view = store.tasks().view(["blocked", "dead-letter"])
    found = [e["task_id"] for e in view["dead-letter"] if e.get("escalation") == file_name]
    found += [t["id"] for t in view["blocked"] if (t.get("blocked") or {}).get("escalation") == file_name]
    return found


def show(store: Store, spec: str) -> dict[str, Any]:
    """One escalation: its header fields, whether it is open and how it was resolved, the tasks it is about
    (with the state each is in now) and its whole Markdown ``text``."""
    stem = find(store, spec)
    rel = f"{layout.ESCALATIONS_DIR}/{stem}.md"
    row = read_header(store, rel)
    view = store.tasks().view([*HOT_STATES, "dead-letter", "abandoned"])
    where = {t["id"]: state for state in HOT_STATES for t in view[state]}
    where.update({e["task_id"]: state for state in ("dead-letter", "abandoned") for e in view[state]})
    about = [] if row.get("budget") else tasks_of(store, row["file"], row["task_id"])  # a budget parks no task
    tasks = [{"id": task_id, "state": where.get(task_id)} for task_id in about]
    return {**row, "systemic": str(row["task_id"] or "").startswith(SYSTEMIC_PREFIX), "tasks": tasks,
            "text": store.read_text(rel) or ""}


def mark_resolved(store: Store, file_name: str | None, text: str) -> None:
    """Record an escalation as resolved: its header's ``state``, ``resolution`` (``text``, on one line) and
    ``resolved_at``, and a Resolution section appended for people (once: a file already resolved is left
    alone)."""
    if not file_name:
        return
    rel = f"{layout.ESCALATIONS_DIR}/{file_name}"
    current = store.read_text(rel)  # read once: the state checked and the header rewritten are this text's
    if current is None or not _row(rel, current)["open"]:
        return
    from loki.text.redact import redact

    line = " ".join(redact(text).split()) or "resolved"
    first, _, body = current.partition("\n")
    fields = _header_fields(first)
    if fields:
        head = header_line({**fields, "state": "resolved", "resolution": line, "resolved_at": store.now_ts()})
        current = head + body
    store.write_text(rel, current.rstrip("\n") + f"\n\n{RESOLUTION_HEADING}\n{markdown_text(line)}\n")


def close(store: Store, escalation_id: str, *, note: str, by: str | None = None) -> dict[str, Any]:
    """Mark one escalation resolved without deciding anything about its task (``escalations close``).

    For an escalation that no longer needs a human -- superseded by a newer one, answered
    elsewhere. ``escalation_id`` is the file name without ``.md``, as ``escalations list`` shows
    it. The Resolution section records who closed it, when and why; the task stays where it is
    (``approve`` is the decision on the task, and resolves all of its escalations).
    """
    check_id(escalation_id.removesuffix(".md"), "escalation id")
    if not note.strip():
        raise InvalidArgument("--note must say why the escalation is closed (it is recorded in the file)",
                              field="note")
    stem = find(store, escalation_id)
    rel = f"{layout.ESCALATIONS_DIR}/{stem}.md"
    row = read_header(store, rel)
    if not row["open"]:
        raise Conflict(f"escalation {stem} is already resolved ({row['resolution']}); nothing changed",
                       escalation=stem, resolution=row["resolution"])
    who = by or "human"
    now = store.now_ts()
    text = f"closed by {who} at {now}: {' '.join(note.split())}"
    mark_resolved(store, row["file"], text)
    return {**read_header(store, rel), "closed_by": who, "closed_at": now, "note": note}


def resolve(store: Store, task_id: str, decision: str, *, note: str | None = None,
            approver: str | None = None) -> dict[str, Any]:
    """Apply a human's decision on a task waiting for one (HUMAN_APPROVED's effect).

    blocked: approve or clarify -> pending (the note kept); cancel -> cancelled.
    dead-letter: approve or clarify -> pending (a recovery); cancel -> abandoned.
    approve and clarify start a fresh attempt budget (the attempts so far stay recorded).
    A task not waiting for a human is left alone (the outcome says so): applying the
    same decision twice is harmless.
    """
    if decision not in DECISIONS:
        raise InvalidArgument(f"--decision must be one of {', '.join(DECISIONS)} (got {decision!r})", field="decision")
    check_id(task_id, "task id")
    who = approver or "human"
    escalation_file = None
    with store.tasks().transaction() as unit:
        now = store.now_ts()
        text = f"{decision} by {who} at {now}" + (f": {note}" if note else "")
        located = unit.find(task_id, ("blocked",))
        if located is not None:
            task = located[1]
            escalation_file = (task.get("blocked") or {}).get("escalation")
            unit.remove("blocked", task)
            task.pop("blocked", None)
            task["updated_at"] = now
            add_note(task, f"human decision: {text}", now, who)
            if decision == "cancel":
                history.record(task, DECIDED[decision], now, by=who, to="cancelled", detail=text)
                unit.put("cancelled", task)
                outcome = "cancelled"
            else:
                task["available_at"] = now
                task["recovery_strategy"] = "human_approved"
                start_fresh_budget(task)  # a human's approval: max_attempts more tries (docs/queue.md)
                history.record(task, DECIDED[decision], now, by=who, to="pending", detail=text)
                unit.put("pending", task)
                outcome = "pending"
        else:
            entry = unit.find_dead_letter(task_id)
            if entry is None:
                if unit.find(task_id, HOT_STATES) is None and not any(
                        e["task_id"] == task_id for e in unit.abandoned()):
                    raise NotFound(f"no task {task_id!r}", task_id=task_id)
                return {"task_id": task_id, "decision": decision, "outcome": "not waiting for a human",
                        "applied": False}
            escalation_file = entry.get("escalation")
            if decision == "cancel":
                history.record(entry["task_data"], DECIDED[decision], now, by=who, to="abandoned", detail=text)
                unit.abandon(entry, f"human explicitly abandoned: {note or 'no reason given'}", now)
                outcome = "abandoned"
            else:
                task = unit.recover(entry)
                clear_claim(task)
                task["available_at"] = now
                task["updated_at"] = now
                task["recovery_strategy"] = "human_approved"
                start_fresh_budget(task)
                add_note(task, f"human decision: {text}", now, who)
                history.record(task, DECIDED[decision], now, by=who, to="pending", detail=text)
                unit.put("pending", task)
                outcome = "pending"
    # The decision answers every open escalation of the task, not only the one it is parked on:
    # an older one would otherwise stay open (and in every session briefing) for ever.
    files = [escalation_file] if escalation_file else []
    files += [row["file"] for row in list_escalations(store, open_only=True)
              if row["task_id"] == task_id and row["file"] not in files]
    for name in files:
        mark_resolved(store, name, text)
    return {"task_id": task_id, "decision": decision, "outcome": outcome, "applied": True,
            "escalation": escalation_file, "resolved": files}
