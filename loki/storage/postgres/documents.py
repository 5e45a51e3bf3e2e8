"""Documents under lock domains, as rows of ``loki_documents`` (docs/postgres.md, "Documents").

Every named item that is read whole is one row, keyed like the file tree (``state/circuit-breakers.json``,
``CONTINUITY.md``, ``config/loki.json``): a state document holds the canonical JSON bytes the file
store would write, a text item its UTF-8 text. ``version`` takes a new number from
``loki_version_seq`` on every write, and is the change token.

A lock domain is an advisory transaction lock on the domain's lock name (``layout.lock_for``), so
:meth:`PgDocuments.transaction` is one PostgreSQL transaction holding it: the documents it writes are
committed together or not at all, and a unit of the task store opened inside it is a savepoint of
the same transaction. Readers take no lock: one statement reads from one snapshot, so
:meth:`PgDocuments.snapshot` of several documents is consistent without the domain's lock.

Writes are checked as the file store checks them: the document's schema (the envelope and the
``changed`` records, or all of it with ``validate_all``), and the state-file size limit, before
anything is sent. The team's settings are the ``config/loki.json`` document of the database
(:meth:`PgDocuments.write_config`): every machine runs by the same rules.

A part of :class:`loki.storage.postgres.store.PgStore`, which owns one and hands it the whole store (typed
as :class:`loki.storage.postgres.shape.PgState`) for what is the store's: the size limit, the schemas, the
lock timeout, and a transaction's appended log lines (the logs' part).
"""

from __future__ import annotations

from loki.errors import FileTooLarge, InvalidInput, SchemaViolation, StateFileError
from loki.storage import jsonio, layout
from loki.storage.postgres import domains
from loki.storage.postgres.queries import query

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Iterable
    from contextlib import AbstractContextManager
    from typing import Any

    import psycopg

    from loki.storage.postgres.shape import PgState


DOCUMENT_HINT = ("the document was changed outside loki (psql?): fix it there, from what `loki validate` lists; on a "
                 "database `loki doctor` reports it and changes nothing (there is no file to set aside)")

