"""The path holders as the PreToolUse hook reads them: an index beside the leases, and on a database tree
this machine's copy of them (docs/leases.md, "The hook's index and this machine's copy").

One file, ``state/.path-leases.index`` (hidden: not state, never moved by ``loki migrate``), written whole
and renamed into place. Line 1 is a JSON header; every other line is one holder (a live lease, or on a
database tree a claim of a task with paths too), lease-shaped, in :data:`BUCKETS` + 1 groups: a holder is
in the group of each of its patterns' **keys**, a pattern's literal leading segments, at most
:data:`DEPTH` of them (``src/auth/**`` -> ``src/auth``, ``docs/*.md`` -> ``docs``, ``**/*.py`` -> the
empty key). A group is the key's FNV-1a hash modulo :data:`BUCKETS`, the empty key its own group. Every
path a pattern covers starts with the pattern's literal leading segments (``leasegate._may_cover``), so
the holders that may cover ``a/b/c.py`` are all in the groups of ``""``, ``a`` and ``a/b``: the hook parses
those three groups, not the whole document. A collision only adds candidates, which the exact test drops.

The header: ``version``, ``offsets`` (the byte offset of each group after the header, and the end),
``count`` (holders), ``source`` (files: the ``[inode, size, mtime_ns]`` of ``state/path-leases.json`` it was
built from; the hook uses the index only while the document is still that one, else it reads the
document itself: an index that lags can cost time, never a missed holder), ``claims`` (true: the claims of
tasks with paths and the landing tasks with paths are in it, a database tree's copy; false: the hook reads
``queue/in-progress.json`` and ``queue/landing.json``) and
``refreshed_at`` (a copy: when it was written, by this machine's clock).

Hot path: standard library only (``json``, ``os``).
"""

from __future__ import annotations

import json
import os

from loki.storage import layout

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

INDEX = "state/.path-leases.index"
"""Beside ``state/path-leases.json`` on a file tree; under ``.loki/cache/`` on a database tree."""
VERSION = 1
DENIALS = "logs/path-leases.jsonl"
"""Edits the hook refused (or asked about), one JSON line each, for ``loki watch`` and ``loki status``:
under the tree's ``logs/`` on a file tree, this machine's ``.loki/cache/logs/`` on a database tree (the
hook never connects)."""
BUCKETS = 256
DEPTH = 2
"""Literal leading segments a key keeps: two tell ``src/auth`` from ``src/billing``."""
FIELDS = ("lease_id", "agent", "patterns", "exclusive", "task", "expires_at", "claim", "landing")
WILD = ("*", "?", "[", "\\")


def key_of(pattern: str) -> str:
    """The literal leading segments of a stored (normalised) pattern, at most :data:`DEPTH`."""
    keep = []
    for segment in pattern.split("/")[:DEPTH]:
        if any(c in segment for c in WILD):
            break
        keep.append(segment)
    return "/".join(keep)


def path_keys(rel: str) -> list[str]:
    """The keys whose holders may cover the repository-relative path ``rel``: ``""`` and its first
    :data:`DEPTH` leading prefixes."""
    names = rel.split("/")
    return ["", *("/".join(names[:n]) for n in range(1, min(DEPTH, len(names)) + 1))]


def group(key: str) -> int:
    """The group of a key: :data:`BUCKETS` for the empty key, else 32-bit FNV-1a of its UTF-8 bytes."""
    if not key:
        return BUCKETS
    value = 0x811C9DC5
    for byte in key.encode("utf-8", "surrogatepass"):
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value % BUCKETS


