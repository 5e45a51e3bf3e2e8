"""Reading an append-only log after a position: the operations both stores share (docs/storage.md).

A position is opaque outside loki/storage/: a caller gets one from the store, keeps it (a saved one
may be written to a state document and read back), hands it back, and compares it only for
equality. Both stores happen to count bytes; only this module and the stores compute with them.
Every operation here is built on the store's own ``read_from(rel, offset, limit) -> (bytes, size)``.
"""

from __future__ import annotations

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any, Protocol

    class LogReader(Protocol):
        """The two reads of :class:`loki.storage.state.Logs` that :func:`every_line` needs (named here, not
        imported: the state protocols import :class:`LogLine` from this module)."""

        def read_after(self, rel: str, position: Any, limit: int = ..., *, whole: bool = ...,
                       final: bool = ...) -> tuple[list[LogLine], Any]: ...
        def read_line(self, rel: str, position: Any) -> bytes: ...


class LogLine:
    """One complete line of a log, without its newline.

    ``position``: where the line starts (opaque; distinct lines of one log have distinct positions);
    ``data``: the line, or None when it is longer than the read's limit (skipped, not held in memory);
    ``length``: its length in bytes.
    """

    __slots__ = ("data", "length", "position")

    def __init__(self, position: Any, data: bytes | None, length: int) -> None:
        self.position, self.data, self.length = position, data, length

    def __repr__(self) -> str:
        return f"LogLine({self.position!r}, {self.data!r}, {self.length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LogLine) and (self.position, self.data, self.length) == \
            (other.position, other.data, other.length)

    __hash__ = None  # type: ignore[assignment]


class LogReads:
    """The log reads of a store; the class mixing it in provides ``read_from``."""

    def read_from(self, rel: str, offset: int, limit: int = 1 << 20) -> tuple[bytes, int]:
        raise NotImplementedError

    def log_end(self, rel: str) -> int:
        """The position after the last byte of a log now (its start when absent)."""
        return self.read_from(rel, 0, 0)[1]

    def log_size(self, rel: str) -> int:
        """The log's size in bytes (a measure for reports, not a position)."""
        return self.read_from(rel, 0, 0)[1]

    def log_bytes_after(self, rel: str, position: int | None) -> int:
        """How many bytes of the log come after ``position`` (0 when it no longer reaches it)."""
        return max(0, self.log_size(rel) - (position or 0))

    def log_valid(self, rel: str, position: int | None) -> bool:
        """False if the log no longer reaches ``position`` (replaced or truncated by hand)."""
        return position is None or 0 <= position <= self.log_size(rel)

    def log_windows(self, rel: str, position: int | None, window: int) -> tuple[bytes, bytes]:
        """The first and the last ``window`` bytes of the log before ``position`` (a fingerprint of
        what was read up to it: if they change, the log was rewritten)."""
        end = position or 0
        head, _ = self.read_from(rel, 0, min(window, end))
        tail, _ = self.read_from(rel, max(0, end - window), min(window, end))
        return head, tail

    def read_after(self, rel: str, position: int | None, limit: int = 1 << 20, *, whole: bool = False,
                   final: bool = False) -> tuple[list[LogLine], int]:
        """The complete lines after ``position`` (None: the log's start), about ``limit`` bytes of them,
        and the position after the last one returned (``position`` itself when there is none).

        A line is never split. One longer than ``limit`` comes back whole with ``whole``; otherwise as
        a :class:`LogLine` without its data, read through in chunks of ``limit``. A last line without its
        newline (still being written, or torn by a crash) is not returned until it is complete, unless
        ``final`` (the caller holds the log's lock, so it is torn: it comes back as a line).
        """
        start = position or 0
        data, size = self.read_from(rel, start, limit)
        end = data.rfind(b"\n")
        if end < 0 and len(data) >= limit:  # the first line is longer than the limit
            if not whole:
                return self._skip_long(rel, start, len(data), limit, final)
            while True:
                more, size = self.read_from(rel, start + len(data), limit)
                if not more:
                    break
                newline = more.find(b"\n")
                data += more
                if newline >= 0:
                    end = len(data) - len(more) + newline
                    break
        lines: list[LogLine] = []
        here = start
        if end >= 0:
            for raw in data[:end].split(b"\n"):
                lines.append(LogLine(here, raw, len(raw)))
                here += len(raw) + 1
        rest = data[end + 1:]
        if final and rest and start + len(data) >= size:  # a torn last line
            lines.append(LogLine(here, rest, len(rest)))
            here += len(rest)
        return lines, here

    def _skip_long(self, rel: str, start: int, seen: int, limit: int, final: bool) -> tuple[list[LogLine], int]:
        while True:
            more, _ = self.read_from(rel, start + seen, limit)
            newline = more.find(b"\n")
            if newline >= 0:
                length = seen + newline
                return [LogLine(start, None, length)], start + length + 1
            if not more:
                if final and seen:
                    return [LogLine(start, None, seen)], start + seen
                return [], start  # still being written
            seen += len(more)

    def read_line(self, rel: str, position: int) -> bytes:
        """The line starting at ``position`` (one a :meth:`read_after` returned), without its newline."""
        lines, _ = self.read_after(rel, position, 1 << 16, whole=True, final=True)
        return lines[0].data or b"" if lines else b""

    def read_tail(self, rel: str, limit: int) -> list[bytes]:
        """The complete lines within the last ``limit`` bytes of a log, oldest first (a line the window
        cuts is dropped, and so is a last line without its newline)."""
        size = self.log_size(rel)
        start = max(0, size - limit)
        data, _ = self.read_from(rel, start, limit)
        if start > 0:
            cut = data.find(b"\n")
            data = data[cut + 1:] if cut >= 0 else b""
        cut = data.rfind(b"\n")
        return data[:cut].split(b"\n") if cut >= 0 else []


def every_line(store: LogReader, rel: str) -> Iterator[tuple[int, bytes]]:
    """``(line number, raw line)`` of a whole log, through any store's ``read_after`` (a chunk at a time:
    logs grow; a line longer than a chunk comes whole; a torn last line comes too)."""
    position: Any = None
    number = 0
    while True:
        lines, position = store.read_after(rel, position, 1 << 20, whole=True, final=True)
        if not lines:
            return
        for line in lines:
            number += 1
            yield number, line.data if line.data is not None else store.read_line(rel, line.position)
