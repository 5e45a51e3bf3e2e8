"""The circuit breaker state machine (reference 001, "Circuit Breaker System"), one transition per test.

Time only moves when a test moves the ManualClock; nothing sleeps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loki.breakers.breakers import RECOVERY_LOG, Breakers, State, check_name
from loki.clock import ManualClock
from loki.errors import InvalidInput, NotFound, StateFileError
from loki.storage import layout
from loki.storage.store import Store
from tests.helpers import state_snapshot, store_problems, tree_problems


@pytest.fixture
def store(backend_store: Store) -> Store:
    """Every test here runs on the files and on the memory store (tests/conftest.py: backend)."""
    return backend_store


REPO = Path(__file__).resolve().parents[2]
T0 = "2026-01-25T10:00:00Z"


@pytest.fixture
def breakers(store: Store) -> Breakers:
    return Breakers(store)


def write_config(root: Path, breakers_section: dict[str, Any]) -> None:
    (root / "config" / "loki.json").write_text(json.dumps({"version": 1, "breakers": breakers_section}))


def entry(store: Store, name: str = "api/claude") -> dict[str, Any]:
    return store.read(layout.BREAKERS)[name]  # type: ignore[no-any-return]


def logged(breakers: Breakers) -> list[str]:
    """The recovery log's lines (read through the store: either backend)."""
    return (breakers.store.read_text(RECOVERY_LOG) or "").splitlines()


def fail_times(breakers: Breakers, clock: ManualClock, times: int, name: str = "api/claude", step: float = 1) -> None:
    for _ in range(times):
        breakers.record_failure(name, error="HTTP 500")
        clock.advance(step)


def open_at_t0(breakers: Breakers, name: str = "api/claude") -> None:
    """Three failures at the same instant: OPEN from T0, cooldown until T0 + 300 s."""
    for _ in range(3):
        breakers.record_failure(name, error="HTTP 500")


# -- CLOSED ----------------------------------------------------------------------------------------


def test_a_breaker_never_used_is_closed_and_checking_it_writes_nothing(root: Path, breakers: Breakers) -> None:
    before = state_snapshot(breakers.store)
    decision = breakers.check("api/claude")
    assert decision.allowed and decision.state is State.CLOSED and decision.retry_after == 0
    assert not decision.probe
    status = breakers.status("api/claude")
    assert status.state is State.CLOSED and not status.recorded
    assert state_snapshot(breakers.store) == before


def test_failures_below_the_threshold_keep_it_closed(store: Store, breakers: Breakers, clock: ManualClock) -> None:
    fail_times(breakers, clock, 2)
    e = entry(store)
    assert e["state"] == "CLOSED"
    assert e["failure_count"] == 2
    assert e["failure_window_start"] == T0
    assert e["last_failure_time"] == "2026-01-25T10:00:01Z"
    assert e["last_error"] == "HTTP 500"
    assert breakers.check("api/claude").allowed


def test_closed_to_open_at_three_failures_within_the_window(root: Path, store: Store, breakers: Breakers,
                                                            clock: ManualClock) -> None:
    fail_times(breakers, clock, 2, step=29)
    change = breakers.record_failure("api/claude", error="HTTP 503")  # 58 s after the first
    assert [(t.from_state, t.to_state) for t in change.transitions] == [(State.CLOSED, State.OPEN)]
    e = entry(store)
    assert e["state"] == "OPEN"
    assert e["failure_count"] == 3
    assert e["last_state_change"] == "2026-01-25T10:00:58Z"
    assert e["cooldown_until"] == "2026-01-25T10:05:58Z"  # now + 300 s
    assert e["failure_window_start"] == T0
    assert logged(breakers) == [
        "2026-01-25T10:00:58Z Circuit opened: api/claude (3 failures within 60s; cooldown until 2026-01-25T10:05:58Z)"
    ]


def test_failures_outside_the_60s_window_do_not_trip(store: Store, breakers: Breakers, clock: ManualClock) -> None:
    breakers.record_failure("api/claude")
    clock.advance(30)
    breakers.record_failure("api/claude")
    clock.advance(30)  # 60 s after the first failure: that window is over, a new one starts
    breakers.record_failure("api/claude")
    e = entry(store)
    assert e["state"] == "CLOSED"
    assert e["failure_count"] == 1
    assert e["failure_window_start"] == "2026-01-25T10:01:00Z"
    clock.advance(59)
    breakers.record_failure("api/claude")
    assert entry(store)["state"] == "CLOSED" and entry(store)["failure_count"] == 2
    assert entry(store)["total_failures"] == 4


