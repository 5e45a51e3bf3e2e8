"""Every agent the tree has seen, derived from the state (``loki agents``); nothing is stored for it.

An agent exists in loki only through what it did: the tasks it holds (``claimed_by``, ``claimed_at``,
``lease_until``; a claim and every heartbeat set ``updated_at``), the attempts it failed (``agent_id``,
a lease that expired is a ``timeout`` attempt of its holder), the tasks it completed (``completed_by``,
or a ``completed`` event in the task's ``history``, when the task records one) and the notes it wrote.
The hot queue files, the dead-letter queue and the abandoned tasks are read, not the archive: "today"
is what matters here, and the archive only holds tasks rotated out of a full ``completed.json``.

**Silent.** An agent heartbeats well inside its lease; one that holds a task and has not done so for
half the lease (the lease it asked for: from its last heartbeat to ``lease_until``), or whose lease has
expired, is *silent*: it is probably gone, and its task goes back to pending when the lease runs out
(the next claim or the watcher's tick). An agent that holds nothing is *idle*, whenever it was last seen.

**Strikes.** Strikes are kept per git branch, not per agent. An agent's branch is the ``branch`` of its
current task's payload when it has one, else a branch named after the agent (the agent's name, or one
``/``-separated part of the branch name: ``eng-001``, ``agents/eng-001``, ``eng-001/login``).
"""

from __future__ import annotations

from loki.clock import format_ts, parse_ts
from loki.storage import layout
from loki.tasks.usage import sum_entries
from loki.wording import duration

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

    from loki.storage.state import StateStore as Store

WORKING, SILENT, IDLE = "working", "silent", "idle"
_STATES = (*layout.QUEUE_STATES, "dead-letter", "abandoned")


def _task_of(state: str, record: dict[str, Any]) -> dict[str, Any]:
    """The task of a queue record (dead-letter and abandoned entries wrap theirs in ``task_data``)."""
    task = record.get("task_data") if state in ("dead-letter", "abandoned") else record
    return task if isinstance(task, dict) else {}


def completer(task: dict[str, Any]) -> str | None:
    """Who completed a task, when the task says: ``completed_by``, else the last ``completed`` event of
    its ``history``."""
    by = task.get("completed_by")
    if isinstance(by, str) and by:
        return by
    for event in reversed(task.get("history") or []):
        if isinstance(event, dict) and event.get("event") in ("completed", "complete"):
            who = event.get("agent") or event.get("by")
            return who if isinstance(who, str) and who else None
    return None


class _Agent:
    __slots__ = ("done_today", "failed_today", "held", "landing", "last_seen", "name", "usage_today")

    def __init__(self, name: str) -> None:
        self.name = name
        self.held: list[dict[str, Any]] = []
        self.landing: list[str] = []
        """Tasks it verified that wait to land (docs/verify.md, "Landing"): not done yet, not counted."""
        self.done_today = 0
        self.failed_today = 0
        self.last_seen: str | None = None
        self.usage_today: list[dict[str, Any]] = []

    def seen(self, when: Any) -> None:
        if isinstance(when, str) and (self.last_seen is None or when > self.last_seen):
            self.last_seen = when


def _gather(view: dict[str, list[Any]], today: str) -> dict[str, _Agent]:
    agents: dict[str, _Agent] = {}

    def agent(name: Any) -> _Agent | None:
        if not isinstance(name, str) or not name:
            return None
        return agents.setdefault(name, _Agent(name))

    for state, records in view.items():
        for record in records:
            task = _task_of(state, record)
            if state == "in-progress" and (holder := agent(task.get("claimed_by"))) is not None:
                holder.held.append(task)
                holder.seen(task.get("updated_at") or task.get("claimed_at"))
            for attempt in task.get("attempts") or []:
                if isinstance(attempt, dict) and (who := agent(attempt.get("agent_id"))) is not None:
                    who.seen(attempt.get("timestamp"))
                    who.failed_today += str(attempt.get("timestamp", "")).startswith(today)
            for entry in task.get("usage") or []:  # what each claim spent (docs/spend.md)
                if isinstance(entry, dict) and str(entry.get("at", "")).startswith(today) \
                        and (who := agent(entry.get("agent"))) is not None:
                    who.usage_today.append(entry)
            if state == "landing" and (who := agent(completer(task))) is not None:
                who.landing.append(str(task.get("id")))
            if state == "completed" and (who := agent(completer(task))) is not None:
                who.seen(task.get("completed_at"))
                who.done_today += str(task.get("completed_at") or "").startswith(today)
    return agents


def _strike_branches(store: Store) -> dict[str, dict[str, Any]]:
    """branch -> {"calls", "highest"} for every branch with strikes."""
    found: dict[str, dict[str, Any]] = {}
    for name in store.list(layout.STRIKES_DIR):
        if not name.endswith(".json"):
            continue
        doc = store.read(f"{layout.STRIKES_DIR}/{name}")
        keys = doc.get("keys", {}) if isinstance(doc, dict) else {}
        counts = [e.get("strike_count", 0) for e in keys.values() if isinstance(e, dict)]
        if counts:
            found[str(doc.get("branch"))] = {"calls": len(counts), "highest": max(counts)}
    return found