class PgDocuments:
    """``transaction``, ``read``, ``snapshot``, ``exists``, ``read_bytes``, ``read_text``, ``write_text``,
    ``remove``, ``list``, ``change_token``, ``config``, ``setting``, ``write_config`` (see the module): the
    documents' own answers; :class:`loki.storage.postgres.store.PgStore` asks the items and the logs first."""

    def __init__(self, store: PgState) -> None:
        self.store = store
        self.db = store.db
        self._config: dict[str, Any] | None = None
        """The team's settings, read once (:attr:`config`)."""

    def _data(self, rel: str) -> bytes | None:
        found = self.db.rows(query("document_data"), (rel,))
        return bytes(found[0][0]) if found else None

    def _decode(self, rel: str, data: bytes | None) -> Any:
        kind = layout.kind_for(rel)
        if data is None:
            return kind.empty() if kind is not None else None
        limit = self.store.max_file_bytes
        if len(data) > limit:
            raise FileTooLarge(rel, f"is {len(data)} bytes, over the {limit}-byte limit for a state document")
        try:
            doc = jsonio.loads_strict(data)
        except jsonio.JsonError as exc:
            raise StateFileError(rel, exc.reason, exc.pointer) from None
        if kind is not None:
            # A row has no digest saying loki wrote it (psql edits bytes as easily as a file): checked in full
            # on every read, as the file store checks a file it did not write.
            found = self.store.schemas.problems(kind.schema, doc)
            if found:
                pointer, reason = found[0]
                raise StateFileError(rel, reason, pointer or "/", hint=DOCUMENT_HINT)
        return doc

    # -- writing rows ------------------------------------------------------------------------------

    def check_size(self, rel: str, size: int) -> None:
        """Refuse to write a document loki would then refuse to read (as the file store does)."""
        limit = self.store.max_file_bytes
        if size > limit:
            raise InvalidInput(f"{rel}: this change would make it {size} bytes, over the {limit}-byte limit for a "
                               "state file (loki refuses to read larger ones); nothing was changed",
                               file=rel, size=size, limit=limit)

    def encode(self, rel: str, doc: Any, changed: Iterable[Any] | None = None) -> bytes:
        """``doc`` checked against its kind's schema and the size limit, as the bytes that are stored."""
        kind = layout.kind_for(rel)
        if kind is not None:
            self._validate(rel, kind, doc, changed)
        data = jsonio.dumps_document(doc, kind.records_key if kind is not None else None)
        self.check_size(rel, len(data))
        return data

    def _validate(self, rel: str, kind: layout.FileKind, doc: Any, changed: Iterable[Any] | None) -> None:
        if changed is None or kind.record_schema is None or self.store.validate_all:
            self.store.schemas.validate(kind.schema, doc, rel)
            return
        self.store.schemas.validate(kind.schema, kind.envelope(doc), rel)
        for record in changed:
            found = self.store.schemas.problems(kind.record_schema, record)
            if found:
                prefix = kind.record_pointer(doc, record)
                raise SchemaViolation(rel, [(prefix + pointer, reason) for pointer, reason in found])

    def put(self, rel: str, data: bytes, mtime_ns: int | None = None) -> None:
        self.db.rows(query("put_document"), (rel, data, mtime_ns))

    # -- settings ----------------------------------------------------------------------------------

    @property
    def config(self) -> dict[str, Any]:
        """The team's settings: the database's ``config/loki.json`` document (``{"version": 1}`` if none)."""
        if self._config is None:
            self._config = self.read(layout.CONFIG)
        return self._config

    def setting(self, section: str, key: str, default: Any) -> Any:
        from loki.config import setting

        return setting(self.config, section, key, default)

    def write_config(self, config: dict[str, Any]) -> None:
        """Make ``config`` the team's settings (validated in full against schemas/config.json)."""
        data = self.encode(layout.CONFIG, config)
        with self.transaction(layout.CONFIG):
            self.put(layout.CONFIG, data)
        self._config = jsonio.loads_strict(data)

    # -- documents ---------------------------------------------------------------------------------

    def transaction(self, lock: str) -> DocumentTxn:
        """One unit of work over ``lock``'s domain (a lock name, or any document of the domain)."""
        return DocumentTxn(self, lock if lock.endswith(".lock") else layout.lock_for(lock))

    def read(self, rel: str, digests: dict[str, Any] | None = None) -> Any:
        """A document (its empty form when absent), read without the domain's lock."""
        return self._decode(rel, self._data(rel))

    def snapshot(self, rels: Iterable[str], attempts: int = 20, *, wait: bool = False) -> dict[str, Any]:
        """Several documents as of one instant: one statement, so one snapshot, and no lock."""
        names = list(rels)
        found = {name: bytes(data) for name, data in
                 self.db.rows(query("documents_snapshot"), (names,))}
        return {rel: self._decode(rel, found.get(rel)) for rel in names}

    def exists(self, rel: str) -> bool:
        """Whether ``rel`` is a document, or a "directory": the prefix of some (as ``lexists`` says)."""
        low, high = _prefix_range(rel)
        return bool(self.db.rows(query("document_exists"), (rel, low, high))[0][0])

    def read_bytes(self, rel: str, *, limit: int | None = None) -> bytes | None:
        """An item's bytes (None: absent), refused over ``limit`` (the state-file limit unless given)."""
        limit = self.store.max_file_bytes if limit is None else limit
        found = self.db.rows(query("document_bytes_up_to"), (limit, rel))
        if not found:
            return None
        size, data = found[0]
        if data is None:
            raise FileTooLarge(rel, f"is {size} bytes, over the {limit}-byte limit for a state file")
        return bytes(data)

    def read_text(self, rel: str) -> str | None:
        data = self.read_bytes(rel)
        if data is None:
            return None
        try:
            return jsonio.decode_utf8(data)
        except jsonio.JsonError as exc:
            raise StateFileError(rel, exc.reason) from None

    def write_text(self, rel: str, text: str) -> None:
        """Replace a text item (CONTINUITY.md, an escalation's edit, a hint) in one statement."""
        data = text.encode("utf-8")
        self.check_size(rel, len(data))
        self.put(rel, data)

    def remove(self, rel: str) -> bool:
        """Delete an item loki derived and can rebuild (a hint); True if it existed."""
        return bool(self.db.rows(query("delete_document"), (rel,)))

    def list(self, rel_dir: str) -> list[str]:
        """The names directly under ``rel_dir``, sorted ([] when there are none), as ``os.listdir`` sorted."""
        low, high = _prefix_range(rel_dir)
        names = {name[len(low):].split("/", 1)[0] for (name,) in
                 self.db.rows(query("documents_in_range"), (low, high))}
        return sorted(names)

    def change_token(self, rel: str) -> int | None:
        """The row's version: a new number on every write (None: absent)."""
        found = self.db.rows(query("document_version"), (rel,))
        return int(found[0][0]) if found else None


