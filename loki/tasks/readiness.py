"""When a pending task is ready, and why it is not: the one rule ``claim``, ``ready`` and ``list`` share.

A pending task is ready (docs/queue.md, "Readiness and order") when

* it is not deferred (``deferred.until``, set by ``loki queue defer``, has come);
* its ``available_at`` (the backoff after a failure) has come -- unless it lies further ahead than
  the longest backoff, which no rule writes: a clock since set back wrote it (``not_after``);
* it is not claimed where it lies (Loki Mode's flock claim in ``pending.json``, while its lease runs);
* every dependency is completed (in the hot files or the archive);
* its type's circuit breaker lets a call through (the domain asks :class:`loki.breakers.breakers.Breakers`;
  this module only takes the answer as a function).

The best ready task is the highest priority, then the oldest ``created_at``, then the earlier in the
file. :func:`select_ready` is that choice as both task stores that scan in Python run it
(``TaskTxn.next_ready``); :func:`explain` walks the same rule over every pending task and says, for
each one that is not ready, every reason why. A leaf of the queue package: the stores import it,
and it imports no store.

This is the one rule. Everything that says "ready" asks it: ``claim`` (``TaskTxn.next_ready``),
``ready`` and ``ready --explain`` and the pending listing (:mod:`loki.queue.explain`), the SessionStart
briefing (``Queue.ready``), and ``loki work --until-empty`` (:mod:`loki.work.outlook` only weighs what
the claim found not ready). Its **SQL twin** on PostgreSQL is the ``claim`` and ``census`` queries (with
their fragments ``deferred``, ``waiting``, ``held`` and ``dependencies_done``, in
``loki/storage/postgres/sql/queries.sql``): a change here is a change there.
``tests/contract/test_readiness.py`` holds them together over deferred, backing off, held, a dependency
not done, a dead dependency and an open breaker, on the files, in memory and on PostgreSQL.
"""

from __future__ import annotations

from loki.clock import ts_before_or_at
from loki.tasks.record import PRIORITY_RANK, TASK_STATES

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable
    from typing import Any, Protocol

    class Lookup(Protocol):
        """What :class:`DependencyIndex` reads: a unit of work, or a lock-free view shaped like one."""

        def find(self, task_id: str, states: Iterable[str]) -> tuple[str, dict[str, Any]] | None: ...
        def find_archived(self, task_id: str) -> tuple[str, dict[str, Any]] | None: ...


HOT_STATES = tuple(s.value for s in TASK_STATES)
LIVE_STATES = (*HOT_STATES, "dead-letter", "abandoned")
"""Every state a task id can be in short of the archive (an entry's ``task_data`` for the last two)."""
DEAD_STATES = ("cancelled", "abandoned")
"""A dependency in one of these states will never complete: a task waiting on it waits for ever."""

DEFERRED, BACKOFF, CLAIMED_IN_PLACE = "deferred", "backoff", "claimed_in_place"
DEPENDENCY, NEVER, BREAKER = "dependency", "never", "breaker"
PATHS = "paths"
"""Its declared paths overlap a live path lease or another agent's claim (docs/leases.md)."""
REASONS = (DEFERRED, BACKOFF, CLAIMED_IN_PLACE, DEPENDENCY, NEVER, PATHS, BREAKER)
"""Why a pending task is not ready, as ``ready --explain --json`` names it (stable)."""


class Census:
    """Why nothing was ready (see :class:`loki.storage.tasks.Census`)."""

    __slots__ = ("busy", "deferred", "deferred_until", "held", "next_time", "on_dependencies", "other_type",
                 "pending", "skipped", "waiting")

    def __init__(self, pending: int) -> None:
        self.pending = pending
        self.other_type = self.waiting = self.held = self.deferred = self.busy = 0
        self.next_time: str | None = None
        self.deferred_until: str | None = None
        self.on_dependencies: list[str] = []
        self.skipped: dict[str, int] = {}


