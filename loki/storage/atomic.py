"""What the file store and the tree's administration (:mod:`loki.storage.treecheck`) both need, apart so that
the administration uses it without importing the store: the temp files' suffix, a directory's fsync, and why a
state file with other hard links is refused.
"""

from __future__ import annotations

import os

TEMP_SUFFIX = ".tmp"


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def hard_link_reason(links: int) -> str:
    """Why a state file with other hard links is refused (the same words everywhere)."""
    return (f"has {links} hard links: another name (perhaps outside .loki/) shares its content, and loki refuses "
            "to write through it as it refuses a symbolic link (`loki doctor --repair` gives it its own copy)")
