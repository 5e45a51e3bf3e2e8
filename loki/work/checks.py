"""``loki work``'s declared checks: run after the agent's command exited 0, before the task completes.

Each check (loki/tasks/verify.py: a command line, split as the shell splits words, run without one)
runs in ``loki work``'s directory (the agent's), with the agent's environment (the task's variables),
under the guard (loki/work/launch.py: a ``loki work`` killed with SIGKILL takes its check down), one
after the other; the first that fails ends the run. Each has a timeout: past it the check's whole
process group gets SIGKILL and the check fails as ``timeout`` (exit 124, as GNU ``timeout`` says).
Its output (stdout and stderr in the order they came) is kept bounded: its first and last
:data:`loki.tasks.verify.TAIL_CHARS` characters, secrets redacted.

A result is evidence (:meth:`CheckResult.evidence`): the command, exit code, duration, output tail
and the commit ``HEAD`` named when it ran. A failure becomes an ordinary failed attempt
(:func:`failure`), classified by the hooks' error reading (loki/text/errorscan.py), so the queue's
backoff, breakers, strikes and dead-letter apply unchanged.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections import deque

from loki.errors import InvalidArgument
from loki.tasks import verify
from loki.text.redact import redact
from loki.work.failure import QUEUE_ERROR_TYPES, Failure, last_meaningful

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import IO, Any

    from loki.work.launch import GuardedLauncher

KEEP_BYTES = 4 * verify.TAIL_CHARS
"""Of each end of a check's output held in memory while it runs (a test suite may print megabytes)."""
TIMEOUT_EXIT = 124
MAX_WAIT_SECONDS = 1.0
"""The longest single wait for a check: its exit and a stop request wake it at once; this bounds how late a
timeout is noticed when the timer is not the wall clock."""


class CheckResult:
    """One check's run."""

    __slots__ = ("command", "commit", "duration_seconds", "exit_code", "head", "interrupted", "tail", "timed_out")

    def __init__(self, command: str, exit_code: int, duration_seconds: float, head: str, tail: str,
                 commit: str | None, *, timed_out: bool = False, interrupted: bool = False) -> None:
        self.command = command
        self.exit_code = exit_code
        self.duration_seconds = duration_seconds
        self.head = head
        self.tail = tail
        self.commit = commit
        self.timed_out = timed_out
        self.interrupted = interrupted

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.interrupted

    def evidence(self) -> dict[str, Any]:
        item: dict[str, Any] = {"command": self.command, "exit_code": self.exit_code,
                                "duration_seconds": self.duration_seconds, "output_tail": self.tail,
                                "commit": self.commit}
        if self.timed_out:
            item["timed_out"] = True
        return item


