"""The task record: its fields, defaults and small pure helpers (docs/design.md §2).

Tasks are plain dicts, exactly what is stored in the queue files; this module is
the one place that knows how a new one is shaped.
"""

from __future__ import annotations

import os
from enum import Enum

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any


PRIORITIES = ("high", "medium", "low")
PRIORITY_RANK = {name: rank for rank, name in enumerate(PRIORITIES)}
ERROR_TYPES = ("test_failure", "timeout", "dependency", "validation", "other")
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_TYPE = "general"
LONGEST_LEASE_SECONDS = 366 * 24 * 3600
"""The longest lease a claim or a heartbeat gives (a year)."""


class State(str, Enum):
    """Where a task is: each state is one file under ``queue/``."""

    PENDING = "pending"
    IN_PROGRESS = "in-progress"
    LANDING = "landing"
    BLOCKED = "blocked"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DEAD_LETTER = "dead-letter"
    ABANDONED = "abandoned"

    def __str__(self) -> str:
        return self.value


TASK_STATES = tuple(s for s in State if s not in (State.DEAD_LETTER, State.ABANDONED))
"""States whose files hold task records (dead-letter and abandoned hold entries wrapping a task)."""


class TaskAnswer(dict):  # type: ignore[type-arg]
    """A task as ``Queue.add`` and ``Queue.claim`` return it: the record itself (``task["id"]``), plus
    how the call came by it: ``created`` (False: ``add`` found its idempotency key and returns the
    task that has it) and ``reused`` (True: ``claim(reuse=True)`` returns the agent's live claim).
    """

    created: bool = True
    reused: bool = False

    @classmethod
    def of(cls, task: dict[str, Any], *, created: bool = True, reused: bool = False) -> TaskAnswer:
        answer = cls(task)
        answer.created = created
        answer.reused = reused
        return answer


def new_task_id() -> str:
    return "task-" + os.urandom(6).hex()


def make_task(
    *,
    task_id: str,
    title: str,
    now: str,
    description: str = "",
    type: str = DEFAULT_TYPE,
    priority: str = "medium",
    dependencies: list[str] | None = None,
    labels: list[str] | None = None,
    payload: dict[str, Any] | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    idempotency_key: str | None = None,
    status: str = State.PENDING.value,
) -> dict[str, Any]:
    """A new task with every field present, in the documented order."""
    return {
        "id": task_id,
        "title": title,
        "description": description,
        "type": type,
        "priority": priority,
        "dependencies": list(dependencies or []),
        "labels": list(labels or []),
        "status": status,
        "created_at": now,
        "available_at": now,
        "claimed_by": None,
        "claimed_at": None,
        "lease_until": None,
        "claim_token": None,
        "attempts": [],
        "max_attempts": max_attempts,
        "idempotency_key": idempotency_key,
        "payload": dict(payload or {}),
        "result": None,
        "last_error": None,
        "completed_at": None,
        "notes": [],
    }


def clear_claim(task: dict[str, Any]) -> None:
    task["claimed_by"] = None
    task["claimed_at"] = None
    task["lease_until"] = None
    task["claim_token"] = None


def add_note(task: dict[str, Any], text: str, now: str, author: str | None = None) -> None:
    """Append a note; its text is redacted (notes quote reasons, errors and human decisions)."""
    from loki.text.redact import redact

    note: dict[str, Any] = {"timestamp": now, "text": redact(text)}
    if author:
        note["author"] = author
    task.setdefault("notes", []).append(note)


def new_claim_token() -> str:
    return os.urandom(8).hex()


def backoff_seconds(failures: int, initial: float, multiplier: float, maximum: float) -> float:
    """Delay before retry number ``failures`` (1-based): 5, 10, 20, ... capped at ``maximum``."""
    if failures < 1:
        return 0.0
    return float(min(initial * multiplier ** (failures - 1), maximum))


