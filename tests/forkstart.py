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
# Warmed too when installed (the `postgres` extra): the PostgreSQL store and its driver, which loki imports only when
# a tree is on PostgreSQL. psycopg's import is ~0.25 s of CPU, paid by every forked run on a database tree
# (`loki migrate --to postgresql://...` at each crash point, `loki init --database`, `loki validate`) and by each
# warm worker (:func:`spawn_module`). Runs on the files never touch them.
OPTIONAL_PRELOAD = ("psycopg", "loki.storage.postgres.store")
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
    for name in OPTIONAL_PRELOAD:
        with contextlib.suppress(ImportError):
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
    _exit_as_interpreter(code)


def _exit_as_interpreter(code: Any) -> None:
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


# -- warm workers the caller reads, kills and waits for ----------------------------------------------------
# The race and fault tests start `python -m tests.procs.<worker>` processes several at a time, read their output
# as it comes, SIGKILL them anywhere, and wait for them; the killed-clients PostgreSQL test starts 200 of them, each
# paying an interpreter start and the imports of loki's queue and psycopg (~0.3 s of CPU) before its first claim.
# :func:`spawn_module` forks each from a second helper (a zygote: the one above runs one child at a time) that
# has imported those once. The child is a real process with its own pid, pipes and connections: the caller kills
# it by pid; the zygote reaps it and reports its wait status.

ZYGOTE_PRELOAD = (*PRELOAD, "loki.storage.postgres.connect")


