"""``loki run``: run a flaky command behind a circuit breaker, with backoff and rate-limit handling.

The reference's "Rate Limit Handling" strategy, as a wrapper any shell loop can use::

    loki run --breaker api/claude -- claude -p "..."

* Before each attempt the breaker is checked (in HALF_OPEN this claims the probe slot). When
  it refuses, the runner waits the seconds it says and asks again.
* The command's stdout and stderr pass through live; the last 64 KiB of each is kept to
  recognise rate limiting: HTTP 429, "rate limit", "Too Many Requests", and a Retry-After
  value (seconds or an HTTP-date) -- which is then waited for instead of the backoff.
* Exit 0 records a success; anything else records a failure and, while retries remain, waits
  ``initial_delay * multiplier ** (n - 1)`` capped at ``max_delay``, minus up to ``jitter`` of
  it (so agents that failed together do not retry together, and no wait exceeds the cap).
* Every wait -- after a failure, or for the breaker -- uses one of ``retries``. The result is
  the command's last exit code; 75 when the breaker still refuses; 127 when the command does
  not exist (126 when it cannot be executed).
* SIGINT and SIGTERM are forwarded to the command's process group; the runner does not retry,
  records nothing, and exits 130 / 143. A command that ignores the signal is killed after a
  grace period.

The command runs in its own session, so a terminal's Ctrl-C reaches it exactly once (through
the runner) and its children go with it. Time, sleeping and randomness are injectable
(``clock``, ``sleep``, ``rng``): tests never sleep.
"""

from __future__ import annotations

import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

from loki.breakers.breakers import Breakers, check_name
from loki.clock import Clock, SystemClock
from loki.errors import InvalidArgument, InvalidInput, LokiError
from loki.stopsignals import stop_requests

TAIL_BYTES = 64 * 1024
MAX_RETRY_AFTER = 3600.0
"""A Retry-After longer than an hour is not waited for in full (a bogus date must not hang a loop)."""
KILL_GRACE_SECONDS = 10.0
CIRCUIT_OPEN_EXIT = 75


class CommandNotFound(LokiError):
    exit_code = 127
    kind = "command_not_found"


class CommandNotExecutable(LokiError):
    exit_code = 126
    kind = "command_not_executable"


# -- policy ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """The reference's strategy: 5 s initial delay, x2, at most 300 s, 5 retries."""

    retries: int = 5
    initial_delay: float = 5.0
    max_delay: float = 300.0
    multiplier: float = 2.0
    jitter: float = 0.1
    """Fraction of each delay taken off at random: a delay lies in [(1 - jitter) * d, d]."""

    def __post_init__(self) -> None:
        checks = [
            ("retries", isinstance(self.retries, int) and self.retries >= 0, "a whole number >= 0"),
            ("initial-delay", _finite(self.initial_delay) and self.initial_delay >= 0, "a number of seconds >= 0"),
            ("max-delay", _finite(self.max_delay) and self.max_delay >= 0, "a number of seconds >= 0"),
            ("multiplier", _finite(self.multiplier) and self.multiplier >= 1, "a number >= 1"),
            ("jitter", _finite(self.jitter) and 0 <= self.jitter <= 1, "a fraction between 0 and 1"),
        ]
        for option, ok, expected in checks:
            if not ok:
                raise InvalidArgument(f"invalid --{option} {getattr(self, option.replace('-', '_'))!r}: "
                                      f"it must be {expected}", field=option)

    def nominal_delay(self, failures: int) -> float:
        """The wait after the ``failures``-th failure, before jitter: 5, 10, 20, 40, ... <= max_delay."""
        try:
            delay = self.initial_delay * self.multiplier ** (failures - 1)
        except OverflowError:
            return self.max_delay
        return min(self.max_delay, delay)

    def delay(self, failures: int, rng: random.Random) -> float:
        nominal = self.nominal_delay(failures)
        return nominal * (1 - self.jitter * rng.random())


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# -- rate limits -----------------------------------------------------------------------------------