def skew_bound(now: str, backoff_max: float) -> str:
    """``not_after`` for ``now``: no rule sets ``available_at`` further ahead than the longest backoff
    (``queue.backoff_max``), so a later one was written under a clock that has since gone back
    (LOKI_NOW, a clock set ahead), and is not waited for."""
    from loki.clock import add_seconds, format_ts, parse_ts

    return format_ts(add_seconds(parse_ts(now), backoff_max))


def time_gate(task: dict[str, Any], now: str, not_after: str) -> tuple[str, str] | None:
    """What holds a pending task back until a time, and that time: ``(DEFERRED, until)``,
    ``(BACKOFF, available_at)``, ``(CLAIMED_IN_PLACE, lease_until)``; None when nothing does.

    A deferral is a human's explicit date, so it is honoured whatever the clock did; a backoff
    further ahead than ``not_after`` was written under a clock since set back, and is not waited for.
    """
    deferred = task.get("deferred")
    if deferred and not ts_before_or_at(deferred["until"], now):
        return DEFERRED, str(deferred["until"])
    available = task["available_at"]
    if not ts_before_or_at(available, now) and ts_before_or_at(available, not_after):
        return BACKOFF, str(available)
    if task.get("claimed_by") and task.get("lease_until") and ts_before_or_at(now, task["lease_until"]):
        # Claimed where it lies, in pending.json (Loki Mode's flock claim): its holder works on it.
        return CLAIMED_IN_PLACE, str(task["lease_until"])
    return None


def claim_key(task: dict[str, Any], index: int) -> tuple[int, str, int]:
    """The claim order: priority, then age, then position in the file."""
    return PRIORITY_RANK[task["priority"]], task["created_at"], index