class Checks:
    """Runs a task's checks; :meth:`request_stop` (another thread: a signal, the lease lost) kills the
    one running and ends the run."""

    def __init__(self, launcher: GuardedLauncher, *, timeout: float, timer: Callable[[], float] = time.monotonic,
                 cwd: str | None = None) -> None:
        self._launcher = launcher
        self._timeout = timeout
        self._timer = timer
        self._cwd = cwd
        self._stop = threading.Event()
        self._wake = threading.Event()
        """Set when the running check exits or a stop is requested: the wait ends at once (no polling)."""
        self.results: list[CheckResult] = []

    def request_stop(self, signum: int) -> None:
        """Kill the running check (SIGKILL to its group: a check holds nothing worth a grace period)."""
        self._stop.set()
        self._wake.set()

    def run(self, commands: Sequence[str]) -> list[CheckResult]:
        """Run ``commands`` in order until one fails (or a stop is requested); their results."""
        commit = verify.git_head(self._cwd)
        for command in commands:
            if self._stop.is_set():
                break
            result = self._one(command, commit)
            self.results.append(result)
            if not result.passed:
                break
        return self.results

    def _one(self, command: str, commit: str | None) -> CheckResult:
        started = self._timer()
        try:
            argv = verify.check_command(command, "check")
        except InvalidArgument as exc:  # a type default of the settings that is not a command line
            return CheckResult(command, 2, 0.0, exc.message, exc.message, commit)
        from loki.breakers.runner import signal_group

        output = _Output()
        try:
            process = self._launcher(argv, cwd=self._cwd)
        except OSError as exc:
            message = f"cannot start the check: {exc.strerror}"
            return CheckResult(command, 126, 0.0, message, message, commit)
        readers = [threading.Thread(target=output.read, args=(stream,), daemon=True)
                   for stream in (process.stdout, process.stderr) if stream is not None]
        for reader in readers:
            reader.start()
        exited = threading.Event()

        def wait() -> None:
            # Wait for the exit without reaping it: while the check is unreaped (a zombie) its process group
            # id cannot be reused, so its group may still be signalled (breakers/runner.py's rule). Only
            # this method reaps it, after its last signal.
            if hasattr(os, "waitid"):
                with contextlib.suppress(ChildProcessError, InterruptedError):
                    os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
            else:  # no waitid (macOS): reaped here, as before
                process.wait()
            exited.set()
            self._wake.set()

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        timed_out = interrupted = False
        deadline = started + self._timeout
        while not exited.is_set():
            left = deadline - self._timer()
            if left <= 0:
                timed_out = True
                signal_group(process, signal.SIGKILL)
                break
            if self._stop.is_set():
                interrupted = True
                signal_group(process, signal.SIGKILL)
                break
            self._wake.wait(min(left, MAX_WAIT_SECONDS))
            self._wake.clear()  # what woke it is looked at above, before the next wait
        if not timed_out and not interrupted:
            # The group's other members may hold the pipes open (a daemon it left): kill what is left,
            # before the check is reaped.
            signal_group(process, signal.SIGKILL)
        code = process.wait()  # reaped here, and only here
        waiter.join()
        for reader in readers:
            reader.join(timeout=5)
        duration = round(self._timer() - started, 3)
        if timed_out:
            output.note(f"loki work: the check was still running after {self._timeout:g}s: killed (its whole "
                        "process group)")
            code = TIMEOUT_EXIT
        elif code < 0:
            code = 128 - code
        head, tail = output.ends()
        return CheckResult(command, code, duration, redact(head), redact(tail), commit, timed_out=timed_out,
                           interrupted=interrupted)


def failure(result: CheckResult, ran: int, of: int) -> Failure:
    """The failed attempt a failed check makes: its class by the hooks' error reading; the message
    names the check and carries its output's head (and its tail when the output is longer)."""
    from loki.text.errorscan import scan

    text = result.head if result.head == result.tail else result.head + "\n" + result.tail
    found = scan(text, result.exit_code)
    error_class = "timeout" if result.timed_out else (found.error_class or "exit_status")
    detail = found.message or ""
    if found.pattern in (None, "exit_status") or not detail:
        detail = last_meaningful(result.tail) or f"exited with code {result.exit_code}"
    which = f"check {ran} of {of}" if of > 1 else "check"
    headline = redact(f"{which} {result.command!r} failed: exit {result.exit_code} ({error_class}): "
                      f"{detail}".splitlines()[0])
    parts = [headline]
    if result.head:
        parts.append(f"output (first lines):\n{result.head}")
    if result.tail and result.tail != result.head:
        parts.append(f"output (last lines):\n{result.tail}")
    return Failure(QUEUE_ERROR_TYPES.get(error_class, "other"), error_class, headline, "\n\n".join(parts))


class _Output:
    """A check's output, both streams as they come: its first and last :data:`KEEP_BYTES` bytes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._head = bytearray()
        self._tail: deque[bytes] = deque()
        self._tail_bytes = 0
        self._total = 0

    def read(self, stream: IO[bytes]) -> None:
        with stream:
            while True:
                chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
                if not chunk:
                    return
                self._add(chunk)

    def note(self, text: str) -> None:
        self._add(("\n" + text + "\n").encode())

    def _add(self, chunk: bytes) -> None:
        with self._lock:
            self._total += len(chunk)
            room = KEEP_BYTES - len(self._head)
            if room > 0:
                self._head += chunk[:room]
            self._tail.append(chunk)
            self._tail_bytes += len(chunk)
            while self._tail_bytes - len(self._tail[0]) >= KEEP_BYTES:
                self._tail_bytes -= len(self._tail.popleft())

    def ends(self) -> tuple[str, str]:
        with self._lock:
            whole = self._total <= KEEP_BYTES
            head = bytes(self._head).decode("utf-8", "replace")
            tail = b"".join(self._tail)[-KEEP_BYTES:].decode("utf-8", "replace")
        if whole:
            return verify.head_of(head), verify.tail(head)
        return verify.head_of(head), verify.tail(tail)
