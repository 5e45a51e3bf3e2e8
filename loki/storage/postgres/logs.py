"""Append-only logs as rows, read after a position that is a line's sequence number (docs/postgres.md).

A log (``logs/signals.jsonl``, ``signals/DRIFT_DETECTED``, ``memory/errors.jsonl`` ...) is a row of
``loki_logs`` and one row of ``loki_log_lines`` per line. The lines of a log are numbered
``base+1 .. last_seq``; a *position* (opaque to callers, docs/storage.md "Log positions") is the
number of the last line read: ``None`` or ``base`` is the start, ``last_seq`` the end, and the line
numbered ``n`` starts at position ``n - 1``. Appenders take the log's lock domain (``<log>.lock``, the
advisory lock ``transaction(log)`` takes too: compaction and ``record_resolutions`` hold it), so numbers
are dense and given in commit order. A rewrite (compaction) or a removal starts the numbering again
*after* every old position, so a position saved before it is no longer valid (:meth:`PgLogs.log_valid`)
and a line's number is never reused: ``DRIFT_DETECTED@<position>`` stays a unique id forever.

Each line also keeps the byte offset it would have in a file, so sizes for reports (``log_size``,
``log_bytes_after``, the drift backlog) and ``read_tail``'s window are what the file store says.
A Markdown file that is appended to but read back whole (``CONTINUITY.md``,
``institutional-knowledge.md``: ``read_whole=True``) is a document, not a log: it is appended under
its lock through the store's ``read_text``/``write_text``, bounded by the state-file limit.

Publishing a line notifies the channel of the log's directory (LISTEN/NOTIFY: a drift line wakes the
watchers at once on every machine, :mod:`loki.storage.postgres.listen`).

A part of :class:`loki.storage.postgres.store.PgStore`, which owns one and hands it the whole store (typed
as :class:`loki.storage.postgres.shape.PgState`) for what is the store's: the size limit, the lock timeout,
and the document a Markdown file read whole is. ``log_text``, ``log_exists``, ``remove_log``, ``log_names``
and ``log_token`` answer for logs only (None, False: not a log); the store asks them after the items.
"""

from __future__ import annotations

import builtins

from loki.storage import jsonio, layout
from loki.storage.logpos import LogLine
from loki.storage.postgres import domains, listen
from loki.storage.postgres.queries import query

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Hashable, Iterable
    from typing import Any

    import psycopg

    from loki.storage.postgres.shape import PgState

BATCH_ROWS = 1000
"""Lines fetched or inserted per statement (a log may be far larger than memory should hold)."""



class _Meta:
    """A log's row: its lines are ``(base, last]``; ``size`` in bytes as a file; ``torn`` last line."""

    __slots__ = ("base", "last", "size", "torn")

    def __init__(self, row: tuple[Any, ...] | None) -> None:
        self.base, self.last, self.size, self.torn = row if row is not None else (0, 0, 0, False)

    def valid(self, position: Any) -> bool:
        return position is None or (isinstance(position, int) and self.base <= position <= self.last)

    @property
    def readable(self) -> int:
        """The last line a reader may see (a torn last line is still being written)."""
        return int(self.last) - 1 if self.torn else int(self.last)


def _split(payload: bytes) -> tuple[list[bytes], bool]:
    """The lines of a payload, and whether its last one has no newline (torn)."""
    lines = payload.split(b"\n")
    torn = lines[-1] != b""
    return (lines if torn else lines[:-1]), torn


