"""Time comes from a clock object, never from ``datetime.now()`` inside domain code.

Every lease, backoff, cooldown and timeout decision takes ``now`` from a clock, so
tests move time by hand (a 300 s cooldown is tested in microseconds) and the CLI
can be driven at a fixed instant with ``LOKI_NOW`` (used by the demo and tests).

Timestamps are whole seconds, ISO 8601 UTC with ``Z`` (``2026-01-25T10:00:00Z``),
as in the reference documents. ``now()`` is truncated at the source so that a
stored ``cooldown_until`` and the current time compare consistently.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

UTC = timezone.utc
_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class Clock:
    """Where "now" comes from. Subclass it (or pass any object with ``now()``)."""

    def now(self) -> datetime:
        raise NotImplementedError


class SystemClock(Clock):
    """The real time, truncated to whole seconds."""

    def now(self) -> datetime:
        return datetime.now(UTC).replace(microsecond=0)


class ManualClock(Clock):
    """A clock that only moves when told to (tests, simulations)."""

    def __init__(self, start: datetime | str = "2026-01-25T10:00:00Z") -> None:
        self._now = parse_ts(start) if isinstance(start, str) else start.astimezone(UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        self._now = self._now + timedelta(seconds=seconds)
        return self._now

    def set(self, when: datetime | str) -> None:
        self._now = parse_ts(when) if isinstance(when, str) else when.astimezone(UTC)


def default_clock() -> Clock:
    """The system clock, or a fixed instant when ``LOKI_NOW`` is set."""
    fixed = os.environ.get("LOKI_NOW")
    if fixed:
        return ManualClock(fixed)
    return SystemClock()


def format_ts(when: datetime) -> str:
    return when.astimezone(UTC).strftime(_FORMAT)


def parse_ts(text: str) -> datetime:
    """Parse an ISO 8601 UTC timestamp (``Z`` or ``+00:00``, optional fraction)."""
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        raise ValueError(f"timestamp {text!r} has no time zone")
    return value.astimezone(UTC)


def seconds_between(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


def add_seconds(when: datetime, seconds: float) -> datetime:
    return when + timedelta(seconds=seconds)
