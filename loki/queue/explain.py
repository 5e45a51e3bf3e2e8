"""What ``loki queue ready`` and the pending listing show: what an agent would get next, and why the rest wait.

The rule is :mod:`loki.tasks.readiness` (the one ``claim`` picks by); this module runs it over a
lock-free read of the queue, so a person asking "why is nothing happening?" never holds up the
agents, and it asks the circuit breakers read-only: listing never takes a HALF_OPEN breaker's probe
slot, which belongs to the claim that takes the task. It imports no :class:`~loki.queue.queue.Queue`:
the queue calls it.
"""

from __future__ import annotations

from loki.clock import ts_before
from loki.storage import layout
from loki.tasks.readiness import DependencyIndex, behind_dead_letter, explain, never_ready

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

    from loki.breakers.breakers import BreakerStatus
    from loki.storage.state import StateStore
    from loki.storage.tasks import TaskStore


class QueueView:
    """A consistent lock-free read of the queue, shaped like the unit of work ``DependencyIndex`` reads."""

    def __init__(self, tasks: TaskStore, docs: dict[str, list[Any]]) -> None:
        self._tasks = tasks
        self.docs = docs
        self._ids: dict[str, tuple[str, dict[str, Any]]] | None = None

    def tasks(self, state: str) -> list[dict[str, Any]]:
        return self.docs[state]

    def dead_letters(self) -> list[dict[str, Any]]:
        return self.docs["dead-letter"]

    def abandoned(self) -> list[dict[str, Any]]:
        return self.docs["abandoned"]

    def find(self, task_id: str, states: Iterable[str]) -> tuple[str, dict[str, Any]] | None:
        """``(state, task)`` by id, through a dictionary built once from the view."""
        if self._ids is None:
            self._ids = {}
            for state, records in self.docs.items():
                for record in records:
                    entry = state in ("dead-letter", "abandoned")
                    self._ids.setdefault(record["task_id"] if entry else record["id"],
                                         (state, record["task_data"] if entry else record))
        found = self._ids.get(task_id)
        return found if found is not None and found[0] in tuple(states) else None

    def find_archived(self, task_id: str) -> tuple[str, dict[str, Any]] | None:
        return self._tasks.find_archived(task_id)


class BreakerView:
    """Which task types a breaker of the same name holds back now, asked without changing anything."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self._names: set[str] | None = None
        self._status: dict[str, BreakerStatus] = {}

    def refusal(self, type_: Any, first: bool) -> str | None:
        """Why a task of ``type_`` cannot be claimed now because of its breaker (None: it can).

        ``first``: the first otherwise-ready task of the type, which a HALF_OPEN breaker with a free
        probe slot lets through; every later one waits for the probe's result.
        """
        if self._names is None:
            self._names = set(self.store.read(layout.BREAKERS)) if self.store.exists(layout.BREAKERS) else set()
        if not isinstance(type_, str) or type_ not in self._names:
            return None
        if type_ not in self._status:
            from loki.breakers.breakers import Breakers

            self._status[type_] = Breakers(self.store).status(type_)
        status = self._status[type_]
        state = status.state.value
        if state == "OPEN":
            return (f"type {type_}: circuit {type_} is OPEN; retry in {status.cooldown_remaining}s "
                    f"(at {status.next_probe_at})")
        if state == "HALF_OPEN":
            if status.next_probe_at and ts_before(status.now, status.next_probe_at):
                return (f"type {type_}: circuit {type_} is HALF_OPEN and another agent holds the probe slot; "
                        f"retry at {status.next_probe_at}")
            if not first:
                return (f"type {type_}: circuit {type_} is HALF_OPEN: one task of the type at a time (the probe), "
                        "and an earlier one takes it")
        return None


def ready_count(store: StateStore) -> tuple[int, int]:
    """``(ready, pending)``: how many pending tasks ``claim`` would hand out now, and how many are pending;
    what ``Queue.ready()`` counts with no filter, without importing the queue (the SessionStart briefing
    asks it at every session's start)."""
    from loki.clock import format_ts
    from loki.config import setting
    from loki.tasks.readiness import skew_bound

    now = format_ts(store.clock.now())
    bound = skew_bound(now, float(setting(store.config, "queue", "backoff_max")))
    report = ready_rows(store.tasks(), store, now=now, not_after=bound, fits=lambda task: True)
    return sum(1 for row in report["rows"] if row["ready"]), int(report["pending"])


def ready_rows(tasks: TaskStore, store: StateStore, *, now: str, not_after: str,
               fits: Callable[[dict[str, Any]], bool], lease_now: str | None = None) -> dict[str, Any]:
    """The pending tasks that ``fits`` accepts, in claim order, each ``{"task", "ready", "reasons"}``;
    and the in-progress tasks whose lease has expired by ``lease_now`` (the lease clock's now, default
    ``now``): the next claim requeues them first."""
    states = ["pending", "in-progress", "landing", "blocked", "completed", "failed", "cancelled", "dead-letter",
              "abandoned"]
    view = QueueView(tasks, tasks.view(states))
    deps = DependencyIndex(view)
    pending = view.tasks("pending")
    chosen = [t for t in pending if fits(t)]
    waiting = [t for t in chosen if t.get("dependencies")]
    on_hold = [*pending, *view.tasks("blocked")] if waiting else []
    stuck = never_ready(on_hold, deps.state_of) if waiting else {}
    behind = behind_dead_letter(on_hold, deps.state_of) if waiting else {}
    ended = lease_now or now
    holders = _path_holders(store, view, ended) if any(t.get("paths") for t in chosen) else None
    rows = explain(chosen, now=now, not_after=not_after, deps=deps, stuck=stuck, refusal=BreakerView(store).refusal,
                   behind=behind, paths=(lambda t: holders.reason(t, None)) if holders is not None else None)
    expired = [t["id"] for t in view.tasks("in-progress")
               if t.get("lease_until") and ts_before(t["lease_until"], ended)]
    return {"pending": len(pending), "rows": rows, "expired": expired}


def _path_holders(store: StateStore, view: QueueView, lease_now: str) -> Any:
    """Who holds which paths (docs/leases.md): the live path leases, the claims of tasks with paths and the
    landing tasks with paths."""
    from loki.clock import parse_ts
    from loki.leases.holders import PathHolders, task_holders
    from loki.leases.leases import PathLeases

    return PathHolders(PathLeases(store).live(parse_ts(lease_now)), task_holders(view.tasks("in-progress"), lease_now,
                                                                                   view.tasks("landing")))