def test_a_success_while_closed_does_not_reset_the_failure_window(store: Store, breakers: Breakers,
                                                                  clock: ManualClock) -> None:
    # An API that fails every other call must still trip: failures are counted per window.
    for _ in range(2):
        breakers.record_failure("api/claude")
        breakers.record_success("api/claude")
        clock.advance(5)
    assert entry(store)["failure_count"] == 2 and entry(store)["success_count"] == 0
    breakers.record_failure("api/claude")
    e = entry(store)
    assert e["state"] == "OPEN"
    assert e["total_successes"] == 2 and e["total_failures"] == 3


# -- OPEN ------------------------------------------------------------------------------------------


def test_open_refuses_every_call_with_the_seconds_to_wait(breakers: Breakers, clock: ManualClock) -> None:
    open_at_t0(breakers)
    clock.advance(100)
    decision = breakers.check("api/claude")
    assert not decision.allowed
    assert decision.state is State.OPEN
    assert decision.retry_after == 200
    assert decision.retry_at == "2026-01-25T10:05:00Z"
    error = decision.error()
    assert error.exit_code == 75 and error.retry_after == 200
    assert "retry in 200s" in error.message


def test_open_stays_open_one_second_before_cooldown_until(root: Path, store: Store, breakers: Breakers,
                                                          clock: ManualClock) -> None:
    open_at_t0(breakers)
    clock.set("2026-01-25T10:04:59Z")
    decision = breakers.check("api/claude")
    assert not decision.allowed and decision.state is State.OPEN and decision.retry_after == 1
    assert breakers.status("api/claude").state is State.OPEN
    assert entry(store)["state"] == "OPEN"


def test_open_to_half_open_exactly_at_cooldown_until(root: Path, store: Store, breakers: Breakers,
                                                     clock: ManualClock) -> None:
    open_at_t0(breakers)
    clock.set("2026-01-25T10:05:00Z")
    decision = breakers.check("api/claude")
    assert decision.allowed and decision.probe and decision.state is State.HALF_OPEN
    e = entry(store)
    assert e["state"] == "HALF_OPEN"
    assert e["failure_count"] == 0 and e["success_count"] == 0  # "Reset failure_count = 0, success_count = 0"
    assert e["last_state_change"] == "2026-01-25T10:05:00Z"
    assert e["cooldown_until"] is None
    assert e["probe_until"] == "2026-01-25T10:05:10Z"
    assert logged(breakers)[-1] == "2026-01-25T10:05:00Z Circuit half-open: api/claude (cooldown over; probing one " \
                                  "call at a time)"


def test_the_lazy_transition_is_dated_when_it_took_effect(store: Store, breakers: Breakers,
                                                          clock: ManualClock) -> None:
    open_at_t0(breakers)
    clock.set("2026-01-25T10:30:00Z")  # nobody looked for 25 minutes
    status = breakers.status("api/claude")
    assert status.state is State.HALF_OPEN and status.stored_state == "OPEN"  # status writes nothing
    assert entry(store)["state"] == "OPEN"
    breakers.record_success("api/claude")  # any record applies the pending transition first
    e = entry(store)
    assert e["state"] == "HALF_OPEN" and e["success_count"] == 1
    assert e["last_state_change"] == "2026-01-25T10:05:00Z"


def test_failures_while_open_are_counted_but_do_not_extend_the_cooldown(root: Path, store: Store, breakers: Breakers,
                                                                        clock: ManualClock) -> None:
    open_at_t0(breakers)
    clock.advance(100)
    change = breakers.record_failure("api/claude", error="late")
    assert change.transitions == []
    e = entry(store)
    assert e["state"] == "OPEN"
    assert e["cooldown_until"] == "2026-01-25T10:05:00Z"
    assert e["total_failures"] == 4 and e["last_error"] == "late"
    assert e["last_failure_time"] == "2026-01-25T10:01:40Z"
    assert len(logged(breakers)) == 1


