"""``logs/tasks.jsonl``: the failures of tasks and the dead-letter reviews, one JSON line each, for people.

The live view's feed (``loki watch``) most needs what goes wrong: a task's attempt failing, a task
moving to the dead-letter queue, what a dead-letter review decided. Each of those already changes the
queue, but a watcher cannot tell from the queue files what happened in between two looks, and one
started later would see none of it. So each is also appended here, after its commit, by whoever did it
(the agent's ``loki queue fail`` or ``loki work``, the session-start review, the watcher's tick): every
watcher follows this log by position, and one started later reads its tail as history, so both show the
same lines.

It is a record for people, not state: nothing reads it to decide anything, a crash between the commit
and the append loses the line (the task's own history keeps the failure), and the lines are redacted
(an error quotes the tool's output). Each line is the feed's event as it is shown: ``event`` (``task``
or ``review``), ``timestamp``, ``detail`` and the facts.
"""

from __future__ import annotations

from loki.storage import layout

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

    from loki.storage.state import Logs as Store  # the one role a task's log uses

LOG = f"{layout.LOGS_DIR}/tasks.jsonl"


def failure_event(outcome: dict[str, Any], attempt: dict[str, Any], now: str) -> dict[str, Any]:
    """What :meth:`loki.queue.queue.Queue.fail` did, as one event: ``change`` is ``failed`` (back to pending,
    retried after ``retry_at``), ``dead-letter`` (its budget used) or ``final`` (``--final``: failed for good)."""
    from loki.tasks.record import attempt_failed

    task = outcome["task"]
    state = outcome["state"]
    why = f"{attempt.get('error_type')}: {' '.join(str(attempt.get('error_message') or '').split())}"
    if state == "dead-letter":
        change, detail = "dead-letter", f"{task['id']} moved to the dead-letter queue ({attempt_failed(task)}); {why}"
    elif state == "failed":
        change, detail = "final", f"{task['id']} failed for good (--final); {why}"
    else:
        change = "failed"
        detail = f"{task['id']}: {attempt_failed(task)}, retry after {str(outcome.get('retry_at'))[11:19]}; {why}"
    return {"event": "task", "timestamp": now, "change": change, "task_id": task["id"],
            "agent": attempt.get("agent_id"), "attempt": attempt.get("attempt_number"),
            "error_type": attempt.get("error_type"), "detail": detail}


def review_event(result: dict[str, Any], left: int) -> dict[str, Any]:
    """A dead-letter review that ran (``result``: :meth:`loki.queue.deadletter.DeadLetter.review`'s), in the
    words and with the identity of :func:`loki.watch.activity.review_event`, which sees the same review
    in the file's metadata: a watcher shows it once, worded alike whichever report it meets first."""
    counts = result["counts"]
    return {"event": "review", "timestamp": result["reviewed_at"], "reviewed_at": result["reviewed_at"],
            "recovered": counts["retry"], "abandoned": counts["abandon"], "entries": left,
            "detail": f"dead-letter review: {counts['retry']} recovered, {counts['abandon']} abandoned, {left} left"}


def append(store: Store, events: list[dict[str, Any]]) -> None:
    """Append ``events``, redacted. A failure to write is not the caller's failure: the change is committed."""
    if not events:
        return
    import contextlib

    from loki.errors import LokiError
    from loki.text.redact import redact_obj

    # A record for people only (see the module's docstring): the task's own history has the failure.
    with contextlib.suppress(LokiError, OSError):
        store.append_lines(LOG, [redact_obj(event) for event in events])


def tail(store: Store, max_bytes: int) -> list[dict[str, Any]]:
    """The events in the last ``max_bytes`` of the log, oldest first."""
    from loki.signals.outcomes import parse_lines

    return parse_lines(b"\n".join(store.read_tail(LOG, max_bytes)))
