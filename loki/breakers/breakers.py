"""Circuit breakers shared by every agent (docs/design.md §4; reference 001, "Circuit Breaker System").

One file, ``state/circuit-breakers.json``, maps a breaker name (``api/claude``) to its state in
the reference's schema. Every agent and shell loop reads and changes it through the store, so
a dependency that keeps failing for one agent is held off for all of them::

    breakers = Breakers(open_store())
    decision = breakers.check("api/claude")      # may claim the half-open probe slot
    if decision.allowed:
        try:
            call_the_api()
        except ApiError as exc:
            breakers.record_failure("api/claude", error=str(exc))
        else:
            breakers.record_success("api/claude")

The state machine is exactly the reference's (thresholds per breaker from config/loki.json):

* CLOSED lets every call through. ``threshold`` failures within ``window`` seconds of the
  first one (``failure_window_start``) open it, with ``cooldown_until = now + cooldown``. A
  failure at or after ``failure_window_start + window`` starts a new window (count 1).
* OPEN refuses every call until ``cooldown_until``. From that instant it is HALF_OPEN; the
  change is written lazily by the next check or record (counts reset) and dated
  ``cooldown_until``, when it took effect.
* HALF_OPEN lets one probe through per ``half_open_interval``: ``check`` claims the slot
  (``probe_until``) under the file's lock, so two agents -- two processes -- never probe at
  once. ``recovery_threshold`` consecutive successes close it (counters reset, timestamps
  cleared); any failure reopens it with a new cooldown.

Where the reference is silent (docs/breakers.md gives the reasons):

* a success while CLOSED only counts in ``total_successes``: the reference counts failures in a
  window, not consecutive failures, so an API that fails every other call still trips;
* a success or failure recorded while OPEN (a call that started before the trip, or a caller
  that did not check) is counted in the totals but changes neither the state nor the cooldown;
* a success does not free the probe slot: the next probe waits for ``probe_until``, so probes
  are at most one per interval, as the reference says;
* ``capacity`` implements the recovery protocol's ramp: 50 % on close, +25 % every 60 s.

Every transition is appended to ``logs/circuit-recovery.log`` as one line in the reference's
style (``2025-01-20T10:35:42Z Circuit recovered: api/claude``), while the file's lock is held,
so the log's order is the order of the transitions.

This module is on the hot path of ``loki breaker check`` (loki/cli/fast.py): it imports
neither typing nor dataclasses at run time, and takes the lock (importing portalocker) only
when a check has a transition to write or a probe slot to claim.
"""

from __future__ import annotations

import math
from enum import Enum

from loki.clock import add_seconds, format_ts, parse_ts
from loki.config import breaker_settings, setting
from loki.errors import CircuitOpen, InvalidArgument, InvalidInput, NotFound, StateFileError
from loki.storage import layout
from loki.storage.schema import pointer

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime
    from typing import Any, Protocol, overload

    from loki.storage.state import Documents, Logs
    from loki.storage.state import StateTxn as Transaction

    class Store(Documents, Logs, Protocol):
        """The roles breakers use: documents (the breakers' file, the config) and a log (the recovery log)."""

RECOVERY_LOG = "logs/circuit-recovery.log"
MAX_NAME_LENGTH = 200
MAX_ERROR_LENGTH = 500
SIMILAR_CUTOFF = 0.75
"""How close (difflib's ratio) a never-recorded name must be to a recorded one to be taken for a typo of it."""
MAX_TRIP_SECONDS = 10**9  # ~31 years: beyond this a datetime overflows long before anyone cares
# Names may not hold control characters (C0, DEL, C1: they would break the one-line log format and
# reach terminals), bidi overrides or lone surrogates (loki.text.textsafe.check_name). The schema's
# propertyNames pattern refuses the controls and surrogates in hand-edited files; a bidi override
# there is tolerated, and escaped wherever the name is printed.


class State(str, Enum):
    CLOSED = "CLOSED"
    OPEN = "OPEN"
    HALF_OPEN = "HALF_OPEN"

    def __str__(self) -> str:
        return self.value


def check_name(name: object) -> str:
    """Return ``name`` if it can name a breaker, else raise :class:`InvalidArgument` saying why.

    A name is a key in one JSON file, never a path: any 1-200 characters without control
    characters or bidi overrides (``api/claude``, ``github api``, ``db:primary``).
    """
    from loki.text.textsafe import check_name as check

    return check(name, "breaker name", MAX_NAME_LENGTH)