def in_claim_order(pending: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [task for _, task in sorted(((claim_key(t, i), t) for i, t in enumerate(pending)), key=lambda p: p[0])]


def select_ready(pending: list[dict[str, Any]], types: Collection[str], now: str, not_after: str,
                 skip_types: Collection[str], done: DependencyIndex) -> tuple[dict[str, Any] | None, Census]:
    """The selection rule of :meth:`TaskTxn.next_ready` over a list of pending tasks (both stores use it)."""
    census = Census(len(pending))
    candidates: list[tuple[tuple[int, str, int], dict[str, Any]]] = []
    for index, task in enumerate(pending):
        if types and task.get("type") not in types:
            census.other_type += 1
            continue
        gate = time_gate(task, now, not_after)
        if gate is None:
            candidates.append((claim_key(task, index), task))
        elif gate[0] == DEFERRED:
            census.deferred += 1
            if census.deferred_until is None or ts_before_or_at(gate[1], census.deferred_until):
                census.deferred_until = gate[1]
        elif gate[0] == BACKOFF:
            census.waiting += 1
            if census.next_time is None or ts_before_or_at(gate[1], census.next_time):
                census.next_time = gate[1]
        else:
            census.held += 1
    candidates.sort(key=lambda pair: pair[0])
    for _, task in candidates:
        if task["dependencies"] and not done.all_completed(task["dependencies"]):
            census.on_dependencies.append(task["id"])
            continue
        if task.get("type") in skip_types:
            census.skipped[task["type"]] = census.skipped.get(task["type"], 0) + 1
            continue
        return task, census
    return None, census


class DependencyIndex:
    """Where a task is (its state), for the dependencies of one claim or one listing, loaded lazily.

    ``all_completed`` is the claim's question and costs one set of ids in the common case;
    ``state_of`` names the state of any task (hot files, then dead-letter and abandoned, then the
    archive), which is what an explanation or a refusal says.
    """

    def __init__(self, unit: Lookup) -> None:
        self.unit = unit
        self._states: dict[str, str | None] = {}

    def all_completed(self, deps: Iterable[str]) -> bool:
        return all(self.state_of(dep) == "completed" for dep in deps)

    def state_of(self, task_id: str) -> str | None:
        """The state ``task_id`` is in (``None``: no such task anywhere): a lookup by id, remembered
        (an index on PostgreSQL, a dictionary per state on files), never a read of every task."""
        if task_id not in self._states:
            found = self.unit.find(task_id, LIVE_STATES) or self.unit.find_archived(task_id)
            self._states[task_id] = found[0] if found is not None else None
        return self._states[task_id]


def never_ready(waiting: Iterable[dict[str, Any]], state_of: Callable[[str], str | None]) -> dict[str, dict[str, str]]:
    """Tasks among ``waiting`` (pending or blocked) that can never become ready.

    A dependency that is cancelled or abandoned never completes; nor does a waiting task that
    depends on one, so the tasks depending on *it* are stuck too. Returns id -> ``{"dependency"``
    (the one that blocks it: of its dependencies, the first on a shortest chain to a dead task),
    ``"root"`` (the dead task at the end of that chain), ``"state"`` (the root's), ``"why"`` (in
    words)``}``, nearest the dead tasks first. ``state_of(id)`` says where any task is (None: nowhere).

    Linear in the tasks and their dependencies (a breadth-first walk back from the dead tasks),
    so ``ready --explain`` and ``validate`` stay cheap with long chains at 10,000 pending.
    """
    return _chains_to(waiting, state_of, DEAD_STATES)


def behind_dead_letter(waiting: Iterable[dict[str, Any]],
                       state_of: Callable[[str], str | None]) -> dict[str, dict[str, str]]:
    """Tasks among ``waiting`` that wait, through other waiting tasks, on a dead-letter task: shaped as
    :func:`never_ready` says. Nothing moves a dead-letter task on but a person or the daily review, so
    ``ready --explain`` names the command at the end of the chain, not only the pending task in front."""
    return _chains_to(waiting, state_of, ("dead-letter",))


def _chains_to(waiting: Iterable[dict[str, Any]], state_of: Callable[[str], str | None],
               root_states: Collection[str]) -> dict[str, dict[str, str]]:
    by_id = {t["id"]: t for t in waiting}
    dependents: dict[str, list[str]] = {}
    level: dict[str, int] = {}
    frontier: list[str] = []
    for task in by_id.values():
        for dep in task.get("dependencies", []):
            dependents.setdefault(dep, []).append(task["id"])
            if dep not in by_id and dep not in level and state_of(dep) in root_states:
                level[dep] = 0
                frontier.append(dep)
    order: list[str] = []
    while frontier:
        following: list[str] = []
        for blocker in frontier:
            for task_id in dependents.get(blocker, ()):
                if task_id not in level:
                    level[task_id] = level[blocker] + 1
                    following.append(task_id)
                    order.append(task_id)
        frontier = following
    stuck: dict[str, dict[str, str]] = {}
    for task_id in order:  # nearest first, so a task's chosen dependency is settled before it
        want = level[task_id] - 1
        dep = next(d for d in by_id[task_id].get("dependencies", []) if level.get(d) == want)
        if dep in stuck:
            root, state = stuck[dep]["root"], stuck[dep]["state"]
            why = f"depends on {dep!r}, which waits on {root!r} ({state})"
        else:
            root, state = dep, str(state_of(dep))
            why = f"depends on {dep!r}, which is {state}"
        stuck[task_id] = {"dependency": dep, "root": root, "state": state, "why": why}
    return stuck


def explain(pending: list[dict[str, Any]], *, now: str, not_after: str, deps: DependencyIndex,
            stuck: dict[str, dict[str, str]], refusal: Callable[[Any, bool], str | None],
            behind: dict[str, dict[str, str]] | None = None,
            paths: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None) -> list[dict[str, Any]]:
    """Every task of ``pending`` in claim order, each ``{"task", "ready", "reasons"}``.

    ``reasons`` is every reason the task is not ready (empty when it is), each ``{"reason"`` (one of
    :data:`REASONS`), ``"text"``, and the facts: ``"until"``, ``"dependency"``, ``"state"``, ``"root"``
    ``}``. ``stuck`` is :func:`never_ready` of the waiting tasks; ``refusal(type, first)`` is why the
    type's breaker refuses a claim now (None: it lets one through), ``first`` true for the first
    otherwise-ready task of that type (a HALF_OPEN breaker lets exactly one through). ``behind`` is
    :func:`behind_dead_letter` of the waiting tasks: a dependency on a dead-letter task, or on a waiting
    task behind one, names the task at the end of the chain (``root``) and the command that moves it
    on (``next``). ``paths(task)`` is why the task's declared paths are held by someone else (None: free).
    """
    rows: list[dict[str, Any]] = []
    seen_types: set[Any] = set()
    for task in in_claim_order(pending):
        reasons: list[dict[str, Any]] = []
        gate = time_gate(task, now, not_after)
        if gate is not None:
            reasons.append(_gate_reason(task, *gate))
        info = stuck.get(task["id"])
        if info is not None:
            reasons.append({"reason": NEVER, "text": f"can never be ready: it {info['why']}",
                            "dependency": info["dependency"], "state": info["state"], "root": info["root"]})
        else:
            for dep in task.get("dependencies", []):
                state = deps.state_of(dep)
                if state != "completed":
                    reasons.append(_dependency_reason(dep, state, (behind or {}).get(str(dep))))
        held = paths(task) if paths is not None and task.get("paths") else None
        if held is not None:
            reasons.append(held)
        refused = refusal(task.get("type"), not reasons and task.get("type") not in seen_types)
        if refused is not None:
            reasons.append({"reason": BREAKER, "text": refused})
        if not reasons:
            seen_types.add(task.get("type"))
        rows.append({"task": task, "ready": not reasons, "reasons": reasons})
    return rows


def _dependency_reason(dep: str, state: str | None, chain: dict[str, str] | None) -> dict[str, Any]:
    reason: dict[str, Any] = {"reason": DEPENDENCY, "dependency": dep, "state": state,
                              "text": f"waits on {dep!r} ({state or 'no such task'})"}
    root = dep if state == "dead-letter" else chain["root"] if chain is not None else None
    if root is not None:
        from loki.wording import dead_letter_next

        if root != dep:
            reason["root"] = root
            reason["text"] += f", which waits on {root!r} (dead-letter)"
        reason["next"] = dead_letter_next(root)
        reason["text"] += (f": loki deadletter retry {root} moves it on (or deadletter propose or split, "
                           "or queue close --wont-do)")
    return reason


def _gate_reason(task: dict[str, Any], gate: str, until: str) -> dict[str, Any]:
    if gate == DEFERRED:
        deferred = task["deferred"]
        by = f" by {deferred['by']}" if deferred.get("by") else ""
        why = f": {deferred['reason']}" if deferred.get("reason") else ""
        return {"reason": DEFERRED, "until": until, "text": f"deferred until {until}{by}{why}"}
    if gate == BACKOFF:
        from loki.tasks.verify import failing_check

        failed = failing_check(task)
        after = "a failed attempt" if failed is None else \
            f"its check {failed['check']!r} failed: exit {failed['exit_code']} ({failed['error_class']})"
        reason = {"reason": BACKOFF, "until": until, "text": f"backing off until {until} (after {after})"}
        if failed is not None:
            reason["check"] = failed["check"]
        return reason
    return {"reason": CLAIMED_IN_PLACE, "until": until,
            "text": f"claimed in pending.json by {task.get('claimed_by')} (Loki Mode) until {until}"}


def short_reason(reasons: list[dict[str, Any]]) -> str:
    """One short phrase for a table cell: the first reason, and how many more."""
    if not reasons:
        return "ready"
    first = reasons[0]
    text = {DEFERRED: f"deferred until {first.get('until')}", BACKOFF: f"backoff until {first.get('until')}",
            CLAIMED_IN_PLACE: f"claimed in place until {first.get('until')}",
            DEPENDENCY: f"waits on {first.get('dependency')} ({first.get('state') or 'missing'})",
            NEVER: f"never: {first.get('root')} is {first.get('state')}",
            BREAKER: "breaker open"}[first["reason"]]
    return text + (f" (+{len(reasons) - 1})" if len(reasons) > 1 else "")
