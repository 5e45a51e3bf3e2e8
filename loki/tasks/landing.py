"""Landing: a verified task is completed only once its commit is on the branch it must land on
(``--land BRANCH``, docs/verify.md, "Landing").

The pure rules: what a branch name may be, which branch a task must land on (its own ``land``, else
its type's default ``verify.land.<type>``), how long it may wait (``verify.land_deadline_hours``), and
the ``landing`` record a task in ``queue/landing.json`` carries. Asking git whether a commit is there
is loki/queue/landing.py's.
"""

from __future__ import annotations

from loki.errors import InvalidArgument

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

MAX_BRANCH_CHARS = 200
DEFAULT_DEADLINE_HOURS = 24.0
_FORBIDDEN = set("~^:?*[\\")


def check_branch(value: Any, where: str = "--land") -> str:
    """A branch name as git allows one (``git check-ref-format --branch``'s rules, checked here without
    git); :class:`InvalidArgument` (exit 2) naming what is wrong."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{where}: a branch must be a name (a string), got {type(value).__name__}",
                              field="land")
    if not value.strip():
        raise InvalidArgument(f"{where}: names no branch; give the branch the work must reach, e.g. --land main",
                              field="land")
    if "\x00" in value:
        raise InvalidArgument(f"{where}: the branch {value[:60]!r} contains NUL", field="land")
    if len(value) > MAX_BRANCH_CHARS:
        raise InvalidArgument(f"{where}: the branch {value[:40]!r}... is {len(value)} characters long; the limit is "
                              f"{MAX_BRANCH_CHARS}", field="land")
    bad = next((char for char in value if ord(char) <= 32 or ord(char) == 127 or char in _FORBIDDEN), None)
    if bad is not None:
        raise InvalidArgument(f"{where}: {value[:60]!r} is not a valid branch name (it contains {bad!r})",
                              field="land")
    parts = value.split("/")
    if value.startswith("-") or value == "@" or "@{" in value or ".." in value or \
            any(not part or part.startswith(".") or part.endswith(".lock") for part in parts) or value.endswith("."):
        raise InvalidArgument(f"{where}: {value[:60]!r} is not a valid branch name (git check-ref-format)",
                              field="land")
    return value


def land_branch(task: dict[str, Any], config: dict[str, Any]) -> str | None:
    """The branch the task must land on: its own ``land`` (False: none, whatever its type's default),
    else its type's default (``verify.land``); None when it need not land."""
    own = task.get("land")
    if own is False:  # `queue edit --no-land`: none, whatever the type's default
        return None
    if isinstance(own, str) and own:
        return own
    types = (config.get("verify") or {}).get("land") or {}
    default = types.get(task.get("type") or "general") if isinstance(types, dict) else None
    return default if isinstance(default, str) and default else None


def deadline_seconds(config: dict[str, Any]) -> float:
    value = (config.get("verify") or {}).get("land_deadline_hours")
    hours = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else DEFAULT_DEADLINE_HOURS
    return hours * 3600


def landing_text(rows: list[dict[str, Any]], limit: int = 5) -> str:
    """``t1 a50f351f4ec8 -> main (since 08:00:35Z), ...``: the first ``limit`` rows in one line."""
    shown = ", ".join(f"{row['task_id']} {str(row['commit'])[:12]} -> {row['branch']} (since {row['since']}"
                      + (", escalated" if row.get("escalation") else "") + ")" for row in rows[:limit])
    return shown + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def landing_lines(view: dict[str, list[Any]], limit: int = 5) -> list[dict[str, Any]]:
    """The tasks waiting to land, oldest first: ``{"task_id", "title", "branch", "commit", "since",
    "deadline", "escalation"}`` (what status, agents, watch and the briefing show)."""
    rows = []
    for task in view.get("landing", []):
        if not isinstance(task, dict):
            continue
        landing: dict[str, Any] = task["landing"] if isinstance(task.get("landing"), dict) else {}
        rows.append({"task_id": task.get("id"), "title": task.get("title"), "branch": landing.get("branch"),
                     "commit": landing.get("commit"), "since": landing.get("since"),
                     "deadline": landing.get("deadline"), "escalation": landing.get("escalation")})
    rows.sort(key=lambda row: str(row["since"] or ""))
    return rows[:limit] if limit else rows