def _clean_error(error: str | None) -> str | None:
    """An error text as it is stored: valid UTF-8, at most MAX_ERROR_LENGTH characters."""
    if error is None:
        return None
    from loki.text.redact import redact

    # Redacted before the cut: a cut through a token would leave a piece no rule recognises.
    text = redact(error[: MAX_ERROR_LENGTH + 4096].encode("utf-8", "backslashreplace").decode("utf-8"))
    return text if len(text) <= MAX_ERROR_LENGTH else text[: MAX_ERROR_LENGTH - 3] + "..."


def _after(when: datetime, seconds: float) -> datetime:
    """``when`` plus ``seconds`` rounded up to whole seconds (timestamps are whole seconds, and a
    cooldown must never end early)."""
    try:
        return add_seconds(when, math.ceil(seconds))
    except OverflowError:
        raise InvalidInput(f"{seconds:g} seconds after {format_ts(when)} is beyond the year 9999") from None


def _seconds_until(later: datetime, now: datetime) -> int:
    return max(0, math.ceil((later - now).total_seconds()))


# -- configuration ---------------------------------------------------------------------------------


class Settings:
    """One breaker's thresholds: the reference's defaults, then config ``breakers.defaults``,
    then ``breakers.per_breaker[name]`` (docs/config.md)."""

    __slots__ = ("cooldown", "half_open_interval", "recovery_threshold", "threshold", "window")

    def __init__(self, threshold: int = 3, window: float = 60, cooldown: float = 300,
                 half_open_interval: float = 10, recovery_threshold: int = 3) -> None:
        self.threshold = threshold
        self.window = window
        self.cooldown = cooldown
        self.half_open_interval = half_open_interval
        self.recovery_threshold = recovery_threshold

    @classmethod
    def from_config(cls, config: dict[str, Any], name: str) -> Settings:
        merged = breaker_settings(config, name)
        return cls(int(merged["threshold"]), merged["window"], merged["cooldown"],
                   merged["half_open_interval"], int(merged["recovery_threshold"]))

    def to_json(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "window": self.window, "cooldown": self.cooldown,
                "half_open_interval": self.half_open_interval, "recovery_threshold": self.recovery_threshold}


class Ramp:
    """The recovery protocol's gradual ramp after a breaker closes again."""

    __slots__ = ("start_percent", "step_percent", "step_seconds")

    def __init__(self, start_percent: float = 50, step_percent: float = 25, step_seconds: float = 60) -> None:
        self.start_percent = start_percent
        self.step_percent = step_percent
        self.step_seconds = step_seconds

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Ramp:
        return cls(setting(config, "breakers", "recovery_start_percent", 50),
                   setting(config, "breakers", "recovery_step_percent", 25),
                   setting(config, "breakers", "recovery_step_seconds", 60))


# -- what the machine produces ---------------------------------------------------------------------


class Transition:
    """One state change, as it is logged."""

    __slots__ = ("at", "detail", "event", "from_state", "name", "to_state")

    def __init__(self, name: str, event: str, from_state: State, to_state: State, at: datetime,
                 detail: str = "") -> None:
        self.name = name
        self.event = event
        self.from_state = from_state
        self.to_state = to_state
        self.at = format_ts(at)
        self.detail = detail

    def log_line(self) -> str:
        """``2025-01-20T10:35:42Z Circuit recovered: api/claude``, with details in parentheses."""
        line = f"{self.at} Circuit {self.event}: {self.name}"
        return f"{line} ({self.detail})" if self.detail else line

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "event": self.event, "from": self.from_state.value, "to": self.to_state.value,
                "detail": self.detail, "log_line": self.log_line()}