class PgLogs:
    """``append_lines``, ``append_text``, ``rewrite_lines``, ``log_end``, ``read_after`` ... on rows."""

    def __init__(self, store: PgState) -> None:
        self.store = store
        self.db = store.db

    # -- appending ---------------------------------------------------------------------------------

    def append_lines(self, rel: str, records: Iterable[Any], *, lock: bool = True) -> int:
        """Append JSON lines; returns the position they start at (the log's end before them)."""
        return self.append_bytes(rel, "".join(jsonio.dumps_compact(r) + "\n" for r in records).encode("utf-8"),
                                 lock=lock)

    def append_text(self, rel: str, lines: Iterable[str], *, lock: bool = True, read_whole: bool = False) -> int:
        """Append plain text lines. ``read_whole``: a Markdown file read back whole, kept as a document."""
        payload = "".join(line.rstrip("\n") + "\n" for line in lines).encode("utf-8")
        return self.append_bytes(rel, payload, lock=lock, read_whole=read_whole)

    def append_bytes(self, rel: str, payload: bytes, *, lock: bool = True, read_whole: bool = False) -> int:
        if not payload:
            return 0
        if read_whole:
            return self._append_document(rel, payload)
        lines, torn = _split(payload)
        size = len(payload)
        with self.db.transaction() as conn:
            if lock:
                domains.hold(self.db, layout.lock_for(rel), self.store.lock_timeout)
            row = conn.execute(query("reserve_log_lines"),
                               {"name": rel, "count": len(lines), "size": size, "torn": torn}).fetchone()
            assert row is not None
            start, offset = int(row[0]), int(row[1])
            self._insert_lines(conn, rel, start, offset, lines)
            listen.notify(conn, self.db, rel, rel)
        return start

    @staticmethod
    def _insert_lines(conn: psycopg.Connection[Any], rel: str, start: int, offset: int,
                      lines: builtins.list[bytes]) -> int:
        """Insert ``lines`` numbered from ``start + 1`` at byte ``offset``; returns the offset after them."""
        offsets = []
        for line in lines:
            offsets.append(offset)
            offset += len(line) + 1
        conn.execute(query("insert_log_lines"), (rel, start, offsets, lines))
        return offset

    def _append_document(self, rel: str, payload: bytes) -> int:
        """A Markdown file read back whole: appended under its lock, bounded like any document."""
        with self.db.transaction():
            domains.hold(self.db, layout.lock_for(rel), self.store.lock_timeout)
            current = (self.store.read_text(rel) or "").encode("utf-8")
            if current and not current.endswith(b"\n"):
                current += b"\n"  # a torn last line is never glued onto (docs/storage.md)
            self.store.check_size(rel, len(current) + len(payload))
            self.store.write_text(rel, (current + payload).decode("utf-8"))
        return len(current)

    def rewrite_lines(self, rel: str, records: Iterable[Any]) -> int:
        """Replace a log with ``records`` (compaction; the caller holds the log's lock). Old positions
        become invalid. The records are streamed in batches, never held whole, and may be read from the
        old lines while they stream (compaction copies lines it found at their positions): the new
        lines are numbered after the old ones, which are deleted only once the last record is in."""
        count = 0
        with self.db.transaction() as conn:
            # Re-entrant: the caller's transaction(rel) holds it already.
            domains.hold(self.db, layout.lock_for(rel), self.store.lock_timeout)
            conn.execute(query("ensure_log"), (rel,))
            row = conn.execute(query("lock_log"), (rel,)).fetchone()
            assert row is not None
            old_last = int(row[0])
            start = old_last + 1  # the new base: past every position the log ever had
            offset = 0
            batch: builtins.list[bytes] = []
            for record in records:
                batch.append(jsonio.dumps_compact(record).encode("utf-8"))
                if len(batch) >= BATCH_ROWS:
                    offset = self._insert_lines(conn, rel, start + count, offset, batch)
                    count += len(batch)
                    batch = []
            if batch:
                offset = self._insert_lines(conn, rel, start + count, offset, batch)
                count += len(batch)
            conn.execute(query("delete_log_lines_up_to"), (rel, old_last))
            conn.execute(query("set_log_range"), (start, start + count, offset, rel))
        return count

    @staticmethod
    def _restart(conn: psycopg.Connection[Any], rel: str) -> int:
        """Empty a log and move its numbering past every position it ever had; returns the new base."""
        row = conn.execute(query("restart_log"), {"name": rel}).fetchone()
        assert row is not None
        conn.execute(query("delete_log_lines"), (rel,))
        return int(row[0])

    # -- reading: one statement each, no unit of work (a reader takes no lock) ---------------------------

    def _meta(self, rel: str) -> _Meta:
        found = self.db.rows(query("log_meta"), (rel,))
        return _Meta(found[0] if found else None)

    def log_names(self, rel_dir: str) -> set[str]:
        """The names under ``rel_dir`` that are logs, or directories of logs (as a file tree lists its log files)."""
        low = rel_dir.rstrip("/") + "/"
        names = {str(name)[len(low):].split("/", 1)[0] for (name,) in
                 self.db.rows(query("logs_in_range"),
                           (low, low[:-1] + "0"))}
        return names

    def _is_log(self, rel: str) -> bool:
        return bool(self.db.rows(query("log_has_lines"), (rel,)))

    def log_end(self, rel: str) -> int:
        """The position after the last line now (its start when the log is absent)."""
        return int(self._meta(rel).last)

    def log_size(self, rel: str) -> int:
        """The log's size in bytes, as a file (a measure for reports, never a position)."""
        return int(self._meta(rel).size)

    def log_valid(self, rel: str, position: Any) -> bool:
        """False if ``position`` is not one of this log's (it was rewritten or removed since)."""
        return self._meta(rel).valid(position)

    def _offset_after(self, rel: str, meta: _Meta, position: int) -> int:
        """The byte offset where the line after ``position`` starts (the log's size at its end)."""
        if position >= meta.last:
            return int(meta.size)
        found = self.db.rows(query("log_line_offset"), (rel, position + 1))
        return int(found[0][0]) if found else int(meta.size)

    def log_bytes_after(self, rel: str, position: Any) -> int:
        """How many bytes of the log come after ``position`` (0 when it is not one of the log's)."""
        meta = self._meta(rel)
        if position is None:
            return int(meta.size)
        if not meta.valid(position):
            return 0
        return int(meta.size) - self._offset_after(rel, meta, position)

    def read_after(self, rel: str, position: Any, limit: int = 1 << 20, *, whole: bool = False,
                   final: bool = False) -> tuple[builtins.list[LogLine], Any]:
        """The complete lines after ``position`` (None: the start), about ``limit`` bytes of them, and
        the position after the last one (``position`` itself when there is none; see the module).

        The lines up to the end the first statement sees: a line committed meanwhile is for the next read."""
        lines: builtins.list[LogLine] = []
        total = 0
        meta = self._meta(rel)
        here = meta.base if position is None else int(position)
        stop = meta.last if final else meta.readable
        while here < stop:
            found = self.db.rows(
                query("log_lines_after"),
                {"limit": limit, "whole": whole, "log": rel, "here": here, "stop": stop, "rows": BATCH_ROWS})
            for seq, length, data in found:
                if lines and total + length + 1 > limit:
                    return lines, here
                lines.append(LogLine(int(seq) - 1, None if data is None else bytes(data), int(length)))
                total += length + 1
                here = int(seq)
            if not found or total >= limit or len(found) < BATCH_ROWS:
                break
        return lines, here

    def read_line(self, rel: str, position: Any) -> bytes:
        """The line starting at ``position`` (one :meth:`read_after` returned), without its newline."""
        found = self.db.rows(query("log_line"), (rel, int(position) + 1))
        return bytes(found[0][0]) if found else b""

    def read_tail(self, rel: str, limit: int) -> builtins.list[bytes]:
        """The complete lines within the last ``limit`` bytes, oldest first (not a torn last line)."""
        found = self.db.rows(query("log_tail"), (rel, limit))
        return [bytes(row[0]) for row in found]

    def log_windows(self, rel: str, position: Any, window: int) -> tuple[bytes, bytes]:
        """The first and the last ``window`` bytes of the log before ``position`` (empty when it is
        not one of the log's: a rewritten log never matches what was read before)."""
        meta = self._meta(rel)
        if position is None or not meta.valid(position):
            return b"", b""
        end = self._offset_after(rel, meta, position)
        return self._bytes_between(rel, meta, 0, min(window, end)), self._bytes_between(rel, meta, max(0, end - window),
                                                                                       end)

    def _bytes_between(self, rel: str, meta: _Meta, start: int, end: int) -> bytes:
        """The log's bytes ``[start, end)`` as a file would hold them."""
        if end <= start:
            return b""
        found = self.db.rows(query("log_lines_between"), (rel, end, start))
        if not found:
            return b""
        first = int(found[0][1])
        text = b"".join(bytes(data) + (b"" if meta.torn and seq == meta.last else b"\n") for seq, _, data in found)
        return text[start - first:end - first]

    # -- the logs' answers to names the items and the documents share (PgStore asks them: store.py) -------

    def log_text(self, rel: str) -> str | None:
        """A log read whole as text (a test's or an inspection's look); None: no such log."""
        if not self._is_log(rel):
            return None
        lines, _ = self.read_after(rel, None, 1 << 62, whole=True, final=True)
        meta = self._meta(rel)
        text = b"\n".join(line.data or b"" for line in lines) + (b"" if meta.torn else b"\n")
        return jsonio.decode_utf8(text)

    def log_exists(self, rel: str) -> bool:
        return self._is_log(rel)

    def remove_log(self, rel: str) -> bool:
        """Remove a log (its old positions stay invalid for good); False: there was no log with lines."""
        with self.db.transaction() as conn:
            if conn.execute(query("lock_log_row"), (rel,)).fetchone() is not None:
                had = conn.execute(query("log_has_a_line"), (rel,)).fetchone()
                self._restart(conn, rel)
                if had is not None:
                    return True
        return False

    def log_token(self, rel: str) -> Hashable | None:
        """A log's token: where its numbering starts and ends (appends and rewrites both change it); None: no log."""
        found = self.db.rows(query("log_token"), (rel,))
        if found:
            return ("log", *found[0])
        return None
