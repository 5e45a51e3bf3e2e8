"""``loki run`` and :mod:`loki.breakers.runner`: retries, backoff, rate limits, the breaker, signals.

Sleeping is injected (a recorder that also moves the ManualClock), so no test waits for a
backoff. The commands are tiny real processes (``python -c``, ``sh -c``).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from loki.breakers import runner as runner_module
from loki.breakers.breakers import Breakers
from loki.breakers.runner import (
    TAIL_BYTES,
    CommandNotExecutable,
    CommandNotFound,
    RetryPolicy,
    Runner,
    detect_rate_limit,
)
from loki.clock import ManualClock
from loki.errors import InvalidInput
from loki.storage import layout
from loki.storage.store import Store
from tests.helpers import cli, process_gone, unreaped

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]


class FakeSleep:
    """Records every wait and moves the clock by it instead of sleeping."""

    def __init__(self, clock: ManualClock | None = None) -> None:
        self.calls: list[float] = []
        self.clock = clock

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)
        if self.clock is not None:
            self.clock.advance(seconds)


class Captured:
    def __init__(self) -> None:
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.notes: list[str] = []


def make_runner(command: list[str], *, captured: Captured | None = None, sleep: FakeSleep | None = None,
                breakers: Breakers | None = None, breaker: str | None = None, clock: ManualClock | None = None,
                **policy: float) -> Runner:
    captured = captured or Captured()
    return Runner(command, policy=RetryPolicy(**{"jitter": 0.0, **policy}), breakers=breakers,  # type: ignore[arg-type]
                  breaker=breaker, sleep=sleep or FakeSleep(), clock=clock, rng=random.Random(7),
                  stdout=captured.stdout.extend, stderr=captured.stderr.extend, notify=captured.notes.append)


def counting_command(counter: Path, succeed_on: int, stderr_text: str = "") -> list[str]:
    """A command that fails until its ``succeed_on``-th run (counted in a file)."""
    code = (
        "import pathlib, sys\n"
        f"p = pathlib.Path({str(counter)!r})\n"
        "n = int(p.read_text()) + 1 if p.exists() else 1\n"
        "p.write_text(str(n))\n"
        f"sys.stderr.write({stderr_text!r})\n"
        f"sys.exit(0 if n >= {succeed_on} else 1)\n"
    )
    return [PY, "-c", code]


def fail_with(code: int, stderr_text: str = "") -> list[str]:
    return [PY, "-c", f"import sys; sys.stderr.write({stderr_text!r}); sys.exit({code})"]


# -- backoff ---------------------------------------------------------------------------------------


def test_the_backoff_sequence_doubles_from_5s_and_is_capped_at_max_delay() -> None:
    policy = RetryPolicy()
    assert [policy.nominal_delay(n) for n in range(1, 10)] == [5, 10, 20, 40, 80, 160, 300, 300, 300]
    assert RetryPolicy(initial_delay=1, multiplier=3, max_delay=50).nominal_delay(5) == 50
    assert RetryPolicy(multiplier=10).nominal_delay(10_000) == 300  # no overflow


def test_jitter_only_ever_shortens_a_wait_by_at_most_its_fraction() -> None:
    policy = RetryPolicy(jitter=0.1)
    rng = random.Random(1)
    for failures in range(1, 9):
        nominal = policy.nominal_delay(failures)
        samples = [policy.delay(failures, rng) for _ in range(200)]
        assert all(0.9 * nominal <= s <= nominal for s in samples)
        assert max(samples) - min(samples) > 0.05 * nominal  # it does spread them
    assert RetryPolicy(jitter=0).delay(3, rng) == 20
    assert RetryPolicy(jitter=1).delay(1, random.Random(3)) < 5


@pytest.mark.parametrize("field, value", [("retries", -1), ("initial_delay", -1.0), ("max_delay", float("nan")),
                                          ("multiplier", 0.5), ("jitter", 1.5)])
def test_a_bad_policy_is_refused(field: str, value: float) -> None:
    with pytest.raises(InvalidInput, match="invalid --"):
        RetryPolicy(**{field: value})  # type: ignore[arg-type]


def test_a_failing_command_is_retried_with_backoff_and_its_last_exit_code_returned(tmp_path: Path) -> None:
    sleep = FakeSleep()
    captured = Captured()
    result = make_runner(fail_with(3, "boom\n"), captured=captured, sleep=sleep, retries=4).run()
    assert (result.exit_code, result.outcome) == (3, "failed")
    assert [a.exit_code for a in result.attempts] == [3, 3, 3, 3, 3]
    assert sleep.calls == [5, 10, 20, 40]
    assert captured.stderr == b"boom\n" * 5
    assert captured.notes[0] == "attempt 1 failed with exit 3; retrying in 5.0s (retry 1 of 4)"
    assert captured.notes[-1] == "attempt 5 failed with exit 3; no retries left, giving up"


def test_a_command_that_recovers_stops_the_retries(tmp_path: Path) -> None:
    sleep = FakeSleep()
    result = make_runner(counting_command(tmp_path / "n", succeed_on=3), sleep=sleep, retries=5).run()
    assert (result.exit_code, result.outcome, len(result.attempts)) == (0, "succeeded", 3)
    assert sleep.calls == [5, 10]
    assert result.to_json()["waited_seconds"] == 15


def test_with_jitter_the_waits_stay_within_bounds(tmp_path: Path) -> None:
    sleep = FakeSleep()
    make_runner(fail_with(1), sleep=sleep, retries=8, jitter=0.2, max_delay=100).run()
    nominal = [5, 10, 20, 40, 80, 100, 100, 100]
    assert len(sleep.calls) == 8
    assert all(0.8 * n <= s <= n for s, n in zip(sleep.calls, nominal, strict=True))


def test_zero_retries_runs_once() -> None:
    sleep = FakeSleep()
    result = make_runner(fail_with(9), sleep=sleep, retries=0).run()
    assert (result.exit_code, len(result.attempts), sleep.calls) == (9, 1, [])


# -- output ----------------------------------------------------------------------------------------


def test_stdout_and_stderr_pass_through_separately_and_completely() -> None:
    captured = Captured()
    code = ("import sys\n"
            "for i in range(3):\n"
            "    print(f'out {i}', flush=True)\n"
            "    print(f'err {i}', file=sys.stderr, flush=True)\n"
            "sys.stdout.write('x' * 300000)\n")
    result = make_runner([PY, "-c", code], captured=captured).run()
    assert result.exit_code == 0
    assert captured.stdout == b"out 0\nout 1\nout 2\n" + b"x" * 300000
    assert captured.stderr == b"err 0\nerr 1\nerr 2\n"


def test_only_a_bounded_tail_is_kept_for_detection(tmp_path: Path) -> None:
    # A rate-limit message followed by more than TAIL_BYTES of output has scrolled away.
    code = f"import sys; sys.stderr.write('rate limit\\n' + 'y' * {TAIL_BYTES + 10}); sys.exit(1)"
    result = make_runner([PY, "-c", code], retries=0).run()
    assert result.attempts[0].rate_limited is False
    recent = f"import sys; sys.stderr.write('y' * {TAIL_BYTES * 2} + 'rate limit'); sys.exit(1)"
    assert make_runner([PY, "-c", recent], retries=0).run().attempts[0].rate_limited is True


def test_a_command_killed_by_a_signal_exits_128_plus_the_signal() -> None:
    assert make_runner(["sh", "-c", "kill -9 $$"], retries=0).run().exit_code == 137


def test_the_exit_is_waited_for_not_polled(monkeypatch: pytest.MonkeyPatch) -> None:
    # Popen.wait(timeout=...) polls with sleeps of up to 50 ms: every exit would be noticed that late.
    timeouts: list[float | None] = []
    real_wait = subprocess.Popen.wait

    def recording_wait(child: subprocess.Popen[bytes], timeout: float | None = None) -> int:
        timeouts.append(timeout)
        return real_wait(child, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", recording_wait)
    assert make_runner([PY, "-c", "raise SystemExit(3)"], retries=0).run().exit_code == 3
    assert timeouts == [None]  # one blocking wait, once the exit is known


def test_a_stopped_command_that_ignores_the_signal_is_killed_with_its_group_while_unreaped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, bool]] = []
    real_signal_group = runner_module.signal_group

    def recording(child: subprocess.Popen[bytes], signum: int) -> None:
        seen.append((signum, unreaped(child.pid)))
        real_signal_group(child, signum)

    monkeypatch.setattr(runner_module, "signal_group", recording)
    stoppable: list[Runner] = []

    def stop_once_running(data: bytes) -> None:  # the command's first output: it is running, SIGTERM ignored
        if not seen:
            stoppable[0].request_stop(signal.SIGTERM)

    runner = Runner(["sh", "-c", "trap '' TERM; echo up; while :; do sleep 1; done"],
                    policy=RetryPolicy(retries=3), sleep=FakeSleep(), stdout=stop_once_running,
                    stderr=lambda data: None, kill_grace=0.0)
    stoppable.append(runner)
    result = runner.run_unguarded()
    assert (result.exit_code, result.outcome) == (143, "interrupted")
    assert [attempt.exit_code for attempt in result.attempts] == [137]  # killed by the SIGKILL, not retried
    assert seen == [(signal.SIGTERM, True), (signal.SIGKILL, True)]


# -- rate limits -----------------------------------------------------------------------------------

NOW = "2026-01-25T10:00:00Z"


@pytest.mark.parametrize("text, evidence, retry_after", [
    ("HTTP/1.1 429 Too Many Requests", "HTTP/1.1 429", None),
    ("< HTTP/2 429\n< retry-after: 30\n", "HTTP/2 429", 30.0),
    ("curl: (22) The requested URL returned error: 429", "error: 429", None),
    ('{"error": {"type": "rate_limit_error", "message": "Rate limited"}}', "rate_limit", None),
    ("openai.RateLimitError: Error code: 429", "RateLimit", None),
    ('{"status": 429, "retry_after": 12.5}', 'status": 429', 12.5),
    ("Retry-After: Sun, 25 Jan 2026 10:02:00 GMT", "Retry-After: Sun, 25 Jan 2026 10:02:00 GMT", 120.0),
    ("Retry-After: 10\n...\nRetry-After: 45", "Retry-After: 45", 45.0),
    ("too many requests, retry after 7 seconds", "too many requests", 7.0),
    ("Retry-After: Sun, 25 Jan 2026 09:00:00 GMT", "Retry-After: Sun, 25 Jan 2026 09:00:00 GMT", 0.0),
])
def test_rate_limiting_is_recognised(text: str, evidence: str, retry_after: float | None) -> None:
    found = detect_rate_limit(text, ManualClock(NOW).now())
    assert found is not None
    assert (found.evidence, found.retry_after) == (evidence, retry_after)


@pytest.mark.parametrize("text", ["processed 429 files", "error: connection refused", "HTTP/1.1 500 Internal",
                                  "limit reached for rate of fire", ""])
def test_other_failures_are_not_rate_limits(text: str) -> None:
    assert detect_rate_limit(text, ManualClock(NOW).now()) is None


def test_a_retry_after_in_seconds_is_waited_for_instead_of_the_backoff() -> None:
    sleep = FakeSleep()
    result = make_runner(fail_with(1, "HTTP/1.1 429 Too Many Requests\nRetry-After: 42\n"), sleep=sleep,
                         retries=2).run()
    assert sleep.calls == [42, 42]
    assert [w.reason for w in result.waits] == ["rate_limit", "rate_limit"]
    assert result.attempts[0].rate_limited and result.attempts[0].retry_after == 42


def test_a_retry_after_http_date_is_waited_for_until_that_time() -> None:
    clock = ManualClock(NOW)
    sleep = FakeSleep(clock)
    make_runner(fail_with(1, "HTTP/1.1 503\nRetry-After: Sun, 25 Jan 2026 10:02:00 GMT\n"), sleep=sleep,
                clock=clock, retries=1).run()
    assert sleep.calls == [120]


def test_a_rate_limit_without_retry_after_backs_off() -> None:
    sleep = FakeSleep()
    result = make_runner(fail_with(1, "rate limit exceeded"), sleep=sleep, retries=2).run()
    assert sleep.calls == [5, 10]
    assert [w.reason for w in result.waits] == ["rate_limit", "rate_limit"]


def test_an_absurd_retry_after_is_capped_at_an_hour() -> None:
    sleep = FakeSleep()
    make_runner(fail_with(1, "Retry-After: 999999"), sleep=sleep, retries=1).run()
    assert sleep.calls == [3600]


# -- the breaker -----------------------------------------------------------------------------------


@pytest.fixture
def breakers(store: Store) -> Breakers:
    return Breakers(store)


def test_success_and_failure_are_recorded_in_the_breaker(tmp_path: Path, store: Store, breakers: Breakers,
                                                         clock: ManualClock) -> None:
    sleep = FakeSleep(clock)
    result = make_runner(counting_command(tmp_path / "n", succeed_on=2, stderr_text="HTTP 429"), sleep=sleep,
                         breakers=breakers, breaker="api/claude", retries=3).run()
    assert result.exit_code == 0
    entry = store.read(layout.BREAKERS)["api/claude"]
    assert (entry["total_failures"], entry["total_successes"], entry["state"]) == (1, 1, "CLOSED")
    assert entry["last_error"] == "exit 1; rate limited (HTTP 429)"


def test_an_open_breaker_with_no_retries_left_exits_75_without_running(tmp_path: Path, breakers: Breakers) -> None:
    breakers.trip("api/claude", for_seconds=100)
    marker = tmp_path / "ran"
    captured = Captured()
    result = make_runner([PY, "-c", f"open({str(marker)!r}, 'w')"], captured=captured, breakers=breakers,
                         breaker="api/claude", retries=0).run()
    assert (result.exit_code, result.outcome, result.attempts) == (75, "circuit_open", [])
    assert not marker.exists()
    assert captured.notes == ["circuit api/claude is OPEN; retry in 100s (at 2026-01-25T10:01:40Z); no retries "
                              "left, giving up (exit 75)"]


def test_an_open_breaker_is_waited_out_then_probed(tmp_path: Path, store: Store, breakers: Breakers,
                                                   clock: ManualClock) -> None:
    breakers.trip("api/claude", for_seconds=100)
    sleep = FakeSleep(clock)
    captured = Captured()
    result = make_runner([PY, "-c", "print('called')"], captured=captured, sleep=sleep, breakers=breakers,
                         breaker="api/claude", retries=2).run()
    assert (result.exit_code, result.outcome) == (0, "succeeded")
    assert sleep.calls == [100]
    assert [w.reason for w in result.waits] == ["circuit_open"]
    assert captured.stdout == b"called\n"
    entry = store.read(layout.BREAKERS)["api/claude"]
    assert (entry["state"], entry["success_count"]) == ("HALF_OPEN", 1)  # the probe's success was recorded


def test_failures_trip_the_breaker_and_then_it_stays_open(tmp_path: Path, store: Store, breakers: Breakers,
                                                          clock: ManualClock) -> None:
    sleep = FakeSleep(clock)
    result = make_runner(fail_with(2), sleep=sleep, breakers=breakers, breaker="api/claude", retries=3).run()
    # three failures (waits 5, 10 and 20 s, all within the 60 s window) open it; the fourth try is refused
    assert (result.exit_code, result.outcome, len(result.attempts)) == (75, "circuit_open", 3)
    assert sleep.calls == [5, 10, 20]
    assert store.read(layout.BREAKERS)["api/claude"]["state"] == "OPEN"


def test_a_busy_probe_slot_is_waited_for(breakers: Breakers, clock: ManualClock) -> None:
    breakers.trip("api/claude", for_seconds=0)
    assert breakers.check("api/claude").probe  # another agent holds the slot for 10 s
    sleep = FakeSleep(clock)
    result = make_runner([PY, "-c", "pass"], sleep=sleep, breakers=breakers, breaker="api/claude", retries=1).run()
    assert (result.exit_code, sleep.calls) == (0, [10])


# -- command not found, signals --------------------------------------------------------------------


def test_a_missing_command_is_127_before_anything_runs(tmp_path: Path, breakers: Breakers) -> None:
    with pytest.raises(CommandNotFound, match="command not found: no-such-command-xyz") as info:
        make_runner(["no-such-command-xyz"], breakers=breakers, breaker="api/claude").run()
    assert info.value.exit_code == 127
    with pytest.raises(CommandNotFound):
        make_runner([str(tmp_path / "missing.sh")]).run()
    script = tmp_path / "not-executable.sh"
    script.write_text("echo hi\n")
    with pytest.raises(CommandNotExecutable) as denied:
        make_runner([str(script)]).run()
    assert denied.value.exit_code == 126
    assert breakers.store.read(layout.BREAKERS) == {}  # nothing ran, so nothing was recorded


def _spawn_runner(root: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([PY, "-m", "loki", "--root", str(root), "run", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)



@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_command_and_the_runner_without_retrying(root: Path, signum: int, code: int) -> None:
    proc = _spawn_runner(root, "--breaker", "api/claude", "--retries", "5", "--initial-delay", "0", "--",
                         PY, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(120)")
    assert proc.stdout is not None
    child = int(proc.stdout.readline())  # the command is running (its output came through the runner)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err.decode()
    assert out == b""  # no second attempt
    assert f"stopped by {signal.Signals(signum).name}; not retrying" in err.decode()
    assert process_gone(child)
    assert Store(root).read(layout.BREAKERS) == {}  # an interrupted call says nothing about the dependency


def test_a_signal_also_reaches_what_the_command_started(root: Path) -> None:
    proc = _spawn_runner(root, "--retries", "0", "--", "sh", "-c", f"{PY} -c 'import os, time; "
                         f"print(os.getpid(), flush=True); time.sleep(120)'; echo after")
    assert proc.stdout is not None
    grandchild = int(proc.stdout.readline())
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert process_gone(grandchild)


def test_a_signal_during_the_backoff_wait_ends_it(root: Path) -> None:
    proc = _spawn_runner(root, "--retries", "3", "--initial-delay", "600", "--max-delay", "600", "--jitter", "0", "--",
                         PY, "-c",
                         "import sys; sys.exit(4)")
    assert proc.stderr is not None
    line = proc.stderr.readline().decode()
    assert line.startswith("loki run: attempt 1 failed with exit 4; retrying in 600.0s")
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130


def test_a_command_that_ignores_the_signal_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    proc = subprocess.Popen([PY, "-m", "tests.procs.run_worker", "0.3", "sh", "-c",
                             "trap '' INT TERM; echo $$; while :; do sleep 1; done"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert process_gone(child)


# -- through the CLI -------------------------------------------------------------------------------


def test_loki_run_passes_output_through_and_exits_with_the_command(root: Path) -> None:
    result = cli(["run", "--retries", "0", "--", PY, "-c",
                  "import sys; print('to stdout'); print('to stderr', file=sys.stderr); sys.exit(6)"], root=root)
    assert result.code == 6
    assert result.stdout == "to stdout\n"
    assert result.stderr == "to stderr\nloki run: attempt 1 failed with exit 6; no retries left, giving up\n"


def test_loki_run_passes_the_commands_own_options_through(root: Path) -> None:
    after_dashes = cli(["run", "--retries", "0", "--", PY, "-c", "import sys; print(sys.argv[1:])", "--retries",
                        "--json", "-x"], root=root)
    assert (after_dashes.code, after_dashes.stdout) == (0, "['--retries', '--json', '-x']\n")
    no_dashes = cli(["run", "--retries", "0", PY, "-c", "import sys; print(sys.argv[1:])", "-q"], root=root)
    assert (no_dashes.code, no_dashes.stdout) == (0, "['-q']\n")


def test_loki_run_json_summary_goes_to_stderr(root: Path) -> None:
    result = cli(["run", "--json", "--retries", "0", "--breaker", "api/claude", "--", PY, "-c",
                  "print('hi')"], root=root)
    assert (result.code, result.stdout) == (0, "hi\n")
    summary = json.loads(result.stderr)
    assert summary["outcome"] == "succeeded" and summary["breaker"] == "api/claude"
    assert summary["attempts"] == [{"number": 1, "exit_code": 0, "rate_limited": False, "retry_after": None}]


def test_loki_run_with_an_open_breaker_exits_75(root: Path) -> None:
    at = {"LOKI_NOW": "2026-01-05T10:00:00Z"}  # one instant for both: the wait is 300 s, not 299 across a second
    cli(["breaker", "trip", "api/claude", "--for", "300"], root=root, env=at)
    result = cli(["run", "--breaker", "api/claude", "--retries", "0", "--", PY, "-c", "print('no')"], root=root,
                 env=at)
    assert (result.code, result.stdout) == (75, "")
    assert "circuit api/claude is OPEN; retry in 300s" in result.stderr


def test_loki_run_command_not_found_is_127(root: Path) -> None:
    result = cli(["run", "--", "no-such-command-xyz", "--flag"], root=root)
    assert (result.code, result.stderr) == (127, "error: command not found: no-such-command-xyz (not in PATH)\n")
    missing = cli(["run"], root=root)
    assert missing.code == 2 and "no command given" in missing.stderr
    with_breaker = cli(["run", "--breaker", "x"], root=root)
    assert with_breaker.code == 2 and "no command given" in with_breaker.stderr


def test_loki_run_bad_options_are_refused(root: Path) -> None:
    assert cli(["run", "--multiplier", "0.5", "--", "true"], root=root).stderr == (
        "error: invalid --multiplier 0.5: it must be a number >= 1\n")
    assert cli(["run", "--retires", "3", "--", "true"], root=root).code == 2  # a typo is not the command
