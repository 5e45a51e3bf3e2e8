"""The search index of error memory: SQLite FTS5 (BM25) over ``memory/errors.jsonl``. A cache.

Nothing is ever only here: every row comes from the log, and the index is thrown away and rebuilt
whenever it cannot be trusted. Deleting ``memory/errors.db`` loses nothing.

* **Lazily caught up.** The hooks only append to the log. The index remembers the store's position
  (opaque: kept and handed back) and the line number it has read up to; each search first indexes the
  complete lines after it, in one SQLite transaction (``BEGIN IMMEDIATE``: two searchers never index the
  same line twice). A line still being written (no newline yet) waits for the next search.
* **Stale** means the log is no longer the one that was indexed: it no longer reaches the position
  (truncated), or the 4 KiB at its start or the 4 KiB just before the position differ from what was
  indexed (compacted, rewritten, edited). Checking costs two small reads and two hashes, so it is
  done before every search; a stale index is rebuilt from the log.
* **Corrupt** (not a database, a malformed page, a missing table): the files are deleted and the
  index is rebuilt. A busy database (another process rebuilding) is waited for, up to the lock
  timeout, then reported as a lock timeout (exit 5).
* **A corrupt line** (torn by a crash, edited by hand, failing ``memory-record.json``) is skipped
  with a warning naming its line number; it never stops the rest. Skipped line numbers are kept
  (the last 100) and shown by ``loki errors stats``.

Failures with the same ``content_hash`` are one *pattern*: a row with an occurrence count, the
first and last time seen, and the fields of the latest occurrence (the log keeps every event).
Resolutions attach to the patterns of the errors they name; a pattern shows its best resolution
(highest confidence, then the most recent).
"""

from __future__ import annotations

import json
import sqlite3

from loki.errors import LockTimeout, StateFileError
from loki.memory import patterns
from loki.storage import layout
from loki.storage.store import digest

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any, TypeVar

    from loki.storage.state import StateStore as Store

    T = TypeVar("T")

