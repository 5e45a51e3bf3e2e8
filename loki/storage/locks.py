"""Permanent lock files (docs/design.md §3 rule 1).

A lock file is never the data file, and is never deleted or replaced: deleting a
lock file while someone waits on it lets two processes "hold" two different
inodes. Locking is portalocker's (``flock`` on POSIX), always with a timeout.

While held, the lock file records who holds it (pid, command, host, since) so a
timeout can name the holder, and the digests of the files loki last wrote under
it, so a reader can tell a file loki wrote from one somebody edited (rule 5).
That record is a hint, not a source of truth: if it is missing or torn the only
cost is a full validation.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from loki.errors import LockTimeout, StateFileError, describe_os_error, os_error_hint

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

DEFAULT_TIMEOUT = 10.0


def describe_command() -> str:
    """The holder's program and command words (``loki queue fail ...``) for the lock record.

    Only words that name a command are kept, never an option's value or a free argument: the
    record stays in the lock file after the holder is gone, and a command line can carry a secret
    (``--error "$(cat .env)"``, ``loki run -- mysql -pPW``). Redacting here would cost every lock
    taken on a hot path the redactor's import.
    """
    words = [os.path.basename(sys.argv[0]) if sys.argv else "python"]
    previous = ""
    for word in sys.argv[1:]:
        if word.isascii() and word[:1].islower() and all(c.islower() or c == "-" for c in word) \
                and not previous.startswith("-") and len(word) <= 40:
            words.append(word)
        elif words[-1] != "...":
            words.append("...")
        previous = word
    text = " ".join(words)
    return text if len(text) <= 200 else text[:197] + "..."


def read_lock_record(path: str) -> dict[str, Any]:
    """The holder/digest record in a lock file; ``{}`` when absent or unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return {}
    try:
        data = os.read(fd, 1 << 20)
    finally:
        os.close(fd)
    try:
        record = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return {}
    return record if isinstance(record, dict) else {}


def holder_pids(path: str) -> list[int] | None:
    """The pids holding a lock on the file at ``path`` right now, as the kernel reports them.

    Linux lists every lock in ``/proc/locks`` by device and inode; holders are its plain lines
    (``->`` lines are waiters). None where the system cannot tell (no ``/proc/locks``).
    """
    try:
        st = os.stat(path)
        with open("/proc/locks", "rb") as f:
            table = f.read(1 << 22)
    except OSError:
        return None
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}".encode()
    pids = []
    for line in table.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[1] != b"->" and fields[5] == wanted and fields[4].isdigit():
            pids.append(int(fields[4]))
    return pids


