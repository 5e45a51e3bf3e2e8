"""Error memory's search on PostgreSQL: full-text search (``tsvector``, ranked by ``ts_rank``) shared
by every machine, instead of each machine's SQLite FTS5 cache (docs/memory.md, docs/postgres.md).

The log ``memory/errors.jsonl`` is rows of this database (:mod:`.logs`); the search is tables beside
it: one row per *pattern* (errors with one ``content_hash``) with a weighted, stemmed ``tsvector``
(``english``: ``failing`` finds ``FAILED``) and a GIN index, the resolutions attached to them, and
where the tables stand in the log (``loki_memory_meta``: the position read up to). The rules --
what a pattern keeps, how a resolution attaches -- are the SQLite cache's (:mod:`loki.memory.patterns`).

* **Caught up lazily, once for everyone.** The hooks only append to the log. A search first reads
  the lines appended since the saved position (on any machine) and indexes them, in one transaction
  holding the lock ``memory/errors.index.lock``: two searchers never index a line twice, and every
  machine then finds what any machine captured.
* **Rebuilt** when the log is no longer the one that was indexed: a compaction (or a removal) moves
  the log's numbering past every old position, so the saved one is no longer valid
  (:meth:`Logs.log_valid`), and the tables are refilled from the log in one transaction.
* A line that is not a record is skipped with its line number, as the SQLite cache does.
* Text is searched as words: punctuation separates them (``loki_words``: ``tests/test_calc.py`` is
  ``tests test calc py``), as the SQLite cache's FTS5 tokenizer reads it.
* A query is words, never syntax: every word must match (``plainto_tsquery``); when that finds
  nothing, any word may (the words' queries joined with ``||``). ``ts_headline`` marks the matched
  words in a snippet.
"""

from __future__ import annotations

import json

from loki.storage import jsonio, layout
from loki.storage.postgres import domains, queries
from loki.storage.postgres.queries import query

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    import psycopg

    from loki.storage.postgres.shape import PgState as PgStore
    from loki.storage.state import MemoryRules

VERSION = "1"
CHUNK = 4 << 20
INDEX_LOCK = f"{layout.MEMORY_DIR}/errors.index.lock"
SNIPPET_WORDS = 16

class _State:
    """Where the tables stand in the log (``loki_memory_meta``)."""

    __slots__ = ("lines", "position", "skipped", "skipped_count", "version")

    def __init__(self, meta: dict[str, str]) -> None:
        self.version = meta.get("version")
        self.position: int | None = int(meta["position"]) if meta.get("position") else None
        self.lines = int(meta.get("lines", "0"))
        self.skipped: list[int] = json.loads(meta.get("skipped", "[]"))
        self.skipped_count = int(meta.get("skipped_count", "0"))


