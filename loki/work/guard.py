"""The guard: runs an agent's command and takes it down with ``loki work`` if ``loki work`` dies.

``loki work`` holds a lease on the task while its command runs. Killed with SIGKILL, it can neither
renew the lease nor stop the command; the lease lapses and the task is requeued, so a command left
running would run the task a second time, alongside the agent that claims it next. The guard
closes that gap: it leads the command's process group and watches a pipe whose write end only
``loki work`` holds. The kernel closes that end when ``loki work`` dies, however it dies; the pipe
reads end-of-file, and the guard SIGKILLs the whole group (the command, what it started, itself).

While ``loki work`` lives the guard is invisible: the command inherits its stdin, stdout and stderr;
SIGINT and SIGTERM sent to the group reach the command, even one sent while the guard was starting it
(the guard ignores them and stays to report the outcome); the guard exits with the command's status,
or dies of the same signal. An exec failure is reported as a shell does: exit 127 (not found) or 126
(not executable).

Run as a script, ``python -I -S guard.py FD -- CMD [ARGS]...``, not imported: with ``-S`` the
interpreter starts in ~10 ms, and this file needs nothing beyond ``os``, ``select``, ``signal`` and
``sys``. Waiting costs nothing: SIGCHLD writes to a wake-up pipe, and one ``select`` waits for
either event.
"""

from __future__ import annotations

import errno
import os
import select
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
else:
    try:  # `signal` wraps this module in enums, which cost ~5 ms of import: a third of the guard's own start
        import _signal as signal
    except ImportError:  # not CPython
        import signal

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _exec(argv: list[str], watch_fd: int, wake: tuple[int, int], go: tuple[int, int], mask: set[int]) -> None:
    """In the forked child: the signal dispositions a command expects, then exec (never returns)."""
    try:
        # Ignored signals stay ignored across exec; Python also ignores SIGPIPE and SIGXFSZ at start-up.
        for sig in (*STOP_SIGNALS, signal.SIGCHLD, signal.SIGPIPE, getattr(signal, "SIGXFSZ", signal.SIGPIPE)):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        for fd in (watch_fd, *wake, go[1]):
            os.close(fd)
        os.read(go[0], 1)  # end-of-file once the guard has passed on the stop signals sent before this process was
        os.close(go[0])
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a stop signal held until now is delivered: at its default
        os.execvp(argv[0], argv)
    except OSError as exc:
        not_found = exc.errno in (errno.ENOENT, errno.ENOTDIR)
        os.write(2, f"loki work: {argv[0]}: {exc.strerror}\n".encode(errors="replace"))
        os._exit(127 if not_found else 126)
    finally:
        os._exit(127)


def _relay(status: int) -> None:
    """Leave as the command left: its exit code, or death by its signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # their disposition cannot be changed (nor needs to be)
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal that does not kill (SIGCHLD ...): its conventional code
    os._exit(os.waitstatus_to_exitcode(status))


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[2] != "--":
        os.write(2, b"usage: guard.py FD -- CMD [ARGS]...\n")
        os._exit(2)
    watch_fd = int(argv[1])
    command = argv[3:]
    if os.getpgrp() != os.getpid():  # started without a group of its own: make one, never kill the caller's
        os.setpgid(0, 0)
    # Stop signals are held (blocked), not ignored, until the command's process can take them. One sent to the
    # group before the fork reaches the guard alone: ignored, it was lost, and the command ran on until loki work's
    # grace period ran out and it SIGKILLed the group (exit 137 after 10 s, not 143 at once).
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    wake = os.pipe()
    os.set_blocking(wake[1], False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # a handler, so the wake-up fd is written
    signal.set_wakeup_fd(wake[1])
    go = os.pipe()
    child = os.fork()
    if child == 0:
        _exec(command, watch_fd, wake, go, mask)
    os.close(go[0])
    # Held here now: every stop signal sent before the fork (and maybe some sent since, which reached the child too).
    held = signal.sigpending() & set(STOP_SIGNALS)
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)  # discards the held ones
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    for sig in held:
        # The child holds its stop signals until `go` closes: a signal it got from the group as well merges with
        # this one (pending signals do not queue), so the command sees each once.
        os.kill(child, sig)
    os.close(go[1])
    while True:
        try:
            ready, _, _ = select.select([watch_fd, wake[0]], [], [])
        except InterruptedError:  # pragma: no cover - select retries itself (PEP 475)
            continue
        if watch_fd in ready and os.read(watch_fd, 1) == b"":
            # loki work is gone: nobody renews the lease, so nobody may go on working on the task.
            os.killpg(0, signal.SIGKILL)
        if wake[0] in ready:
            os.read(wake[0], 512)
            pid, status = os.waitpid(child, os.WNOHANG)
            if pid == child:
                _relay(status)


if __name__ == "__main__":
    main(sys.argv)
