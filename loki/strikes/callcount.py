"""How many tool calls a branch has made: the clock that resolution confidence is measured in.

Error memory links a failure streak to the success that ended it with a confidence that falls
with the number of calls in between (docs/memory.md). Counting them needs one write per tool call,
and the PostToolUse hook runs after every call of every agent, so the counter is the cheapest
durable counter there is: ``state/errors/<branch>.calls``, one byte appended per call with
``O_APPEND`` (atomic between processes, no lock), its size being the count.

This is the second documented exception to "only loki/storage/store.py writes state" (docs/storage.md):
the counter is a hint, so it is neither locked, validated nor fsynced. A lost byte (a crash, two
agents at once) only nudges one confidence. It is only advanced while the branch has strike state
(a streak may end) and by every failure, so a branch without failures never writes it; it grows
by one byte per call while streaks are open (a million calls: one megabyte).
"""

from __future__ import annotations

import os

from loki.storage import layout

SUFFIX = ".calls"


def counter_file(branch_file_name: str) -> str:
    """The counter of a branch, relative to the root (``state/errors/<name>.calls``)."""
    return f"{layout.STRIKES_DIR}/{branch_file_name}{SUFFIX}"


def tick(root: str, branch_file_name: str) -> int | None:
    """Count one call; return its number (1 for the first), or None if the counter cannot be written."""
    path = os.path.join(root, *counter_file(branch_file_name).split("/"))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError:
        return None
    try:
        if os.fstat(fd).st_nlink > 1:  # hard-linked (perhaps out of .loki/): never write through it
            return None
        os.write(fd, b".")
        return os.fstat(fd).st_size
    except OSError:
        return None
    finally:
        os.close(fd)


def current(root: str, branch_file_name: str) -> int:
    """Calls counted so far (0 when the counter does not exist)."""
    try:
        st = os.lstat(os.path.join(root, *counter_file(branch_file_name).split("/")))
    except OSError:
        return 0
    return st.st_size