class Spawned:
    """A warm-forked ``python -m MODULE ARGS``: the part of ``subprocess.Popen(text=True, stdout=PIPE)`` the
    worker tests use (``pid``, ``stdout``, ``send_signal``, ``poll``, ``wait``, ``communicate``,
    ``returncode``); stderr goes to a file (``stderr`` reads it: all of it once the process has ended)."""

    def __init__(self, zygote: _Zygote, pid: int, stdout: Any, stderr: Any) -> None:
        # stderr: the file the process writes, unlinked (what it wrote so far; all of it once it ended)
        self._zygote, self.pid, self.stdout, self.stderr = zygote, pid, stdout, stderr
        self.returncode: int | None = None

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:  # not reaped yet, so the pid is still this process's
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def poll(self) -> int | None:
        if self.returncode is None:
            status = self._zygote.status(self.pid, 0)
            if status is not None:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            status = self._zygote.status(self.pid, timeout)
            if status is None:
                raise subprocess.TimeoutExpired(f"python -m ... (pid {self.pid})", timeout or 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Everything left on stdout (to its end: the process and its children closed it), then the exit."""
        out = None
        if self.stdout is not None:
            out = self.stdout.read()
            self.stdout.close()
        self.wait(timeout)
        text = self.stderr.read()
        self.stderr.close()
        return out, text


class _Zygote:
    def __init__(self) -> None:
        import socket

        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.env = dict(os.environ)
        start = f"from tests.forkstart import _zygote; _zygote({ZYGOTE_PRELOAD!r}, {theirs.fileno()})"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", start],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, cwd=_REPO, env=self.env, pass_fds=(theirs.fileno(),))
        theirs.close()
        self.lock = threading.Lock()
        self.exits: dict[int, int] = {}
        atexit.register(self.close)

    def close(self) -> None:
        """Closing the socket ends the zygote; its children are the caller's to kill (they are its workers)."""
        self.sock.close()
        if self.proc.poll() is None:
            self.proc.wait()

    def _receive(self, timeout: float | None) -> tuple[Any, ...]:
        if not select.select([self.sock], [], [], timeout)[0]:
            raise TimeoutError
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("the fork zygote exited")
        message: tuple[Any, ...] = pickle.loads(data)
        if message[0] == "exit":
            self.exits[message[1]] = message[2]
        return message

    def spawn(self, request: dict[str, Any], fds: list[int]) -> int:
        import socket

        with self.lock:
            socket.send_fds(self.sock, [pickle.dumps(request)], fds)
            while True:
                message = self._receive(60)
                if message[0] == "pid":
                    return int(message[1])

    def status(self, pid: int, timeout: float | None) -> int | None:
        """The wait status of ``pid`` once the zygote has reaped it; None if not within ``timeout``."""
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while pid not in self.exits:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    self._receive(left)
                except TimeoutError:
                    return None
            return self.exits.pop(pid)


def _start_of(env: dict[str, str]) -> dict[str, str]:
    """What of ``env`` sets how an interpreter starts, but PYTHONDONTWRITEBYTECODE: a forked child sets
    ``sys.dont_write_bytecode`` from its own environment (:func:`_module_child`), as a start would."""
    return {k: v for k, v in env.items() if k.startswith(_START_KEYS) and k != "PYTHONDONTWRITEBYTECODE"}


_zygote_proc: _Zygote | None = None
_zygote_pid: int | None = None


def spawn_module(module: str, args: list[str], *, cwd: str | os.PathLike[str] | None = None,
                 env: dict[str, str] | None = None, stdout: int = subprocess.PIPE,
                 text: bool = True) -> Spawned | subprocess.Popen[Any]:
    """``subprocess.Popen([python, "-m", module, *args], stdout=PIPE, stderr=PIPE, text=text)``, forked warm
    (``stdout=subprocess.DEVNULL``: its output thrown away, ``.stdout`` None).

    An environment that changes how an interpreter starts (see :func:`run`) gets a cold ``Popen`` instead."""
    global _zygote_proc, _zygote_pid
    full_env = dict(os.environ if env is None else env)
    where = os.fspath(cwd or _REPO)
    if _zygote_proc is None or _zygote_pid != os.getpid() or _zygote_proc.proc.poll() is not None:
        _zygote_proc, _zygote_pid = _Zygote(), os.getpid()
    zygote = _zygote_proc
    if _start_of(full_env) != _start_of(zygote.env):
        return subprocess.Popen([sys.executable, "-m", module, *args], cwd=where, env=full_env,
                                stdout=stdout, stderr=subprocess.PIPE, text=text)
    if stdout == subprocess.DEVNULL:
        reader, writer = None, os.open(os.devnull, os.O_WRONLY)
    else:
        reader, writer = os.pipe()
    handle, err_path = tempfile.mkstemp(prefix="loki-spawn-", suffix=".err")
    try:
        pid = zygote.spawn({"module": module, "argv": list(args), "cwd": where, "env": full_env}, [writer, handle])
    finally:
        os.close(writer)  # the child holds the only writer now: its end is the pipe's end
        os.close(handle)
    mode: dict[str, Any] = {"mode": "r", "errors": "replace"} if text else {"mode": "rb"}
    err = open(err_path, **mode)  # noqa: SIM115 (Spawned's stderr, closed by communicate)
    os.unlink(err_path)
    return Spawned(zygote, pid, None if reader is None else open(reader, **mode), err)


def _zygote(preload: tuple[str, ...], fd: int) -> None:
    """Fork a child per request; answer ("pid", pid) at once and ("exit", pid, status) when it is reaped."""
    import gc
    import importlib
    import socket

    for name in preload:
        importlib.import_module(name)
    for name in OPTIONAL_PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    gc.freeze()
    sock = socket.socket(fileno=fd)
    wake_reader, wake_writer = os.pipe()
    os.set_blocking(wake_writer, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that set_wakeup_fd wakes the select below
    signal.set_wakeup_fd(wake_writer, warn_on_full_buffer=False)
    children = 0
    while True:
        ready = select.select([sock, wake_reader], [], [])[0]
        if wake_reader in ready:
            os.read(wake_reader, 4096)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            children -= 1
            sock.send(pickle.dumps(("exit", pid, status)))
        if sock not in ready:
            continue
        data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, 2)
        if not data:
            return  # the caller is gone
        request = pickle.loads(data)
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for own in (sock.fileno(), wake_reader, wake_writer):
                os.close(own)
            _module_child(request, fds[0], fds[1])  # never returns
        for received in fds:
            os.close(received)
        children += 1
        sock.send(pickle.dumps(("pid", pid)))


def _module_child(request: dict[str, Any], out: int, err: int) -> None:
    """Become ``python -m MODULE ARGV`` as Popen(stdout=PIPE, stderr=file) from the request's cwd would have."""
    import runpy

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    os.close(err)
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    sys.argv = [request["module"], *request["argv"]]
    sys.path[0] = request["cwd"]
    code: Any = 0
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    _exit_as_interpreter(code)
