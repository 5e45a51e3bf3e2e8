"""What one claim of a task spent: the usage entry a task keeps (docs/spend.md).

A task's ``usage`` is a list, one entry per claim that reported usage (``loki work`` records it with the
claim's outcome, in the same unit of work: a repeat of that write, recognised by the queue, adds nothing).
This module is the one place that knows the entry's shape and refuses a wrong one: the meter
(loki/spend/meter.py) builds entries, the queue checks them before storing.
"""

from __future__ import annotations

import math

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

TOKEN_KINDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens")
"""Tokens by kind: ``input_tokens`` counts only input that was neither read from nor written to a cache."""
MAX_TOKENS = 10**12
"""More than any session can use (a trillion tokens of one kind): a bigger count is a format error."""
MAX_USD = 1_000_000.0
"""One attempt costing more than a million dollars is a misread figure, not a bill."""
SOURCES = ("claude", "codex", "gemini", "result_file")
USD_SOURCES = ("agent", "prices")
OUTCOMES = ("completed", "failed", "released")


class BadUsage(ValueError):
    """A usage figure loki will not store; ``str()`` is one line naming the field and what is wrong."""


def check_count(value: object, name: str) -> int:
    """A token count: a whole number from 0 to :data:`MAX_TOKENS` (not a bool, a float, a string)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadUsage(f"{name} must be a whole number of tokens (got {_shown(value)})")
    if not 0 <= value <= MAX_TOKENS:
        raise BadUsage(f"{name} must be from 0 to {MAX_TOKENS:,} tokens (got {value:,})")
    return value


def check_usd(value: object, name: str) -> float:
    """Dollars: a finite number from 0 to :data:`MAX_USD` (not a bool, not a string like ``"$0.12"``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadUsage(f"{name} must be a number of dollars (got {_shown(value)})")
    if not math.isfinite(value) or not 0 <= value <= MAX_USD:
        raise BadUsage(f"{name} must be a number of dollars from 0 to {MAX_USD:,.0f} (got {value!r})")
    return float(value)


def check_entry(entry: object) -> dict[str, Any]:
    """``entry`` if it is a usage entry loki stores (:class:`BadUsage` naming the field otherwise)."""
    if not isinstance(entry, dict):
        raise BadUsage(f"usage must be an object (got {_shown(entry)})")
    allowed = {*TOKEN_KINDS, "usd", "usd_source", "model", "source", "attempt", "agent", "at", "outcome"}
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise BadUsage(f"usage.{unknown[0]}: unknown field (known: {', '.join(sorted(allowed))})")
    for kind in TOKEN_KINDS:
        check_count(entry.get(kind), f"usage.{kind}")
    if entry.get("usd") is not None:
        check_usd(entry["usd"], "usage.usd")
        if entry.get("usd_source") not in USD_SOURCES:
            raise BadUsage(f"usage.usd_source must be one of {', '.join(USD_SOURCES)}")
    elif entry.get("usd_source") is not None:
        raise BadUsage("usage.usd_source without usage.usd")
    if entry.get("source") not in SOURCES:
        raise BadUsage(f"usage.source must be one of {', '.join(SOURCES)} (got {_shown(entry.get('source'))})")
    model = entry.get("model")
    if model is not None and (not isinstance(model, str) or not 0 < len(model) <= 200):
        raise BadUsage("usage.model must be a model name of 1 to 200 characters")
    for key in ("agent", "at"):
        if key in entry and not isinstance(entry[key], str):
            raise BadUsage(f"usage.{key} must be a string")
    if "outcome" in entry and entry["outcome"] not in OUTCOMES:
        raise BadUsage(f"usage.outcome must be one of {', '.join(OUTCOMES)}")
    if "attempt" in entry:
        number = entry["attempt"]
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise BadUsage("usage.attempt must be a whole number >= 1")
    return entry


def total_tokens(entry: dict[str, Any]) -> int:
    return sum(int(entry.get(kind) or 0) for kind in TOKEN_KINDS)


def sum_entries(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Tokens by kind, all tokens, dollars (what was priced) and how many entries had no dollar figure."""
    total: dict[str, Any] = {kind: 0 for kind in TOKEN_KINDS}
    usd = 0.0
    unpriced = 0
    for entry in entries:
        for kind in TOKEN_KINDS:
            total[kind] += int(entry.get(kind) or 0)
        if entry.get("usd") is None:
            unpriced += 1
        else:
            usd += float(entry["usd"])
    total["tokens"] = sum(total[kind] for kind in TOKEN_KINDS)
    total["usd"] = round(usd, 6)
    total["unpriced"] = unpriced
    total["attempts"] = len(entries)
    return total


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