def _process_command(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read(4096).split(b"\0")
    except OSError:
        return None
    text = " ".join(a.decode("utf-8", "replace") for a in argv if a)
    return text if len(text) <= 200 else text[:197] + "..."


def current_holder(path: str) -> dict[str, Any]:
    """Who holds the lock at ``path`` now, naming only what the OS confirms.

    The record in the lock file names the last loki process that took the lock, which may have
    released it long ago, or died, while something else (not loki) holds it now. So the record's
    details (command, host, since) are used only for a pid the kernel says holds the lock; another
    verified holder is named by pid and its command line; ``{}`` when the OS cannot tell.
    """
    pids = holder_pids(path)
    if not pids:
        return {}
    pid = pids[0]
    record = read_lock_record(path).get("holder")
    if isinstance(record, dict) and record.get("pid") == pid and record.get("host") == os.uname().nodename:
        return dict(record)
    command = _process_command(pid)
    return {"pid": pid, **({"command": command} if command else {})}


def describe_holder(holder: dict[str, Any]) -> str:
    """``pid N (command) on host since T``, or what can be said of an unverified holder."""
    if not holder:
        return "held by a process this system cannot name"
    text = f"held by pid {holder.get('pid')}"
    if holder.get("command"):
        text += f" ({holder['command']!s})"
    if holder.get("host"):
        text += f" on {holder['host']}"
    if holder.get("since"):
        text += f" since {holder['since']}"
    return text


class _Expired(Exception):
    pass


def _try_lock(portalocker: Any, handle: Any) -> bool:
    try:
        portalocker.lock(handle, portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING)
        return True
    except portalocker.exceptions.LockException:
        return False


def _wait_with_alarm(portalocker: Any, handle: Any, timeout: float) -> bool | None:
    """Block in the kernel until the lock is free, bounded by a SIGALRM timer.

    A blocked waiter is woken the moment the holder releases, where a poller would
    keep losing the race to a holder that releases and re-acquires in a loop. Returns
    None when a timer cannot be used here (not the main thread, the application
    already uses SIGALRM, or SIGALRM is blocked), and the caller polls instead.

    A blocked SIGALRM (the signal mask is inherited through exec: a launcher that blocks
    it passes that on) would never interrupt the wait: the timeout would not bound it, and
    the process would wait for as long as the holder holds the lock.
    """
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return None
    if signal.getitimer(signal.ITIMER_REAL)[0] > 0:
        return None
    if hasattr(signal, "pthread_sigmask") and signal.SIGALRM in signal.pthread_sigmask(signal.SIG_BLOCK, ()):
        return None
    if signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, signal.SIG_IGN, None):
        return None

    def expire(signum: int, frame: Any) -> None:
        raise _Expired

    previous = signal.signal(signal.SIGALRM, expire)
    try:
        signal.setitimer(signal.ITIMER_REAL, max(timeout, 0.001))
        portalocker.lock(handle, portalocker.LockFlags.EXCLUSIVE)
        return True
    except _Expired:
        # The timer may have fired just after the lock was granted: ask once more (taking a
        # lock this descriptor already holds succeeds) rather than report a timeout wrongly.
        return _try_lock(portalocker, handle)
    finally:
        # Disarm before restoring the old handler: an armed timer under SIG_DFL kills the process.
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _wait_by_polling(portalocker: Any, handle: Any, deadline: float) -> bool:
    delay = 0.0002
    while time.monotonic() < deadline:
        time.sleep(delay)
        if _try_lock(portalocker, handle):
            return True
        delay = min(delay * 2, 0.002)
    return _try_lock(portalocker, handle)


def in_use(path: str) -> bool:
    """Whether some holder has the lock at ``path`` right now (this process's own locks included).

    Probes with a non-blocking lock that is dropped at once, and never creates the lock file.
    """
    import portalocker

    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    with os.fdopen(fd, "r+b", buffering=0) as handle:  # closing it drops the probe's lock
        return not _try_lock(portalocker, handle)


def holder(path: str) -> dict[str, Any] | None:
    """The record of whoever holds the lock at ``path`` right now, or None when nobody does.

    Probes with a SHARED non-blocking lock on a read-only descriptor, dropped at once: asking
    (``loki status``) never writes to the lock file nor looks like a holder for longer than the
    probe. ``{}`` when it is held but its record cannot be read.
    """
    import portalocker

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb", buffering=0) as handle:
        try:
            portalocker.lock(handle, portalocker.LockFlags.SHARED | portalocker.LockFlags.NON_BLOCKING)
        except portalocker.exceptions.LockException:
            found = read_lock_record(path).get("holder")
            return dict(found) if isinstance(found, dict) else {}
        portalocker.unlock(handle)
    return None


_QUEUES: dict[str, threading.Lock] = {}
_QUEUES_LOCK = threading.Lock()


def _queue_of(path: str) -> threading.Lock:
    """This process's lock for the lock file at ``path``: its threads take it before the flock (see acquire)."""
    key = os.path.abspath(path)
    with _QUEUES_LOCK:
        found = _QUEUES.get(key)
        if found is None:
            found = _QUEUES[key] = threading.Lock()
        return found