def test_a_success_while_open_does_not_close_it(store: Store, breakers: Breakers, clock: ManualClock) -> None:
    open_at_t0(breakers)
    clock.advance(10)
    breakers.record_success("api/claude")
    e = entry(store)
    assert e["state"] == "OPEN" and e["success_count"] == 0 and e["total_successes"] == 1


# -- HALF_OPEN -------------------------------------------------------------------------------------


def half_open(breakers: Breakers, clock: ManualClock) -> None:
    open_at_t0(breakers)
    clock.set("2026-01-25T10:05:00Z")


def test_half_open_lets_only_one_probe_per_interval(store: Store, breakers: Breakers, clock: ManualClock) -> None:
    half_open(breakers, clock)
    first = breakers.check("api/claude")
    second = breakers.check("api/claude")
    assert first.allowed and first.probe
    assert not second.allowed and second.state is State.HALF_OPEN
    assert second.retry_after == 10 and second.retry_at == "2026-01-25T10:05:10Z"
    assert "another agent holds the probe slot" in second.reason
    clock.advance(9)
    assert not breakers.check("api/claude").allowed
    clock.advance(1)  # the interval is over: the next probe may go
    third = breakers.check("api/claude")
    assert third.allowed and third.probe
    assert entry(store)["probe_until"] == "2026-01-25T10:05:20Z"


def test_a_success_does_not_free_the_probe_slot_early(breakers: Breakers, clock: ManualClock) -> None:
    half_open(breakers, clock)
    assert breakers.check("api/claude").allowed
    breakers.record_success("api/claude")
    refused = breakers.check("api/claude")
    assert not refused.allowed and refused.retry_after == 10


def test_partial_success_stays_half_open(store: Store, breakers: Breakers, clock: ManualClock) -> None:
    half_open(breakers, clock)
    for expected in (1, 2):
        assert breakers.check("api/claude").allowed
        change = breakers.record_success("api/claude")
        assert change.transitions == []
        assert entry(store)["state"] == "HALF_OPEN" and entry(store)["success_count"] == expected
        clock.advance(10)


def test_half_open_to_closed_after_three_consecutive_successes(root: Path, store: Store, breakers: Breakers,
                                                               clock: ManualClock) -> None:
    half_open(breakers, clock)
    for _ in range(3):
        assert breakers.check("api/claude").allowed
        change = breakers.record_success("api/claude")
        clock.advance(10)
    assert [(t.from_state, t.to_state) for t in change.transitions] == [(State.HALF_OPEN, State.CLOSED)]
    e = entry(store)
    assert e["state"] == "CLOSED"
    # "Reset all counters, clear timestamps"
    assert e["failure_count"] == 0 and e["success_count"] == 0
    assert e["last_failure_time"] is None and e["cooldown_until"] is None
    assert e["failure_window_start"] is None and e["probe_until"] is None
    assert e["last_state_change"] == "2026-01-25T10:05:20Z"
    assert e["recovered_at"] == "2026-01-25T10:05:20Z"
    assert e["total_successes"] == 3 and e["total_failures"] == 3  # lifetime totals stay
    assert logged(breakers)[-1] == "2026-01-25T10:05:20Z Circuit recovered: api/claude"
    assert breakers.check("api/claude").allowed


def test_any_half_open_failure_reopens_with_a_new_cooldown(root: Path, store: Store, breakers: Breakers,
                                                           clock: ManualClock) -> None:
    half_open(breakers, clock)
    for _ in range(2):
        breakers.check("api/claude")
        breakers.record_success("api/claude")
        clock.advance(10)
    breakers.check("api/claude")
    change = breakers.record_failure("api/claude", error="still down")
    assert [(t.from_state, t.to_state) for t in change.transitions] == [(State.HALF_OPEN, State.OPEN)]
    e = entry(store)
    assert e["state"] == "OPEN"
    assert e["cooldown_until"] == "2026-01-25T10:10:20Z"  # now (10:05:20) + 300 s
    assert e["success_count"] == 0 and e["probe_until"] is None
    assert logged(breakers)[-1] == ("2026-01-25T10:05:20Z Circuit reopened: api/claude (probe failed while HALF_OPEN; "
                                   "cooldown until 2026-01-25T10:10:20Z)")
    refused = breakers.check("api/claude")
    assert not refused.allowed and refused.retry_after == 300


