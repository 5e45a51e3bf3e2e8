"""Dead-letter entries: the record a task becomes when it leaves the queue for good or for review.

The reference's format (001 Troubleshooting, Dead Letter Queue). A leaf module: the queue makes
entries, the dead-letter review and escalations read them, and none of those need each other for it.
"""

from __future__ import annotations

from loki.wording import plural

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any


STRATEGIES = ("retry_with_simpler_approach", "dependency_blocked", "requires_human_review", "permanent_abandon")


def recovery_strategy(attempts: list[dict[str, Any]]) -> str:
    """The strategy an entry starts with, decided from its attempts (deterministic).

    * any ``validation`` failure -> ``requires_human_review``: the task's contract or spec is
      in question, and retrying cannot settle that;
    * else, the last failure a ``dependency`` error -> ``dependency_blocked``;
    * else ``retry_with_simpler_approach``.
    """
    if any(a.get("error_type") == "validation" for a in attempts):
        return "requires_human_review"
    if attempts and attempts[-1].get("error_type") == "dependency":
        return "dependency_blocked"
    return "retry_with_simpler_approach"


def error_summary(attempts: list[dict[str, Any]]) -> str:
    """A brief description of the failure pattern: the last error, and how many ways it was tried."""
    if not attempts:
        return "no attempts recorded"
    from loki.text.redact import redact

    # Redacted again: attempts written by older versions or by hand reach the summary and the escalation.
    last = redact(attempts[-1].get("error_message") or "").strip().splitlines()
    message = last[0] if last else "(no error message)"
    if len(message) > 200:
        message = message[:197] + "..."
    approaches = len({a.get("approach") or "(unspecified)" for a in attempts})
    tried = plural(approaches, "distinct approach", "distinct approaches")
    return f"{message} ({plural(len(attempts), 'attempt')}, {tried})"


def make_entry(task: dict[str, Any], original_queue: str) -> dict[str, Any]:
    """A dead-letter entry for ``task``: its attempts, a summary, a strategy and the whole task."""
    attempts = [dict(a) for a in task.get("attempts", [])]
    return {
        "task_id": task["id"],
        "original_queue": original_queue,
        "failure_count": len(attempts),
        "first_failure": attempts[0]["timestamp"] if attempts else task["created_at"],
        "last_failure": attempts[-1]["timestamp"] if attempts else task["created_at"],
        "error_summary": error_summary(attempts),
        "attempts": attempts,
        "recovery_strategy": recovery_strategy(attempts),
        "task_data": task,
    }
