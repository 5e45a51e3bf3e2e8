"""Opening a tree's state: the file store, or the database its config names (docs/postgres.md).

A tree always has a ``.loki/`` directory on each machine (the hooks' local caches live there).
Its ``config/loki.json`` says where the state is: absent ``storage``, in the files beside it; with
``{"storage": {"backend": "postgresql", "database": URL}}``, in that database, shared by every machine
whose tree names it. ``LOKI_DATABASE_URL``, when set, replaces the saved URL (it may carry the
password the saved one never holds).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

    from loki.storage.state import StateStore

URL_ENV = "LOKI_DATABASE_URL"


def database_url(root: str) -> str | None:
    """The database a tree is on, or None for a file tree."""
    from loki.storage.backendof import storage_section

    storage = storage_section(root)
    if storage is None:
        return None
    from_env = os.environ.get(URL_ENV)
    if from_env:
        return from_env
    saved = storage.get("database")
    if not isinstance(saved, str) or not saved:
        from loki.storage.layout import CONFIG
        from loki.storage.postgres.connect import DatabaseError

        raise DatabaseError(f"{os.path.join(root, *CONFIG.split('/'))}: storage.backend is postgresql but no "
                            f"database is named: set /storage/database or {URL_ENV}", field="/storage/database")
    return saved


def open_store(root: str | os.PathLike[str] | None = None, **kwargs: Any) -> StateStore:
    """The store of the tree at ``root`` (found like git finds ``.git`` when None): the one public way
    to open a tree (``loki.open_store``), the files or the database its config names.

    Refused (exit 5) while ``loki migrate`` moves the tree, or after one was interrupted: the message
    names the command that finishes it (loki/storage/moving.py)."""
    from loki.storage.moving import refuse_if_moving
    from loki.storage.paths import find_root

    found = find_root(root)
    refuse_if_moving(found)
    return open_found(found, guarded=True, **kwargs)


def open_found(found: str, *, guarded: bool, **kwargs: Any) -> StateStore:
    """The store of the tree at ``found``. ``guarded``: every unit it writes checks first that no
    migration is under way and that the tree still keeps its state there; ``loki migrate``'s own stores
    are not guarded (they are the migration)."""
    url = database_url(found)
    if url is None:
        from loki.storage.store import Store

        files = Store(found, **kwargs)
        files.guarded = guarded
        return files
    from loki.storage.postgres.connect import check_url
    from loki.storage.postgres.store import PgStore

    check_url(url, URL_ENV if os.environ.get(URL_ENV) else "config/loki.json /storage/database")
    pg = PgStore.open(url, root=found, **kwargs)
    if guarded:
        from functools import partial

        from loki.storage.moving import check_writable

        pg.db.guard = partial(check_writable, found, "postgresql")
    store: StateStore = pg
    return store
