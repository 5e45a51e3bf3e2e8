"""The warm state ``loki serve`` keeps for the hook handlers: on a PostgreSQL tree, open database connections.

A command hook opens the tree's store, and on PostgreSQL a connection, for every call. The server answers up to
:data:`loki.serve.app.HOOK_THREADS` hook requests at once, each in a thread of its own pool; a
:class:`WarmStores` made with ``per_thread=True`` keeps one :class:`Database` per thread of that pool (so at most
that many connections, each made again after a break, docs/postgres.md), and a request never shares its
connection with another one running at the same moment. One made without it (the board's feed, which looks
at the store one look at a time) keeps a single connection. Each request still gets a new store over its
connection, so the team's settings are read afresh, exactly as a command hook reads them. A file tree's store
is opened per request as before: it holds nothing worth keeping.
"""

from __future__ import annotations

import threading
from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loki.storage.postgres.session import Database
    from loki.storage.state import StateStore


class WarmStores:
    def __init__(self, *, per_thread: bool = False) -> None:
        self.per_thread = per_thread
        self.db: Database | None = None
        """The single connection (``per_thread=False``)."""
        self._local = threading.local()
        self._made: list[Database] = []
        self._lock = threading.Lock()

    def open(self, root: str) -> StateStore:
        """What :func:`loki.storage.opening.open_store` returns for ``root``, over the kept connection."""
        from loki.storage.moving import check_writable, refuse_if_moving
        from loki.storage.opening import URL_ENV, database_url, open_store

        url = database_url(root)
        if url is None:
            return open_store(root)
        refuse_if_moving(root)
        from loki.storage.postgres.store import PgStore

        db = self._local.__dict__.get("db") if self.per_thread else self.db
        if db is None or db.url != url:
            import os

            from loki.storage.postgres.connect import check_url
            from loki.storage.postgres.session import Database

            check_url(url, URL_ENV if os.environ.get(URL_ENV) else "config/loki.json /storage/database")
            if db is not None:
                self._forget(db)
            db = Database(url)
            db.guard = partial(check_writable, root, "postgresql")
            with self._lock:
                self._made.append(db)
            if self.per_thread:
                self._local.db = db
            else:
                self.db = db
        store: StateStore = PgStore(db, local_root=root)
        return store

    def _forget(self, db: Database) -> None:
        with self._lock:
            if db in self._made:
                self._made.remove(db)
        db.close()

    @property
    def connections(self) -> int:
        """How many connections are kept now (one per thread that answered on a PostgreSQL tree)."""
        with self._lock:
            return len(self._made)

    def close(self) -> None:
        with self._lock:
            made, self._made = self._made, []
        for db in made:
            db.close()
        self.db = None