# -- manual control --------------------------------------------------------------------------------


def test_trip_opens_by_hand_for_the_given_time_then_probes(root: Path, store: Store, breakers: Breakers,
                                                           clock: ManualClock) -> None:
    change = breakers.trip("api/claude", for_seconds=60)
    assert change.breaker.state is State.OPEN
    assert entry(store)["cooldown_until"] == "2026-01-25T10:01:00Z"
    assert logged(breakers) == ["2026-01-25T10:00:00Z Circuit tripped manually: api/claude (for 60s; cooldown until "
                               "2026-01-25T10:01:00Z)"]
    clock.advance(60)
    assert breakers.check("api/claude").probe


def test_trip_defaults_to_the_cooldown_and_rounds_fractions_up(store: Store, breakers: Breakers) -> None:
    breakers.trip("api/a")
    assert entry(store, "api/a")["cooldown_until"] == "2026-01-25T10:05:00Z"
    breakers.trip("api/b", for_seconds=0.2)
    assert entry(store, "api/b")["cooldown_until"] == "2026-01-25T10:00:01Z"


@pytest.mark.parametrize("seconds", [-1, float("nan"), float("inf"), 10**10, True])
def test_trip_refuses_a_bad_duration(root: Path, breakers: Breakers, seconds: Any) -> None:
    before = state_snapshot(breakers.store)
    with pytest.raises(InvalidInput, match="invalid --for"):
        breakers.trip("api/claude", for_seconds=seconds)
    assert state_snapshot(breakers.store) == before


def test_reset_closes_and_clears_and_logs(root: Path, store: Store, breakers: Breakers) -> None:
    open_at_t0(breakers)
    change = breakers.reset("api/claude")
    e = entry(store)
    assert change.breaker.state is State.CLOSED and e["state"] == "CLOSED"
    assert e["failure_count"] == 0 and e["cooldown_until"] is None and e["last_error"] is None
    assert e["recovered_at"] == T0  # a reset from OPEN starts the recovery ramp too
    assert e["total_failures"] == 3
    assert logged(breakers)[-1] == "2026-01-25T10:00:00Z Circuit reset: api/claude (was OPEN; manual reset)"


def test_reset_of_an_unknown_breaker_is_an_error_that_changes_nothing(root: Path, breakers: Breakers) -> None:
    breakers.record_failure("api/claude")
    before = state_snapshot(breakers.store)
    with pytest.raises(NotFound, match="no breaker named 'api/claud' \\(known: api/claude\\)"):
        breakers.reset("api/claud")
    assert state_snapshot(breakers.store) == before


# -- configuration ---------------------------------------------------------------------------------


def test_config_overrides_per_breaker(root: Path, clock: ManualClock) -> None:
    write_config(root, {
        "defaults": {"cooldown": 120},
        "per_breaker": {"api/flaky": {"threshold": 5, "window": 10, "half_open_interval": 30,
                                      "recovery_threshold": 1}},
    })
    breakers = Breakers(Store(root, clock=clock))
    assert breakers.settings("api/claude").to_json() == {
        "threshold": 3, "window": 60, "cooldown": 120, "half_open_interval": 10, "recovery_threshold": 3}
    fail_times(breakers, clock, 4, name="api/flaky", step=0)
    assert breakers.status("api/flaky").state is State.CLOSED  # threshold 5 for this one
    clock.advance(10)  # its window is 10 s: this failure starts a new one
    breakers.record_failure("api/flaky")
    assert breakers.status("api/flaky").failure_count == 1
    fail_times(breakers, clock, 4, name="api/flaky", step=0)
    flaky = breakers.status("api/flaky")
    assert flaky.state is State.OPEN and flaky.cooldown_until == "2026-01-25T10:02:10Z"  # default cooldown 120
    fail_times(breakers, clock, 3, name="api/claude", step=0)
    assert breakers.status("api/claude").state is State.OPEN  # the defaults still apply to the others
    clock.advance(120)
    assert breakers.check("api/flaky").probe
    clock.advance(29)
    assert breakers.check("api/flaky").retry_after == 1  # one probe per 30 s
    breakers.record_success("api/flaky")
    assert breakers.status("api/flaky").state is State.CLOSED  # recovery_threshold 1


