"""The watcher's periodic tick: what must happen because time passed, not because a signal came.

* expired leases are requeued (``Queue.requeue_stale``: a ``timeout`` attempt each);
* blocked tasks whose human-review deadline passed move to the dead-letter queue
  (reference, HUMAN_REVIEW_NEEDED: "timeout: 24 hours -> move task to dead letter queue");
* OPEN breakers whose cooldown is over are moved to HALF_OPEN and saved (a check would
  write that transition lazily; the tick writes it down when nobody checks), so it is
  logged exactly once, by whoever sees it first;
* the dead-letter review runs when it is due (``deadletter.review_interval_hours``);
* tasks in ``landing`` are resolved (loki/queue/landing.py): completed when their commit reached
  their branch, back to pending when their branch was deleted unmerged, escalated past their deadline.

Each step first looks without a lock and takes the queue lock only when there is
something to do, so a tick every few seconds costs agents nothing. Every action is
appended to ``logs/events.jsonl``. ``now`` is the store's clock: tests move it by hand.
"""

from __future__ import annotations

from loki.clock import format_ts, parse_ts, ts_before
from loki.config import setting
from loki.queue import deadletter
from loki.storage import layout
from loki.tasks import history
from loki.tasks.deadentry import make_entry
from loki.tasks.record import add_note
from loki.wording import plural

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from datetime import datetime
    from typing import Any

    from loki.storage.state import StateStore as Store

EVENTS_LOG = f"{layout.LOGS_DIR}/events.jsonl"
SOURCE = "loki watch"


def _event(action: str, detail: str, **extra: Any) -> dict[str, Any]:
    return {"event": "tick", "action": action, "detail": detail, **extra}


class Tick:
    """One watcher's periodic maintenance."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._landing_key: Any = None
        """What the last resolution of landing saw (loki/queue/landing.py: Landing.key)."""

    def run(self) -> list[dict[str, Any]]:
        now = self.store.clock.now()
        events = [*self.requeue_expired(now), *self.review_timeouts(now), *self.breaker_cooldowns(),
                  *self.deadletter_review(now), *self.landings()]
        if events:
            stamp = format_ts(now)
            from loki.text.redact import redact_obj

            self.store.append_lines(EVENTS_LOG, [redact_obj({"timestamp": stamp, "source": SOURCE,
                                                             **{k: v for k, v in e.items() if k != "event"}})
                                                 for e in events])
        return events

    def requeue_expired(self, now: datetime) -> list[dict[str, Any]]:
        from loki.queue.queue import Queue

        # Leases end by the lease clock (the database's on PostgreSQL), not by this machine's: a watcher on a
        # clock behind must still see a dead holder's lease end (docs/postgres.md, "Clock skew").
        lease_clock = getattr(self.store, "lease_clock", None)
        stamp = format_ts(lease_clock.now() if lease_clock is not None else now)
        tasks = self.store.tasks().tasks_in("in-progress")
        if not any(t.get("lease_until") and ts_before(t["lease_until"], stamp) for t in tasks):
            return []
        moved = Queue(self.store).requeue_stale()
        return ([_event("lease_expired", f"{task_id}: lease expired, back to pending (a timeout attempt)",
                        task_id=task_id) for task_id in moved["requeued"]]
                + [_event("lease_expired", f"{task_id}: lease expired on its last attempt -> dead-letter",
                          task_id=task_id) for task_id in moved["dead_lettered"]])

    def review_timeouts(self, now: datetime) -> list[dict[str, Any]]:
        """Blocked tasks past their human-review deadline -> dead-letter, marked requires_human_review."""
        if not any(_overdue(t, now) for t in self.store.tasks().tasks_in("blocked")):
            return []
        events = []
        with self.store.tasks().transaction() as unit:
            now = self.store.clock.now()  # again, inside the lock: the tick may have waited for it
            stamp = format_ts(now)
            for task in [t for t in unit.tasks("blocked") if _overdue(t, now)]:
                blocked = task.pop("blocked")
                unit.remove("blocked", task)
                add_note(task, f"no human decision by {blocked['deadline']} ({blocked.get('reason', '')}): moved "
                               "to the dead-letter queue", stamp, SOURCE)
                task["updated_at"] = stamp
                history.record(task, "dead_lettered", stamp, by=SOURCE, to="dead-letter",
                               detail=f"no human decision by {blocked['deadline']} ({blocked.get('reason', '')})")
                previous = blocked.get("previous_status")
                entry = make_entry(task, previous if previous in ("pending", "in-progress") else "pending")
                entry["recovery_strategy"] = "requires_human_review"
                if blocked.get("escalation"):
                    # A human already has an escalation file: the review must not write a second one.
                    entry["escalated_at"] = blocked["since"]
                    entry["escalation"] = blocked["escalation"]
                unit.dead_letter(entry)
                events.append(_event("review_timeout", f"{task['id']}: no human decision by {blocked['deadline']}"
                                                       " -> dead-letter (requires_human_review)", task_id=task["id"]))
        return events

    def breaker_cooldowns(self) -> list[dict[str, Any]]:
        """OPEN breakers whose cooldown is over are moved to HALF_OPEN and saved (under the breakers
        lock), so the change is reported once: by the tick or the check that saw it first."""
        from loki.breakers.breakers import Breakers

        breakers = Breakers(self.store)
        # ``at``: when the cooldown ended, as the recovery log dates it (the live view shows it once).
        return [_event("breaker_half_open", f"{t.name}: cooldown over, HALF_OPEN (one probe per "
                                            f"{breakers.settings(t.name).half_open_interval:g}s)", breaker=t.name,
                       at=t.at)
                for t in breakers.settle()]

    def landings(self) -> list[dict[str, Any]]:
        """Resolve the landing tasks when their refs, or the tasks, changed since the last tick, or a deadline
        passed: a quiet tick costs one ``git for-each-ref``, whatever the number of tasks."""
        from loki.queue.landing import Landing

        landing = Landing(self.store)
        key = landing.key()
        if key is None or (key == self._landing_key and not landing.due(self.store.clock.now())):
            self._landing_key = key
            return []
        self._landing_key = key  # a change this resolution makes changes the key: the next tick looks again
        return [_event(e["action"], e["detail"], task_id=e["task_id"]) for e in landing.resolve()]

    def deadletter_review(self, now: datetime) -> list[dict[str, Any]]:
        doc = self.store.tasks().dead_letter_doc()
        if not doc["tasks"]:
            return []
        last = doc["metadata"]["last_reviewed"]
        hours = float(setting(self.store.config, "deadletter", "review_interval_hours"))
        if last is not None and (now - parse_ts(last)).total_seconds() < hours * 3600:
            return []
        result = deadletter.DeadLetter(self.store).review()
        if result.get("skipped"):
            return []
        counts = result["counts"]
        return [_event("deadletter_review", f"dead-letter review of {plural(result['entries'], 'entry', 'entries')}: "
                                            + ", ".join(f"{v} {k}" for k, v in counts.items() if v), counts=counts,
                       reviewed_at=result["reviewed_at"])]


def _overdue(task: dict[str, Any], now: datetime) -> bool:
    deadline = (task.get("blocked") or {}).get("deadline")
    return isinstance(deadline, str) and parse_ts(deadline) <= now
