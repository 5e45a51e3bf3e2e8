"""Read a small file outside ``.loki/`` without ever blocking on it.

``.git/HEAD``, a worktree's ``.git`` file and ``.claude/settings.json`` belong to other tools, and
nothing stops them being a FIFO or a device: a plain ``open()`` of a FIFO blocks until a writer
comes, which would hang a hook (and the agent's session with it). So the file is opened with
``O_NONBLOCK`` and refused unless ``fstat`` says it is a regular file. (State files inside
``.loki/`` go through :mod:`loki.storage.store`, which does the same.)

Imports only ``errno``, ``os`` and ``stat``: the PreToolUse hook reads ``HEAD`` through here.
"""

from __future__ import annotations

import errno
import os
import stat


class NotRegularFile(OSError):
    """The path exists but is a FIFO, socket, device or directory."""


def read_regular(path: str, limit: int, *, own: bool = False) -> bytes:
    """Up to ``limit`` bytes of the regular file at ``path``.

    Raises :class:`FileNotFoundError` when it does not exist, :class:`NotRegularFile` when it is
    not a regular file, and :class:`OSError` when it cannot be read. ``own``: the file must be
    this name's own (a file someone else wrote there, such as ``loki work``'s result file): a
    symbolic link or a file with other hard links is refused (:class:`NotRegularFile`), so it
    cannot make a file elsewhere be read in its place.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (os.O_NOFOLLOW if own else 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if own and exc.errno == errno.ELOOP:
            raise NotRegularFile(f"{path} is a symbolic link, which loki does not follow") from None
        raise
    try:
        status = os.fstat(fd)
        mode = status.st_mode
        if own and stat.S_ISREG(mode) and status.st_nlink != 1:
            raise NotRegularFile(f"{path} has other links ({status.st_nlink} names for one file), which loki "
                                 "does not read")
        if not stat.S_ISREG(mode):
            kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                    else "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "not a regular file")
            raise NotRegularFile(f"{path} is {kind}, not a regular file")
        chunks = []
        size = 0
        while size < limit:
            chunk = os.read(fd, limit - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