_RATE_LIMIT = re.compile(
    r"rate[ _-]?limit"                                        # "rate limit", "rate-limited", RateLimitError
    r"|too many requests"                                     # the 429 reason phrase
    r"|\bHTTP/\d(?:\.\d)?\s+429\b"                            # a status line
    r"|\b(?:status|status_code|code|error|http)[\"']?\s*[:=]?\s*[\"']?429\b",  # status: 429, error 429
    re.IGNORECASE,
)
_HTTP_DATE = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun),\s*\d{1,2}\s+[A-Za-z]{3}\s+\d{4}\s+\d{2}:\d{2}:\d{2}\s+GMT"
_RETRY_AFTER = re.compile(
    r"\bretry[-_ ]after[\"']?\s*(?:[:=]\s*[\"']?|\s+)(?P<value>" + _HTTP_DATE + r"|\d+(?:\.\d+)?)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class RateLimit:
    evidence: str
    """The text that gave it away (``429``, ``rate limit``, ``Retry-After: 30``)."""
    retry_after: float | None
    """Seconds the server asked us to wait, when it said."""


def detect_rate_limit(output: str, now: datetime) -> RateLimit | None:
    """Rate limiting in a command's output, and the Retry-After it gives (the last one), if any."""
    waits = list(_RETRY_AFTER.finditer(output))
    match = _RATE_LIMIT.search(output)
    if match is None and not waits:
        return None
    retry_after: float | None = None
    if waits:
        retry_after = _retry_after_seconds(waits[-1].group("value"), now)
    evidence = match.group(0) if match is not None else waits[-1].group(0)
    return RateLimit(evidence=evidence.strip(), retry_after=retry_after)


def _retry_after_seconds(value: str, now: datetime) -> float | None:
    if value[0].isdigit():
        return float(value)
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - now).total_seconds())


# -- results ---------------------------------------------------------------------------------------


@dataclass
class Attempt:
    number: int
    exit_code: int
    rate_limited: bool = False
    retry_after: float | None = None


@dataclass
class Wait:
    reason: str
    """``backoff``, ``rate_limit`` or ``circuit_open``."""
    seconds: float


@dataclass
class RunResult:
    command: list[str]
    breaker: str | None
    exit_code: int = 0
    outcome: str = ""
    """``succeeded``, ``failed``, ``circuit_open`` or ``interrupted``."""
    attempts: list[Attempt] = field(default_factory=list)
    waits: list[Wait] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command, "breaker": self.breaker, "exit_code": self.exit_code, "outcome": self.outcome,
            "attempts": [vars(a) for a in self.attempts], "waits": [vars(w) for w in self.waits],
            "waited_seconds": round(sum(w.seconds for w in self.waits), 3),
        }


# -- the runner ------------------------------------------------------------------------------------

Writer = Callable[[bytes], None]
Launcher = Callable[[list[str]], "subprocess.Popen[bytes]"]
"""Starts one attempt of the command: its stdout and stderr piped, leading its own process group."""


def launch_in_own_session(command: list[str]) -> subprocess.Popen[bytes]:
    """The default :data:`Launcher`: the command in a session (and process group) of its own."""
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def stream_writer(stream: IO[str]) -> Writer:
    """Write raw bytes to a text stream's buffer (or decoded, for a StringIO), flushing each time."""

    def write(data: bytes) -> None:
        buffer = getattr(stream, "buffer", None)
        stream.flush()
        if buffer is not None:
            buffer.write(data)
            buffer.flush()
        else:
            stream.write(data.decode("utf-8", "replace"))
            stream.flush()

    return write


