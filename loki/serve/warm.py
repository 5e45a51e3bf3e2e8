"""The warm state ``loki serve`` keeps for the hook handlers: on a PostgreSQL tree, one database connection.

A command hook opens the tree's store, and on PostgreSQL a connection, for every call. The server answers
hook requests one at a time (:class:`loki.serve.app.HookAnswerer`), so one :class:`Database` (the connection,
made again after a break, docs/postgres.md) serves them all. Each request still gets a new store over it, so
the team's settings are read afresh, exactly as a command hook reads them. A file tree's store is opened per
request as before: it holds nothing worth keeping.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loki.storage.postgres.session import Database
    from loki.storage.state import StateStore


class WarmStores:
    def __init__(self) -> None:
        self.db: Database | None = None

    def open(self, root: str) -> StateStore:
        """What :func:`loki.storage.opening.open_store` returns for ``root``, over the kept connection."""
        from loki.storage.moving import check_writable, refuse_if_moving
        from loki.storage.opening import URL_ENV, database_url, open_store

        url = database_url(root)
        if url is None:
            return open_store(root)
        refuse_if_moving(root)
        from loki.storage.postgres.session import Database
        from loki.storage.postgres.store import PgStore

        if self.db is None or self.db.url != url:
            import os

            from loki.storage.postgres.connect import check_url

            check_url(url, URL_ENV if os.environ.get(URL_ENV) else "config/loki.json /storage/database")
            self.close()
            self.db = Database(url)
            self.db.guard = partial(check_writable, root, "postgresql")
        store: StateStore = PgStore(self.db, local_root=root)
        return store

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None
