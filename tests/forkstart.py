"""``python -m loki ARGS`` as a real process, forked from a warm interpreter instead of started cold.

A test that runs loki in a real process (the bad-input corpus, the hooks as an agent runs them) wants what
only a process has: its own exit code, stdin and stdout as bytes through pipes, its own resource limits,
``os._exit`` at a crash point, nothing shared with the test's interpreter. Starting ``python -m loki`` cold
for each costs ~70 ms of CPU, most of it the interpreter's start and loki's imports (typer, rich, jsonschema),
and the fast lane ran ~600 of them. So each pytest process keeps one helper process (:func:`_serve`) that has
imported them once; for each run it forks a child which makes itself what ``subprocess.run`` would have made
-- the working directory, the environment, stdin (a pipe holding the input), stdout and stderr (files the
caller reads), the file-size limit -- and then runs :func:`loki.entry.main` with the arguments, as
``python -m loki`` does, ending through the interpreter's ordinary exit (flushing, ``atexit``).

What a fork does not reproduce is the cold start itself: which modules an entry imports is tested by the
tests that start their own interpreter (tests/hooks/test_hooks.py's import probe, tests/architecture/), and
the cold-start cost by bench/. A run whose environment changes how an interpreter starts (``PYTHON*``,
``LC_*``, ``LANG``: stdout's encoding is fixed at start), or that comes while another thread of the test is
using the helper, starts a cold process instead (:func:`run` decides; the answer is the same).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

# Warmed in the helper before any fork: the CLI (typer, rich), the hooks' entry and handlers, the stores.
PRELOAD = ("loki.entry", "loki.cli.app", "loki.hooks.boundary", "loki.hooks.handlers", "loki.storage.store",
           "loki.storage.schema",
           # and what the forked runs of the fast lane then imported lazily, each run again: the store's lock
           # (portalocker, logging: ~13 ms), the hooks' and the queue commands' domain modules. Measured over
           # 615 runs: ~27 ms of CPU a run before, ~16 ms after. None reads the environment at import.
           "portalocker", "logging", "resource", "loki.argv", "loki.storage.opening", "loki.config",
           "loki.text.redact", "loki.text.textsafe", "loki.regularfile", "loki.tasks.record", "loki.strikes.strikes",
           "loki.hooks.tooloutcome", "loki.queue.queue", "loki.memory.memory", "loki.storage.filetasks",
           "loki.cli.output", "loki.cli.common", "loki.cli.fast", "loki.cli.queue", "loki.leases.hotcopy",
           "loki.hooks.leasegate", "loki.tasks.usage", "loki.spend.budgets", "loki.signals.emit",
           "loki.breakers.breakers", "loki.hooks.gemini", "loki.hooks.codex", "loki.queue.escalations",
           "loki.tasks.verify", "loki.leases.leases", "loki.storage.moving", "loki.storage.backendof",
           "loki.text.errorscan", "typer._click.decorators")
_START_KEYS = ("PYTHON", "LC_", "LANG")
_HEADER = struct.Struct("!I")


@dataclass
class Done:
    returncode: int
    stdout: bytes
    stderr: bytes


class _Helper:
    def __init__(self) -> None:
        self.env = dict(os.environ)
        self.proc = subprocess.Popen([sys.executable, "-c", f"from tests.forkstart import _serve; _serve({PRELOAD!r})"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=_REPO, env=self.env)
        self.lock = threading.Lock()
        atexit.register(self.close)

    def close(self) -> None:
        """End the helper and reap it (so its children's CPU is counted with the test run's)."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait()

    def same_start(self, env: dict[str, str]) -> bool:
        def start(values: dict[str, str]) -> dict[str, str]:
            return {k: v for k, v in values.items() if k.startswith(_START_KEYS)}

        return start(env) == start(self.env)

    def call(self, request: dict[str, Any], timeout: float) -> tuple[int, int]:
        """(pid, wait status) of one forked run; the child is killed at ``timeout``."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        data = pickle.dumps(request)
        self.proc.stdin.write(_HEADER.pack(len(data)) + data)
        self.proc.stdin.flush()
        pid = _HEADER.unpack(_read_exactly(self.proc.stdout.fileno(), _HEADER.size, None))[0]
        try:
            status = _read_exactly(self.proc.stdout.fileno(), 4, timeout)
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            _read_exactly(self.proc.stdout.fileno(), 4, None)
            raise subprocess.TimeoutExpired(request["argv"], timeout) from None
        return pid, struct.unpack("!i", status)[0]


_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_helper: _Helper | None = None
_helper_pid: int | None = None


def _read_exactly(fd: int, size: int, timeout: float | None) -> bytes:
    got = b""
    while len(got) < size:
        if timeout is not None and not select.select([fd], [], [], timeout)[0]:
            raise TimeoutError
        chunk = os.read(fd, size - len(got))
        if not chunk:
            raise EOFError("the fork helper exited")
        got += chunk
    return got


def run(argv: list[str], *, input: bytes | None = None, cwd: str | os.PathLike[str] | None = None,
        env: dict[str, str] | None = None, timeout: float = 60, fsize_limit: int | None = None) -> Done:
    """``python -m loki ARGV`` in a real process (forked warm where it can be): exit code, stdout, stderr.

    ``fsize_limit``: RLIMIT_FSIZE for the process (SIGXFSZ ignored), as a full disk."""
    global _helper, _helper_pid
    full_env = dict(os.environ if env is None else env)
    if _helper is None or _helper_pid != os.getpid() or _helper.proc.poll() is not None:
        _helper, _helper_pid = _Helper(), os.getpid()
    helper = _helper
    if not helper.same_start(full_env) or not helper.lock.acquire(blocking=False):
        return _cold(argv, input=input, cwd=cwd, env=full_env, timeout=timeout, fsize_limit=fsize_limit)
    try:
        with tempfile.TemporaryDirectory(prefix="loki-fork-") as scratch:
            out, err = os.path.join(scratch, "out"), os.path.join(scratch, "err")
            request = {"argv": list(argv), "input": input, "cwd": os.fspath(cwd or os.getcwd()), "env": full_env,
                       "out": out, "err": err, "fsize": fsize_limit}
            _pid, status = helper.call(request, timeout)
            with open(out, "rb") as o, open(err, "rb") as e:
                return Done(os.waitstatus_to_exitcode(status), o.read(), e.read())
    finally:
        helper.lock.release()


def _cold(argv: list[str], *, input: bytes | None, cwd: str | os.PathLike[str] | None, env: dict[str, str],
          timeout: float, fsize_limit: int | None) -> Done:
    def limits() -> None:
        if fsize_limit is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            import resource

            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_limit, fsize_limit))

    done = subprocess.run([sys.executable, "-m", "loki", *argv], input=input, capture_output=True, cwd=cwd,
                          env=env, timeout=timeout, preexec_fn=limits if fsize_limit is not None else None)
    return Done(done.returncode, done.stdout, done.stderr)


# -- the helper process --------------------------------------------------------------------------------


def _serve(preload: tuple[str, ...]) -> None:
    """Read requests on stdin, fork one child per request, answer its pid and then its wait status."""
    import importlib

    for name in preload:
        importlib.import_module(name)
    import gc

    gc.freeze()  # the children do not collect (and so touch) the helper's objects
    requests, answers = sys.stdin.fileno(), sys.stdout.fileno()
    while True:
        try:
            size = _HEADER.unpack(_read_exactly(requests, _HEADER.size, None))[0]
        except EOFError:
            return  # the test process is gone
        request = pickle.loads(_read_exactly(requests, size, None))
        pid = os.fork()
        if pid == 0:
            _child(request)  # never returns: the interpreter exits with the command's code
        os.write(answers, _HEADER.pack(pid))
        _, status = os.waitpid(pid, 0)
        os.write(answers, struct.pack("!i", status))


def _child(request: dict[str, Any]) -> None:
    """Become ``python -m loki ARGV`` as subprocess.run(capture_output=True, input=...) would have started it."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    data = request["input"]
    if data is None:
        stdin = os.open(os.devnull, os.O_RDONLY)
    else:
        stdin, writer = os.pipe()
        if len(data) <= 60_000:  # fits a pipe's buffer
            os.write(writer, data)
            os.close(writer)
        else:
            def feed() -> None:
                try:
                    with open(writer, "wb") as pipe:
                        pipe.write(data)
                except BrokenPipeError:  # the command stopped reading, as a real process may
                    pass

            threading.Thread(target=feed, daemon=True).start()
    os.dup2(stdin, 0)
    os.dup2(os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)
    os.dup2(os.open(request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)
    if request["fsize"] is not None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (request["fsize"], request["fsize"]))
    sys.argv = [os.path.join(_REPO, "loki", "__main__.py"), *request["argv"]]
    sys.path[0] = request["cwd"]  # as `python -m` puts the working directory first
    from loki.entry import main

    code: Any = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    except BaseException:  # as the interpreter reports an uncaught exception
        import traceback

        traceback.print_exc()
        code = 1
    # The interpreter's exit without its teardown of every module the helper loaded (most of a forked run's
    # CPU): what `python -m loki` does at exit that a command can see -- atexit functions, flushed streams.
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    if code is None:
        code = 0
    elif not isinstance(code, int):
        sys.stderr.write(f"{code}\n")
        sys.stderr.flush()
        code = 1
    os._exit(code & 0xFF)
