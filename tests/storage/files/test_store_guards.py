"""Storage guards: no write makes a file loki refuses to read, bounded inputs, hard links, readers
next to a stopped writer, an honest lock-timeout message, hooks that write nothing when they fail."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from loki.errors import InvalidInput
from loki.storage import layout
from loki.storage.store import Store
from tests.helpers import cli, loki_proc, put_tasks, snapshot_bytes, task

PENDING = layout.queue_file("pending")
LIMIT = 16 * 1024


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    """A 16 KiB state-file limit instead of 64 MiB, so going over it costs nothing."""
    import loki.storage.store

    monkeypatch.setattr(loki.storage.store, "DEFAULT_MAX_FILE_BYTES", LIMIT)
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
    too_big = pytest.raises(InvalidInput, match=re.escape("queue/in-progress.json"))
    with too_big, store.transaction(layout.QUEUE_LOCK) as txn:
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
    from loki.queue.queue import Queue

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


# -- hard links are refused like symbolic links -------------------------------------------------------


def _hard_link_out(store: Store, rel: str, outside: Path, content: bytes = b"") -> Path:
    """Make ``rel`` a second name of a file outside the tree; return that file."""
    path = Path(store.path(rel))
    path.parent.mkdir(parents=True, exist_ok=True)
    outside.write_bytes(path.read_bytes() if path.exists() else content)
    if path.exists():
        path.unlink()
    os.link(outside, path)
    return outside


@pytest.mark.parametrize("rel", [layout.MEMORY_LOG, layout.KNOWLEDGE, "logs/events.jsonl", "signals/DRIFT_DETECTED"])
def test_appending_to_a_hard_linked_state_file_is_refused_and_the_other_file_untouched(
        store: Store, tmp_path: Path, rel: str) -> None:
    from loki.errors import StateFileError

    outside = _hard_link_out(store, rel, tmp_path / "outside.txt", b"mine\n")
    with pytest.raises(StateFileError, match=f"{rel}: has 2 hard links"):
        store.append_lines(rel, [{"a": 1}])
    with pytest.raises(StateFileError, match="hard links"):
        store.append_text(rel, ["more"])
    assert outside.read_bytes() == b"mine\n"


def test_a_hard_linked_lock_file_or_call_counter_is_never_written_through(store: Store, tmp_path: Path) -> None:
    from loki.errors import StateFileError
    from loki.strikes import callcount

    lock = _hard_link_out(store, layout.QUEUE_LOCK, tmp_path / "outside.lock", b"precious")
    with pytest.raises(StateFileError, match=re.escape("queue/.lock: the lock file has 2 hard links")):
        put_tasks(store, "pending", [task("a")])
    assert lock.read_bytes() == b"precious"
    counter = _hard_link_out(store, callcount.counter_file("main"), tmp_path / "outside.calls", b"...")
    assert callcount.tick(str(store.root), "main") is None
    assert counter.read_bytes() == b"..."


def test_a_hard_linked_journal_append_target_stops_the_commit_before_anything_is_written(
        store: Store, tmp_path: Path) -> None:
    from loki.errors import StateFileError

    archive = "archive/completed-2026-01.jsonl"
    outside = _hard_link_out(store, archive, tmp_path / "outside.jsonl", b"")
    before = snapshot_bytes(store.root)
    with pytest.raises(StateFileError, match="hard links"), store.transaction(layout.QUEUE_LOCK) as txn:
        txn.write(PENDING, {"version": 1, "tasks": [task("a")]})
        txn.append(archive, [{"id": "old"}])
    assert snapshot_bytes(store.root) == before and outside.read_bytes() == b""


def test_validate_reports_hard_links_and_doctor_repair_gives_the_file_its_own_copy(
        store: Store, tmp_path: Path) -> None:
    store.append_lines(layout.MEMORY_LOG, [])  # nothing: the log may not exist yet
    outside = _hard_link_out(store, layout.MEMORY_LOG, tmp_path / "outside.jsonl", b"")
    put_tasks(store, "pending", [task("a")])
    pending_outside = _hard_link_out(store, PENDING, tmp_path / "outside-pending.json")
    pending_bytes = pending_outside.read_bytes()
    result = cli(["validate", "--json"], root=store.root)
    assert result.code == 1
    assert sorted(p["file"] for p in result.json()["problems"]) == [layout.MEMORY_LOG, PENDING]
    assert all("2 hard links" in p["message"] for p in result.json()["problems"])
    assert cli(["doctor"], root=store.root).code == 1  # without --repair: reported, left as it is
    assert os.stat(store.path(PENDING)).st_nlink == 2
    repaired = cli(["doctor", "--repair", "--json"], root=store.root)
    assert repaired.code == 0, repaired.stdout + repaired.stderr
    report = repaired.json()
    assert sorted(report["detached"]) == [layout.MEMORY_LOG, PENDING] and report["moved_aside"] == []
    assert os.stat(store.path(PENDING)).st_nlink == 1 and os.stat(store.path(layout.MEMORY_LOG)).st_nlink == 1
    assert Path(store.path(PENDING)).read_bytes() == pending_bytes  # every task still in the queue
    store.append_lines(layout.MEMORY_LOG, [{"a": 1}])
    assert outside.read_bytes() == b"" and pending_outside.read_bytes() == pending_bytes


def test_an_appended_markdown_file_read_back_whole_may_not_outgrow_the_limit(store: Store, small_limit: int) -> None:
    store.append_text(layout.KNOWLEDGE, ["x" * (small_limit // 2)], read_whole=True)
    before = snapshot_bytes(store.root)
    with pytest.raises(InvalidInput, match=f"{layout.KNOWLEDGE}: this change would make it"):
        store.append_text(layout.KNOWLEDGE, ["y" * (small_limit // 2)], read_whole=True)
    assert snapshot_bytes(store.root) == before
    assert store.read_text(layout.KNOWLEDGE) is not None  # still readable


# -- readers do not block on a stopped writer ---------------------------------------------------------


@pytest.fixture
def stopped_writer(store: Store):  # type: ignore[no-untyped-def]
    """A process stopped (SIGSTOP) in the middle of claiming task 'a': lock held, journal written,
    pending.json already without 'a', in-progress.json not yet with it. Yields its pid."""
    import signal
    import subprocess
    import sys

    put_tasks(store, "pending", [task("a"), task("b")])
    proc = subprocess.Popen([sys.executable, "-m", "tests.procs.stopped_writer", str(store.root)],
                            cwd=Path(__file__).resolve().parents[3], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "LOKI_NOW": "2026-01-25T10:00:00Z"})
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "stopped\n"
        _, status = os.waitpid(proc.pid, os.WUNTRACED)  # returns once it is really stopped
        assert os.WIFSTOPPED(status)
        assert os.path.exists(store.path("queue/.journal.json"))
        yield proc.pid
        os.kill(proc.pid, signal.SIGCONT)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and out.strip() == "a"
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def test_readers_show_the_last_committed_state_while_the_writer_is_stopped_mid_commit(
        store: Store, stopped_writer: int) -> None:
    before = snapshot_bytes(store.root)
    # A long lock timeout: a reader that waited for the lock would hang the test, not pass it.
    env = {"LOKI_LOCK_TIMEOUT": "600", "LOKI_NOW": "2026-01-25T10:00:00Z"}
    status = loki_proc(["status", "--json"], root=store.root, env=env, timeout=60)
    assert status.code == 0, status.stderr
    assert status.json()["queue"]["pending"] == 1 and status.json()["queue"]["in-progress"] == 1
    for result in (status, loki_proc(["queue", "list", "--json", "--state", "all"], root=store.root, env=env,
                                     timeout=60),
                   loki_proc(["queue", "show", "a", "--json"], root=store.root, env=env, timeout=60)):
        assert result.code == 0, result.stderr
        note = f"queue/.lock is held by pid {stopped_writer}"
        assert note in result.stderr and "in the middle of a commit" in result.stderr
        assert any(note in n for n in result.json()["notes"])
    listed = loki_proc(["queue", "list", "--json", "--state", "all"], root=store.root, env=env, timeout=60).json()
    assert sorted((t["id"], t["state"]) for t in listed["tasks"]) == [("a", "in-progress"), ("b", "pending")]
    shown = loki_proc(["queue", "show", "a", "--json"], root=store.root, env=env, timeout=60).json()
    assert shown["state"] == "in-progress" and shown["task"]["claimed_by"] == "stopped-agent"
    assert snapshot_bytes(store.root) == before  # readers finish nothing: the journal is the writer's


def test_validate_waits_for_the_stopped_writer_and_its_timeout_is_exit_5(store: Store, stopped_writer: int) -> None:
    result = loki_proc(["validate"], root=store.root, env={"LOKI_LOCK_TIMEOUT": "0.05"}, timeout=60)
    assert result.code == 5, result.stdout + result.stderr
    assert "timed out" in result.stderr and f"held by pid {stopped_writer}" in result.stderr


def test_a_lock_timeout_names_the_process_holding_the_lock_now_not_the_last_loki_holder(
        store: Store, tmp_path: Path) -> None:
    import subprocess
    import sys

    from loki.errors import LockTimeout

    lock = store.path(layout.QUEUE_LOCK)
    put_tasks(store, "pending", [task("a")])  # the lock file exists and names this (loki) process
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    record = json.loads(Path(lock).read_text())
    record["holder"]["pid"] = int(dead.stdout)  # the last loki holder: gone now
    Path(lock).write_text(json.dumps(record))
    # Not loki: a plain flock from another program, which writes nothing into the lock file.
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys; f = open(sys.argv[1], 'rb'); "
                               "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()", lock],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(LockTimeout) as caught, Store(store.root, lock_timeout=0.05).transaction(PENDING):
            pass
        message = caught.value.message
        assert f"held by pid {holder.pid}" in message and f"pid {int(dead.stdout)}" not in message
        assert caught.value.details["holder"]["pid"] == holder.pid
        assert "-c" in caught.value.details["holder"]["command"]  # its own command line, from the OS
    finally:
        holder.communicate("", timeout=60)
