"""A task's history: every change to it, kept as an event in the task record itself.

The events live in the task's ``history`` field (schemas/task.json), so they travel with the task
through every state file, the dead-letter entry (``task_data``), ``abandoned.json``, the archive and
every storage backend, and need no store of their own. ``loki queue history ID`` shows them.

An event is ``{"at", "event", "by", "to", "detail", ...}``: when, what (:data:`EVENTS`), who (an
agent, a human's name, ``loki`` for the watcher and the dead-letter review; absent when unknown), the
state the task went to when it moved, and a sentence. Some carry facts of their own: ``until``
(a lease, a retry time, a deferral, a deadline), ``attempt`` (the attempt's number), ``changes``
(what ``edit`` changed: field -> ``{"from", "to"}``).

**Bounds.** Heartbeats of one claim are one event (``count``, ``last_at``, ``longest_gap_seconds``:
the longest silence between the claim and its heartbeats, which is what an operator looks for), so a
long task does not grow with time. A task keeps at most :data:`MAX_EVENTS` events: past that the
oldest are dropped, except the first (``added``), and one ``omitted`` event after it counts them.
Free text is redacted and cut at :data:`MAX_TEXT` characters (attempts keep the whole error). So a
task's history stays under ~60 KB however long it lives, and a 10,000-task queue file under its
64 MiB limit with room to spare for typical lives of a dozen events.

This module is on ``queue claim``'s path: the standard library only (redaction is imported when a
text is recorded, and a claim records none).
"""

from __future__ import annotations

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

MAX_EVENTS = 100
MAX_TEXT = 500
MAX_NAME = 200
MAX_VALUE = 120
"""An edited string (title, description) is kept in ``changes`` up to this many characters."""

EVENTS = (
    "added", "claimed", "heartbeat", "released", "completed", "failed", "lease_expired", "blocked",
    "dead_lettered", "escalated", "proposed", "retried", "approved", "clarified", "cancelled", "abandoned",
    "edited", "closed", "deferred", "undeferred", "omitted",
)
"""Every kind of event, as ``history --json`` names it (stable)."""


def record(task: dict[str, Any], event: str, now: str, *, by: str | None = None, to: str | None = None,
           detail: str | None = None, **facts: Any) -> dict[str, Any]:
    """Append one event to ``task``'s history (bounded, see the module) and return it.

    ``facts`` whose value is None are left out, so every event carries only what it knows.
    """
    entry: dict[str, Any] = {"at": now, "event": event}
    if by:
        entry["by"] = by[:MAX_NAME]  # names are checked where they come in; a signal's approver is not
    if to:
        entry["to"] = to
    if detail:
        entry["detail"] = clip(detail)
    entry.update((key, value) for key, value in facts.items() if value is not None)
    events = _events_of(task, new=event == "added")
    events.append(entry)
    if len(events) > MAX_EVENTS:
        _drop_oldest(events)
    return entry


def heartbeat(task: dict[str, Any], now: str, by: str, lease_until: str) -> None:
    """Record a heartbeat: consecutive heartbeats of one claim fold into one event.

    The gap since the holder was last heard of (its claim or its last heartbeat) is the silence
    the event keeps the longest of. Call it before the task's ``lease_until`` changes.
    """
    gap = _seconds_between(_last_heard(task), now)
    events = task.get("history") or []
    last = events[-1] if events else None
    if last is not None and last.get("event") == "heartbeat" and last.get("by") == by:
        last["count"] = int(last.get("count", 1)) + 1
        last["last_at"] = now
        last["until"] = lease_until
        if gap is not None and gap > float(last.get("longest_gap_seconds", 0)):
            last["longest_gap_seconds"] = gap
        return
    record(task, "heartbeat", now, by=by, until=lease_until, count=1, last_at=now,
           longest_gap_seconds=gap if gap is not None else 0)


def _last_heard(task: dict[str, Any]) -> str | None:
    """When the holder of an in-progress task was last heard of: its last heartbeat, else its claim."""
    for event in reversed(task.get("history") or []):
        if event.get("event") == "heartbeat":
            return str(event.get("last_at") or event["at"])
        if event.get("event") == "claimed":
            return str(event["at"])
    return task.get("claimed_at")


def events_of(task: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """The task's events and whether they were recorded (False: the task predates its history,
    or came from another tool; what its fields still tell is rebuilt: added, each failed attempt,
    the completion)."""
    if task.get("history"):
        return list(task["history"]), True
    rebuilt: list[dict[str, Any]] = [{"at": task["created_at"], "event": "added", "to": "pending"}]
    for attempt in task.get("attempts", []):
        rebuilt.append({"at": attempt["timestamp"], "event": "failed", "by": attempt.get("agent_id"),
                        "attempt": attempt.get("attempt_number"),
                        "detail": clip(f"{attempt.get('error_type')}: {attempt.get('error_message')}")})
    if task.get("completed_at") and task.get("status") == "completed":
        rebuilt.append({"at": task["completed_at"], "event": "completed", "to": "completed"})
    return sorted(rebuilt, key=lambda e: str(e["at"])), False


def completed_by(task: dict[str, Any]) -> str | None:
    """Who completed the task: its ``completed_by`` (the holder whose work was done, or the person who
    closed it as done), else the last event of its history that completed it."""
    if isinstance(task.get("completed_by"), str) and task["completed_by"]:
        return str(task["completed_by"])
    for event in reversed(task.get("history") or []):
        if event.get("to") == "completed":
            by = event.get("by")
            return str(by) if by else None
    return None


def changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """field -> ``{"from", "to"}`` for what differs (in the record's field order), strings cut to
    :data:`MAX_VALUE` characters."""
    keys = [key for key in before if key in after] + [key for key in after if key not in before]
    return {key: {"from": _short(before.get(key)), "to": _short(after.get(key))}
            for key in keys if before.get(key) != after.get(key)}


def clip(text: str) -> str:
    """``text`` on one line, secrets redacted, cut at :data:`MAX_TEXT` characters."""
    from loki.text.redact import redact

    text = redact(" ".join(str(text).split()))
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


# -- inside ------------------------------------------------------------------------------------------


def _events_of(task: dict[str, Any], *, new: bool) -> list[dict[str, Any]]:
    events = task.get("history")
    if events is None and new:
        events = task["history"] = []
    elif events is None:
        # A task from before histories (or from another tool): start with what its record says,
        # so the first event is still the task's beginning.
        events = task["history"] = [{"at": task["created_at"], "event": "added", "to": "pending",
                                     "detail": "recorded before this task kept a history: see its attempts "
                                               "and notes for what happened until now"}]
    return events


def _drop_oldest(events: list[dict[str, Any]]) -> None:
    """Keep the first event and the newest ones; an ``omitted`` event after the first counts the rest."""
    if len(events) > 1 and events[1].get("event") == "omitted":
        marker = events[1]
        keep_from = 2
    else:
        marker = {"at": events[1]["at"], "event": "omitted", "count": 0}
        events.insert(1, marker)
        keep_from = 2
    excess = len(events) - MAX_EVENTS
    if excess > 0:
        marker["count"] = int(marker["count"]) + excess
        marker["detail"] = f"{marker['count']} older events dropped (a task keeps at most {MAX_EVENTS})"
        del events[keep_from:keep_from + excess]


def _seconds_between(earlier: str | None, later: str) -> float | None:
    if not earlier:
        return None
    from loki.clock import parse_ts

    try:
        return max(0.0, (parse_ts(later) - parse_ts(earlier)).total_seconds())
    except ValueError:
        return None


def _short(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_VALUE:
        return value[: MAX_VALUE - 3] + "..."
    return value