class Decision:
    """The answer to ``check``: go ahead (``allowed``), or wait ``retry_after`` seconds."""

    __slots__ = ("allowed", "cooldown_until", "name", "now", "probe", "probe_until", "retry_after", "retry_at",
                 "state")

    def __init__(self, name: str, state: State, now: datetime, *, allowed: bool, probe: bool = False,
                 retry_at: datetime | None = None, probe_until: str | None = None,
                 cooldown_until: str | None = None) -> None:
        self.name = name
        self.state = state
        self.now = format_ts(now)
        self.allowed = allowed
        self.probe = probe
        """True when this check claimed the HALF_OPEN probe slot: report the result."""
        self.retry_at = format_ts(retry_at) if retry_at is not None else None
        self.retry_after = _seconds_until(retry_at, now) if retry_at is not None else 0
        self.probe_until = probe_until
        self.cooldown_until = cooldown_until

    @property
    def reason(self) -> str:
        if self.allowed:
            if self.probe:
                return (f"{self.name} is HALF_OPEN; you hold the probe slot until {self.probe_until}: "
                        f"report the result with `loki breaker success|failure`")
            return f"{self.name} is {self.state.value}"
        if self.state is State.HALF_OPEN:
            return (f"circuit {self.name} is HALF_OPEN and another agent holds the probe slot; "
                    f"retry in {self.retry_after}s (at {self.retry_at})")
        return f"circuit {self.name} is OPEN; retry in {self.retry_after}s (at {self.retry_at})"

    def error(self) -> CircuitOpen:
        """The refusal as the exception the CLI maps to exit 75."""
        return CircuitOpen(self.reason, name=self.name, retry_after=self.retry_after, retry_at=self.retry_at,
                           state=self.state.value)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "allowed": self.allowed, "state": self.state.value, "probe": self.probe,
                "retry_after": self.retry_after, "retry_at": self.retry_at, "probe_until": self.probe_until,
                "cooldown_until": self.cooldown_until, "now": self.now}


class BreakerStatus:
    """A breaker as of ``now``: its fields, what they mean now, and its settings.

    ``state`` is the effective state: an OPEN breaker whose cooldown is over shows as
    HALF_OPEN even before the next check writes that down (``stored_state`` is the file's).
    """

    __slots__ = ("cooldown_remaining", "entry", "name", "next_probe_at", "now", "recorded", "settings",
                 "stored_state")

    def __init__(self, name: str, entry: dict[str, Any], *, stored_state: str | None, now: datetime,
                 settings: Settings, cooldown_remaining: int | None, next_probe_at: str | None) -> None:
        self.name = name
        self.entry = entry
        self.stored_state = stored_state
        self.recorded = stored_state is not None
        self.now = format_ts(now)
        self.settings = settings
        self.cooldown_remaining = cooldown_remaining
        """Seconds until an OPEN breaker starts probing; None unless OPEN."""
        self.next_probe_at = next_probe_at
        """When the next probe may start (OPEN: at cooldown_until; HALF_OPEN: when the slot frees)."""

    @property
    def state(self) -> State:
        return State(self.entry["state"])

    @property
    def failure_count(self) -> int:
        return int(self.entry["failure_count"])

    @property
    def success_count(self) -> int:
        return int(self.entry["success_count"])

    @property
    def cooldown_until(self) -> str | None:
        return self.entry["cooldown_until"]  # type: ignore[no-any-return]

    @property
    def probe_until(self) -> str | None:
        return self.entry["probe_until"]  # type: ignore[no-any-return]

    @property
    def last_error(self) -> str | None:
        return self.entry["last_error"]  # type: ignore[no-any-return]

    @property
    def total_failures(self) -> int:
        return int(self.entry["total_failures"])

    @property
    def total_successes(self) -> int:
        return int(self.entry["total_successes"])

    def to_json(self) -> dict[str, Any]:
        e = self.entry
        return {
            "name": self.name, "state": e["state"], "stored_state": self.stored_state, "recorded": self.recorded,
            "failure_count": e["failure_count"], "success_count": e["success_count"],
            "last_failure_time": e["last_failure_time"], "last_state_change": e["last_state_change"],
            "cooldown_until": e["cooldown_until"], "failure_window_start": e["failure_window_start"],
            "probe_until": e["probe_until"], "last_error": e["last_error"], "recovered_at": e["recovered_at"],
            "total_failures": e["total_failures"], "total_successes": e["total_successes"],
            "cooldown_remaining": self.cooldown_remaining, "next_probe_at": self.next_probe_at,
            "now": self.now, "settings": self.settings.to_json(),
        }


class Change:
    """What a record/reset/trip did: the breaker afterwards and the transitions it made."""

    __slots__ = ("breaker", "transitions")

    def __init__(self, breaker: BreakerStatus, transitions: list[Transition]) -> None:
        self.breaker = breaker
        self.transitions = transitions

    def to_json(self) -> dict[str, Any]:
        return {"breaker": self.breaker.to_json(), "transitions": [t.to_json() for t in self.transitions]}


