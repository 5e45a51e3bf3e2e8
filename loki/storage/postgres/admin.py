"""Administering a tree's database: ``init --database``, ``db upgrade`` (``validate`` and ``doctor`` are in
:mod:`.check`, which the store asks: :meth:`PgStore.validate_state`).

``init`` against a database is also how a second machine joins a team: an empty schema gets loki's
tables (every migration) and the shipped text documents; a schema that already holds loki's tables
at this loki's version is joined as it is; another application's tables, an older schema (``loki db
upgrade``) or a newer one (upgrade loki) are refused before anything is written -- on the server or
in the local ``.loki/``.

"""

from __future__ import annotations

import os

from loki.errors import InvalidInput
from loki.storage import layout
from loki.storage.postgres import migrations
from loki.storage.postgres.check import doctor as doctor  # where they were, for callers that import them here
from loki.storage.postgres.check import validate as validate
from loki.storage.postgres.connect import DatabaseError, check_url, without_password
from loki.storage.postgres.session import Database
from loki.storage.store import Store

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any


SEEDED_TEXTS = (layout.ESCALATION_TEMPLATE, layout.CONTINUITY)
"""The text documents a new tree starts with (the escalation template, CONTINUITY.md)."""


def init_database(url: str) -> dict[str, Any]:
    """Make ``url``'s schema a loki schema (or join one); returns what was done. Exit 1 on a refusal."""
    check_url(url, "--database")
    db = Database(url, check_schema=False)
    try:
        conn = db.conn
        have = migrations.version(conn)
        if have is None:
            raise migrations.foreign_error(conn)
        if have and have != migrations.latest():
            migrations.check(conn)  # raises: older (db upgrade) or newer (upgrade loki)
        applied = migrations.upgrade(conn) if have == 0 else []
        schema = db.schema
    finally:
        db.close()
    seeded: list[str] = []
    if applied:
        from loki.storage.postgres.store import PgStore

        store = PgStore.open(url)
        try:
            for rel, content in layout.initial_files().items():
                if rel in SEEDED_TEXTS and isinstance(content, str) and not store.exists(rel):
                    store.write_text(rel, content)
                    seeded.append(rel)
        finally:
            store.close()
    return {"database": without_password(url), "schema": schema, "created": bool(applied),
            "migrations": [f"{number:03d}_{name}" for number, name in applied], "seeded": seeded,
            "schema_version": migrations.latest()}


def upgrade_database(url: str) -> dict[str, Any]:
    """Apply the migrations ``url``'s schema lacks (``loki db upgrade``)."""
    db = Database(url, check_schema=False)
    try:
        conn = db.conn
        before = migrations.version(conn)
        if before == 0:
            raise DatabaseError(f"{db.where} has no loki schema: run `loki init --database URL` first")
        applied = migrations.upgrade(conn)
        return {"database": without_password(url), "schema": db.schema, "from_version": before,
                "schema_version": migrations.latest(),
                "migrations": [f"{number:03d}_{name}" for number, name in applied]}
    finally:
        db.close()


def url_of_tree(root: str | None) -> str:
    """The database of the tree at ``root`` (found like git finds .git); exit 1 on a file tree."""
    from loki.storage.opening import database_url
    from loki.storage.paths import find_root

    found = find_root(root)
    url = database_url(found)
    if not url:
        raise DatabaseError(f"{found} keeps its state in files, not in a database: give --database URL",
                            root=found)
    return url


# -- this machine's tree joins a database -----------------------------------------------------------


def init_database_tree(root: str, url: str) -> dict[str, Any]:
    """This machine's ``.loki/`` keeps its state in the database at ``url`` (created or joined).

    Refused before anything is written, here or on the server: a ``.loki/`` already on another
    database, or one whose files hold state (``loki migrate --to URL`` moves it), and every refusal of
    :func:`loki.storage.postgres.admin.init_database`. The URL is saved without its password.
    """
    check_url(url, "--database")
    saved = without_password(url)
    config_rel = layout.CONFIG
    existing: dict[str, Any] | None = None
    if os.path.isdir(root):
        store = Store(root)
        existing = store.read(config_rel) if store.exists(config_rel) else None
        storage = (existing or {}).get("storage") or {}
        if storage.get("backend") == "postgresql":
            if storage.get("database") != saved:
                raise InvalidInput(f"{root} already keeps its state in {storage.get('database')}; to move it to "
                                   f"{saved}, use `loki migrate --to URL` from a tree on the new database",
                                   file=f"{root}/{config_rel}", pointer="/storage/database")
        else:
            held = _state_in_files(store)
            if held:
                raise InvalidInput(f"{root} keeps state in its files ({held}): move it to the database with "
                                   f"`loki migrate --to {saved}` instead", file=root)
    report = init_database(url)
    wanted = {**(existing or {"version": 1}), "storage": {"backend": "postgresql", "database": saved}}
    written = wanted != existing
    if written:
        os.makedirs(os.path.join(root, "config"), exist_ok=True)
        store = Store(root)
        with store.transaction(config_rel) as txn:
            txn.write(config_rel, wanted)
    return {**report, "root": root, "config_written": written, "password_dropped": saved != url}


def _state_in_files(store: Store) -> str:
    """What state a file tree holds (tasks, entries, signals, escalations, memory), '' when none."""
    view = store.tasks().view([*layout.QUEUE_STATES, "dead-letter", "abandoned"])
    parts = [f"{len(items)} {state}" for state, items in view.items() if items]
    for directory in (layout.SIGNALS_DIR, layout.ESCALATIONS_DIR):
        names = [n for n in store.list(directory) if not n.startswith(".")]
        if names:
            parts.append(f"{len(names)} in {directory}/")
    if store.log_size(layout.MEMORY_LOG):
        parts.append("error memory")
    return ", ".join(parts)