class FileLock:
    """An exclusive lock on a permanent lock file, taken with a timeout.

    ``flock`` locks belong to an open file description, so two FileLock objects on
    the same path exclude each other even inside one process.
    """

    def __init__(self, path: str, timeout: float = DEFAULT_TIMEOUT, display_path: str | None = None) -> None:
        self.path = path
        self.display_path = display_path or path
        self.timeout = timeout
        self._fd: int | None = None
        self._queue = _queue_of(path)
        self.record: dict[str, Any] = {}

    @property
    def held(self) -> bool:
        return self._fd is not None

    def confirm(self) -> bool:
        """Whether the lock is still ours: a flock lasts as long as its descriptor (nothing to ask)."""
        return self.held

    def acquire(self) -> FileLock:
        import portalocker  # deferred: ~50 ms of import that read-only commands never pay

        deadline = time.monotonic() + self.timeout
        queue = self._queue
        # Threads of one process (loki serve's hook threads) wait for the path here, woken at each release, and
        # only the first polls the flock: polling threads all racing for it starved some for seconds.
        if not queue.acquire(timeout=max(self.timeout, 0.001)):
            raise self._timeout_error()
        try:
            handle = os.fdopen(self._open(), "r+b", buffering=0, closefd=True)
        except BaseException:
            queue.release()
            raise
        try:
            if not _try_lock(portalocker, handle):
                left = max(deadline - time.monotonic(), 0.001)
                got = _wait_with_alarm(portalocker, handle, left)
                if got is None:  # no alarm available here (a thread, or the app owns SIGALRM)
                    got = _wait_by_polling(portalocker, handle, deadline)
                if not got:
                    raise self._timeout_error()
        except BaseException:
            handle.close()
            queue.release()
            raise
        self._handle = handle
        self._fd = handle.fileno()
        self.record = read_lock_record(self.path)
        self.write_record({
            "holder": {"pid": os.getpid(), "command": describe_command(), "host": os.uname().nodename,
                       "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
            "digests": self.record.get("digests", {}) if isinstance(self.record.get("digests"), dict) else {},
        })
        return self

    def _open(self) -> int:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except IsADirectoryError:
            raise StateFileError(self.display_path, "the lock file is a directory; loki needs a regular file "
                                 "here (move the directory away)") from None
        except OSError as exc:
            if exc.errno == 40:  # ELOOP: a symlink
                raise StateFileError(self.display_path, "the lock file is a symbolic link; refusing to follow it") \
                    from None
            raise StateFileError(self.display_path, f"cannot open lock file: {describe_os_error(exc)}",
                                 hint=os_error_hint(exc)) from None
        try:
            links = os.fstat(fd).st_nlink
        except OSError:
            links = 1
        if links > 1:
            # The holder record is written into the lock file in place: through a hard link it
            # would overwrite a file outside .loki/. Refused as a symbolic link is.
            os.close(fd)
            raise StateFileError(self.display_path, f"the lock file has {links} hard links; refusing to write "
                                 "through it (give it back its own file: `rm` it while no loki runs)")
        return fd

    def _timeout_error(self) -> LockTimeout:
        holder = current_holder(self.path)
        return LockTimeout(
            f"timed out after {self.timeout:g}s waiting for the lock {self.display_path}; {describe_holder(holder)}",
            lock=self.display_path,
            holder=holder,
            timeout=self.timeout,
        )

    def write_record(self, record: dict[str, Any]) -> None:
        """Replace the lock file's record in place (it is never replaced as a file).

        Best effort: the record is a hint (who holds the lock, which digests are loki's), so a
        full disk costs a less helpful timeout message or one full validation, never the lock.
        """
        assert self._fd is not None
        data = json.dumps(record, separators=(",", ":")).encode("utf-8")
        self.record = record
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, data, 0)
        except OSError:
            pass

    def release(self) -> None:
        if self._fd is None:
            return
        # Closing the descriptor drops the flock; the file itself stays forever.
        self._handle.close()
        self._fd = None
        self._queue.release()

    def __enter__(self) -> FileLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