class PgMemorySearch:
    """Error memory's search in one schema's tables (:class:`loki.storage.state.MemorySearch`)."""

    def __init__(self, store: PgStore, rules: MemoryRules) -> None:
        self.store = store
        self.rules = rules
        """Error memory's rules for reading its log (loki/memory/patterns.py), handed in: storage is below it."""
        self.columns = ", ".join(f"p.{name}" for name in ("id", *rules.COLUMNS))
        self.db = store.db
        self.warnings: list[str] = []

    def close(self) -> None:
        """Nothing to close: the tables live in the store's database."""

    # -- keeping up with the log ----------------------------------------------------------------------

    def sync(self) -> dict[str, Any]:
        """Index what the log gained since the tables last read it (rebuild if it was rewritten).

        Returns ``{"added", "skipped", "rebuilt": reason or None, "offset": the position read up to}``.
        """
        state = self._state()
        if state.version == VERSION and self.store.log_valid(layout.MEMORY_LOG, state.position) \
                and state.position == self.store.log_end(layout.MEMORY_LOG):
            return {"added": 0, "skipped": 0, "rebuilt": None, "offset": state.position}
        with self.db.transaction() as conn:
            domains.hold(self.db, INDEX_LOCK, self.store.lock_timeout)
            state = self._state()  # another searcher may have caught up while we waited
            reason = self._stale_reason(state)
            if reason is not None:
                return self._refill(conn, reason)
            return self._consume(conn, state)

    def rebuild(self, reason: str) -> dict[str, Any]:
        """Empty the tables and index the whole log again."""
        with self.db.transaction() as conn:
            domains.hold(self.db, INDEX_LOCK, self.store.lock_timeout)
            return self._refill(conn, reason)

    def _state(self) -> _State:
        with self.db.transaction() as conn:
            return _State({str(k): str(v) for k, v in conn.execute(query("memory_meta"))})

    def _stale_reason(self, state: _State) -> str | None:
        if state.version is None:
            return None if state.position is None else "the index has no version"
        if state.version != VERSION:
            return f"the index format changed (version {state.version}, now {VERSION})"
        if not self.store.log_valid(layout.MEMORY_LOG, state.position):
            return "the log was rewritten since it was indexed (compacted or edited)"
        return None

    def _refill(self, conn: psycopg.Connection[Any], reason: str) -> dict[str, Any]:
        for statement in (query("empty_memory_patterns"), query("empty_memory_records"),
                          query("empty_memory_resolutions"), query("empty_memory_resolution_log"),
                          query("empty_memory_meta")):  # in this order
            conn.execute(statement)
        report = self._consume(conn, _State({}))
        report["rebuilt"] = reason
        return report

    def _consume(self, conn: psycopg.Connection[Any], state: _State) -> dict[str, Any]:
        """Index every line after the saved position and save the new one (inside the caller's transaction)."""
        self.warnings = []
        position, line = state.position, state.lines
        added = skipped = 0
        while True:
            lines, position = self.store.read_after(layout.MEMORY_LOG, position, CHUNK, whole=True)
            if not lines:
                break
            for entry in lines:
                line += 1
                raw = entry.data or b""
                if not raw.strip():
                    continue
                record, problem = self.rules.read_line(self.store.schemas, raw)
                if record is not None and b"\\u0000" in raw:
                    # Stored before loki dropped NULs at the write (or appended by hand): text columns
                    # cannot hold one, and one such line would stop the search for everyone.
                    record = jsonio.without_nul(record)
                    raw = jsonio.dumps_compact(record).encode("utf-8")
                if record is None:
                    skipped += 1
                    state.skipped = [*state.skipped, line][-self.rules.SKIPPED_KEPT:]
                    state.skipped_count += 1
                    self.warnings.append(f"{layout.MEMORY_LOG} line {line}: {problem}; skipped")
                    continue
                if record["kind"] == "error":
                    self._index_error(conn, record, line)
                else:
                    self._index_resolution(conn, record, raw, line)
                added += 1
        if position is None:
            position = self.store.log_end(layout.MEMORY_LOG)
        meta = {"version": VERSION, "position": str(position), "lines": str(line),
                "skipped": json.dumps(state.skipped), "skipped_count": str(state.skipped_count)}
        conn.cursor().executemany(query("write_memory_meta"), list(meta.items()))
        return {"added": added, "skipped": skipped, "rebuilt": None, "offset": position}

    def _index_error(self, conn: psycopg.Connection[Any], record: dict[str, Any], line: int) -> None:
        fields = self.rules.error_fields(record, line)
        seen = record["timestamp"]
        row = conn.execute(query("upsert_pattern"), {
            **fields, "content_hash": record["content_hash"], "first": record.get("first_seen") or seen,
            "seen": seen, "occurrences": int(record.get("occurrences") or 1),
            "refs_text": self.rules.refs_text(fields["file_references"])}).fetchone()
        assert row is not None
        ids = [record["id"], *record.get("aliases", [])]
        conn.execute(query("record_ids_of_pattern"), (ids, row[0]))

    def _index_resolution(self, conn: psycopg.Connection[Any], record: dict[str, Any], raw: bytes, line: int) -> None:
        conn.execute(query("log_resolution"), (record["id"], line, raw.decode("utf-8")))
        matched = conn.execute(query("patterns_resolved"), (list(dict.fromkeys(record["resolves"])),)).fetchall()
        for pattern, text in matched:
            added = conn.execute(
                query("add_resolution"),
                (pattern, record["id"], record["resolution"], record["confidence"], record["calls_between"],
                 bool(record.get("same_input")), record["timestamp"], line)).fetchone()
            if added is not None:
                counted = self.rules.with_resolution(text, record["resolution"])
                conn.execute(query("count_resolution"), (counted, pattern))

    # -- reading ----------------------------------------------------------------------------------------

    def search(self, query: str, *, limit: int = 10, error_class: str | None = None,
               with_resolution: bool = False, highlight: tuple[str, str] = ("**", "**")) -> list[dict[str, Any]]:
        """Patterns matching ``query`` by ``ts_rank``, best first (see the module for the rules)."""
        words = [word.replace("_", " ") for word in self.rules.query_words(query, limit)]  # as loki_words() splits
        self.sync()
        every = (queries.query("word_query"), [" ".join(words)])
        rows = self._match(every, limit, error_class, with_resolution, highlight)
        if not rows and len(words) > 1:
            anyone = (" || ".join([queries.query("word_query")] * len(words)), list(words))
            rows = self._match(anyone, limit, error_class, with_resolution, highlight)
        return rows

    def _match(self, tsquery: tuple[str, list[str]], limit: int, error_class: str | None, with_resolution: bool,
               highlight: tuple[str, str]) -> list[dict[str, Any]]:
        expression, words = tsquery
        options = (f'StartSel="{highlight[0]}", StopSel="{highlight[1]}", MaxWords={SNIPPET_WORDS}, MinWords=4, '
                   'MaxFragments=1, FragmentDelimiter=" … "')
        sql = query("match_patterns").replace("/*tsquery*/", expression)  # one word_query, or any of several
        with self.db.transaction() as conn:
            found = conn.execute(sql, [options, *words, error_class, error_class, with_resolution, limit]).fetchall()
            results = []
            for rank, row in enumerate(found, start=1):
                shown = self._pattern(conn, row)
                shown.update(rank=rank, score=round(float(row[-2]), 4), snippet=row[-1])
                results.append(shown)
        return results

    def _pattern(self, conn: psycopg.Connection[Any], row: tuple[Any, ...]) -> dict[str, Any]:
        fields = dict(zip(("id", *self.rules.COLUMNS), row, strict=False))
        best = None
        if fields["resolutions"]:
            found = conn.execute(query("best_resolution"), (fields["id"],)).fetchone()
            if found is not None:
                best = {"id": found[0], "resolution": found[1], "confidence": found[2], "calls_between": found[3],
                        "same_input": bool(found[4]), "timestamp": found[5]}
        return self.rules.hit(fields, best)

    def stats(self, *, top: int = 10) -> dict[str, Any]:
        """Totals, counts by class, the most frequent patterns and the share of resolved ones."""
        self.sync()
        state = self._state()
        with self.db.transaction() as conn:
            count, events, resolved = conn.execute(query("memory_totals")).fetchone() or (0, 0, 0)
            (resolutions,) = conn.execute(query("count_resolutions")).fetchone() or (0,)
            by_class = [{"error_class": c, "patterns": int(n), "occurrences": int(o), "resolved": int(r)}
                        for c, n, o, r in conn.execute(query("patterns_by_class"))]
            frequent = [self._pattern(conn, row) for row in conn.execute(query("frequent_patterns"), (top,)).fetchall()]
        count, events, resolved = int(count), int(events), int(resolved)
        return {
            "errors": events,
            "patterns": count,
            "resolutions": int(resolutions),
            "resolved_patterns": resolved,
            "resolved_share": round(resolved / count, 4) if count else 0.0,
            "by_class": by_class,
            "most_frequent": frequent,
            "skipped_lines": state.skipped_count,
            "skipped_line_numbers": state.skipped,
            "indexed_bytes": self.store.log_size(layout.MEMORY_LOG)
            - self.store.log_bytes_after(layout.MEMORY_LOG, state.position),
            "indexed_lines": state.lines,
        }

    def resolution_records(self) -> Iterator[dict[str, Any]]:
        """Every resolution record of the log, in log order (for rebuilding the prefix hints)."""
        self.sync()
        with self.db.transaction() as conn:
            rows = conn.execute(query("resolution_records")).fetchall()
        for (text,) in rows:
            yield json.loads(text)