class Capacity:
    """Recommended parallelism for calls through one breaker (recovery protocol, steps 3-5)."""

    __slots__ = ("agents", "max_agents", "name", "next_step_at", "now", "percent", "reason", "state")

    def __init__(self, name: str, state: State, now: datetime, *, max_agents: int, percent: float, agents: int,
                 next_step_at: str | None, reason: str) -> None:
        self.name = name
        self.state = state
        self.now = format_ts(now)
        self.max_agents = max_agents
        self.percent = percent
        self.agents = agents
        self.next_step_at = next_step_at
        self.reason = reason

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "state": self.state.value, "max_agents": self.max_agents,
                "percent": self.percent, "agents": self.agents, "next_step_at": self.next_step_at,
                "reason": self.reason, "now": self.now}


# -- the state machine -----------------------------------------------------------------------------


def new_entry(now: datetime | None) -> dict[str, Any]:
    """A breaker never seen before: CLOSED, nothing counted. ``now`` None: not yet recorded."""
    return {
        "state": State.CLOSED.value, "failure_count": 0, "success_count": 0, "last_failure_time": None,
        "last_state_change": format_ts(now) if now is not None else None, "cooldown_until": None,
        "failure_window_start": None, "probe_until": None, "last_error": None, "recovered_at": None,
        "total_failures": 0, "total_successes": 0,
    }


def _complete(entry: dict[str, Any]) -> dict[str, Any]:
    """A copy with every optional field present (entries written by other tools may lack them)."""
    full = new_entry(None)
    full.update(entry)
    return full


