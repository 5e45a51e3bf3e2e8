"""Small helpers for the words loki prints."""

from __future__ import annotations


def plural(count: int, word: str, many: str | None = None) -> str:
    """``plural(1, "entry", "entries")`` -> "1 entry"; ``plural(3, "task")`` -> "3 tasks"."""
    return f"{count} {word if count == 1 else many or word + 's'}"
