"""A read-only, lock-free look at strike state, for the hooks' hot path.

The exception to "all state goes through loki/storage/store.py" (docs/storage.md): ``loki hook
pre-tool-use`` runs before every tool call of every agent, and importing the store (schemas,
locks, clock: ~20 ms) would double its cost. It only *reads*: the strike file and the config are
replaced atomically by the store, so a reader without a lock sees a whole old or a whole new
file. It keeps the store's reading rules (no symlinks, regular files only, a size limit) and
never validates, writes, repairs or creates anything; a file it cannot use reads as "no strikes"
and the caller reports it. Everything that writes strike state uses :class:`loki.strikes.strikes.Strikes`.

On a tree whose state is in a database, the files it reads are this machine's copies
(:func:`hot_root`): importing a database driver would cost the hook more than its whole budget.
"""

from __future__ import annotations

import json
import os
import stat

from loki.storage import layout

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

MAX_BYTES = 8 * 1024 * 1024


class Unreadable(Exception):
    """A state file exists but cannot be used (its message names it and says why)."""


def hot_root(root: str) -> str:
    """Where the hot path reads strike state, hints and the settings: the tree itself, or, on a tree whose
    state is in a database, this machine's copies under ``.loki/cache/`` (kept by the hooks that
    connect: docs/postgres.md). One ``stat``; a file tree never has that directory."""
    cache = os.path.join(root, layout.LOCAL_CACHE_DIR)
    return cache if os.path.isdir(cache) else root


def strike_file(branch_file_name: str) -> str:
    """The strike file of a branch, relative to the root (``state/errors/<name>.json``)."""
    return f"{layout.STRIKES_DIR}/{branch_file_name}.json"


def any_json_file(root: str, rel_dir: str) -> bool:
    """Whether ``rel_dir`` under the tree holds any (non-hidden) ``.json`` file: the hot path's cheap
    "is there anything at all" test, one directory listing, before it reads or imports more."""
    try:
        names = os.listdir(os.path.join(root, *rel_dir.split("/")))
    except OSError:
        return False
    return any(name.endswith(".json") and not name.startswith(".") for name in names)


def any_strike_files(root: str) -> bool:
    """False when no branch has strike state at all (the common case: skip everything)."""
    return any_json_file(root, layout.STRIKES_DIR)


def read_json(root: str, rel: str) -> Any:
    """A state file's parsed content, or None if it does not exist. Raises :class:`Unreadable`."""
    path = os.path.join(root, *rel.split("/"))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Unreadable(f"{rel}: cannot be read ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Unreadable(f"{rel}: is not a regular file")
        if st.st_size > MAX_BYTES:
            raise Unreadable(f"{rel}: is {st.st_size} bytes, too large to be a strike file")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    try:
        return json.loads(b"".join(chunks).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Unreadable(f"{rel}: is not valid JSON ({exc}); run `loki validate`") from None


def read_config(root: str) -> dict[str, Any]:
    """``config/loki.json`` unvalidated, {} when absent or unusable (see :meth:`Tiers.from_config`)."""
    try:
        doc = read_json(root, layout.CONFIG)
    except Unreadable:
        return {}
    return doc if isinstance(doc, dict) else {}


def read_keys(root: str, branch_file_name: str) -> dict[str, Any]:
    """The ``keys`` of a branch's strike file ({} when there is none). Raises :class:`Unreadable`."""
    rel = strike_file(branch_file_name)
    doc = read_json(root, rel)
    if doc is None:
        return {}
    keys = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(keys, dict):
        raise Unreadable(f"{rel}: has no 'keys' object; run `loki validate`")
    return keys
