"""``loki work --until-empty``: when nothing is ready, is anything worth waiting for?

A claim that finds nothing ready says why (exit 3). ``--until-empty`` keeps the agent working until
the queue has nothing left *it* could ever run without a human; until then it waits and claims
again. A pending task of its types is worth waiting for when it can become ready on its own:

* it is backing off after a failed attempt (its ``available_at`` is ahead): the wait ends when the
  earliest backoff does;
* it waits on dependencies, each of which is completed, in progress (another agent holds it; its
  holder completes it, or it comes back to pending), or itself a pending task worth waiting for
  (this agent will run it);
* it is deferred (``loki queue defer``): the deferral ends at its date, or a person lifts it;
* its type's circuit breaker holds it back for now: the cooldown ends by itself;
* it is of its types and another agent holds it: that agent may fail it (back to pending, backing
  off), or die (the lease lapses and the next claim requeues it); the wait is known to end by the
  lease's end at the latest.

Not worth waiting for: a dependency that is blocked (a human decides), failed, dead-lettered,
cancelled or abandoned, or pending but of a type this agent does not run (nobody may); and a task
Loki Mode's agents hold in ``pending.json``. So a team of ``loki work --until-empty`` agents stop
together, once nothing of their types is held or may become ready.

Dependencies on tasks waiting for each other (a cycle, refused when tasks are added, possible in a
hand-edited file) are not waited for.

This is not a second readiness rule: the loop asks it only after ``claim`` (the one rule,
loki/tasks/readiness.py) found nothing ready, and it sorts what the claim refused by whether the wait
ends without a human, timing deferrals and backoffs with the rule's own ``time_gate``.
``tests/contract/test_readiness.py`` checks that the two agree on every backend.
"""

from __future__ import annotations

from loki.clock import format_ts, parse_ts, ts_before
from loki.queue.queue import COMPLETED, IN_PROGRESS, PENDING

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Collection
    from datetime import datetime
    from typing import Any

    from loki.queue.queue import Queue

POLL_SECONDS = 5.0
"""How often to look again while waiting (a task held elsewhere may come back early, a dependency may
complete, a breaker cool down, a deferral be lifted): the watcher's tick interval."""


class Outlook:
    """``waiting``: tasks worth waiting for; ``next_at``: the earliest time one of them is known to change
    (a backoff or deferral ends, a held task's lease lapses); ``reasons``: how many wait for what."""

    __slots__ = ("next_at", "reasons", "waiting")

    def __init__(self, waiting: int, next_at: str | None, reasons: dict[str, int] | None = None) -> None:
        self.waiting = waiting
        self.next_at = next_at
        self.reasons = reasons or {}

    def wait_seconds(self, now: datetime) -> float:
        """How long to wait before claiming again: until :attr:`next_at`, at most :data:`POLL_SECONDS`
        (something else may become ready sooner)."""
        if self.next_at is None:
            return POLL_SECONDS
        return max(0.0, min(POLL_SECONDS, (parse_ts(self.next_at) - now).total_seconds()))

    def describe(self) -> str:
        """``1 held by another agent, 2 backing off``: what the waiting tasks wait for."""
        return ", ".join(f"{count} {why}" for why, count in self.reasons.items() if count)


def outlook(queue: Queue, types: Collection[str], now: datetime) -> Outlook:
    """What in ``queue`` may still become ready for an agent running ``types`` (every type when empty)."""
    view = queue.tasks.view([PENDING, IN_PROGRESS, COMPLETED])
    completed = {t["id"] for t in view[COMPLETED]}
    settled = completed | {t["id"] for t in view[IN_PROGRESS]}
    mine = [t for t in view[PENDING]
            if (not types or t.get("type") in types) and not t.get("claimed_by")]
    # Held by another agent: it may fail it (back to pending, backing off) or die (its lease lapses and
    # the next claim requeues it). Either way it comes back to whoever runs its type.
    held = [t for t in view[IN_PROGRESS] if not types or t.get("type") in types]
    hot = settled | {t["id"] for t in view[PENDING]}
    archived: dict[str, bool] = {}

    def completed_in_archive(dep: str) -> bool:
        if dep not in archived:
            found = None if dep in hot else queue.tasks.find_archived(dep)
            archived[dep] = found is not None and found[0] == COMPLETED
        return archived[dep]

    # The least fixpoint: a task joins once each dependency has completed, is held, or has joined.
    # Tasks in a cycle never join, so they are never waited for.
    waiting: dict[str, dict[str, Any]] = {}
    grew = True
    while grew:
        grew = False
        for task in mine:
            if task["id"] in waiting:
                continue
            if all(dep in settled or dep in waiting or completed_in_archive(dep)
                   for dep in task.get("dependencies") or []):
                waiting[task["id"]] = task
                grew = True
    from loki.config import setting
    from loki.tasks.readiness import BACKOFF, DEFERRED, skew_bound, time_gate

    now_text = format_ts(now)
    not_after = skew_bound(now_text, float(setting(queue.store.config, "queue", "backoff_max")))
    events: list[str] = []
    reasons = {"held by another agent": len(held), "backing off": 0, "deferred": 0, "waiting on dependencies": 0,
               "held back by a breaker": 0}
    for task in waiting.values():
        gate = time_gate(task, now_text, not_after)  # the rule's own time gate, as claim applies it
        if gate is not None and gate[0] == DEFERRED:
            reasons["deferred"] += 1
            events.append(gate[1])
        elif gate is not None and gate[0] == BACKOFF:
            reasons["backing off"] += 1
            events.append(gate[1])
        elif not all(dep in completed or completed_in_archive(dep) for dep in task.get("dependencies") or []):
            reasons["waiting on dependencies"] += 1
        else:
            reasons["held back by a breaker"] += 1
    events.extend(t["lease_until"] for t in held if t.get("lease_until"))
    future = [at for at in events if ts_before(now_text, at)]
    return Outlook(len(waiting) + len(held), min(future, key=parse_ts) if future else None, reasons)
