"""Small helpers for the words loki prints."""

from __future__ import annotations

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    pass


def plural(count: int, word: str, many: str | None = None) -> str:
    """``plural(1, "entry", "entries")`` -> "1 entry"; ``plural(3, "task")`` -> "3 tasks"."""
    return f"{count} {word if count == 1 else many or word + 's'}"


def shorten(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters: cut at a word boundary, ending in ``…`` when cut.

    An error cut mid-word (``ConnectionRefusedError: [Errno 111] Connection ref``) reads as a different error;
    a single word longer than the limit is the one thing cut inside (there is no boundary to cut at).
    """
    flat = " ".join(str(text).split())
    if len(flat) <= limit:
        return flat
    head = flat[: limit - 1]
    cut = head.rfind(" ")
    if cut > 0 and flat[limit - 1] != " ":
        head = head[:cut]
    return head.rstrip(" ,;:") + "…"


def duration(seconds: float | None) -> str:
    """``3725`` -> ``1h02m``, ``45`` -> ``45s``, ``-90`` -> ``-1m30s``; None -> ``""``."""
    if seconds is None:
        return ""
    total = round(seconds)
    sign, left = ("-" if total < 0 else ""), abs(total)
    hours, rest = divmod(left, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{sign}{hours}h{minutes:02d}m"
    return f"{sign}{minutes}m{secs:02d}s" if minutes else f"{sign}{secs}s"


def dead_letter_next(task_id: str) -> str:
    """The commands that move a dead-letter entry on, for a person who meets it at a dead end (the review
    left it, a task waits on it): nothing else ever takes it out of the dead-letter queue but the review."""
    return (f"loki deadletter retry {task_id} (back to pending now), "
            f"loki deadletter propose {task_id} --approach TEXT (the next review retries it so), "
            f"loki deadletter split {task_id} --title T (simpler tasks), "
            f"or loki queue close {task_id} --wont-do --reason TEXT (give it up)")