def _prefix_range(rel_dir: str) -> tuple[str, str]:
    """``[low, high)`` holding exactly the names under ``rel_dir/`` (names compare bytewise: COLLATE "C")."""
    low = rel_dir.rstrip("/") + "/"
    return low, low[:-1] + "0"  # "0" is the character after "/"


class DocumentTxn:
    """Reads and staged writes of one lock domain: one PostgreSQL transaction holding the domain's lock."""

    def __init__(self, documents: PgDocuments, lock: str) -> None:
        self.documents = documents
        self.store = documents.store
        self.lock_rel = lock
        self._docs: dict[str, Any] = {}
        self._staged: dict[str, bytes] = {}
        self._appends: dict[str, list[Any]] = {}
        self._unit: AbstractContextManager[psycopg.Connection[Any]] | None = None
        self.recovered = False

    def __enter__(self) -> DocumentTxn:
        self._unit = domains.begin(self.documents.db, self.lock_rel, self.store.lock_timeout)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        unit = self._unit
        assert unit is not None, "use the transaction in a with block"
        self._unit = None
        domains.end(unit, exc_type, exc, tb, self.commit)

    def _check_domain(self, rel: str) -> None:
        if layout.lock_for(rel) != self.lock_rel:
            from loki.errors import LokiError

            raise LokiError(f"{rel} is not guarded by {self.lock_rel}; it needs its own transaction")

    def read(self, rel: str) -> Any:
        """The current document of ``rel`` (its empty form when absent); staged writes are seen."""
        if rel not in self._docs:
            self._check_domain(rel)
            self._docs[rel] = self.documents.read(rel)
        return self._docs[rel]

    def write(self, rel: str, doc: Any, *, changed: Iterable[Any] | None = None) -> None:
        """Stage ``doc`` (checked now: schema, size); nothing is sent before commit."""
        self._check_domain(rel)
        self._staged[rel] = self.documents.encode(rel, doc, changed)
        self._docs[rel] = doc

    def append(self, rel: str, records: Iterable[Any]) -> None:
        """Stage records appended to a log of this domain, written with the documents."""
        self._check_domain(rel)
        self._appends.setdefault(rel, []).extend(records)

    def commit(self) -> None:
        """Write what is staged now; the transaction (and the lock) lasts until the ``with`` block ends."""
        for rel, data in self._staged.items():
            self.documents.put(rel, data)
        for rel, records in self._appends.items():
            self.store.append_lines(rel, records, lock=False)  # the logs' part
        # Each directory written announces it on its channel (sent at commit): a breaker opened, a lease taken
        # reach whoever observes state/ (the boards of `loki serve`) at once, as the file store's observer does.
        from loki.storage.postgres import listen

        for directory in dict.fromkeys(listen.directory_of(rel) for rel in self._staged):
            listen.notify(self.documents.db.conn, self.documents.db, f"{directory}/", directory)
        self._staged, self._appends = {}, {}
