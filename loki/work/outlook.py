"""``loki work --until-empty``: when nothing is ready, is anything worth waiting for?

A claim that finds nothing ready says why (exit 3). ``--until-empty`` keeps the agent working until
the queue has nothing left *it* could ever run without a human; until then it waits and claims
again. A pending task of its types is worth waiting for when it can become ready on its own:

* it is backing off after a failed attempt (its ``available_at`` is ahead): the wait ends when the
  earliest backoff does;
* it waits on dependencies, each of which is completed, in progress (another agent holds it; its
  holder completes it, or it comes back to pending), or itself a pending task worth waiting for
  (this agent will run it);
* its type's circuit breaker holds it back for now: the cooldown ends by itself.

Not worth waiting for: a dependency that is blocked (a human decides), failed, dead-lettered,
cancelled or abandoned, or pending but of a type this agent does not run (nobody may); a task Loki
Mode's agents hold in ``pending.json``; and tasks other agents hold, which are theirs (if one fails,
its holder's own loop runs it again; if its holder dies, the lease lapses and the next claim anywhere
requeues it). So a team of ``loki work --until-empty`` agents each stop once what is left is held by
the others.

Dependencies on tasks waiting for each other (a cycle, refused when tasks are added, possible in a
hand-edited file) are not waited for.
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
"""How often to look again while waiting on something without a known end (a dependency others hold,
a breaker's cooldown): the watcher's tick interval."""


class Outlook:
    """``waiting``: tasks worth waiting for; ``next_at``: when the earliest backoff among them ends."""

    __slots__ = ("next_at", "waiting")

    def __init__(self, waiting: int, next_at: str | None) -> None:
        self.waiting = waiting
        self.next_at = next_at

    def wait_seconds(self, now: datetime) -> float:
        """How long to wait before claiming again: until the earliest backoff ends, at most
        :data:`POLL_SECONDS` (something else may become ready sooner)."""
        if self.next_at is None:
            return POLL_SECONDS
        return max(0.0, min(POLL_SECONDS, (parse_ts(self.next_at) - now).total_seconds()))


def outlook(queue: Queue, types: Collection[str], now: datetime) -> Outlook:
    """What in ``queue`` may still become ready for an agent running ``types`` (every type when empty)."""
    view = queue.tasks.view([PENDING, IN_PROGRESS, COMPLETED])
    settled = {t["id"] for t in view[COMPLETED]} | {t["id"] for t in view[IN_PROGRESS]}
    mine = [t for t in view[PENDING]
            if (not types or t.get("type") in types) and not t.get("claimed_by")]
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
    now_text = format_ts(now)
    backing_off = [t["available_at"] for t in waiting.values() if ts_before(now_text, t["available_at"])]
    return Outlook(len(waiting), min(backing_off, key=parse_ts) if backing_off else None)
