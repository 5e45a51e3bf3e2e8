"""The PostgreSQL state store (:class:`loki.storage.state.StateStore`): a tree's state as rows.

Composed of one part per concept, each its own module and an object the store owns: documents under lock
domains (:class:`.documents.PgDocuments`), append-only logs read after a position (:class:`.logs.PgLogs`),
published items, the signals' claim, the long-held locks, the watchers' wake-ups and this machine's copies
(:class:`.items.PgItems`). Every verb of the store says which part answers it; the names the three share
(``read_bytes``, ``read_text``, ``write_text``, ``exists``, ``remove``, ``list``, ``change_token``) ask the
items, then the logs, then the documents, each answering only for what is its own. A part is given the
store (as :class:`loki.storage.postgres.shape.PgState`) for what is the store's: the size limit, the lock
timeout, the schemas, and a shared name asked of the whole. The task store (:mod:`.tasks`) shares the
connection (:class:`loki.storage.postgres.session.Database`).

The team's settings (``config/loki.json``'s document: leases, breakers, strikes ...) live in the
database, so every machine runs by the same rules; the local ``.loki/config/loki.json`` only says
where the database is. ``where`` is the database for messages (its URL without a password, and the
schema); ``local_root`` is this machine's ``.loki/`` directory (None when opened by URL alone), where the
hooks' local caches live.
"""

from __future__ import annotations

from loki.clock import default_clock, format_ts
from loki.storage.postgres.documents import PgDocuments
from loki.storage.postgres.items import PgItems
from loki.storage.postgres.logs import PgLogs
from loki.storage.postgres.session import Database, DatabaseClock
from loki.storage.schema import registry

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    import builtins
    from collections.abc import Callable, Hashable, Iterable
    from typing import Any, Literal

    from loki.clock import Clock
    from loki.storage.logpos import LogLine
    from loki.storage.postgres.documents import DocumentTxn
    from loki.storage.postgres.items import PgHeldLock
    from loki.storage.postgres.listen import Listener
    from loki.storage.postgres.memorysearch import PgMemorySearch
    from loki.storage.postgres.tasks import PgTasks
    from loki.storage.problems import DoctorReport, Problem
    from loki.storage.schema import Registry
    from loki.storage.state import MemoryRules

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_LOCK_TIMEOUT = 10.0