class Runner:
    """Run ``command`` until it succeeds, the retries are used up, the breaker stays open, or a
    signal stops it. ``sleep``, ``clock`` and ``rng`` are injectable; nothing here prints --
    progress goes to ``notify``, the command's output to ``stdout``/``stderr`` writers. ``launch``
    starts each attempt (``loki work`` puts its guard around the command, loki/work/guard.py)."""

    def __init__(
        self,
        command: list[str],
        *,
        policy: RetryPolicy | None = None,
        breakers: Breakers | None = None,
        breaker: str | None = None,
        sleep: Callable[[float], None] | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        stdout: Writer | None = None,
        stderr: Writer | None = None,
        notify: Callable[[str], None] | None = None,
        kill_grace: float = KILL_GRACE_SECONDS,
        launch: Launcher | None = None,
    ) -> None:
        if not command:
            raise InvalidArgument("no command given: loki run [OPTIONS] -- CMD [ARGS]...")
        if breaker is not None:
            check_name(breaker)
            if breakers is None:
                raise InvalidInput("a breaker name needs a Breakers instance")
        self.command = list(command)
        self.policy = policy or RetryPolicy()
        self.breaker = breaker
        self._gate = breakers if breaker is not None else None
        self.clock = clock or (breakers.store.clock if breakers is not None else SystemClock())
        self.rng = rng or random.Random()
        self._sleep = sleep or self._interruptible_sleep
        self._stdout = stdout or stream_writer(sys.stdout)
        self._stderr = stderr or stream_writer(sys.stderr)
        self._notify = notify or (lambda message: None)
        self.kill_grace = kill_grace
        self._launch = launch or launch_in_own_session
        self._stop = threading.Event()
        self._wake = threading.Event()
        """Set when a stop is requested or the running command exits: :meth:`_reap` waits on it."""
        self._stop_signal: int | None = None
        self._child: subprocess.Popen[bytes] | None = None
        self._tails = (bytearray(), bytearray())  # the last TAIL_BYTES of the command's stdout, stderr

    # public ----------------------------------------------------------------------------------

    def run(self) -> RunResult:
        resolve(self.command)
        with stop_requests(self.request_stop):
            return self._loop()

    def run_unguarded(self) -> RunResult:
        """:meth:`run` for a caller that owns SIGINT/SIGTERM itself (``loki work``, which stops more
        than the command) and passes them on to :meth:`request_stop`."""
        resolve(self.command)
        return self._loop()

    def request_stop(self, signum: int) -> None:
        """What SIGINT/SIGTERM do: stop retrying and pass the signal on to the command."""
        if self._stop_signal is None:
            self._stop_signal = signum
        child = self._child
        if child is not None and child.returncode is None:
            signal_group(child, signum)
        # Woken only after the signal is passed on: a reaper woken first could end a zero grace period with the
        # SIGKILL before the command was ever sent this signal.
        self._stop.set()
        self._wake.set()

    def stopped(self) -> bool:
        """Has SIGINT/SIGTERM (or :meth:`request_stop`) asked the runner to stop?"""
        return self._stop_signal is not None

    # the loop --------------------------------------------------------------------------------


    def _loop(self) -> RunResult:
        result = RunResult(self.command, self.breaker)
        retries = self.policy.retries
        waits_left = retries
        failures = 0
        while True:
            if self.stopped():
                return self._interrupted(result)
            if self._gate is not None and self.breaker is not None:
                decision = self._gate.check(self.breaker)
                if not decision.allowed:
                    if waits_left == 0:
                        self._notify(f"{decision.reason}; no retries left, giving up (exit {CIRCUIT_OPEN_EXIT})")
                        return _finish(result, CIRCUIT_OPEN_EXIT, "circuit_open")
                    waits_left -= 1
                    seconds = float(decision.retry_after)
                    self._notify(f"{decision.reason}; waiting {seconds:g}s (retry {retries - waits_left} of "
                                 f"{retries})")
                    self._wait(result, "circuit_open", seconds)
                    continue
            attempt = Attempt(len(result.attempts) + 1, self._execute())
            result.attempts.append(attempt)
            if self.stopped():  # a signal arrived while the command ran: its exit says nothing about the breaker
                return self._interrupted(result)
            if attempt.exit_code == 0:
                if self._gate is not None and self.breaker is not None:
                    self._gate.record_success(self.breaker)
                return _finish(result, 0, "succeeded")
            failures += 1
            limit = detect_rate_limit(self._tail_text(), self.clock.now())
            if limit is not None:
                attempt.rate_limited, attempt.retry_after = True, limit.retry_after
            if self._gate is not None and self.breaker is not None:
                self._gate.record_failure(self.breaker, error=self._error_text(attempt.exit_code, limit))
            if waits_left == 0:
                self._notify(f"attempt {attempt.number} failed with exit {attempt.exit_code}; no retries left, "
                             f"giving up")
                return _finish(result, attempt.exit_code, "failed")
            waits_left -= 1
            if limit is not None and limit.retry_after is not None:
                reason, seconds = "rate_limit", min(limit.retry_after, MAX_RETRY_AFTER)
                why = f"rate limited ({limit.evidence}); the server asks for {limit.retry_after:g}s"
            else:
                reason, seconds = ("rate_limit" if limit else "backoff"), self.policy.delay(failures, self.rng)
                why = f"rate limited ({limit.evidence})" if limit else f"failed with exit {attempt.exit_code}"
            self._notify(f"attempt {attempt.number} {why}; retrying in {seconds:.1f}s (retry "
                         f"{retries - waits_left} of {retries})")
            self._wait(result, reason, seconds)

    def _wait(self, result: RunResult, reason: str, seconds: float) -> None:
        result.waits.append(Wait(reason, seconds))
        if self._stop_signal is None:
            self._sleep(seconds)

    def _interrupted(self, result: RunResult) -> RunResult:
        signum = self._stop_signal or signal.SIGINT
        name = signal.Signals(signum).name
        self._notify(f"stopped by {name}; not retrying")
        return _finish(result, 128 + signum, "interrupted")

    def _interruptible_sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)

    @staticmethod
    def _error_text(exit_code: int, limit: RateLimit | None) -> str:
        text = f"exit {exit_code}"
        if limit is not None:
            text += f"; rate limited ({limit.evidence})"
        return text

    # one attempt -----------------------------------------------------------------------------

    def _execute(self) -> int:
        """Run the command once, teeing its output; its exit code (128+N if killed by signal N)."""
        self._tails = (bytearray(), bytearray())
        try:
            child = self._launch(self.command)
        except FileNotFoundError:
            raise CommandNotFound(f"command not found: {self.command[0]}", command=self.command[0]) from None
        except PermissionError:
            raise CommandNotExecutable(f"cannot execute {self.command[0]}: permission denied",
                                       command=self.command[0]) from None
        self._child = child
        if self._stop_signal is not None:  # the signal came while the command was starting
            signal_group(child, self._stop_signal)
        assert child.stdout is not None and child.stderr is not None
        pumps = [
            threading.Thread(target=_pump, args=(child.stdout, self._stdout, self._tails[0]), daemon=True),
            threading.Thread(target=_pump, args=(child.stderr, self._stderr, self._tails[1]), daemon=True),
        ]
        for pump in pumps:
            pump.start()
        code = self._reap(child)
        for pump in pumps:
            # A background grandchild may hold the pipes open forever: do not wait for it.
            pump.join(timeout=5)
        self._child = None
        return code if code >= 0 else 128 - code

    def _reap(self, child: subprocess.Popen[bytes]) -> int:
        """Wait for the command; after a stop signal, SIGKILL its group once the grace period is over.

        Waits for the exit without reaping it (``waitid`` with ``WNOWAIT``, in a thread), so the
        escalation happens here, while the child is unreaped (its process group id cannot have been
        reused yet), and the exit is seen the moment it happens: polling ``wait(timeout=...)`` noticed
        it up to 50 ms late, for every attempt and every agent ``loki work`` runs.
        """
        if not hasattr(os, "waitid"):  # no waitid (macOS): poll, as checks.py reaps there
            return self._reap_polling(child)
        exited = threading.Event()

        def wait_for_exit() -> None:
            with suppress(ChildProcessError, InterruptedError):
                os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
            exited.set()
            self._wake.set()

        threading.Thread(target=wait_for_exit, daemon=True).start()
        deadline: float | None = None
        while not exited.is_set():
            timeout: float | None = None
            if self._stop_signal is not None:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.kill_grace
                if now >= deadline:
                    signal_group(child, signal.SIGKILL)
                    exited.wait()
                    break
                timeout = deadline - now
            # Woken by the exit or by request_stop (a signal handler runs while this thread waits).
            self._wake.wait(timeout)
            self._wake.clear()  # what woke it is looked at above, before the next wait
        return child.wait()  # reaped here, after its last signal

    def _reap_polling(self, child: subprocess.Popen[bytes]) -> int:
        deadline: float | None = None
        while True:
            try:
                return child.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                pass
            if self._stop_signal is not None:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.kill_grace
                elif now >= deadline:
                    signal_group(child, signal.SIGKILL)

    def _tail_text(self) -> str:
        out, err = self._tails
        return (bytes(err) + b"\n" + bytes(out)).decode("utf-8", "replace")

    def output_tail(self) -> tuple[bytes, bytes]:
        """The last 64 KiB of the last attempt's stdout and stderr, as the command wrote them."""
        out, err = self._tails
        return bytes(out), bytes(err)

    # signals ---------------------------------------------------------------------------------



