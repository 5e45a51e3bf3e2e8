"""What the live view of ``loki watch`` shows, as data (laid out by loki/watch/screen.py).

A snapshot: queue counts by state, the in-progress tasks with holder and lease left,
the breakers, the signals waiting, the last outcomes and the open escalations. How it is laid
out on a terminal of a given size is :mod:`loki.watch.screen`.

It is taken every second while 10,000 tasks sit in the queue files, so it re-reads a
file only when the file changed (``Store.change_token``; on the files it is the inode, size,
mtime and ctime: every write is a rename or an append) and keeps from it only what the view
shows. Escalation files are listed at most every ``escalations_every`` seconds, and each is
re-read only when it changed (:class:`loki.watch.activity.EscalationFiles`, which the live view
shares with the feed).
"""

from __future__ import annotations

import time

from loki.clock import format_ts, parse_ts
from loki.signals import emit as signals
from loki.signals import outcomes
from loki.storage import layout
from loki.watch.activity import EscalationFiles

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from loki.storage.state import StateStore as Store

KEPT_IN_PROGRESS = 200
"""In-progress tasks kept from a parse (the soonest leases first); the view shows fewer."""
RECENT_BYTES = 64 * 1024


class Dashboard:
    """Snapshots of one tree for the live view, re-reading only what changed."""

    def __init__(self, store: Store, *, in_progress_limit: int = 12, recent_limit: int = 10,
                 escalations_limit: int = 6, escalations_every: float = 5.0,
                 timer: Callable[[], float] = time.monotonic, escalations: EscalationFiles | None = None) -> None:
        self.store = store
        self.escalation_files = escalations or EscalationFiles(store)
        self.in_progress_limit = in_progress_limit
        self.recent_limit = recent_limit
        self.escalations_limit = escalations_limit
        self.escalations_every = escalations_every
        self._timer = timer
        self._files: dict[str, tuple[Any, Any]] = {}
        self._escalations: tuple[float, list[dict[str, Any]]] | None = None

    def snapshot(self, *, consuming: bool | None = None, holder: dict[str, Any] | None = None) -> dict[str, Any]:
        now = self.store.clock.now()
        queue = {state: self._summary(state)["count"] for state in (*layout.QUEUE_STATES, "dead-letter", "abandoned")}
        held = self._summary("in-progress")
        rows = []
        for task in held["tasks"][: self.in_progress_limit]:
            lease = task.get("lease_until")
            left = int((parse_ts(lease) - now).total_seconds()) if lease else None
            rows.append({"id": task["id"], "title": task.get("title", ""), "holder": task.get("claimed_by"),
                         "lease_until": lease, "lease_left": left})
        escalations = self._open_escalations()
        failing = sum(self._summary(state).get("failing", 0)
                      for state in ("pending", "in-progress", "blocked", "dead-letter"))
        return {
            "now": format_ts(now),
            "root": self.store.where,
            "consuming": consuming,
            "holder": holder,
            "queue": queue,
            "in_progress": {"total": held["count"], "tasks": rows},
            "breakers": self._breakers(),
            "signals": self._signal_counts(),
            "recent": self._recent(),
            "escalations": {"open": len(escalations), "items": escalations[-self.escalations_limit:]},
            "checks_failing": failing,
        }

    # -- cached file summaries ---------------------------------------------------------------------

    def _summary(self, state: str) -> dict[str, Any]:
        """A state's count (and the in-progress tasks), through the task store: re-read only when changed."""
        queue = self.store.tasks()
        key = queue.change_token(state)
        cached = self._files.get(state)
        if cached is not None and cached[0] == key and key is not None:
            summary: dict[str, Any] = cached[1]
            return summary
        tasks = queue.tasks_in(state)
        summary = {"count": len(tasks), "tasks": []}
        if state == "in-progress":
            # Soonest lease first: those are the tasks about to be requeued.
            summary["tasks"] = [
                {k: t.get(k) for k in ("id", "title", "claimed_by", "lease_until")}
                for t in sorted(tasks, key=lambda t: t.get("lease_until") or "9999")[:KEPT_IN_PROGRESS]
            ]
        if state in ("pending", "in-progress", "blocked", "dead-letter"):
            from loki.tasks.verify import checks_failing

            # tasks whose declared check failed at their last attempt (docs/verify.md)
            summary["failing"] = len(checks_failing({state: tasks}))
        self._files[state] = (key, summary)
        return summary

    def _breakers(self) -> list[dict[str, Any]]:
        from loki.breakers.breakers import Breakers

        return [{"name": b.name, "state": b.state.value, "failures": b.failure_count,
                 "threshold": b.settings.threshold, "cooldown_remaining": b.cooldown_remaining,
                 "next_probe_at": b.next_probe_at, "last_error": b.last_error}
                for b in Breakers(self.store).status()]

    def _signal_counts(self) -> dict[str, Any]:
        counts: dict[str, Any] = {}
        for place, rel_dir in signals.PLACES.items():
            names = self.store.list(rel_dir)
            if place == "waiting":
                counts[place] = sum(1 for n in names if signals.is_signal_entry(n))
            else:
                counts[place] = sum(1 for n in names if not n.startswith("."))
        counts["drift_pending_bytes"] = signals.drift_backlog(self.store)["pending_bytes"]
        return counts

    def _recent(self) -> list[dict[str, Any]]:
        key = self.store.change_token(outcomes.LOG)
        cached = self._files.get(outcomes.LOG)
        if cached is not None and cached[0] == key:
            recent: list[dict[str, Any]] = cached[1]
            return recent
        recent = outcomes.tail(self.store, RECENT_BYTES)[-self.recent_limit:]
        self._files[outcomes.LOG] = (key, recent)
        return recent

    def _open_escalations(self) -> list[dict[str, Any]]:
        now = self._timer()
        if self._escalations is None or now - self._escalations[0] >= self.escalations_every:
            self._escalations = (now, self.escalation_files.open_rows())
        return self._escalations[1]
