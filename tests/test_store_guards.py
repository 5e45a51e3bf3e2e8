"""Storage guards: no write makes a file loki refuses to read, bounded inputs, hard links, readers
next to a stopped writer, an honest lock-timeout message, hooks that write nothing when they fail."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from loki import layout
from loki.errors import InvalidInput
from loki.store import Store
from tests.helpers import cli, loki_proc, put_tasks, snapshot_bytes, task

PENDING = layout.queue_file("pending")
LIMIT = 16 * 1024


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    """A 16 KiB state-file limit instead of 64 MiB, so going over it costs nothing."""
    import loki.store

    monkeypatch.setattr(loki.store, "DEFAULT_MAX_FILE_BYTES", LIMIT)
    return LIMIT


def _batch(path: Path, prefix: str, count: int) -> Path:
    path.write_text("\n".join(json.dumps({"id": f"{prefix}-{n}", "title": "x" * 200}) for n in range(count)))
    return path


# -- a write never produces a file loki refuses to read ---------------------------------------------


def test_two_batches_that_each_fit_cannot_push_the_queue_file_over_the_read_limit(
        store: Store, small_limit: int, tmp_path: Path) -> None:
    first = cli(["queue", "add", "--from-file", str(_batch(tmp_path / "a.jsonl", "a", 20))], root=store.root)
    assert first.code == 0, first.stderr
    assert os.path.getsize(store.path(PENDING)) < small_limit
    before = snapshot_bytes(store.root)
    second = cli(["queue", "add", "--from-file", str(_batch(tmp_path / "b.jsonl", "b", 20))], root=store.root)
    assert second.code == 1
    assert "queue/pending.json" in second.stderr and f"over the {small_limit}-byte limit" in second.stderr
    assert "nothing was changed" in second.stderr
    assert snapshot_bytes(store.root) == before
    listed = cli(["queue", "list", "--json", "--limit", "100"], root=store.root)
    assert listed.code == 0 and listed.json()["total"] == 20


def test_every_writer_is_held_to_the_read_limit(store: Store, small_limit: int) -> None:
    before = snapshot_bytes(store.root)
    with pytest.raises(InvalidInput, match="over the 16384-byte limit"):
        store.write_text(layout.CONTINUITY, "x" * (small_limit + 1))
    with pytest.raises(InvalidInput, match="signals/BIG"):
        store.create_unique(layout.SIGNALS_DIR, "BIG", b"{}" + b" " * small_limit)
    with pytest.raises(InvalidInput, match="queue/in-progress.json"), store.transaction(layout.QUEUE_LOCK) as txn:
        txn.write(PENDING, {"version": 1, "tasks": [task("small")]})
        txn.write(layout.queue_file("in-progress"),
                  {"version": 1, "tasks": [task(f"t{n}", status="in-progress", description="y" * 400)
                                           for n in range(60)]})
    assert snapshot_bytes(store.root) == before  # the multi-file change wrote nothing at all


def test_doctor_repair_never_sets_aside_a_queue_file_only_because_it_is_too_big(
        store: Store, small_limit: int) -> None:
    put_tasks(store, "pending", [task(f"t{n}", description="z" * 300) for n in range(20)])
    Path(store.path(PENDING)).write_bytes(Path(store.path(PENDING)).read_bytes() + b" " * small_limit)
    before = snapshot_bytes(store.root)
    for args in (["doctor"], ["doctor", "--repair"], ["doctor", "--repair", "--json"]):
        result = cli(args, root=store.root)
        assert result.code == 1, args
        assert snapshot_bytes(store.root) == before, args  # still there, every task with it
    report = result.json()
    assert report["moved_aside"] == [] and not report["healthy"]
    [problem] = report["problems"]
    assert problem["file"] == PENDING and "over the 16384-byte limit" in problem["message"]
    assert "leaves it where it is" in problem["message"]
    claim = cli(["queue", "claim", "--agent", "a1"], root=store.root)
    assert claim.code == 1 and "make it smaller by hand" in claim.stderr


# -- queue add --from-file reads a bounded regular file ---------------------------------------------


@pytest.mark.parametrize("source", ["/dev/zero", "/dev/urandom", "fifo", "directory"])
def test_from_file_refuses_what_is_not_a_regular_file_without_reading_it(
        store: Store, tmp_path: Path, source: str) -> None:
    if source == "fifo":
        source = str(tmp_path / "batch.fifo")
        os.mkfifo(source)  # no writer: opening it for reading in blocking mode would never return
    elif source == "directory":
        source = str(tmp_path)
    before = snapshot_bytes(store.root)
    # A real process, with a guard: before the fix /dev/zero grew without limit and a FIFO hung.
    result = loki_proc(["queue", "add", "--from-file", source], root=store.root, timeout=30)
    assert result.code == 1, result.stderr
    assert source in result.stderr and "--from-file reads a regular file" in result.stderr
    assert snapshot_bytes(store.root) == before


def test_from_file_refuses_a_batch_over_the_limit_before_parsing_it(
        store: Store, small_limit: int, tmp_path: Path) -> None:
    from loki.queue import Queue

    big = tmp_path / "big.json"
    big.write_bytes(b"[" + b" " * small_limit + b"]")
    before = snapshot_bytes(store.root)
    result = cli(["queue", "add", "--from-file", str(big)], root=store.root)
    assert result.code == 1
    assert str(big) in result.stderr and f"{small_limit + 2} bytes, over the {small_limit}-byte limit" in result.stderr
    with pytest.raises(InvalidInput, match="over the 16384-byte limit for a batch"):
        Queue(store).add_from_file(str(big))
    assert snapshot_bytes(store.root) == before
    big.write_bytes(b"[]")
    assert Queue(store).add_from_file(str(big)) == []