class Machine:
    """The reference's state machine over one breaker entry, at one instant.

    Pure: it changes ``entry`` (a complete copy) in place and collects the transitions; the
    caller decides where the entry is stored. Every method first applies the lazy
    OPEN -> HALF_OPEN change.
    """

    def __init__(self, name: str, entry: dict[str, Any], settings: Settings, now: datetime) -> None:
        self.name = name
        self.entry = _complete(entry)
        self._before = dict(self.entry)
        self.settings = settings
        self.now = now
        self.transitions: list[Transition] = []

    @property
    def state(self) -> State:
        return State(self.entry["state"])

    @property
    def changed(self) -> bool:
        return self.entry != self._before

    def time(self, field: str) -> datetime | None:
        value = self.entry.get(field)
        if value is None:
            return None
        try:
            return parse_ts(value)
        except (TypeError, ValueError):
            raise StateFileError(layout.BREAKERS, f"{value!r} is not an ISO 8601 timestamp",
                                 pointer([self.name, field])) from None

    def _ts(self, when: datetime | None = None) -> str:
        return format_ts(self.now if when is None else when)

    def cooldown_end(self) -> datetime:
        """When an OPEN breaker starts probing. An OPEN entry without ``cooldown_until`` (written by
        hand or another tool) stays open for one cooldown from its ``last_state_change``."""
        end = self.time("cooldown_until")
        changed = self.time("last_state_change")
        if end is None:
            end = _after(changed or self.now, self.settings.cooldown)
        if changed is not None and changed > _after(self.now, self.settings.cooldown):
            # Opened more than a cooldown from now: under a clock that has since gone back (LOKI_NOW,
            # a clock set ahead). No rule opens a breaker in the future, so the cooldown is over (it
            # probes one call at a time) instead of lasting as long as the jump.
            return self.now
        return end

    def _move(self, to: State, event: str, detail: str = "", at: datetime | None = None) -> None:
        when = self.now if at is None else at
        self.transitions.append(Transition(self.name, event, self.state, to, when, detail))
        self.entry["state"] = to.value
        self.entry["last_state_change"] = self._ts(when)

    def _open(self, event: str, detail: str, seconds: float) -> None:
        until = _after(self.now, seconds)
        self._move(State.OPEN, event, f"{detail}; cooldown until {format_ts(until)}")
        self.entry.update(cooldown_until=format_ts(until), success_count=0, probe_until=None, recovered_at=None)

    def _close(self, event: str, detail: str = "") -> None:
        ramp_from = self._ts() if self.state is not State.CLOSED else self.entry["recovered_at"]
        self._move(State.CLOSED, event, detail)
        # "Reset all counters, clear timestamps"; the totals are lifetime counts and stay.
        self.entry.update(failure_count=0, success_count=0, last_failure_time=None, cooldown_until=None,
                          failure_window_start=None, probe_until=None, last_error=None, recovered_at=ramp_from)

    # transitions ---------------------------------------------------------------------------------

    def advance(self) -> None:
        """OPEN -> HALF_OPEN exactly when now >= cooldown_until; dated when it took effect."""
        if self.state is not State.OPEN:
            return
        end = self.cooldown_end()
        if self.now < end:
            return
        skew = self.time("last_state_change")
        detail = "cooldown over; probing one call at a time"
        if skew is not None and skew > end:
            detail += f" (it was opened at {format_ts(skew)}, after now: clock skew, so its cooldown is not waited out)"
        self._move(State.HALF_OPEN, "half-open", detail, at=end)
        self.entry.update(failure_count=0, success_count=0, cooldown_until=None, failure_window_start=None,
                          probe_until=None)

    def record_failure(self, error: str | None = None) -> None:
        self.advance()
        entry = self.entry
        entry["total_failures"] += 1
        entry["last_failure_time"] = self._ts()
        entry["last_error"] = _clean_error(error)
        state = self.state
        if state is State.CLOSED:
            start = self.time("failure_window_start")
            if start is None or self.now < start or self.now >= _after(start, self.settings.window):
                entry["failure_window_start"] = self._ts()  # outside the window: a new one starts here
                entry["failure_count"] = 0
            entry["failure_count"] += 1
            if entry["failure_count"] >= self.settings.threshold:
                self._open("opened", f"{entry['failure_count']} failures within {self.settings.window:g}s",
                           self.settings.cooldown)
        elif state is State.HALF_OPEN:
            entry["failure_count"] = 1
            entry["failure_window_start"] = self._ts()
            self._open("reopened", "probe failed while HALF_OPEN", self.settings.cooldown)
        # OPEN: a call that started before the trip; counted above, the cooldown stands.

    def record_success(self) -> None:
        self.advance()
        self.entry["total_successes"] += 1
        if self.state is State.HALF_OPEN:
            self.entry["success_count"] += 1
            if self.entry["success_count"] >= self.settings.recovery_threshold:
                self._close("recovered")
        # CLOSED: failures are counted per window, not consecutively, so a success resets nothing.
        # OPEN: a call that started before the trip; it does not shorten the cooldown.

    def claim(self) -> tuple[bool, datetime | None]:
        """May a call go now? In HALF_OPEN this claims the probe slot. Returns (allowed, retry_at)."""
        self.advance()
        state = self.state
        if state is State.CLOSED:
            return True, None
        if state is State.OPEN:
            return False, self.cooldown_end()
        taken_until = self.time("probe_until")
        if taken_until is not None and taken_until > _after(self.now, self.settings.half_open_interval):
            taken_until = None  # taken under a clock since set back: no rule holds the slot that long
        if taken_until is not None and self.now < taken_until:
            return False, taken_until
        self.entry["probe_until"] = self._ts(_after(self.now, self.settings.half_open_interval))
        return True, None

    def trip(self, seconds: float | None) -> None:
        seconds = self.settings.cooldown if seconds is None else seconds
        self._open("tripped manually", f"for {seconds:g}s", seconds)

    def reset(self) -> None:
        self.advance()
        self._close("reset", f"was {self.state.value}; manual reset")


def effective(name: str, entry: dict[str, Any], settings: Settings, now: datetime) -> Machine:
    """The breaker as it is at ``now`` (the lazy transition applied to a copy; nothing is written)."""
    machine = Machine(name, entry, settings, now)
    machine.advance()
    return machine


# -- the shared file -------------------------------------------------------------------------------


def _closest(name: str, doc: dict[str, Any]) -> str | None:
    """The recorded breaker name closest to ``name`` (difflib's ratio at least :data:`SIMILAR_CUTOFF`), else None."""
    if not doc:
        return None
    import difflib

    close = difflib.get_close_matches(name, sorted(doc), n=1, cutoff=SIMILAR_CUTOFF)
    return close[0] if close else None