@pytest.mark.files("looks at or edits the files themselves")
def test_an_invalid_config_is_refused_naming_it(root: Path, store: Store, breakers: Breakers) -> None:
    (root / "config" / "loki.json").write_text('{"version": 1, "breakers": {"defaults": {"threshold": 0}}}')
    before = state_snapshot(breakers.store)
    with pytest.raises(StateFileError) as info:
        breakers.record_failure("api/claude")
    assert info.value.path == "config/loki.json" and info.value.pointer == "/breakers/defaults/threshold"
    assert state_snapshot(breakers.store) == before


# -- gradual recovery ------------------------------------------------------------------------------


def recovered(breakers: Breakers, clock: ManualClock) -> None:
    half_open(breakers, clock)
    for _ in range(3):
        breakers.check("api/claude")
        breakers.record_success("api/claude")
        clock.advance(10)
    clock.set("2026-01-25T10:05:20Z")  # the instant it closed


def test_capacity_ramps_50_75_100_percent_after_recovery(breakers: Breakers, clock: ManualClock) -> None:
    recovered(breakers, clock)
    ramp = []
    for seconds in (0, 59, 60, 119, 120, 1000):
        clock.set("2026-01-25T10:05:20Z")
        clock.advance(seconds)
        cap = breakers.capacity("api/claude", 8)
        ramp.append((seconds, cap.percent, cap.agents, cap.next_step_at))
    assert ramp == [
        (0, 50, 4, "2026-01-25T10:06:20Z"),
        (59, 50, 4, "2026-01-25T10:06:20Z"),
        (60, 75, 6, "2026-01-25T10:07:20Z"),
        (119, 75, 6, "2026-01-25T10:07:20Z"),
        (120, 100, 8, None),
        (1000, 100, 8, None),
    ]


def test_capacity_rounds_down_but_never_to_zero(breakers: Breakers, clock: ManualClock) -> None:
    recovered(breakers, clock)
    assert breakers.capacity("api/claude", 5).agents == 2  # 50 % of 5
    assert breakers.capacity("api/claude", 1).agents == 1
    clock.advance(60)
    assert breakers.capacity("api/claude", 5).agents == 3  # 75 % of 5


def test_capacity_by_state(breakers: Breakers, clock: ManualClock) -> None:
    assert breakers.capacity("api/new", 5).to_json()["agents"] == 5  # never opened: full capacity
    open_at_t0(breakers)
    cap = breakers.capacity("api/claude", 5)
    assert (cap.state, cap.agents, cap.percent, cap.next_step_at) == (State.OPEN, 0, 0, "2026-01-25T10:05:00Z")
    clock.set("2026-01-25T10:05:00Z")
    cap = breakers.capacity("api/claude", 5)
    assert (cap.state, cap.agents) == (State.HALF_OPEN, 1)


def test_capacity_ramp_is_configurable(root: Path, clock: ManualClock) -> None:
    write_config(root, {"recovery_start_percent": 20, "recovery_step_percent": 40, "recovery_step_seconds": 30})
    breakers = Breakers(Store(root, clock=clock))
    recovered(breakers, clock)
    assert breakers.capacity("api/claude", 10).agents == 2
    clock.advance(30)
    assert breakers.capacity("api/claude", 10).agents == 6
    clock.advance(30)
    assert breakers.capacity("api/claude", 10).agents == 10


@pytest.mark.parametrize("bad", [0, -3, True, 2.5])
def test_capacity_refuses_a_bad_max(breakers: Breakers, bad: Any) -> None:
    with pytest.raises(InvalidInput, match="invalid --max"):
        breakers.capacity("api/claude", bad)


# -- the log ---------------------------------------------------------------------------------------