class PgStore:
    """A tree's state in a PostgreSQL database (see the module's docstring).

    It owns three parts and hands each verb to the part it belongs to (items: publish and claim; logs:
    append and read after a position; documents: transactions). The names the three share --
    ``read_bytes``, ``read_text``, ``write_text``, ``exists``, ``remove``, ``list``, ``change_token`` -- ask
    items first, then logs, then documents (an escalation is an item read like a document, a log may be read
    whole as text), each part answering only for what is its own."""

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
        self._tasks: PgTasks | None = None
        self.validate_all = validate_all if validate_all is not None else bool(os.environ.get("LOKI_VALIDATE_ALL"))
        self._documents = PgDocuments(self)
        self._logs = PgLogs(self)
        self._items = PgItems(self)
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
        found = self._items.item_bytes(rel, limit=limit)
        return found if found is not None else self._documents.read_bytes(rel, limit=limit)

    def read_text(self, rel: str) -> str | None:
        found = self._items.item_text(rel)
        if found is None:
            found = self._logs.log_text(rel)
        return found if found is not None else self._documents.read_text(rel)

    def write_text(self, rel: str, text: str) -> None:
        if not self._items.write_item_text(rel, text):
            self._documents.write_text(rel, text)

    def exists(self, rel: str) -> bool:
        return self._items.item_exists(rel) or self._logs.log_exists(rel) or self._documents.exists(rel)

    def remove(self, rel: str) -> bool:
        return self._items.remove_item(rel) or self._logs.remove_log(rel) or self._documents.remove(rel)

    def list(self, rel_dir: str) -> builtins.list[str]:
        """The names under ``rel_dir``: items, directories of items, logs, documents."""
        rel_dir = rel_dir.rstrip("/")
        return sorted(self._items.item_names(rel_dir) | self._logs.log_names(rel_dir)
                      | set(self._documents.list(rel_dir)))

    def change_token(self, rel: str) -> Hashable | None:
        found: Hashable | None = self._items.item_token(rel)
        if found is None:
            found = self._logs.log_token(rel)
        return found if found is not None else self._documents.change_token(rel)

    # -- documents (loki/storage/postgres/documents.py) ------------------------------------------------

    def rows(self, sql: str, params: Any = ()) -> builtins.list[tuple[Any, ...]]:
        """The rows of one statement (:meth:`loki.storage.postgres.session.Database.rows`)."""
        return self.db.rows(sql, params)

    def transaction(self, lock: str) -> DocumentTxn:
        return self._documents.transaction(lock)

    def read(self, rel: str, digests: dict[str, Any] | None = None) -> Any:
        return self._documents.read(rel, digests)

    def snapshot(self, rels: Iterable[str], attempts: int = 20, *, wait: bool = False) -> dict[str, Any]:
        return self._documents.snapshot(rels, attempts, wait=wait)

    def check_size(self, rel: str, size: int) -> None:
        self._documents.check_size(rel, size)

    def encode(self, rel: str, doc: Any, changed: Iterable[Any] | None = None) -> bytes:
        return self._documents.encode(rel, doc, changed)

    @property
    def config(self) -> dict[str, Any]:
        return self._documents.config

    def setting(self, section: str, key: str, default: Any) -> Any:
        return self._documents.setting(section, key, default)

    def write_config(self, config: dict[str, Any]) -> None:
        self._documents.write_config(config)

    # -- logs (loki/storage/postgres/logs.py) ----------------------------------------------------------

    def append_lines(self, rel: str, records: Iterable[Any], *, lock: bool = True) -> int:
        return self._logs.append_lines(rel, records, lock=lock)

    def append_text(self, rel: str, lines: Iterable[str], *, lock: bool = True, read_whole: bool = False) -> int:
        return self._logs.append_text(rel, lines, lock=lock, read_whole=read_whole)

    def append_bytes(self, rel: str, payload: bytes, *, lock: bool = True, read_whole: bool = False) -> int:
        return self._logs.append_bytes(rel, payload, lock=lock, read_whole=read_whole)

    def rewrite_lines(self, rel: str, records: Iterable[Any]) -> int:
        return self._logs.rewrite_lines(rel, records)

    def log_end(self, rel: str) -> int:
        return self._logs.log_end(rel)

    def log_size(self, rel: str) -> int:
        return self._logs.log_size(rel)

    def log_valid(self, rel: str, position: Any) -> bool:
        return self._logs.log_valid(rel, position)

    def log_bytes_after(self, rel: str, position: Any) -> int:
        return self._logs.log_bytes_after(rel, position)

    def read_after(self, rel: str, position: Any, limit: int = 1 << 20, *, whole: bool = False,
                   final: bool = False) -> tuple[builtins.list[LogLine], Any]:
        return self._logs.read_after(rel, position, limit, whole=whole, final=final)

    def read_line(self, rel: str, position: Any) -> bytes:
        return self._logs.read_line(rel, position)

    def read_tail(self, rel: str, limit: int) -> builtins.list[bytes]:
        return self._logs.read_tail(rel, limit)

    def log_windows(self, rel: str, position: Any, window: int) -> tuple[bytes, bytes]:
        return self._logs.log_windows(rel, position, window)

    # -- items, locks, observation, local caches and copies (loki/storage/postgres/items.py) ------------

    def create_unique(self, rel_dir: str, name: str, data: bytes, *, suffix: str = "", separator: str = "-",
                      mtime_ns: int | None = None, state_file: bool = True) -> str:
        return self._items.create_unique(rel_dir, name, data, suffix=suffix, separator=separator,
                                         mtime_ns=mtime_ns, state_file=state_file)

    def claim_into(self, rel: str, rel_dir: str, entry: str) -> bool:
        return self._items.claim_into(rel, rel_dir, entry)

    def finish(self, rel: str, target_dir: str | None) -> None:
        self._items.finish(rel, target_dir)

    def scan(self, rel_dir: str) -> builtins.list[dict[str, Any]]:
        return self._items.scan(rel_dir)

    def entry(self, rel: str) -> dict[str, Any] | None:
        return self._items.entry(rel)

    def observe(self, rel_dir: str, wake: Callable[[], None]) -> Listener:
        return self._items.observe(rel_dir, wake)

    def lock(self, rel: str, timeout: float) -> PgHeldLock:
        return self._items.lock(rel, timeout)

    def lock_holder(self, rel: str) -> dict[str, Any] | None:
        return self._items.lock_holder(rel)

    def memory_search(self, rules: MemoryRules) -> PgMemorySearch:
        return self._items.memory_search(rules)

    def index_database(self, rel: str, side_files: Iterable[str] = ()) -> str:
        return self._items.index_database(rel, side_files)

    def keep_local(self, rels: Iterable[str] = (), dirs: Iterable[str] = ()) -> builtins.list[str]:
        return self._items.keep_local(rels, dirs)

    def tasks(self) -> PgTasks:
        if self._tasks is None:
            from loki.storage.postgres.tasks import PgTasks

            self._tasks = PgTasks(self)
        return self._tasks

    def close(self) -> None:
        self.db.close()