VERSION = "1"
WINDOW = 4096
"""Bytes hashed at the start of the log and just before the indexed offset (the staleness check)."""
CHUNK = 4 << 20
WEIGHTS = (3.0, 4.0, 2.0, 1.0, 0.5, 1.5)
"""BM25 weight of each column: command, error_message, file_references, stack_trace, output, resolution."""
HIGHLIGHT = ("**", "**")
SIDE_FILES = ("-wal", "-shm", "-journal")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS patterns(
    id INTEGER PRIMARY KEY,
    content_hash TEXT NOT NULL UNIQUE,
    tool TEXT NOT NULL,
    prefix TEXT NOT NULL,
    command TEXT NOT NULL,
    error_message TEXT NOT NULL,
    error_class TEXT,
    exit_code INTEGER,
    file_references TEXT NOT NULL,
    stack_trace TEXT,
    output TEXT NOT NULL,
    cwd TEXT NOT NULL,
    branch TEXT NOT NULL,
    session_id TEXT,
    first_seen TEXT NOT NULL,
    last_seen TEXT NOT NULL,
    occurrences INTEGER NOT NULL,
    resolutions INTEGER NOT NULL DEFAULT 0,
    last_id TEXT NOT NULL,
    last_line INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS patterns_by_prefix ON patterns(tool, prefix);
CREATE INDEX IF NOT EXISTS patterns_by_class ON patterns(error_class);
CREATE INDEX IF NOT EXISTS patterns_by_occurrences ON patterns(occurrences);
CREATE TABLE IF NOT EXISTS records(id TEXT PRIMARY KEY, pattern INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS resolutions(
    pattern INTEGER NOT NULL,
    id TEXT NOT NULL,
    resolution TEXT NOT NULL,
    confidence REAL NOT NULL,
    calls_between INTEGER NOT NULL,
    same_input INTEGER NOT NULL,
    timestamp TEXT NOT NULL,
    line INTEGER NOT NULL,
    PRIMARY KEY (pattern, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS resolution_log(id TEXT PRIMARY KEY, line INTEGER NOT NULL, record TEXT NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS search USING fts5(
    command, error_message, file_references, stack_trace, output, resolution, tokenize = 'porter unicode61'
);
"""
_TABLES = ("patterns", "records", "resolutions", "resolution_log", "search", "meta")


class _State:
    """Where the index stands in the log (the ``meta`` table)."""

    __slots__ = ("head", "lines", "offset", "skipped", "skipped_count", "tail", "version")

    def __init__(self, meta: dict[str, str]) -> None:
        self.version = meta.get("version")
        self.offset = int(meta.get("offset", "0"))
        self.lines = int(meta.get("lines", "0"))
        self.head = meta.get("head", "")
        self.tail = meta.get("tail", "")
        self.skipped: list[int] = json.loads(meta.get("skipped", "[]"))
        self.skipped_count = int(meta.get("skipped_count", "0"))


class MemoryIndex:
    """The FTS5 index of one tree's error memory. Every public method first catches up with the log."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.warnings: list[str] = []
        """What the last catch-up that read anything skipped, one per line (``memory/errors.jsonl line 7: ...``)."""
        self._db: sqlite3.Connection | None = None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # -- public ------------------------------------------------------------------------------------

    def sync(self) -> dict[str, Any]:
        """Index what the log gained since the last time; rebuild if the index is stale or corrupt.

        Returns ``{"added": lines indexed now, "skipped": lines skipped now, "rebuilt": reason or None,
        "offset": the store's position in the log indexed up to}``.
        """
        try:
            return self._sync()
        except sqlite3.DatabaseError as exc:
            self._raise_if_busy(exc)
            return self._recreate(f"the index was unreadable ({exc})")

    def rebuild(self, reason: str) -> dict[str, Any]:
        """Throw the index away and index the whole log again."""
        try:
            return self._rebuild(self._connect(), reason)
        except sqlite3.DatabaseError as exc:
            self._raise_if_busy(exc)
            return self._recreate(f"{reason}; the index was unreadable ({exc})")

    def search(self, query: str, *, limit: int = 10, error_class: str | None = None,
               with_resolution: bool = False, highlight: tuple[str, str] = HIGHLIGHT) -> list[dict[str, Any]]:
        """Patterns matching ``query`` by BM25, best first.

        Every word of the query must match (FTS5 with the porter stemmer: ``failed`` finds
        ``failing``); when that finds nothing, any word may. ``snippet`` shows the best-matching
        passage with the matched words between ``highlight`` markers.
        """
        terms = [f'"{word}"' for word in patterns.query_words(query, limit)]
        self.sync()

        def run() -> list[dict[str, Any]]:
            rows = self._match(" ".join(terms), limit, error_class, with_resolution, highlight)
            if not rows and len(terms) > 1:
                rows = self._match(" OR ".join(terms), limit, error_class, with_resolution, highlight)
            return rows

        return self._guarded(run)

    def stats(self, *, top: int = 10) -> dict[str, Any]:
        """Totals, counts by class, the most frequent patterns and the share of resolved ones."""
        self.sync()
        return self._guarded(lambda: self._stats(top))

    def resolution_records(self) -> Iterator[dict[str, Any]]:
        """Every resolution record of the log, in log order (for rebuilding the prefix hints)."""
        self.sync()
        rows = self._guarded(lambda: self._connect().execute(
            "SELECT record FROM resolution_log ORDER BY line").fetchall())
        for (text,) in rows:
            yield json.loads(text)

    # -- connection ----------------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._db is not None:
            return self._db
        path = self.store.index_database(layout.MEMORY_INDEX, SIDE_FILES)
        db = sqlite3.connect(path, timeout=self.store.lock_timeout, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")  # searchers read while one catches up
            db.execute("PRAGMA synchronous=NORMAL")  # a cache: durability comes from the log
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not tables:
                db.executescript(_SCHEMA)
            elif not tables.issuperset(_TABLES):
                missing = ", ".join(sorted(set(_TABLES) - tables))
                raise sqlite3.DatabaseError(f"the index has no table {missing}")
        except BaseException:
            db.close()
            raise
        self._db = db
        return db

    def _recreate(self, reason: str) -> dict[str, Any]:
        """Delete the index files (unreadable) and build a new index from the log."""
        self.close()
        for suffix in ("", *SIDE_FILES):
            self.store.remove(layout.MEMORY_INDEX + suffix)
        try:
            return self._rebuild(self._connect(), reason)
        except sqlite3.DatabaseError as exc:
            self._raise_if_busy(exc)
            raise StateFileError(layout.MEMORY_INDEX, f"cannot be rebuilt: {exc}") from None

    def _guarded(self, query: Callable[[], T]) -> T:
        """Run a read; if the database turns out to be damaged, rebuild it and run it again."""
        try:
            return query()
        except sqlite3.DatabaseError as exc:
            self._raise_if_busy(exc)
            self._recreate(f"the index was unreadable ({exc})")
            return query()

    def _raise_if_busy(self, exc: sqlite3.DatabaseError) -> None:
        text = str(exc).lower()
        if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
            raise LockTimeout(f"{layout.MEMORY_INDEX} is busy (another process is indexing it) after "
                              f"{self.store.lock_timeout:g} s; try again", file=layout.MEMORY_INDEX) from None

    # -- catching up -----------------------------------------------------------------------------------

    def _state(self, db: sqlite3.Connection) -> _State:
        return _State(dict(db.execute("SELECT key, value FROM meta").fetchall()))

    def _fingerprint(self, position: Any) -> tuple[str, str]:
        head, tail = self.store.log_windows(layout.MEMORY_LOG, position, WINDOW)
        return digest(head), digest(tail)

    def _stale_reason(self, state: _State) -> str | None:
        if state.version is None:
            return None if state.offset == 0 else "the index has no version"
        if state.version != VERSION:
            return f"the index format changed (version {state.version}, now {VERSION})"
        if not self.store.log_valid(layout.MEMORY_LOG, state.offset):
            return (f"the log is {self.store.log_size(layout.MEMORY_LOG)} bytes, shorter than the "
                    f"{state.offset} bytes indexed (truncated or rewritten)")
        if state.offset != 0 and self._fingerprint(state.offset) != (state.head, state.tail):
            return "the log was rewritten since it was indexed (compacted or edited)"
        return None

    def _sync(self) -> dict[str, Any]:
        db = self._connect()
        state = self._state(db)
        reason = self._stale_reason(state)
        if reason is not None:
            return self._rebuild(db, reason)
        if state.version is not None and state.offset == self.store.log_end(layout.MEMORY_LOG):
            return {"added": 0, "skipped": 0, "rebuilt": None, "offset": state.offset}
        db.execute("BEGIN IMMEDIATE")
        try:
            state = self._state(db)  # another process may have caught up while we waited
            reason = self._stale_reason(state)
            if reason is not None:
                db.execute("ROLLBACK")
                return self._rebuild(db, reason)
            report = self._consume(db, state)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return report

    def _rebuild(self, db: sqlite3.Connection, reason: str) -> dict[str, Any]:
        db.execute("BEGIN IMMEDIATE")
        try:
            for table in _TABLES:
                db.execute(f"DELETE FROM {table}")
            report = self._consume(db, _State({}))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        report["rebuilt"] = reason
        return report

    def _consume(self, db: sqlite3.Connection, state: _State) -> dict[str, Any]:
        """Index every complete line after ``state.offset``; record the new position (inside a transaction)."""
        self.warnings = []
        position, line = state.offset, state.lines
        added = skipped = 0
        while True:
            lines, position = self.store.read_after(layout.MEMORY_LOG, position, CHUNK, whole=True)
            if not lines:
                break  # the end, or a line still being written: it waits
            for entry in lines:
                line += 1
                raw = entry.data or b""
                if not raw.strip():
                    continue
                problem = self._index_line(db, raw, line)
                if problem is None:
                    added += 1
                else:
                    skipped += 1
                    state.skipped = [*state.skipped, line][-patterns.SKIPPED_KEPT:]
                    state.skipped_count += 1
                    self.warnings.append(f"{layout.MEMORY_LOG} line {line}: {problem}; skipped")
        head, tail = self._fingerprint(position)
        meta = {"version": VERSION, "offset": str(position), "lines": str(line), "head": head, "tail": tail,
                "skipped": json.dumps(state.skipped), "skipped_count": str(state.skipped_count)}
        db.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", meta.items())
        return {"added": added, "skipped": skipped, "rebuilt": None, "offset": position}

    def _index_line(self, db: sqlite3.Connection, raw: bytes, line: int) -> str | None:
        """Index one line; the reason it was skipped, or None."""
        record, problem = patterns.read_line(self.store.schemas, raw)
        if record is None:
            return problem
        if record["kind"] == "error":
            self._index_error(db, record, line)
        else:
            self._index_resolution(db, record, raw, line)
        return None

    def _index_error(self, db: sqlite3.Connection, record: dict[str, Any], line: int) -> None:
        fields = patterns.error_fields(record, line)
        seen = record["timestamp"]
        first = record.get("first_seen") or seen
        occurrences = int(record.get("occurrences") or 1)
        row = db.execute("SELECT id, command, error_message, file_references, stack_trace, output FROM patterns "
                         "WHERE content_hash = ?", (record["content_hash"],)).fetchone()
        if row is None:
            names = ", ".join(fields)
            marks = ", ".join("?" * len(fields))
            inserted = db.execute(
                f"INSERT INTO patterns(content_hash, first_seen, last_seen, occurrences, {names}) "
                f"VALUES (?, ?, ?, ?, {marks})", (record["content_hash"], first, seen, occurrences, *fields.values()),
            ).lastrowid
            pattern = int(inserted or 0)
            self._put_text(db, pattern, fields, "")
        else:
            pattern = row[0]
            assignments = ", ".join(f"{name} = ?" for name in fields)
            db.execute(
                f"UPDATE patterns SET occurrences = occurrences + ?, first_seen = min(first_seen, ?), "
                f"last_seen = max(last_seen, ?), {assignments} WHERE id = ?",
                (occurrences, first, seen, *fields.values(), pattern),
            )
            # The searchable text follows the latest occurrence (what is shown); unchanged text is not rewritten.
            if tuple(row[1:]) != (fields["command"], fields["error_message"], fields["file_references"],
                                  fields["stack_trace"], fields["output"]):
                resolution = db.execute("SELECT resolution FROM search WHERE rowid = ?", (pattern,)).fetchone()
                db.execute("DELETE FROM search WHERE rowid = ?", (pattern,))
                self._put_text(db, pattern, fields, resolution[0] if resolution else "")
        db.executemany("INSERT OR IGNORE INTO records(id, pattern) VALUES (?, ?)",
                       [(ident, pattern) for ident in (record["id"], *record.get("aliases", []))])

    @staticmethod
    def _put_text(db: sqlite3.Connection, pattern: int, fields: dict[str, Any], resolution: str) -> None:
        refs = patterns.refs_text(fields["file_references"])
        db.execute("INSERT INTO search(rowid, command, error_message, file_references, stack_trace, output, "
                   "resolution) VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (pattern, fields["command"], fields["error_message"], refs, fields["stack_trace"] or "",
                    fields["output"], resolution))

    def _index_resolution(self, db: sqlite3.Connection, record: dict[str, Any], raw: bytes, line: int) -> None:
        db.execute("INSERT OR IGNORE INTO resolution_log(id, line, record) VALUES (?, ?, ?)",
                   (record["id"], line, raw.decode("utf-8")))
        ids = list(dict.fromkeys(record["resolves"]))
        matched: list[int] = []
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            matched += [p for (p,) in db.execute(
                f"SELECT DISTINCT pattern FROM records WHERE id IN ({', '.join('?' * len(part))})", part)]
        for pattern in dict.fromkeys(matched):
            added = db.execute(
                "INSERT OR IGNORE INTO resolutions(pattern, id, resolution, confidence, calls_between, same_input, "
                "timestamp, line) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (pattern, record["id"], record["resolution"], record["confidence"], record["calls_between"],
                 int(bool(record.get("same_input"))), record["timestamp"], line),
            ).rowcount
            if not added:
                continue
            db.execute("UPDATE patterns SET resolutions = resolutions + 1 WHERE id = ?", (pattern,))
            row = db.execute("SELECT command, error_message, file_references, stack_trace, output, resolution "
                             "FROM search WHERE rowid = ?", (pattern,)).fetchone()
            if row is None:
                continue
            db.execute("DELETE FROM search WHERE rowid = ?", (pattern,))
            db.execute("INSERT INTO search(rowid, command, error_message, file_references, stack_trace, output, "
                       "resolution) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (pattern, *row[:5], patterns.with_resolution(row[5], record["resolution"])))

    # -- reading -------------------------------------------------------------------------------------------

    _COLUMNS = ("id", *patterns.COLUMNS)

    def _match(self, expression: str, limit: int, error_class: str | None, with_resolution: bool,
               highlight: tuple[str, str]) -> list[dict[str, Any]]:
        db = self._connect()
        where = ["search MATCH ?"]
        params: list[Any] = [expression]
        if error_class is not None:
            where.append("p.error_class = ?")
            params.append(error_class)
        if with_resolution:
            where.append("p.resolutions > 0")
        columns = ", ".join(f"p.{name}" for name in self._COLUMNS)
        weights = ", ".join(str(w) for w in WEIGHTS)
        sql = (f"SELECT {columns}, bm25(search, {weights}) AS score, "
               f"snippet(search, -1, ?, ?, '…', 16) AS snippet "
               f"FROM search JOIN patterns p ON p.id = search.rowid WHERE {' AND '.join(where)} "
               f"ORDER BY score, p.last_seen DESC, p.id LIMIT ?")
        rows = db.execute(sql, [highlight[0], highlight[1], *params, limit]).fetchall()
        results = []
        for rank, row in enumerate(rows, start=1):
            hit = self._pattern(row)
            hit.update(rank=rank, score=round(-row[len(self._COLUMNS)], 4), snippet=row[len(self._COLUMNS) + 1])
            results.append(hit)
        return results

    def _pattern(self, row: tuple[Any, ...]) -> dict[str, Any]:
        fields = dict(zip(self._COLUMNS, row[: len(self._COLUMNS)], strict=True))
        return patterns.hit(fields, self._best_resolution(fields["id"]) if fields["resolutions"] else None)

    def _best_resolution(self, pattern: int) -> dict[str, Any] | None:
        row = self._connect().execute(
            "SELECT id, resolution, confidence, calls_between, same_input, timestamp FROM resolutions "
            "WHERE pattern = ? ORDER BY confidence DESC, timestamp DESC, line DESC LIMIT 1", (pattern,)).fetchone()
        if row is None:
            return None
        return {"id": row[0], "resolution": row[1], "confidence": row[2], "calls_between": row[3],
                "same_input": bool(row[4]), "timestamp": row[5]}

    def _stats(self, top: int) -> dict[str, Any]:
        db = self._connect()
        count, events, resolved = db.execute(
            "SELECT count(*), coalesce(sum(occurrences), 0), coalesce(sum(resolutions > 0), 0) FROM patterns"
        ).fetchone()
        (resolutions,) = db.execute("SELECT count(*) FROM resolution_log").fetchone()
        by_class = [{"error_class": c, "patterns": n, "occurrences": o, "resolved": r} for c, n, o, r in db.execute(
            "SELECT coalesce(error_class, 'unknown'), count(*), sum(occurrences), sum(resolutions > 0) FROM patterns "
            "GROUP BY 1 ORDER BY 3 DESC, 1")]
        columns = ", ".join(self._COLUMNS)
        frequent = [self._pattern(row) for row in db.execute(
            f"SELECT {columns} FROM patterns ORDER BY occurrences DESC, last_seen DESC, id LIMIT ?", (top,))]
        state = self._state(db)
        return {
            "errors": events,
            "patterns": count,
            "resolutions": resolutions,
            "resolved_patterns": resolved,
            "resolved_share": round(resolved / count, 4) if count else 0.0,
            "by_class": by_class,
            "most_frequent": frequent,
            "skipped_lines": state.skipped_count,
            "skipped_line_numbers": state.skipped,
            "indexed_bytes": self.store.log_size(layout.MEMORY_LOG)
            - self.store.log_bytes_after(layout.MEMORY_LOG, state.offset),
            "indexed_lines": state.lines,
        }