def test_every_transition_is_logged_once_in_order(root: Path, breakers: Breakers, clock: ManualClock) -> None:
    open_at_t0(breakers)                           # CLOSED -> OPEN
    clock.set("2026-01-25T10:05:00Z")
    breakers.check("api/claude")                   # OPEN -> HALF_OPEN
    breakers.record_failure("api/claude")          # HALF_OPEN -> OPEN
    clock.set("2026-01-25T10:10:00Z")
    for _ in range(3):
        breakers.check("api/claude")
        breakers.record_success("api/claude")      # ... HALF_OPEN -> CLOSED
        clock.advance(10)
    breakers.trip("api/claude", for_seconds=30)    # manual trip
    breakers.reset("api/claude")                   # manual reset
    assert logged(breakers) == [
        "2026-01-25T10:00:00Z Circuit opened: api/claude (3 failures within 60s; cooldown until 2026-01-25T10:05:00Z)",
        "2026-01-25T10:05:00Z Circuit half-open: api/claude (cooldown over; probing one call at a time)",
        "2026-01-25T10:05:00Z Circuit reopened: api/claude (probe failed while HALF_OPEN; cooldown until "
        "2026-01-25T10:10:00Z)",
        "2026-01-25T10:10:00Z Circuit half-open: api/claude (cooldown over; probing one call at a time)",
        "2026-01-25T10:10:20Z Circuit recovered: api/claude",
        "2026-01-25T10:10:30Z Circuit tripped manually: api/claude (for 30s; cooldown until 2026-01-25T10:11:00Z)",
        "2026-01-25T10:10:30Z Circuit reset: api/claude (was OPEN; manual reset)",
    ]
    assert store_problems(breakers.store) == []


# -- names, errors and hand-written files ----------------------------------------------------------


@pytest.mark.parametrize("name, problem", [
    ("", "empty"),
    ("x" * 201, "201 characters long"),
    ("api\x00claude", "control character '\\x00'"),
    ("api/claude\n", "control character '\\n'"),
    ("a\x7fb", "control character '\\x7f'"),
    ("a\x85b", "control character '\\x85'"),
    ("a\udcffb", "'\\udcff'"),
])
def test_bad_names_are_refused_clearly(root: Path, breakers: Breakers, name: str, problem: str) -> None:
    before = state_snapshot(breakers.store)
    for call in (breakers.check, breakers.record_failure, breakers.record_success, breakers.trip, breakers.status):
        with pytest.raises(InvalidInput, match="invalid breaker name") as info:
            call(name)
        assert problem in info.value.message
    assert state_snapshot(breakers.store) == before


@pytest.mark.files("looks at or edits the files themselves")
@pytest.mark.parametrize("name", ["api/claude", "../../etc/passwd", "github api", "db:primary", "é/ü/日本", "x" * 200])
def test_any_printable_name_is_a_key_not_a_path(tmp_path: Path, root: Path, store: Store, breakers: Breakers,
                                                name: str) -> None:
    assert check_name(name) == name
    before = {p.relative_to(tmp_path) for p in tmp_path.rglob("*")}
    breakers.record_failure(name)
    assert entry(store, name)["failure_count"] == 1
    created = {p.relative_to(tmp_path) for p in tmp_path.rglob("*")} - before
    assert created == {Path(".loki/state/circuit-breakers.json.lock")}  # nothing named after the breaker
    assert store_problems(breakers.store) == []


def test_the_error_text_is_kept_short_and_valid_utf8(store: Store, breakers: Breakers) -> None:
    breakers.record_failure("api/claude", error="x" * 2000)
    assert len(entry(store)["last_error"]) == 500 and entry(store)["last_error"].endswith("...")
    breakers.record_failure("api/claude", error="bad byte \udcff here")
    assert entry(store)["last_error"] == "bad byte \\udcff here"


def test_the_reference_example_file_is_read_as_is(root: Path, clock: ManualClock) -> None:
    # Entries without loki's optional fields (as Loki Mode itself writes them) work unchanged.
    example = (REPO / ".loki.example" / "state" / "circuit-breakers.json").read_bytes()
    (root / layout.BREAKERS).write_bytes(example)
    clock.set("2025-01-20T10:36:00Z")
    breakers = Breakers(Store(root, clock=clock))
    assert breakers.check("api/claude").allowed
    openai = breakers.check("api/openai")
    assert not openai.allowed and openai.retry_at == "2025-01-20T10:40:42Z"
    codex = breakers.check("api/codex")
    assert codex.allowed and codex.probe
    breakers.record_success("api/codex")
    breakers.record_success("api/codex")
    assert breakers.status("api/codex").state is State.CLOSED  # it had 1 success already


