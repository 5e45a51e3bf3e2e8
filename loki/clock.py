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


MIN_YEAR = 2000
MAX_YEAR = 9998
"""The supported range for ``LOKI_NOW``: every timestamp stays ISO 8601 with a 4-digit year, and
even a year-long lease or a long manual trip added to it stays below the year 10000."""


def default_clock() -> Clock:
    """The system clock, or a fixed instant when ``LOKI_NOW`` is set (a usage error, exit 2, naming
    ``LOKI_NOW`` when it is not a timestamp in the supported range)."""
    fixed = os.environ.get("LOKI_NOW")
    if fixed:
        return ManualClock(parse_loki_now(fixed))
    return SystemClock()


def parse_loki_now(text: str) -> datetime:
    from loki.errors import UsageError

    expected = (f"expected an ISO 8601 UTC time such as 2026-01-25T10:00:00Z, between the years {MIN_YEAR} and "
                f"{MAX_YEAR}")
    try:
        when = parse_ts(text.strip())
    except (ValueError, OverflowError) as exc:
        raise UsageError(f"LOKI_NOW={text[:60]!r} is not a time loki can use ({exc}); {expected}",
                         variable="LOKI_NOW") from None
    if not MIN_YEAR <= when.year <= MAX_YEAR:
        raise UsageError(f"LOKI_NOW={text[:60]!r} is outside the supported range; {expected}", variable="LOKI_NOW")
    return when.replace(microsecond=0)


def format_ts(when: datetime) -> str:
    # Not strftime("%Y"): glibc writes year 1 as "1", which no ISO parser (loki's included) reads back.
    when = when.astimezone(UTC)
    return (f"{when.year:04d}-{when.month:02d}-{when.day:02d}T{when.hour:02d}:{when.minute:02d}:"
            f"{when.second:02d}Z")


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


def ts_before(a: str, b: str) -> bool:
    """a < b for two timestamps (see ts_before_or_at)."""
    if len(a) == 20 and len(b) == 20:
        return a < b
    return parse_ts(a) < parse_ts(b)


def ts_before_or_at(a: str, b: str) -> bool:
    """a <= b for two timestamps; canonical ones compare as strings, anything else is parsed."""
    if len(a) == 20 and len(b) == 20:
        return a <= b
    return parse_ts(a) <= parse_ts(b)