def source_of(path: str) -> list[int] | None:
    """The identity of the document the index is built from (inode, size, mtime in ns), or None."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def build(holders: Iterable[dict[str, Any]], *, source: list[int] | None, claims: bool,
          refreshed_at: str | None = None) -> bytes:
    """The index of ``holders`` (lease-shaped records), as bytes to write whole."""
    groups: list[list[bytes]] = [[] for _ in range(BUCKETS + 1)]
    count = 0
    for holder in holders:
        line = json.dumps({f: holder.get(f) for f in FIELDS}, ensure_ascii=False, separators=(",", ":"))
        data = line.encode("utf-8", "surrogatepass") + b"\n"
        count += 1
        for number in sorted({group(key_of(p)) for p in holder["patterns"]}):
            groups[number].append(data)
    offsets = [0]
    for lines in groups:
        offsets.append(offsets[-1] + sum(len(line) for line in lines))
    header = {"version": VERSION, "count": count, "claims": claims, "source": source, "refreshed_at": refreshed_at,
              "offsets": offsets}
    return json.dumps(header, separators=(",", ":")).encode() + b"\n" + b"".join(b"".join(g) for g in groups)


class Index:
    """An index file opened by the hook: its header, and the holders of the groups a path may be in."""

    def __init__(self, path: str, header: dict[str, Any], start: int) -> None:
        self.path = path
        self.header = header
        self.start = start
        self._groups: dict[int, list[dict[str, Any]]] = {}

    @property
    def count(self) -> int:
        return int(self.header["count"])

    @property
    def claims(self) -> bool:
        return bool(self.header.get("claims"))

    @property
    def refreshed_at(self) -> str | None:
        value = self.header.get("refreshed_at")
        return value if isinstance(value, str) else None

    def candidates(self, rel: str) -> list[dict[str, Any]]:
        """The holders whose patterns may cover ``rel`` (a superset; unvalidated, odd lines skipped)."""
        found: list[dict[str, Any]] = []
        seen: set[int] = set()
        for key in path_keys(rel):
            number = group(key)
            if number in seen:
                continue
            seen.add(number)
            found.extend(self._group(number))
        return found

    def everything(self) -> list[dict[str, Any]]:
        """Every holder (each once)."""
        found: dict[str, dict[str, Any]] = {}
        for number in range(BUCKETS + 1):
            for holder in self._group(number):
                found.setdefault(str(holder.get("lease_id")), holder)
        return list(found.values())

    def _group(self, number: int) -> list[dict[str, Any]]:
        cached = self._groups.get(number)
        if cached is not None:
            return cached
        offsets = self.header["offsets"]
        begin, end = offsets[number], offsets[number + 1]
        holders: list[dict[str, Any]] = []
        if end > begin:
            with open(self.path, "rb") as f:
                f.seek(self.start + begin)
                data = f.read(end - begin)
            for line in data.splitlines():
                try:
                    holder = json.loads(line)
                except ValueError:
                    continue
                if isinstance(holder, dict) and isinstance(holder.get("patterns"), list):
                    holders.append(holder)
        self._groups[number] = holders
        return holders


def open_index(hot: str, document: str | None) -> Index | None:
    """The index under ``hot`` (the tree, or this machine's copies), or None: absent, unreadable, of another
    version, or (``document`` given: a file tree) built from another version of that document."""
    path = os.path.join(hot, *INDEX.split("/"))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            first = f.readline(1 << 20)
        header = json.loads(first)
    except (OSError, ValueError):
        return None
    if not isinstance(header, dict) or header.get("version") != VERSION or not isinstance(header.get("count"), int):
        return None
    offsets = header.get("offsets")
    if not isinstance(offsets, list) or len(offsets) != BUCKETS + 2 or not all(isinstance(o, int) for o in offsets):
        return None
    if document is not None and (header.get("source") is None or header["source"] != source_of(document)):
        return None
    return Index(path, header, len(first))


def write(path: str, data: bytes) -> None:
    """Write the index whole (a temp file renamed over it: a reader sees the old one or the new one)."""
    from loki.storage.store import atomic_write

    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, data, sync_dir=False)  # derived: the document (or the database) is the truth


def rebuild_beside(root: str) -> str:
    """Build the index of a file tree from ``state/path-leases.json`` as it is now (its identity and its
    content read from one descriptor: the index names exactly the version it shows); returns its path."""
    document = document_path(root)
    try:
        with open(document, "rb") as f:
            st = os.fstat(f.fileno())
            doc = json.loads(f.read())
        source: list[int] | None = [st.st_ino, st.st_size, st.st_mtime_ns]
    except FileNotFoundError:
        doc, source = {}, None
    live = doc.get("leases") if isinstance(doc, dict) else None
    path = os.path.join(root, *INDEX.split("/"))
    write(path, build(live if isinstance(live, list) else [], source=source, claims=False))
    return path


def document_path(root: str) -> str:
    return os.path.join(root, *layout.LEASES.split("/"))


# -- the hook's lines on a database tree (this machine's file, read by the watcher) ---------------------


def log_size(path: str) -> int:
    try:
        return os.stat(path, follow_symlinks=False).st_size
    except OSError:
        return 0


def log_read(path: str, position: int) -> tuple[bytes, int]:
    """The complete lines appended to ``path`` after byte ``position``, and the position after them (a file
    shorter than ``position`` was replaced: read from its start)."""
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size < position:
                position = 0
            f.seek(position)
            data = f.read(1 << 24)
    except FileNotFoundError:
        return b"", 0
    end = data.rfind(b"\n") + 1  # a line still being written waits for the next look
    return data[:end], position + end


def log_tail(path: str, max_bytes: int) -> bytes:
    """The complete lines of the last ``max_bytes`` of ``path``."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - max_bytes))
            data = f.read(max_bytes)
            if size > max_bytes:
                data = data[data.find(b"\n") + 1:]
    except FileNotFoundError:
        return b""
    return data[: data.rfind(b"\n") + 1]
