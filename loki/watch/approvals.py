"""A human's decision on a task that waits for one: what ``loki approve`` does, callable from Python.

The decision travels as a HUMAN_APPROVED signal, so it is logged and applied exactly once by the
same consumer as every other signal (docs/signals.md). :func:`approve` checks that the task really
waits for a human (blocked, or in the dead-letter queue), emits the signal and, when no watcher is
consuming, applies it at once; with a watcher running, the watcher applies it and the result names
that watcher. A decision that was recorded but failed to apply is an error that says where the
signal is kept, never a silent "applied later"::

    from loki import open_store
    from loki.watch.approvals import approve

    result = approve(open_store(), "task-1", "approve", note="use staging", approver="alice")
    print(result.applied_now, result.outcome)

Kept out of :mod:`loki.queue.escalations`, which writes and resolves the escalation files: approving goes
through the signal consumer, and the consumer's rules call into ``escalations``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

    from loki.storage.state import StateStore as Store

WAITING_STATES = ("blocked", "dead-letter")
"""The states in which a task waits for a human decision (``escalate`` puts it there)."""


@dataclass(frozen=True)
class Approval:
    """What :func:`approve` did: the signal it emitted, and either the outcome of applying it now
    (``applied_now``) or the watcher that will (``consumer``, its lock holder record)."""

    signal: str
    task_id: str
    decision: str
    approver: str
    applied_now: bool
    outcome: dict[str, Any] | None
    consumer: dict[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        return {"signal": self.signal, "task_id": self.task_id, "decision": self.decision,
                "applied_now": self.applied_now, "outcome": self.outcome, "consumer": self.consumer}


def approve(store: Store, task_id: str, decision: str, *, note: str | None = None,
            approver: str | None = None) -> Approval:
    """Record ``decision`` (approve, cancel or clarify) on a task waiting for a human, and apply it
    now unless a watcher is consuming signals.

    ``approver`` defaults to ``$USER`` (as git's author does), else "human". Raises
    :class:`~loki.errors.InvalidInput` for a strike escalation's id (those are cleared with
    ``loki errors reset``), :class:`~loki.errors.InvalidArgument` for an unknown decision,
    :class:`~loki.errors.NotFound` for an unknown task, :class:`~loki.errors.Conflict` for a task
    that is not blocked or dead-lettered, and :class:`~loki.errors.LokiError` when this call was
    the consumer and applying the decision failed (the signal stays in ``signals/.processing/``
    for the next consumer to retry).
    """
    from loki.errors import Conflict, InvalidArgument, InvalidInput, LokiError
    from loki.queue.escalations import DECISIONS
    from loki.queue.queue import Queue
    from loki.signals import emit as signals
    from loki.signals import types as signaltypes
    from loki.storage.paths import check_id
    from loki.strikes.strikes import ESCALATION_PREFIX
    from loki.watch.consumer import consume_pending

    check_id(task_id, "task id")
    if task_id.startswith(ESCALATION_PREFIX):
        raise InvalidInput(f"{task_id} is a strike escalation (a tool call that kept failing), not a task: once the "
                           "cause is fixed, clear it with `loki errors reset`", field="task_id")
    if decision not in DECISIONS:
        raise InvalidArgument(f"--decision must be one of {', '.join(DECISIONS)} (got {decision!r})", field="decision")
    if approver is not None:
        from loki.text.textsafe import check_name

        check_name(approver, "approver name")
    who = approver or os.environ.get("USER") or "human"
    state = Queue(store).show(task_id)["state"]  # NotFound (exit 1) for an unknown id
    if state not in WAITING_STATES:
        raise Conflict(f"{task_id} is {state}, not waiting for a human decision (only blocked and dead-letter "
                       "tasks are)", task_id=task_id, state=state)
    fields = {"decision": decision, "approver": who, **({"note": note} if note else {})}
    emitted = signals.emit(store, signaltypes.HUMAN_APPROVED, fields, task_id=task_id)
    # With no watcher running, apply it now (the same exactly-once consumer); else the watcher does.
    done = consume_pending(store)
    mine = next((o for o in done["outcomes"] if o.get("name") == emitted["name"]), None)
    if done["consumed"] and mine is None:
        # We were the consumer and it did not apply: say so, never "the watcher applies it".
        failed = next((e for e in done["errors"] if signals.original_name(str(e.get("id"))) == emitted["name"]),
                      None)
        why = failed["message"] if failed else "it was not applied"
        raise LokiError(f"{decision} for {task_id} was recorded as signal {emitted['name']} but applying it failed: "
                        f"{why}. The signal is kept in signals/.processing/; `loki watch --once` (or a running "
                        "`loki watch`) retries it", signal=emitted["name"], task_id=task_id, decision=decision,
                        applied_now=False, reason=why)
    return Approval(signal=emitted["name"], task_id=task_id, decision=decision, approver=who,
                    applied_now=done["consumed"], outcome=mine, consumer=None if done["consumed"] else done["consumer"])


def approve_escalation(store: Store, escalation_id: str, decision: str, *, note: str | None = None,
                       approver: str | None = None) -> list[Approval]:
    """:func:`approve` for every task an escalation is about that still waits for a human: the one task of
    an ordinary escalation, each dead-letter entry of a systemic one (the dead-letter review escalates
    several entries with one root cause in one file). ``escalation_id`` is what ``escalations list``
    shows (or a unique task or ``systemic-...`` id it ends with: :func:`loki.queue.escalations.find`).

    Raises :class:`~loki.errors.InvalidInput` for a strike escalation (a tool call, not a task: ``loki
    errors reset``), :class:`~loki.errors.Conflict` when none of its tasks waits for a decision any more
    (close it with ``loki escalations close``), and whatever :func:`approve` raises for a task.
    """
    from loki.errors import Conflict, InvalidInput
    from loki.queue.escalations import find, read_header, tasks_of
    from loki.queue.queue import Queue
    from loki.storage import layout
    from loki.strikes.strikes import ESCALATION_PREFIX

    stem = find(store, escalation_id)
    row = read_header(store, f"{layout.ESCALATIONS_DIR}/{stem}.md")
    if str(row["task_id"] or "").startswith(ESCALATION_PREFIX):
        raise InvalidInput(f"{stem} escalates a tool call that kept failing (3-strike protocol), not a task: once "
                           "the cause is fixed, `loki errors reset` clears it, or `loki escalations close` closes it",
                           field="task_id", escalation=stem)
    if row.get("budget"):
        return acknowledge_budget(store, stem, row, decision, note=note, approver=approver)
    waiting = [task_id for task_id in tasks_of(store, row["file"], row["task_id"])
               if _state(Queue(store), task_id) in WAITING_STATES]
    if not waiting:
        raise Conflict(f"no task of escalation {stem} waits for a human decision any more; `loki escalations close "
                       f"{stem} --note ...` closes it", escalation=stem)
    return [approve(store, task_id, decision, note=note, approver=approver) for task_id in waiting]


def acknowledge_budget(store: Store, stem: str, row: dict[str, Any], decision: str, *, note: str | None,
                       approver: str | None) -> list[Approval]:
    """A spent budget's escalation parks no task: ``approve`` is a person acknowledging it (resolved; the budget
    stays spent until its window refills or ``loki budget set`` raises it). ``cancel`` and ``clarify`` have
    nothing to act on (:class:`~loki.errors.InvalidInput`); an escalation already resolved is a Conflict."""
    from loki.errors import Conflict, InvalidInput
    from loki.queue.escalations import mark_resolved

    if decision != "approve":
        raise InvalidInput(f"{stem} is a spent budget ({row['budget']}), not a task: `--decision approve` "
                           f"acknowledges it; `loki budget set {row['budget']} ...` raises it", field="decision",
                           escalation=stem)
    if not row["open"]:
        raise Conflict(f"escalation {stem} is already resolved ({row['resolution']}); nothing changed",
                       escalation=stem, resolution=row["resolution"])
    if approver is not None:
        from loki.text.textsafe import check_name

        check_name(approver, "approver name")
    who = approver or os.environ.get("USER") or "human"
    mark_resolved(store, row["file"], f"acknowledged by {who} at {store.now_ts()}" + (f": {note}" if note else ""))
    return []


def _state(queue: Any, task_id: str) -> str | None:
    from loki.errors import NotFound

    try:
        return str(queue.show(task_id)["state"])
    except NotFound:
        return None


def approve_any(store: Store, target: str, decision: str, *, note: str | None = None,
                approver: str | None = None) -> dict[str, Any]:
    """What ``loki approve ID`` does: ``ID`` is a task (:func:`approve`) or, when no task has that id, an
    escalation (:func:`approve_escalation`). Returns ``{"escalation": its id or None, "approvals": [...]}``."""
    from loki.errors import InvalidArgument, NotFound
    from loki.queue.escalations import DECISIONS

    if decision not in DECISIONS:  # before anything is looked up: the command line alone shows it
        raise InvalidArgument(f"--decision must be one of {', '.join(DECISIONS)} (got {decision!r})", field="decision")
    try:
        return {"escalation": None, "approvals": [approve(store, target, decision, note=note, approver=approver)]}
    except NotFound as missing:
        try:
            from loki.queue.escalations import find

            stem = find(store, target)
        except NotFound:
            raise NotFound(f"no task or escalation {target!r} (`loki escalations list --open` shows what waits for "
                           "a human)", task_id=target) from missing
    return {"escalation": stem, "approvals": approve_escalation(store, stem, decision, note=note, approver=approver)}