class Breakers:
    """Every named circuit breaker of one ``.loki/`` directory.

    Reads take no lock (writes are atomic renames); every change re-reads the file inside its
    lock, so concurrent agents never lose an update. ``now`` always comes from ``store.clock``.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    @classmethod
    def open(cls, root: str | None = None) -> Breakers:
        """The Breakers of the nearest ``.loki/`` (or ``root``), like the CLI finds it."""
        from loki.storage.opening import open_store

        return cls(open_store(root))

    def settings(self, name: str) -> Settings:
        return Settings.from_config(self.store.config, name)

    # reading -------------------------------------------------------------------------------------

    if TYPE_CHECKING:
        @overload
        def status(self, name: str) -> BreakerStatus: ...
        @overload
        def status(self, name: None = None) -> list[BreakerStatus]: ...

    def status(self, name: str | None = None) -> BreakerStatus | list[BreakerStatus]:
        """``status(name)``: that breaker's :class:`BreakerStatus` (CLOSED and ``recorded`` false if it
        was never used); ``status()``: every recorded breaker, sorted by name."""
        doc = self.store.read(layout.BREAKERS)
        now = self.store.clock.now()
        if name is None:
            return [self._status_of(key, doc[key], now) for key in sorted(doc)]
        check_name(name)
        return self._status_of(name, doc.get(name), now)

    def similar(self, name: str) -> str | None:
        """A recorded breaker whose name is close to ``name`` when ``name`` itself was never recorded (a typo
        such as ``api/cluade`` is silently a new, CLOSED breaker): what "did you mean" names, else None."""
        doc = self.store.read(layout.BREAKERS)
        return None if name in doc else _closest(name, doc)

    def _status_of(self, name: str, entry: dict[str, Any] | None, now: datetime) -> BreakerStatus:
        settings = self.settings(name)
        machine = effective(name, entry if entry is not None else new_entry(None), settings, now)
        remaining: int | None = None
        next_probe: str | None = None
        if machine.state is State.OPEN:
            end = machine.cooldown_end()
            remaining = _seconds_until(end, now)
            next_probe = format_ts(end)
        elif machine.state is State.HALF_OPEN:
            taken_until = machine.time("probe_until")
            next_probe = format_ts(taken_until if taken_until is not None and taken_until > now else now)
        return BreakerStatus(name, machine.entry, stored_state=entry["state"] if entry is not None else None,
                             now=now, settings=settings, cooldown_remaining=remaining, next_probe_at=next_probe)

    def capacity(self, name: str, max_agents: int) -> Capacity:
        """How many of ``max_agents`` should call through this breaker now (recovery protocol).

        OPEN: 0 (every call is refused). HALF_OPEN: 1, the prober. CLOSED after a recovery:
        50 % of ``max_agents`` (rounded down, at least 1), +25 % every 60 s, up to 100 %.
        CLOSED otherwise: all of them.
        """
        check_name(name)
        if isinstance(max_agents, bool) or not isinstance(max_agents, int) or max_agents < 1:
            raise InvalidArgument(f"invalid --max {max_agents!r}: it must be a whole number of agents, at least 1",
                                  field="max_agents")
        entry = self.store.read(layout.BREAKERS).get(name)
        now = self.store.clock.now()
        machine = effective(name, entry if entry is not None else new_entry(None), self.settings(name), now)
        state = machine.state
        if state is State.OPEN:
            end = format_ts(machine.cooldown_end())
            return Capacity(name, state, now, max_agents=max_agents, percent=0, agents=0, next_step_at=end,
                            reason=f"OPEN: every call is refused until {end}")
        if state is State.HALF_OPEN:
            return Capacity(name, state, now, max_agents=max_agents, percent=0, agents=1, next_step_at=None,
                            reason="HALF_OPEN: only the agent holding the probe slot should call")
        ramp = Ramp.from_config(self.store.config)
        recovered = machine.time("recovered_at")
        if recovered is None or ramp.step_seconds <= 0:  # never opened, or a ramp of zero-length steps
            return Capacity(name, state, now, max_agents=max_agents, percent=100, agents=max_agents,
                            next_step_at=None, reason="CLOSED: full capacity")
        steps = max(0, math.floor((now - recovered).total_seconds() / ramp.step_seconds))
        percent = min(100, ramp.start_percent + steps * ramp.step_percent)
        if percent >= 100:
            return Capacity(name, state, now, max_agents=max_agents, percent=100, agents=max_agents,
                            next_step_at=None, reason=f"CLOSED: recovered at {format_ts(recovered)}; ramp complete")
        # Rounded down (a recovering dependency gets the benefit of the doubt), but never 0 agents.
        agents = max(1, math.floor(max_agents * percent / 100 + 1e-9))
        next_step = format_ts(_after(recovered, (steps + 1) * ramp.step_seconds)) if ramp.step_percent > 0 else None
        return Capacity(name, state, now, max_agents=max_agents, percent=percent, agents=agents,
                        next_step_at=next_step, reason=f"CLOSED: recovering since {format_ts(recovered)}; ramping up")

    # the gate ------------------------------------------------------------------------------------

    def check(self, name: str, *, new: bool = False) -> Decision:
        """May a call through ``name`` go ahead now?

        CLOSED (or never used): yes. OPEN before ``cooldown_until``: no, with the seconds to wait.
        HALF_OPEN: yes for exactly one caller per ``half_open_interval`` -- that caller's
        decision has ``probe`` true and it must report the result -- no for everyone else.
        The common answers come from a lock-free read; the lock is taken only to write a
        transition or claim the probe slot, and the decision is then made again inside it.

        A name never recorded that is close to a recorded breaker which is not CLOSED (``api/cluade``
        while ``api/claude`` is OPEN) is most likely a typo that would go past the open breaker:
        :class:`~loki.errors.InvalidArgument` (exit 2) naming it, unless ``new`` says the name is meant.
        """
        check_name(name)
        doc = self.store.read(layout.BREAKERS)
        entry = doc.get(name)
        now = self.store.clock.now()
        if entry is None and doc and not new:
            self._refuse_a_typo(name, doc, now)
        quick = self._decide_without_lock(name, entry, now)
        if quick is not None:
            return quick
        with self.store.transaction(layout.BREAKERS) as txn:
            doc = txn.read(layout.BREAKERS)
            now = self.store.clock.now()
            entry = doc.get(name)
            if entry is None:
                return Decision(name, State.CLOSED, now, allowed=True)
            machine = Machine(name, entry, self.settings(name), now)
            allowed, retry_at = machine.claim()
            if machine.changed:
                self._commit(txn, doc, machine)
        probe = allowed and machine.state is State.HALF_OPEN
        return self._decision(machine, now, allowed, retry_at, probe)

    def _refuse_a_typo(self, name: str, doc: dict[str, Any], now: datetime) -> None:
        similar = _closest(name, doc)  # what `similar` names: the gate and the note agree
        if similar is None:
            return
        state = effective(similar, doc[similar], self.settings(similar), now).state
        if state is State.CLOSED:
            return  # nothing to go past: the note after the go-ahead is enough
        raise InvalidArgument(
            f"no breaker {name!r} was ever recorded, and {similar} (did you mean {similar}?) is {state.value}: a typo "
            f"must not go past it; check {similar}, or, if {name!r} is a new dependency, pass --new to `loki breaker "
            f"check` (or record it once: `loki breaker success {name}`)",
            field="name", name=name, did_you_mean=similar, similar_state=state.value)

    def _decide_without_lock(self, name: str, entry: dict[str, Any] | None, now: datetime) -> Decision | None:
        if entry is None or entry["state"] == State.CLOSED:
            return Decision(name, State.CLOSED, now, allowed=True)
        # Only refusals are decided here: they change nothing, and they stay true until a time
        # the file states (cooldown_until, probe_until) -- a slightly stale read is still right.
        # A time dated further ahead than a rule sets it (a clock since set back) is left to the
        # locked path, which bounds it with the breaker's own settings (Machine.cooldown_end, claim).
        probe = Machine(name, entry, Settings(), now)  # only parses timestamps; thresholds unused
        if entry["state"] == State.OPEN:
            until = probe.time("cooldown_until")
            changed = probe.time("last_state_change")
            if until is not None and now < until and (changed is None or changed <= now):
                return self._decision(probe, now, False, until, False)
        elif entry["state"] == State.HALF_OPEN:
            taken_until = probe.time("probe_until")
            if taken_until is not None and now < taken_until and (
                    taken_until <= _after(now, probe.settings.half_open_interval)  # the default: no config read
                    or taken_until <= _after(now, self.settings(name).half_open_interval)):
                return self._decision(probe, now, False, taken_until, False)
        return None

    @staticmethod
    def _decision(machine: Machine, now: datetime, allowed: bool, retry_at: datetime | None,
                  probe: bool) -> Decision:
        return Decision(machine.name, machine.state, now, allowed=allowed, probe=probe,
                        retry_at=None if allowed else retry_at, probe_until=machine.entry["probe_until"],
                        cooldown_until=machine.entry["cooldown_until"])

    def settle(self) -> list[Transition]:
        """Write down every OPEN -> HALF_OPEN change that time has made (cooldown over) and return them.

        The change is otherwise written lazily by the next check or record of that breaker; the
        watcher's tick calls this so the transition is saved -- and logged -- once, by whoever sees
        it first, under the file's lock. A breaker already moved by somebody else is left alone.
        """
        now = self.store.clock.now()
        if not any(self._due(name, entry, now) for name, entry in self.store.read(layout.BREAKERS).items()):
            return []  # the common case: no lock taken
        with self.store.transaction(layout.BREAKERS) as txn:
            doc = txn.read(layout.BREAKERS)
            now = self.store.clock.now()
            machines = []
            for name in sorted(doc):
                machine = Machine(name, doc[name], self.settings(name), now)
                machine.advance()
                if machine.transitions:
                    machines.append(machine)
            if machines:
                self._commit_all(txn, doc, machines)
        return [t for machine in machines for t in machine.transitions]

    def _due(self, name: str, entry: dict[str, Any], now: datetime) -> bool:
        return bool(entry["state"] == State.OPEN and effective(name, entry, self.settings(name), now).transitions)

    # recording -----------------------------------------------------------------------------------

    def record_success(self, name: str) -> Change:
        """A call through ``name`` succeeded. In HALF_OPEN, the ``recovery_threshold``-th
        consecutive success closes the breaker."""
        return self._update(name, lambda machine: machine.record_success())

    def record_failure(self, name: str, error: str | None = None) -> Change:
        """A call through ``name`` failed (``error``: what it said; kept, truncated, as ``last_error``)."""
        return self._update(name, lambda machine: machine.record_failure(error))

    def trip(self, name: str, for_seconds: float | None = None) -> Change:
        """Open ``name`` by hand for ``for_seconds`` (default: its cooldown); then it probes as usual."""
        if for_seconds is not None and (isinstance(for_seconds, bool) or not isinstance(for_seconds, (int, float))
                                        or not 0 <= for_seconds <= MAX_TRIP_SECONDS):
            raise InvalidArgument(f"invalid --for {for_seconds!r}: it must be a number of seconds between 0 and "
                                  f"{MAX_TRIP_SECONDS}", field="for_seconds")
        return self._update(name, lambda machine: machine.trip(for_seconds))

    def reset(self, name: str) -> Change:
        """Close ``name`` by hand and clear its counts (a breaker that was open starts the recovery
        ramp). A name that was never recorded is an error: it is most likely a typo."""
        return self._update(name, lambda machine: machine.reset(), create=False)

    def _update(self, name: str, action: Callable[[Machine], None], *, create: bool = True) -> Change:
        check_name(name)
        with self.store.transaction(layout.BREAKERS) as txn:
            doc = txn.read(layout.BREAKERS)
            now = self.store.clock.now()
            entry = doc.get(name)
            if entry is None:
                if not create:
                    known = ", ".join(sorted(doc)[:10]) or "none"
                    raise NotFound(f"no breaker named {name!r} (known: {known})", name=name)
                entry = new_entry(now)
            machine = Machine(name, entry, self.settings(name), now)
            action(machine)
            self._commit(txn, doc, machine)
        status = self._status_of(name, machine.entry, now)
        return Change(status, machine.transitions)

    def _commit(self, txn: Transaction, doc: dict[str, Any], machine: Machine) -> None:
        self._commit_all(txn, doc, [machine])

    def _commit_all(self, txn: Transaction, doc: dict[str, Any], machines: list[Machine]) -> None:
        """Write the entries, then log their transitions while the lock is still held (log order =
        transition order). Nothing is logged if the write fails; the write stands if logging does."""
        for machine in machines:
            doc[machine.name] = machine.entry
        txn.write(layout.BREAKERS, doc, changed=[machine.entry for machine in machines])
        txn.commit()
        lines = [t.log_line() for machine in machines for t in machine.transitions]
        if lines:
            self.store.append_text(RECOVERY_LOG, lines)