def _finish(result: RunResult, exit_code: int, outcome: str) -> RunResult:
    result.exit_code = exit_code
    result.outcome = outcome
    return result


def _pump(source: IO[bytes], write: Writer, tail: bytearray) -> None:
    """Copy one of the command's streams to ours as it comes, keeping the last TAIL_BYTES."""
    fd = source.fileno()
    writing = True
    try:
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            if writing:
                try:
                    write(chunk)
                except (OSError, ValueError):
                    writing = False  # our output is gone (closed pipe); keep draining so the command never blocks
            tail.extend(chunk)
            if len(tail) > TAIL_BYTES:
                del tail[: len(tail) - TAIL_BYTES]
    finally:
        source.close()


def signal_group(child: subprocess.Popen[bytes], signum: int) -> None:
    """Signal the command and everything it started (it leads its own process group)."""
    try:
        os.killpg(child.pid, signum)
    except (ProcessLookupError, PermissionError):
        with suppress(OSError):  # already gone
            child.send_signal(signum)


def resolve(command: list[str]) -> str:
    """The executable ``command`` would run; :class:`CommandNotFound` (127) or
    :class:`CommandNotExecutable` (126) before anything else happens."""
    if not command:
        raise InvalidArgument("no command given: loki run [OPTIONS] -- CMD [ARGS]...")
    program = command[0]
    if os.sep in program:
        if not os.path.exists(program):
            raise CommandNotFound(f"command not found: {program}", command=program)
        if os.path.isdir(program) or not os.access(program, os.X_OK):
            raise CommandNotExecutable(f"cannot execute {program}: not an executable file", command=program)
        return program
    found = shutil.which(program)
    if found is None:
        raise CommandNotFound(f"command not found: {program} (not in PATH)", command=program)
    return found
