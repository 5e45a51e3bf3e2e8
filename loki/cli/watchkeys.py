"""Keys for the live view of ``loki watch``: the terminal in cbreak mode, read without blocking the loop.

:func:`cbreak` puts a terminal in cbreak mode (each key arrives at once, not echoed; Ctrl-C and
Ctrl-Z still send their signals) and puts the saved mode back on the way out, whatever the way
out is: a return, an exception, or a stop request from SIGINT/SIGTERM/SIGHUP, which the watcher
turns into a return. Only SIGKILL gets past it (``stty sane`` then).

:class:`KeyReader` reads the keys on a thread of its own, so the watcher's loop never waits for
a key: the thread waits in ``select`` (a tenth of a second at a time, so it notices the stop),
decodes what arrived (arrow and page keys are escape sequences) and calls ``on_key`` (the
watcher's ``wake``, which ends the loop's wait at once). The loop takes the keys with
:meth:`KeyReader.drain` after each cycle.
"""

from __future__ import annotations

import os
import select
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

SEQUENCES = {
    "\x1b[A": "up", "\x1b[B": "down", "\x1bOA": "up", "\x1bOB": "down",
    "\x1b[5~": "pageup", "\x1b[6~": "pagedown",
    "\x1b[H": "home", "\x1b[F": "end", "\x1bOH": "home", "\x1bOF": "end",
    "\x1b[1~": "home", "\x1b[4~": "end", "\x1b[7~": "home", "\x1b[8~": "end",
}


def decode(data: str) -> list[str]:
    """The keys in what one read returned: characters, or the names in :data:`SEQUENCES`.

    An escape sequence loki does not know (a function key) is dropped whole; a lone ESC is
    ``escape``.
    """
    keys: list[str] = []
    index = 0
    while index < len(data):
        if data[index] != "\x1b":
            keys.append(data[index])
            index += 1
            continue
        match = next((seq for seq in SEQUENCES if data.startswith(seq, index)), None)
        if match is not None:
            keys.append(SEQUENCES[match])
            index += len(match)
            continue
        end = index + 1
        if end < len(data) and data[end] in "[O":  # an unknown CSI/SS3 sequence: up to its final byte
            end += 1
            while end < len(data) and not ("@" <= data[end] <= "~"):
                end += 1
            index = end + 1
            continue
        keys.append("escape")
        index = end
    return keys


@contextmanager
def cbreak(fd: int) -> Iterator[None]:
    """The terminal on ``fd`` in cbreak mode inside; its previous mode back on every way out."""
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd, termios.TCSANOW)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


class KeyReader:
    """Keys from ``fd`` on a daemon thread, queued for :meth:`drain`."""

    POLL = 0.1

    def __init__(self, fd: int, on_key: Callable[[], None]) -> None:
        self.fd = fd
        self.on_key = on_key
        self._keys: deque[str] = deque()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loki-watch-keys", daemon=True)

    def __enter__(self) -> KeyReader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=1)

    def drain(self) -> list[str]:
        keys = []
        while self._keys:
            keys.append(self._keys.popleft())
        return keys

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self.fd], [], [], self.POLL)
                if not ready:
                    continue
                data = os.read(self.fd, 64)
            except (OSError, ValueError):  # the terminal went away: no more keys
                return
            if not data:
                return
            self._keys.extend(decode(data.decode("utf-8", "replace")))
            self.on_key()