def branch_of(agent: str, task: dict[str, Any] | None, branches: list[str]) -> str | None:
    """The branch an agent works on, as far as the state says (the module's docstring)."""
    payload = (task or {}).get("payload")
    if isinstance(payload, dict) and isinstance(payload.get("branch"), str):
        return str(payload["branch"])
    return next((b for b in sorted(branches) if b == agent or agent in b.split("/")), None)


def _row(agent: _Agent, now: str, branches: dict[str, dict[str, Any]]) -> dict[str, Any]:
    current = max(agent.held, key=lambda t: str(t.get("claimed_at") or ""), default=None)
    heartbeat = (current.get("updated_at") or current.get("claimed_at")) if current else None
    lease_until = current.get("lease_until") if current else None
    lease_left = silence = None
    status = IDLE
    if current is not None:
        status = WORKING
        if isinstance(lease_until, str):
            lease_left = round((parse_ts(lease_until) - parse_ts(now)).total_seconds())
            if lease_left <= 0:
                status, silence = SILENT, "lease expired"
            elif isinstance(heartbeat, str):
                lease = (parse_ts(lease_until) - parse_ts(heartbeat)).total_seconds()
                quiet = (parse_ts(now) - parse_ts(heartbeat)).total_seconds()
                if quiet > lease / 2:
                    status, silence = SILENT, (f"no heartbeat for {duration(quiet)} (more than half of its "
                                               f"{duration(lease)} lease)")
    branch = branch_of(agent.name, current, list(branches))
    return {"agent": agent.name, "status": status, "silent_because": silence, "last_seen": agent.last_seen,
            "last_heartbeat": heartbeat, "task": current.get("id") if current else None,
            "task_title": current.get("title") if current else None,
            "tasks_held": sorted(t["id"] for t in agent.held), "lease_until": lease_until, "lease_left": lease_left,
            "done_today": agent.done_today, "failed_today": agent.failed_today, "branch": branch,
            "spent_today": sum_entries(agent.usage_today) if agent.usage_today else None,
            "strikes": branches.get(branch) if branch is not None else None,
            "failing_check": _failing_check(current), "landing": sorted(agent.landing)}


def _failing_check(task: dict[str, Any] | None) -> dict[str, Any] | None:
    """The declared check the held task failed at its last attempt (docs/verify.md), if it did."""
    from loki.tasks.verify import failing_check

    failed = failing_check(task) if task is not None else None
    return None if failed is None else {key: failed[key] for key in ("check", "exit_code", "error_class", "attempt")}


def roster(store: Store) -> dict[str, Any]:
    """Every agent seen: ``{"now", "today", "agents": [...]}``, silent ones first, then by name; each row
    ``{"agent", "status" (working|silent|idle), "silent_because", "last_seen", "last_heartbeat", "task",
    "task_title", "tasks_held", "lease_until", "lease_left" (seconds), "done_today", "failed_today",
    "branch", "strikes" ({"calls", "highest"} or None), "spent_today" (the sums of loki/tasks/usage.py, or
    None: no usage recorded today), "failing_check" (or None), "landing" (the tasks it verified that wait to
    land), "paths" (the patterns it holds now: its path
    leases and its claims of tasks with paths; an agent that only holds a lease is listed too)}``."""
    now = format_ts(store.clock.now())
    today = now[:10]
    agents = _gather(store.tasks().view(_STATES), today)
    branches = _strike_branches(store)
    held = _paths_held(store)
    for name in held.keys() - agents.keys():  # an agent seen only through a path lease
        agents[name] = _Agent(name)
    rows = [_row(agent, now, branches) | {"paths": held.get(agent.name, [])} for agent in agents.values()]
    order = {SILENT: 0, WORKING: 1, IDLE: 2}
    rows.sort(key=lambda r: (order[r["status"]], r["agent"]))
    return {"now": now, "today": today, "agents": rows}


def _paths_held(store: Store) -> dict[str, list[str]]:
    """agent -> the patterns it holds now: its live path leases and its claims of tasks with paths."""
    from loki.leases.leases import NOBODY, PathLeases

    leases = PathLeases(store)
    now = leases.now()
    held: dict[str, list[str]] = {}
    for holder in [*leases.live(now), *leases.claims(now)]:
        if holder.get("landing") and holder["agent"] == NOBODY:
            continue  # a landing task no agent completed: no agent to show it under
        mine = held.setdefault(holder["agent"], [])
        mine.extend(p for p in holder["patterns"] if p not in mine)
    return held


def names(store: Store) -> list[str]:
    """The names of every agent seen (for completion): holders and agents of recorded attempts."""
    return sorted(_gather(store.tasks().view(_STATES), "-").keys())
