"""The file side of ``loki migrate`` (loki/admin/migrate.py): the marker written and removed, the files set
aside or cleared. Here because they touch the tree's files, and only the storage layer does (docs/storage.md).
"""

from __future__ import annotations

import json
import os

from loki.storage import layout
from loki.storage.moving import marker_path
from loki.storage.store import atomic_write, crashpoint, fsync_dir

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any


def write_marker(root: str, doc: dict[str, Any]) -> None:
    """Write the marker (loki/storage/moving.py) durably: temp file, fsync, rename, fsync of config/."""
    os.makedirs(os.path.dirname(marker_path(root)), exist_ok=True)
    atomic_write(marker_path(root), json.dumps(doc, sort_keys=True).encode("utf-8"))


def remove_marker(root: str) -> None:
    try:
        os.unlink(marker_path(root))
    except FileNotFoundError:
        return
    fsync_dir(os.path.dirname(marker_path(root)))


def clear_files(found: str) -> None:
    """Remove a file copy of a database's state (an interrupted or failed ``migrate --to files``)."""
    import shutil

    for name in layout.TREE_STATE:
        path = os.path.join(found, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)
    fsync_dir(found)


def set_aside_files(found: str, name: str) -> str | None:
    """Move the tree's state files into ``name`` under the tree (a move to a database); each rename durable and
    safe to repeat after a kill. The directory's path, or None when there was nothing to set aside (the source
    was a database) and it is gone again."""
    set_aside = os.path.join(found, name)
    os.makedirs(set_aside, exist_ok=True)
    fsync_dir(found)
    for entry in layout.TREE_STATE:
        path = os.path.join(found, entry)
        if os.path.lexists(path):
            crashpoint("migrate-set-aside")
            os.rename(path, os.path.join(set_aside, entry))
            fsync_dir(found)
    fsync_dir(set_aside)
    if not os.listdir(set_aside):
        os.rmdir(set_aside)  # the source was a database: nothing was set aside
        return None
    return set_aside
