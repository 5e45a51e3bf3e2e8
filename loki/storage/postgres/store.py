"""The PostgreSQL state store (:class:`loki.storage.state.StateStore`): a tree's state as rows.

Composed of one part per concept, each its own module: documents under lock domains
(:mod:`.documents`), append-only logs read after a position (:mod:`.logs`), published items, the
signals' claim and the long-held locks (:mod:`.items`). The task store (:mod:`.tasks`) shares the
connection (:class:`loki.storage.postgres.session.Database`).

The team's settings (``config/loki.json``'s document: leases, breakers, strikes ...) live in the
database, so every machine runs by the same rules; the local ``.loki/config/loki.json`` only says
where the database is. ``where`` is the database for messages (its URL without a password, and the
schema); ``local_root`` is this machine's ``.loki/`` directory (None when opened by URL alone), where the
hooks' local caches live.
"""

from __future__ import annotations

from loki.clock import default_clock, format_ts
from loki.storage.postgres.documents import Documents
from loki.storage.postgres.items import Items
from loki.storage.postgres.logs import Logs
from loki.storage.postgres.session import Database, DatabaseClock
from loki.storage.schema import registry

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Hashable
    from typing import Any, Literal

    from loki.clock import Clock
    from loki.storage.postgres.tasks import PgTasks
    from loki.storage.problems import DoctorReport, Problem
    from loki.storage.schema import Registry

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_LOCK_TIMEOUT = 10.0


class PgStore(Items, Logs, Documents):
    """A tree's state in a PostgreSQL database (see the module's docstring).

    Each part brings its own verbs (items: publish and claim; logs: append and read after a position;
    documents: transactions). The names the three share -- ``read_bytes``, ``read_text``, ``write_text``,
    ``exists``, ``remove``, ``list``, ``change_token`` -- are routed here, in one place: items answer first,
    then logs, then documents (an escalation is an item read like a document, a log may be read whole as
    text), each part answering only for what is its own."""

    backend = "postgresql"
    # Capabilities (loki/storage/state.py): a claim is one UPDATE, keys need no directories, and the hooks'
    # hot path reads this machine's copies (keep_local).
    claims_in_one_step: Literal[True] = True
    keys_need_dirs: Literal[False] = False
    keeps_local_copies: Literal[True] = True

    def __init__(self, db: Database, *, local_root: str | None = None, clock: Clock | None = None,
                 schemas: Registry | None = None, config: dict[str, Any] | None = None,
                 lock_timeout: float | None = None, validate_all: bool | None = None,
                 lease_clock: Clock | None = None) -> None:
        import os

        self.db = db
        self.local_root = local_root
        self.clock = clock or default_clock()
        # Leases are judged by one clock for every machine: the database's (docs/postgres.md, "Clock
        # skew"); a test may pass its own to move the database's time by hand.
        self.lease_clock: Clock = lease_clock or DatabaseClock(db)
        self.schemas = schemas or registry()
        self.notes: list[str] = []
        self.max_file_bytes = DEFAULT_MAX_BYTES
        self._lock_timeout = lock_timeout
        self._config: dict[str, Any] | None = None
        self._tasks: PgTasks | None = None
        self.validate_all = validate_all if validate_all is not None else bool(os.environ.get("LOKI_VALIDATE_ALL"))
        if config is not None:
            self.write_config(config)

    @classmethod
    def open(cls, url: str, *, root: str | None = None, **kwargs: Any) -> PgStore:
        """The store of the database at ``url``; ``root``: this machine's ``.loki/`` directory."""
        return cls(Database(url), local_root=root, **kwargs)

    def __repr__(self) -> str:
        return f"PgStore({self.where})"

    @property
    def where(self) -> str:
        """The database without its password, and the schema: what people are shown."""
        return self.db.where

    @property
    def lock_timeout(self) -> float:
        if self._lock_timeout is not None:
            return self._lock_timeout
        from loki.config import lock_timeout_setting

        return lock_timeout_setting(lambda: self.config, DEFAULT_LOCK_TIMEOUT)

    def now_ts(self) -> str:
        return format_ts(self.clock.now())

    # -- administration (loki/storage/postgres/check.py does the work) ------------------------------

    def validate_state(self) -> list[Problem]:
        from loki.storage.postgres.check import validate

        return validate(self)

    def doctor_state(self, *, repair: bool = False) -> DoctorReport:
        from loki.storage.postgres.check import doctor

        return doctor(self, repair=repair)

    def stored_records(self, states: list[str]) -> dict[str, list[Any]]:
        """The rows as the task store reads them."""
        return self.tasks().view(states)

    # -- the names the parts share: items, then logs, then documents -----------------------------------

    def read_bytes(self, rel: str, *, limit: int | None = None) -> bytes | None:
        found = self.item_bytes(rel, limit=limit)
        return found if found is not None else Documents.read_bytes(self, rel, limit=limit)

    def read_text(self, rel: str) -> str | None:
        found = self.item_text(rel)
        if found is None:
            found = self.log_text(rel)
        return found if found is not None else Documents.read_text(self, rel)

    def write_text(self, rel: str, text: str) -> None:
        if not self.write_item_text(rel, text):
            Documents.write_text(self, rel, text)

    def exists(self, rel: str) -> bool:
        return self.item_exists(rel) or self.log_exists(rel) or Documents.exists(self, rel)

    def remove(self, rel: str) -> bool:
        return self.remove_item(rel) or self.remove_log(rel) or Documents.remove(self, rel)

    def list(self, rel_dir: str) -> list[str]:
        """The names under ``rel_dir``: items, directories of items, logs, documents."""
        rel_dir = rel_dir.rstrip("/")
        return sorted(self.item_names(rel_dir) | self.log_names(rel_dir) | set(Documents.list(self, rel_dir)))

    def change_token(self, rel: str) -> Any:  # Hashable | None (Any: the documents' own is narrower, an int)
        found: Hashable | None = self.item_token(rel)
        if found is None:
            found = self.log_token(rel)
        return found if found is not None else Documents.change_token(self, rel)

    def tasks(self) -> PgTasks:
        if self._tasks is None:
            from loki.storage.postgres.tasks import PgTasks

            self._tasks = PgTasks(self)
        return self._tasks

    def close(self) -> None:
        self.db.close()