def attempts_in_budget(task: dict[str, Any]) -> int:
    """Failed attempts that count against ``max_attempts``: those since the budget last started.

    A human's approval, ``retry --reset-count`` and the review's retry with a new approach start
    a fresh budget: ``budget_start`` records how many attempts came before it (absent: 0). The
    history itself is never cut, so the dead-letter review and the escalation file still see
    every attempt.
    """
    total = len(task.get("attempts", []))
    start = task.get("budget_start")
    return total - min(total, start) if isinstance(start, int) and start > 0 else total


def start_fresh_budget(task: dict[str, Any]) -> None:
    """From now on ``max_attempts`` more failures are allowed; the attempts so far stay recorded."""
    task["budget_start"] = len(task.get("attempts", []))


def make_attempt(task: dict[str, Any], *, now: str, agent_id: str, approach: str, error_type: str,
                 error_message: str) -> dict[str, Any]:
    """The next attempt record of ``task`` (the dead-letter reference's fields exactly).

    The error message and the approach are redacted here, the one place every attempt is made (``queue
    fail``, a lease that expired, TESTS_FAILED, ``loki work``): a task's ``last_error`` and a dead-letter
    entry's attempts copy them.
    """
    from loki.text.redact import redact

    return {
        "attempt_number": len(task.get("attempts", [])) + 1,
        "timestamp": now,
        "agent_id": agent_id,
        "approach": redact(approach),
        "error_type": error_type,
        "error_message": redact(error_message),
    }


def summary(task: dict[str, Any], state: str | None = None) -> dict[str, Any]:
    """The few fields a listing needs: an agent must not get 40,000 tokens back from ``list``."""
    return {
        "id": task["id"],
        "state": state or task.get("status"),
        "title": task["title"],
        "priority": task["priority"],
        "type": task.get("type"),
        "labels": task.get("labels", []),
        "dependencies": task.get("dependencies", []),
        "attempts": len(task.get("attempts", [])),
        "claimed_by": task.get("claimed_by"),
        "lease_until": task.get("lease_until"),
        "available_at": task.get("available_at"),
    }


def redact_task_text(task: dict[str, Any]) -> None:
    """Redact a new task's free text in place: a title, description, label or payload can come from an
    agent, an import (GitHub issues, PRDs) or a tool's output, and whatever it quotes is stored and shown."""
    from loki.text.redact import redact, redact_obj

    for key in ("title", "description"):
        if isinstance(task.get(key), str):
            task[key] = redact(task[key])
    if isinstance(task.get("labels"), list):
        task["labels"] = [redact(label) if isinstance(label, str) else label for label in task["labels"]]
    if task.get("payload") is not None:
        task["payload"] = redact_obj(task["payload"])


def plausible_lease(task: dict[str, Any]) -> bool:
    """Whether ``task``'s lease is one a claim or a heartbeat could have given: it ends after it starts, at
    most :data:`LONGEST_LEASE_SECONDS` later. One that is not (edited by hand, or written by a clock set
    years ahead) would hold its task for ever on a machine's clock: it counts as ended (docs/queue.md,
    "Leases and clock skew"). A lease or a start that cannot be read is left to ``loki validate``."""
    from loki.clock import parse_ts

    claimed, until = task.get("claimed_at"), task.get("lease_until")
    if not (isinstance(claimed, str) and isinstance(until, str)):
        return True
    try:
        length = (parse_ts(until) - parse_ts(claimed)).total_seconds()
    except (ValueError, OverflowError):
        return True
    return 0 <= length <= LONGEST_LEASE_SECONDS


def attempt_failed(task: dict[str, Any]) -> str:
    """``attempt 3 of 5 failed``, counted in the current budget, with the attempts before it if
    any: ``attempt 1 of 2 failed (after 2 earlier attempts)`` once a human approved a retry."""
    from loki.wording import plural

    used = attempts_in_budget(task)
    earlier = len(task.get("attempts", [])) - used
    return f"attempt {used} of {task['max_attempts']} failed" + (f" (after {plural(earlier, 'earlier attempt')})"
                                                                   if earlier else "")
