"""``loki errors compact``: keep error memory bounded without losing what it learned.

The log gains one line per failure forever; compaction rewrites it (atomically, under the log's
lock, so no append is lost) by these rules:

1. **Duplicates merge.** All errors with one ``content_hash`` become one record: the latest
   occurrence, with ``occurrences`` (how many it stands for) and ``first_seen``. Its id survives;
   resolutions that named the others now name it. Ids that a strike streak still holds (it may
   be resolved later) are kept on the record as ``aliases``.
2. **Resolutions are never dropped.** Each is kept, re-pointed at the surviving ids. Two that
   resolve the same errors with the same call merge into the more confident one.
3. **The bound** is ``memory.max_records`` lines. Over it, the patterns dropped are the least
   recently seen ones *without* a resolution (and not held by an open streak); patterns with a
   resolution are kept even if that leaves the log over the bound, and the report says so.
4. **Unreadable lines** (not JSON, failing the schema) are not silently dropped: they are moved to
   ``memory/errors.jsonl.corrupt.<timestamp>`` and reported by line number.

Errors come first in the new log (in the order of their latest occurrence), then resolutions, so
the index always meets an error before what resolves it. The log is read twice (once to plan,
once to copy the surviving lines) so a large log is never held in memory whole.
"""

from __future__ import annotations

from loki.storage import jsonio, layout

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    from loki.storage.state import StateStore as Store


CHUNK = 1 << 20
"""Bytes read from the log at a time (a longer line is still read whole)."""


class _Group:
    """Every error of one content hash, as read in the first pass."""

    __slots__ = ("aliases", "count", "first_seen", "ids", "latest_id", "line", "lines", "position")

    def __init__(self) -> None:
        self.count = 0
        self.first_seen = ""
        self.ids: list[str] = []
        """Every id the group's records carried (their own and their aliases)."""
        self.latest_id = ""
        self.aliases: list[str] = []
        self.position: Any = None
        """Where its latest record's line starts in the log (the store's position: kept, handed back)."""
        self.line = self.lines = 0


def live_memory_ids(store: Store) -> set[str]:
    """Error ids that strike streaks on any branch still hold (a later success may resolve them)."""
    from loki.strikes.strikes import Strikes

    ids: set[str] = set()
    for row in Strikes.branches(store):
        doc = store.read(row["file"])
        for entry in (doc or {}).get("keys", {}).values():
            ids.update(entry.get("memory_ids") or [])
    return ids


