"""The price table: model -> dollars per million tokens of each kind, cache tiers included (docs/spend.md).

Used only where the agent gives no dollar figure (Codex CLI and Gemini CLI report tokens; Claude Code's
``total_cost_usd`` is taken as it is). The table is versioned: an entry priced from it records
``usd_source: "prices"`` and the table's :data:`VERSION` is shown by ``loki usage``. A team overrides or adds
models in ``config/loki.json``::

    {"spend": {"prices": {"my-model": {"input": 2.0, "output": 8.0, "cache_read": 0.2, "cache_creation": 2.5}}}}

A model is found by its exact name, else by the longest known name it starts with
(``claude-sonnet-4-5-20250929`` is priced as ``claude-sonnet-4-5``); an unknown model stays unpriced (its
tokens are counted, its dollars are not: ``loki usage`` says how many attempts were unpriced).
"""

from __future__ import annotations

import math

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

VERSION = "2026-11-01"
KINDS = ("input", "output", "cache_read", "cache_creation")
"""Price kinds, in dollars per million tokens; ``cache_creation`` is the 5-minute cache write tier."""

PRICES: dict[str, dict[str, float]] = {
    # Anthropic: cache writes 1.25x input, cache reads 0.1x input.
    "claude-opus-4-5": {"input": 5.0, "output": 25.0, "cache_read": 0.5, "cache_creation": 6.25},
    "claude-opus-4": {"input": 15.0, "output": 75.0, "cache_read": 1.5, "cache_creation": 18.75},
    "claude-sonnet-4-5": {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_creation": 3.75},
    "claude-sonnet-4": {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_creation": 3.75},
    "claude-haiku-4-5": {"input": 1.0, "output": 5.0, "cache_read": 0.1, "cache_creation": 1.25},
    "claude-3-5-haiku": {"input": 0.8, "output": 4.0, "cache_read": 0.08, "cache_creation": 1.0},
    # OpenAI (Codex CLI): cached input 0.1x; no separate cache write charge.
    "gpt-5-codex": {"input": 1.25, "output": 10.0, "cache_read": 0.125, "cache_creation": 1.25},
    "gpt-5-mini": {"input": 0.25, "output": 2.0, "cache_read": 0.025, "cache_creation": 0.25},
    "gpt-5": {"input": 1.25, "output": 10.0, "cache_read": 0.125, "cache_creation": 1.25},
    # Google (Gemini CLI), prompts up to 200k tokens.
    "gemini-2.5-pro": {"input": 1.25, "output": 10.0, "cache_read": 0.31, "cache_creation": 1.25},
    "gemini-2.5-flash-lite": {"input": 0.1, "output": 0.4, "cache_read": 0.025, "cache_creation": 0.1},
    "gemini-2.5-flash": {"input": 0.3, "output": 2.5, "cache_read": 0.075, "cache_creation": 0.3},
}


class BadPrices(ValueError):
    """``spend.prices`` in the config is not a price table; ``str()`` names the entry."""


def table(config: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The built-in table with the config's ``spend.prices`` over it (checked: :class:`BadPrices`)."""
    merged = {model: dict(row) for model, row in PRICES.items()}
    overrides = (config.get("spend") or {}).get("prices") or {}
    if not isinstance(overrides, dict):
        raise BadPrices("spend.prices must be an object: model -> {input, output, cache_read, cache_creation}")
    for model, row in overrides.items():
        if not isinstance(row, dict) or set(row) - set(KINDS):
            raise BadPrices(f"spend.prices.{model}: an object of {', '.join(KINDS)} (dollars per million tokens)")
        for kind, value in row.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not 0 <= value <= 10_000:
                raise BadPrices(f"spend.prices.{model}.{kind}: dollars per million tokens, from 0 to 10000 "
                                f"(got {value!r})")
        base = merged.get(model) or {kind: 0.0 for kind in KINDS}
        merged[model] = {**base, **{kind: float(value) for kind, value in row.items()}}
        if "input" in row and model not in PRICES:
            merged[model].setdefault("cache_creation", float(row["input"]))
    return merged


def find(prices: dict[str, dict[str, float]], model: str | None) -> dict[str, float] | None:
    """The row for ``model``: exact, else the longest name it starts with; None when unknown."""
    if not model:
        return None
    if model in prices:
        return prices[model]
    best = max((name for name in prices if model.startswith(name)), key=len, default=None)
    return prices[best] if best is not None else None


def cost(row: dict[str, float], tokens: dict[str, int]) -> float:
    """Dollars for ``tokens`` (``input_tokens`` ... as in loki/tasks/usage.py) at ``row``'s prices."""
    total = sum(row.get(kind, 0.0) * tokens.get(f"{kind}_tokens", 0) for kind in KINDS)
    return total / 1_000_000