def test_an_open_entry_without_cooldown_until_stays_open_one_cooldown(root: Path, clock: ManualClock) -> None:
    (root / layout.BREAKERS).write_text(json.dumps({"api/x": {
        "state": "OPEN", "failure_count": 3, "last_failure_time": None, "last_state_change": T0}}))
    breakers = Breakers(Store(root, clock=clock))
    clock.advance(299)
    assert breakers.check("api/x").retry_after == 1
    clock.advance(1)
    assert breakers.check("api/x").probe


@pytest.mark.files("looks at or edits the files themselves")
@pytest.mark.parametrize("content, pointer", [
    (b'{"api/claude": {"state": "CLOSED", ', ""),
    (b'{"api/claude": {"state": "SHUT", "failure_count": 0, "last_failure_time": null, '
     b'"last_state_change": "2026-01-25T10:00:00Z"}}', "/api~1claude/state"),
])
def test_a_broken_file_is_refused_and_never_written(root: Path, breakers: Breakers, content: bytes,
                                                    pointer: str) -> None:
    (root / layout.BREAKERS).write_bytes(content)
    before = state_snapshot(breakers.store)
    calls = [lambda: breakers.check("api/claude"), lambda: breakers.record_failure("api/claude"),
             lambda: breakers.record_success("api/claude"), lambda: breakers.reset("api/claude"),
             lambda: breakers.trip("api/claude"), lambda: breakers.status(), lambda: breakers.capacity("api/claude", 2)]
    for call in calls:
        with pytest.raises(StateFileError) as info:
            call()
        assert info.value.path == layout.BREAKERS and info.value.pointer == pointer
    assert state_snapshot(breakers.store) == before


# -- many processes --------------------------------------------------------------------------------


def _spawn(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **(env or {})})


@pytest.mark.slow  # eight processes racing
def test_eight_processes_recording_at_once_lose_no_update(root: Path) -> None:
    write_config(root, {"defaults": {"threshold": 1_000_000, "window": 3600}})
    workers, failures, successes = 8, 30, 20
    env = {"LOKI_NOW": T0}
    procs = [_spawn(["-m", "tests.procs.breaker_worker", str(root), "api/shared", str(failures), str(successes)],
                    env) for _ in range(workers)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    e = Store(root).read(layout.BREAKERS)["api/shared"]
    assert e["total_failures"] == workers * failures
    assert e["total_successes"] == workers * successes
    assert e["failure_count"] == workers * failures  # one window: every failure counted exactly once
    assert e["state"] == "CLOSED"
    assert tree_problems(root) == []


@pytest.mark.slow  # eight processes racing
@pytest.mark.parametrize("stored", ["open, cooldown over", "half-open, slot free"])
def test_only_one_process_gets_the_probe(root: Path, stored: str) -> None:
    now = "2026-01-25T10:05:00Z"
    if stored == "open, cooldown over":
        fields = {"state": "OPEN", "cooldown_until": now, "failure_count": 3}
    else:
        fields = {"state": "HALF_OPEN", "probe_until": "2026-01-25T10:04:59Z", "failure_count": 0}
    doc = {"api/claude": {"last_failure_time": T0, "last_state_change": T0, **fields}}
    (root / layout.BREAKERS).write_text(json.dumps(doc))
    procs = [_spawn(["-m", "loki", "--root", str(root), "breaker", "check", "api/claude", "--json"],
                    {"LOKI_NOW": now}) for _ in range(8)]
    results = [(proc.wait(timeout=60), proc.communicate()) for proc in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0] + [75] * 7, [err.decode() for _, (_, err) in results]
    winners = [json.loads(out) for code, (out, _) in results if code == 0]
    assert winners[0]["probe"] is True and winners[0]["probe_until"] == "2026-01-25T10:05:10Z"
    assert Store(root).read(layout.BREAKERS)["api/claude"]["probe_until"] == "2026-01-25T10:05:10Z"
    half_open_lines = [line for line in (Store(root).read_text(RECOVERY_LOG) or "").splitlines() if "half-open" in line]
    assert len(half_open_lines) == (1 if stored == "open, cooldown over" else 0)