def compact(store: Store, *, max_records: int) -> dict[str, Any]:
    """Rewrite the log by the rules above; return what was done."""
    from loki.clock import format_ts
    from loki.memory.record import RECORD_SCHEMA

    with store.transaction(layout.MEMORY_LOG):
        groups: dict[str, _Group] = {}
        resolutions: list[dict[str, Any]] = []
        corrupt: list[tuple[int, bytes]] = []
        lines = events = 0
        bytes_before = store.log_size(layout.MEMORY_LOG)
        for number, position, raw in _lines(store):
            if not raw.strip():
                continue
            lines += 1
            try:
                record = jsonio.loads_strict(raw)
            except jsonio.JsonError:
                corrupt.append((number, raw))
                continue
            if store.schemas.problems(RECORD_SCHEMA, record):
                corrupt.append((number, raw))
                continue
            if record["kind"] == "resolution":
                resolutions.append(record)
                continue
            group = groups.setdefault(record["content_hash"], _Group())
            occurrences = int(record.get("occurrences") or 1)
            first = record.get("first_seen") or record["timestamp"]
            group.count += occurrences
            group.lines += 1
            events += occurrences
            group.first_seen = min(group.first_seen, first) if group.first_seen else first
            group.ids += [record["id"], *record.get("aliases", [])]
            group.latest_id = record["id"]
            group.position, group.line = position, number

        survivor = {old: group.latest_id for group in groups.values() for old in group.ids}
        held = live_memory_ids(store)
        for group in groups.values():
            group.aliases = [i for i in dict.fromkeys(group.ids) if i != group.latest_id and i in held]
        resolved = {survivor.get(i, i) for record in resolutions for i in record["resolves"]}
        live = {survivor.get(i, i) for i in held}
        merged_resolutions, kept_resolutions = _merge_resolutions(resolutions, survivor)

        order = sorted(groups.items(), key=lambda item: item[1].line)
        dropped = dropped_events = dropped_lines = 0
        over = len(order) + len(kept_resolutions) - max_records
        for content_hash, group in order:  # the least recently seen first
            if over <= 0:
                break
            if group.latest_id in resolved or group.latest_id in live:
                continue
            del groups[content_hash]
            dropped += 1
            dropped_events += group.count
            dropped_lines += group.lines
            over -= 1
        survivors = [group for content_hash, group in order if content_hash in groups]

        corrupt_file = None
        if corrupt:
            stamp = format_ts(store.clock.now()).replace(":", "")
            data = b"".join(raw + b"\n" for _, raw in corrupt)
            corrupt_file = store.create_unique(layout.MEMORY_DIR, f"errors.jsonl.corrupt.{stamp}", data,
                                               state_file=False)

        def records() -> Iterator[dict[str, Any]]:
            for group in survivors:
                record = _read_record(store, group)
                for field in ("occurrences", "first_seen", "aliases"):
                    record.pop(field, None)
                if group.count > 1:
                    record["occurrences"] = group.count
                    record["first_seen"] = group.first_seen
                if group.aliases:
                    record["aliases"] = group.aliases
                yield record
            yield from kept_resolutions

        written = store.rewrite_lines(layout.MEMORY_LOG, records())
        bytes_after = store.log_size(layout.MEMORY_LOG)
    return {
        "lines_before": lines,
        "lines_after": written,
        "bytes_before": bytes_before,
        "bytes_after": bytes_after,
        "errors": events,
        "patterns": len(survivors),
        "merged": sum(group.lines for _, group in order) - dropped_lines - len(survivors),
        "dropped_patterns": dropped,
        "dropped_errors": dropped_events,
        "resolutions": len(kept_resolutions),
        "resolutions_merged": merged_resolutions,
        "aliases_kept": sum(len(group.aliases) for group in survivors),
        "corrupt_lines": [number for number, _ in corrupt],
        "corrupt_file": corrupt_file,
        "max_records": max_records,
        "over_bound": written > max_records,
    }


def _lines(store: Store) -> Iterator[tuple[int, Any, bytes]]:
    """``(line number, position, raw line)`` of every line of the log, a torn last one included (the
    caller holds the log's lock, so no line is still being written)."""
    number, position = 0, None
    while True:
        lines, position = store.read_after(layout.MEMORY_LOG, position, CHUNK, whole=True, final=True)
        if not lines:
            return
        for line in lines:
            number += 1
            yield number, line.position, line.data or b""


def _read_record(store: Store, group: _Group) -> dict[str, Any]:
    record: dict[str, Any] = jsonio.loads_strict(store.read_line(layout.MEMORY_LOG, group.position))
    return record


def _merge_resolutions(records: list[dict[str, Any]], survivor: dict[str, str]) -> tuple[int, list[dict[str, Any]]]:
    """Re-point resolutions at surviving ids; merge those naming the same errors with the same call."""
    kept: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in records:
        resolves = list(dict.fromkeys(survivor.get(i, i) for i in record["resolves"]))
        record = dict(record, resolves=resolves)
        key = (record["tool"], record["resolution"], tuple(sorted(resolves)))
        current = kept.get(key)
        if current is None or (record["confidence"], record["timestamp"]) >= (current["confidence"],
                                                                                current["timestamp"]):
            kept[key] = record
    by_id = {r["id"]: r for r in kept.values()}
    ordered = [by_id[r["id"]] for r in records if r["id"] in by_id]
    return len(records) - len(ordered), ordered
