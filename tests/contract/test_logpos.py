"""Log positions: the store's read-after-position operations, on both backends (docs/storage.md, "Log positions").

A caller gets a position from the store, keeps it and hands it back; these tests, like the domain
modules, never compute with one (tests/architecture/test_storage_seam.py checks the modules).
"""

from __future__ import annotations

from typing import Any

LOG = "logs/test.jsonl"


def data(lines: list[Any]) -> list[bytes | None]:
    return [line.data for line in lines]


def test_an_absent_log_reads_as_empty(backend_store: Any) -> None:
    lines, after = backend_store.read_after(LOG, None)
    assert lines == [] and after == backend_store.log_end(LOG)
    assert backend_store.read_tail(LOG, 100) == [] and backend_store.log_valid(LOG, None)
    assert backend_store.log_size(LOG) == 0 and backend_store.log_bytes_after(LOG, None) == 0


def test_read_after_hands_back_the_lines_appended_since(backend_store: Any) -> None:
    store = backend_store
    start = store.log_end(LOG)
    store.append_lines(LOG, [{"n": 1}, {"n": 2}])
    lines, after = store.read_after(LOG, start)
    assert data(lines) == [b'{"n":1}', b'{"n":2}'] and after == store.log_end(LOG)
    assert [store.read_line(LOG, line.position) for line in lines] == [b'{"n":1}', b'{"n":2}']
    assert lines[0].position == start and lines[0].position != lines[1].position
    assert store.read_after(LOG, after) == ([], after)  # nothing new: the same position back
    store.append_lines(LOG, [{"n": 3}])
    more, end = store.read_after(LOG, after)
    assert data(more) == [b'{"n":3}'] and end == store.log_end(LOG) and end != after
    assert data(store.read_after(LOG, None)[0]) == [b'{"n":1}', b'{"n":2}', b'{"n":3}']


def test_a_line_is_never_split_by_the_limit(backend_store: Any) -> None:
    store = backend_store
    store.append_lines(LOG, [{"n": i} for i in range(10)])
    seen, position = [], None
    while True:
        lines, position = store.read_after(LOG, position, 12)  # a line is 8 bytes with its newline
        if not lines:
            break
        seen += data(lines)
    assert seen == [b'{"n":%d}' % i for i in range(10)] and position == store.log_end(LOG)


def test_a_line_longer_than_the_limit_comes_whole_or_without_its_data(backend_store: Any) -> None:
    store = backend_store
    store.append_lines(LOG, [{"x": "y" * 100}, {"n": 1}])
    long = b'{"x":"' + b"y" * 100 + b'"}'
    lines, after = store.read_after(LOG, None, 16, whole=True)
    assert data(lines) == [long]
    skipped, skipped_after = store.read_after(LOG, None, 16)
    assert data(skipped) == [None] and skipped[0].length == len(long) and skipped_after == after
    assert data(store.read_after(LOG, after, 16)[0]) == [b'{"n":1}']


def test_a_torn_last_line_waits_until_it_is_complete(backend_store: Any) -> None:
    store = backend_store
    store.append_lines(LOG, [{"n": 1}])
    store.append_bytes(LOG, b'{"n":')  # a line still being written (or torn by a crash)
    lines, after = store.read_after(LOG, None)
    assert data(lines) == [b'{"n":1}'] and after != store.log_end(LOG)
    assert store.read_after(LOG, after) == ([], after)
    assert store.read_tail(LOG, 1000) == [b'{"n":1}']
    # under the log's lock (compaction) it is torn, not being written: it comes back as a line
    final, end = store.read_after(LOG, None, final=True)
    assert data(final) == [b'{"n":1}', b'{"n":'] and end == store.log_end(LOG)


def test_read_tail_drops_the_line_its_window_cuts(backend_store: Any) -> None:
    store = backend_store
    store.append_lines(LOG, [{"n": i} for i in range(5)])
    assert store.read_tail(LOG, 12) == [b'{"n":4}']  # 12 bytes: the end of line 3 and all of line 4
    assert store.read_tail(LOG, 1000) == [b'{"n":%d}' % i for i in range(5)]


def test_a_position_a_replaced_log_no_longer_reaches_is_not_valid(backend_store: Any) -> None:
    store = backend_store
    store.append_lines(LOG, [{"n": i} for i in range(5)])
    end = store.log_end(LOG)
    assert store.log_valid(LOG, end) and store.log_bytes_after(LOG, end) == 0
    store.remove(LOG)
    store.append_lines(LOG, [{"n": 9}])
    assert not store.log_valid(LOG, end) and store.log_valid(LOG, None)
    assert store.log_bytes_after(LOG, end) == 0 and store.log_bytes_after(LOG, None) == store.log_size(LOG)


def test_the_windows_before_a_position_change_when_the_log_is_rewritten(backend_store: Any) -> None:
    store = backend_store
    store.append_lines(LOG, [{"n": i} for i in range(5)])
    end = store.log_end(LOG)
    before = store.log_windows(LOG, end, 16)
    store.append_lines(LOG, [{"n": 5}])
    assert store.log_windows(LOG, end, 16) == before  # appending leaves what was read alone
    store.remove(LOG)
    store.append_lines(LOG, [{"m": i} for i in range(6)])
    assert store.log_windows(LOG, end, 16) != before
