"""The storage rules of DESIGN.md §3, through the library."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from loki.errors import InvalidInput, LockTimeout, SchemaViolation, StateFileError
from loki.storage import layout
from loki.storage.locks import FileLock
from loki.storage.store import Store, digest
from tests.helpers import put_tasks, task, tree_problems

PENDING = layout.queue_file("pending")
IN_PROGRESS = layout.queue_file("in-progress")


def test_transaction_round_trip(store: Store) -> None:
    put_tasks(store, "pending", [task("a"), task("b")])
    doc = store.read(PENDING)
    assert [t["id"] for t in doc["tasks"]] == ["a", "b"]
    assert tree_problems(store.root) == []


def test_written_file_is_one_record_per_line_and_parses(store: Store) -> None:
    put_tasks(store, "pending", [task("a"), task("b")])
    text = Path(store.path(PENDING)).read_text()
    lines = text.splitlines()
    assert lines[0] == '{"version":1,"tasks":['
    assert lines[1].startswith('{"id":"a"') and lines[2].startswith('{"id":"b"')
    assert json.loads(text)["tasks"][1]["id"] == "b"


def test_nothing_written_when_the_block_raises(store: Store) -> None:
    put_tasks(store, "pending", [task("a")])
    before = Path(store.path(PENDING)).read_bytes()
    with pytest.raises(RuntimeError), store.transaction(layout.QUEUE_LOCK) as txn:
        txn.write(PENDING, {"version": 1, "tasks": []})
        raise RuntimeError("boom")
    assert Path(store.path(PENDING)).read_bytes() == before


def test_invalid_record_is_refused_before_anything_is_written(store: Store) -> None:
    before = Path(store.path(PENDING)).read_bytes()
    bad = task("a", priority="urgent")
    with pytest.raises(SchemaViolation) as caught, store.transaction(layout.QUEUE_LOCK) as txn:
        txn.write(PENDING, {"version": 1, "tasks": [bad]}, changed=[bad])
    assert caught.value.details["pointer"] == "/tasks/0/priority"
    assert "urgent" in caught.value.message
    assert Path(store.path(PENDING)).read_bytes() == before


def test_changed_records_only_are_validated_when_declared(root: Path) -> None:
    # Without LOKI_VALIDATE_ALL a write checks the envelope and the declared records only:
    # that is what keeps a claim on a 10,000-task file cheap.
    fast = Store(root, validate_all=False)
    good, bad = task("good"), task("bad", priority="urgent")
    with fast.transaction(layout.QUEUE_LOCK) as txn:
        txn.write(PENDING, {"version": 1, "tasks": [good, bad]}, changed=[good])
    with pytest.raises(SchemaViolation), fast.transaction(layout.QUEUE_LOCK) as txn:
        txn.write(PENDING, {"version": 1, "tasks": [good, bad]}, changed=[bad])


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b'{"version": 1, "tasks": [', "invalid JSON"),
        (b'{"version": 1, "version": 1, "tasks": []}', "duplicate key 'version'"),
        (b'{"version": 1, "tasks": [], "x": NaN}', "NaN"),
        (b'{"version": 1, "tasks": [Infinity]}', "Infinity"),
        (b'{"version": 1, "tasks": []} trailing', "Extra data"),
        (b'\xef\xbb\xbf{"version": 1, "tasks": []}', "byte-order mark"),
        (b'{"version": 1, "tasks": ["\xff"]}', "not valid UTF-8"),
        ('{"version":1,"tasks":[]}'.encode("utf-16"), "not valid UTF-8"),
        (b'{"version": 2, "tasks": []}', "/version"),
        (b'{"version": 1, "tasks": [{"id": "a"}]}', "required"),
        (b"[" * 100_000 + b"]" * 100_000, "nesting is too deep"),
    ],
)
def test_bad_file_is_refused_and_never_overwritten(store: Store, content: bytes, reason: str) -> None:
    path = Path(store.path(PENDING))
    path.write_bytes(content)
    with pytest.raises(StateFileError) as caught, store.transaction(layout.QUEUE_LOCK) as txn:
        doc = txn.read(PENDING)
        txn.write(PENDING, doc)
    assert caught.value.path == PENDING
    assert reason in str(caught.value) or reason in caught.value.pointer
    assert path.read_bytes() == content
    with pytest.raises(StateFileError):
        store.read(PENDING)
    assert path.read_bytes() == content


def test_error_names_file_pointer_and_reason(store: Store) -> None:
    doc = {"version": 1, "tasks": [task("a"), task("b", priority="urgent")]}
    Path(store.path(PENDING)).write_text(json.dumps(doc))
    with pytest.raises(StateFileError) as caught:
        store.read(PENDING)
    assert caught.value.path == PENDING
    assert caught.value.pointer == "/tasks/1/priority"
    assert "'urgent'" in caught.value.reason or '"urgent"' in caught.value.reason


def test_hand_edited_file_is_validated_in_full_even_when_loki_wrote_it_before(store: Store) -> None:
    put_tasks(store, "pending", [task("a")])
    path = Path(store.path(PENDING))
    path.write_text(path.read_text().replace('"priority":"medium"', '"priority":"mediu"'))
    with pytest.raises(StateFileError) as caught:
        store.read(PENDING)
    assert caught.value.pointer == "/tasks/0/priority"


def test_file_loki_wrote_is_trusted_by_digest(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    put_tasks(store, "pending", [task("a")])
    data = Path(store.path(PENDING)).read_bytes()
    assert store.recorded_digests(layout.QUEUE_LOCK)[PENDING] == digest(data)
    calls: list[str] = []
    real = store.schemas.problems
    monkeypatch.setattr(store.schemas, "problems", lambda name, doc: calls.append(name) or real(name, doc))
    store.read(PENDING)
    assert calls == []  # trusted: no validation on the read path


def test_bare_array_in_loki_mode_shape_is_read_and_rewritten_in_loki_format(store: Store) -> None:
    Path(store.path(PENDING)).write_text(json.dumps([
        {"id": "task-001", "type": "eng-backend", "priority": 9, "payload": {"action": "build login"},
         "createdAt": "2026-01-20T10:00:00Z", "claimedBy": None, "claimedAt": None, "timeout": 3600,
         "retries": 0, "maxRetries": 3},
    ]))
    doc = store.read(PENDING)
    imported = doc["tasks"][0]
    assert imported["title"] == "build login" and imported["priority"] == "high"
    # Loki Mode dead-letters at its maxRetries-th failure; what loki's fields cannot hold unchanged
    # (the numeric priority, the retry counters, the timeout) is kept; its nulls are loki's nulls.
    assert imported["max_attempts"] == 3
    assert imported["payload"]["loki_mode"] == {"priority": 9, "retries": 0, "maxRetries": 3, "timeout": 3600}
    with store.transaction(layout.QUEUE_LOCK) as txn:
        txn.write(PENDING, txn.read(PENDING))
    assert json.loads(Path(store.path(PENDING)).read_text())["version"] == 1
    assert tree_problems(store.root) == []


def test_values_loki_cannot_hold_are_kept_not_refused(store: Store) -> None:
    # A type longer than loki's 100 characters, an empty tag: loki's fields get a usable value, the
    # originals stay under payload.loki_mode (nothing Loki Mode wrote is refused or lost).
    Path(store.path(PENDING)).write_text(json.dumps([{"id": "a", "type": "x" * 200, "tags": ["", "ok"]}]))
    (imported,) = store.read(PENDING)["tasks"]
    assert imported["type"] == "general" and imported["labels"] == ["ok"]
    assert imported["payload"]["loki_mode"] == {"type": "x" * 200, "tags": ["", "ok"]}


def test_missing_file_reads_as_empty(store: Store) -> None:
    os.unlink(store.path(layout.queue_file("blocked")))
    assert store.read(layout.queue_file("blocked")) == {"version": 1, "tasks": []}


def test_symlinked_state_file_is_refused(store: Store, tmp_path: Path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text('{"version": 1, "tasks": []}')
    os.unlink(store.path(PENDING))
    os.symlink(outside, store.path(PENDING))
    with pytest.raises(StateFileError, match="symbolic link"):
        store.read(PENDING)
    with pytest.raises(StateFileError, match="symbolic link"), store.transaction(layout.QUEUE_LOCK) as txn:
        txn.read(PENDING)
    assert outside.read_text() == '{"version": 1, "tasks": []}'


def test_symlinked_directory_is_refused(store: Store, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, store.path("state/errors/sub"))
    with pytest.raises(StateFileError, match="symbolic link"):
        store.read("state/errors/sub/main.json")


def test_directory_where_a_file_should_be_is_refused(store: Store) -> None:
    os.unlink(store.path(PENDING))
    os.mkdir(store.path(PENDING))
    with pytest.raises(StateFileError, match="directory"):
        store.read(PENDING)


def test_lock_file_replaced_by_a_directory_is_a_clear_error(store: Store) -> None:
    lock = store.path(layout.QUEUE_LOCK)
    if os.path.exists(lock):
        os.unlink(lock)
    os.mkdir(lock)
    with pytest.raises(StateFileError, match="lock file is a directory"), store.transaction(layout.QUEUE_LOCK):
        pass


@pytest.mark.parametrize("rel", ["../x", "/etc/passwd", "queue/../../x", "a//b", "", "a\x00b", "queue/./x"])
def test_paths_that_escape_are_refused(store: Store, rel: str) -> None:
    with pytest.raises(InvalidInput):
        store.path(rel)


def test_lock_timeout_names_the_holder(store: Store) -> None:
    holder = FileLock(store.path(layout.QUEUE_LOCK), timeout=1)
    holder.acquire()
    try:
        waiting = Store(store.root, lock_timeout=0.05)
        with pytest.raises(LockTimeout) as caught, waiting.transaction(layout.QUEUE_LOCK):
            pass
        assert caught.value.exit_code == 5
        assert f"pid {os.getpid()}" in caught.value.message
        assert caught.value.details["holder"]["pid"] == os.getpid()
    finally:
        holder.release()
    assert os.path.exists(store.path(layout.QUEUE_LOCK))  # never deleted


def test_multi_file_commit_leaves_no_journal(store: Store) -> None:
    with store.transaction(layout.QUEUE_LOCK) as txn:
        txn.write(PENDING, {"version": 1, "tasks": []})
        txn.write(IN_PROGRESS, {"version": 1, "tasks": [task("a", status="in-progress")]})
    assert not os.path.exists(store.path("queue/.journal.json"))
    assert store.read(IN_PROGRESS)["tasks"][0]["id"] == "a"


def test_journal_left_by_a_crash_is_finished_by_the_next_lock_taker(store: Store) -> None:
    put_tasks(store, "pending", [task("a")])
    moved = task("a", status="in-progress")
    journal = {
        "version": 1,
        "created_at": "2026-01-25T10:00:00Z",
        "files": {PENDING: {"version": 1, "tasks": []}, IN_PROGRESS: {"version": 1, "tasks": [moved]}},
    }
    Path(store.path("queue/.journal.json")).write_text(json.dumps(journal))
    with store.transaction(layout.QUEUE_LOCK) as txn:
        assert txn.recovered
        assert txn.read(PENDING)["tasks"] == []
        assert txn.read(IN_PROGRESS)["tasks"][0]["id"] == "a"
    assert not os.path.exists(store.path("queue/.journal.json"))
    assert tree_problems(store.root) == []


def test_unreadable_journal_stops_everything_and_is_kept(store: Store) -> None:
    Path(store.path("queue/.journal.json")).write_text("{not json")
    with pytest.raises(StateFileError, match="journal"), store.transaction(layout.QUEUE_LOCK):
        pass
    assert Path(store.path("queue/.journal.json")).read_text() == "{not json"


def test_snapshot_reads_the_journal_state_consistently(store: Store) -> None:
    put_tasks(store, "pending", [task("a")])
    journal = {"version": 1, "created_at": "2026-01-25T10:00:00Z",
               "files": {PENDING: {"version": 1, "tasks": []},
                         IN_PROGRESS: {"version": 1, "tasks": [task("a", status="in-progress")]}}}
    Path(store.path("queue/.journal.json")).write_text(json.dumps(journal))
    docs = store.snapshot([PENDING, IN_PROGRESS])
    assert docs[PENDING]["tasks"] == [] and docs[IN_PROGRESS]["tasks"][0]["id"] == "a"


def test_append_lines_never_glues_onto_a_torn_line(store: Store) -> None:
    rel = "logs/events.jsonl"
    Path(store.path(rel)).write_bytes(b'{"a":1}\n{"torn":')
    store.append_lines(rel, [{"b": 2}])
    lines = Path(store.path(rel)).read_bytes().split(b"\n")
    assert lines[:3] == [b'{"a":1}', b'{"torn":', b'{"b":2}']


def test_a_log_created_by_an_append_is_not_executable(store: Store) -> None:
    store.append_lines("logs/new.jsonl", [{"a": 1}])
    assert stat.S_IMODE(os.stat(store.path("logs/new.jsonl")).st_mode) & 0o111 == 0


def test_create_unique_never_overwrites(store: Store) -> None:
    first = store.create_unique("signals", "HUMAN_APPROVED", b'{"a": 1}')
    second = store.create_unique("signals", "HUMAN_APPROVED", b'{"a": 2}')
    assert first == "signals/HUMAN_APPROVED" and second == "signals/HUMAN_APPROVED-2"
    assert Path(store.path(first)).read_bytes() == b'{"a": 1}'
    leftovers = [n for n in os.listdir(store.path("signals")) if n.endswith(".tmp")]
    assert leftovers == []


def test_disk_full_is_a_clear_error_and_the_file_is_unchanged(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    put_tasks(store, "pending", [task("a")])
    before = Path(store.path(PENDING)).read_bytes()
    real_write = os.write

    def full(fd: int, data: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(StateFileError, match="no space left"), store.transaction(layout.QUEUE_LOCK) as txn:
        txn.write(PENDING, {"version": 1, "tasks": []})
    monkeypatch.setattr(os, "write", real_write)
    assert Path(store.path(PENDING)).read_bytes() == before
    assert [n for n in os.listdir(store.path("queue")) if n.endswith(".tmp")] == []


def test_rewrite_lines_replaces_a_log_atomically(store: Store) -> None:
    rel = "logs/events.jsonl"
    store.append_lines(rel, [{"a": 1}, {"a": 2}])
    before = os.stat(store.path(rel)).st_ino
    with store.transaction(rel):
        assert store.rewrite_lines(rel, ({"b": n} for n in range(2500))) == 2500
    assert Path(store.path(rel)).read_text().splitlines()[::1000] == ['{"b":0}', '{"b":1000}', '{"b":2000}']
    assert os.stat(store.path(rel)).st_ino != before  # replaced, never rewritten in place
    with pytest.raises(RuntimeError), store.transaction(rel):
        store.rewrite_lines(rel, (r if r < 3 else _boom() for r in range(5)))  # type: ignore[misc]
    assert len(Path(store.path(rel)).read_text().splitlines()) == 2500  # a failed rewrite changes nothing
    assert [n for n in os.listdir(store.path("logs")) if n.endswith(".tmp")] == []


def _boom() -> None:
    raise RuntimeError("the generator failed half-way")


def test_remove_deletes_a_derived_file(store: Store) -> None:
    store.ensure_dir("memory/hints")
    store.write_text("memory/hints/x.json", "{}")
    assert store.remove("memory/hints/x.json") is True and store.remove("memory/hints/x.json") is False
    with pytest.raises(StateFileError, match="is a directory"):
        store.remove("memory/hints")


@pytest.mark.parametrize("item", [
    {"id": "a", "title": "t", "status": "pending", "attempts": [], "max_attempts": 5},
    {"id": "a", "title": "t", "status": "pending", "attempts": [], "max_attempts": 5, "priority": "bogus"},
])
def test_a_converted_bare_array_must_come_out_valid(store: Store, item: dict) -> None:
    Path(store.path(PENDING)).write_text(json.dumps([item]))
    before = Path(store.path(PENDING)).read_bytes()
    with pytest.raises(StateFileError, match="after converting it from Loki Mode's format"):
        store.read(PENDING)
    with pytest.raises(StateFileError), store.transaction(layout.QUEUE_LOCK) as txn:
        txn.read(PENDING)
    assert Path(store.path(PENDING)).read_bytes() == before
    assert PENDING not in store.recorded_digests(layout.QUEUE_LOCK)


def test_snapshot_never_returns_a_half_done_commit(store: Store, monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    """A commit that replaced the first file just before the reader's first stats and finishes just
    after its last ones: the journal was on disk in between, so the reader must not trust what it read."""
    put_tasks(store, "pending", [task("t1")])
    moved = [{"version": 1, "tasks": []}, {"version": 1, "tasks": [task("t1", status="in-progress")]}]
    rels = [PENDING, IN_PROGRESS]
    calls = {"n": 0}
    real = Store._stat_key

    def racing(self: Store, rel: str) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:  # the writer: journal written, first file replaced
            journal = {"version": 1, "created_at": "2026-01-25T10:00:00Z", "appends": {},
                       "files": {PENDING: moved[0], IN_PROGRESS: moved[1]}}
            Path(store.path("queue/.journal.json")).write_text(json.dumps(journal))
            Path(store.path(PENDING)).write_text(json.dumps(moved[0]))
        result = real(self, rel)
        if calls["n"] == 2 * len(rels) and os.path.exists(store.path("queue/.journal.json")):
            # The writer finishes after the reader's last stat (if the reader got that far).
            Path(store.path(IN_PROGRESS)).write_text(json.dumps(moved[1]))
            os.unlink(store.path("queue/.journal.json"))
        return result

    monkeypatch.setattr(Store, "_stat_key", racing)
    docs = store.snapshot(rels)
    ids = [t["id"] for rel in rels for t in docs[rel]["tasks"]]
    assert ids == ["t1"]  # in exactly one of the two files


def test_a_symlinked_archive_stops_the_commit_before_any_journal(store: Store, tmp_path: Path) -> None:
    outside = tmp_path / "outside.jsonl"
    outside.write_text("")
    os.symlink(outside, store.path("archive/completed-2026-01.jsonl"))
    with pytest.raises(StateFileError, match="symbolic link"), store.transaction(layout.QUEUE_LOCK) as txn:
        txn.write(PENDING, {"version": 1, "tasks": []})
        txn.append("archive/completed-2026-01.jsonl", [task("a", status="completed")])
    assert not os.path.exists(store.path("queue/.journal.json"))
    assert outside.read_text() == ""
    put_tasks(store, "pending", [task("b")])  # the queue still works


def test_doctor_repair_sets_aside_a_journal_that_cannot_be_finished(store: Store) -> None:
    from tests.helpers import cli

    Path(store.path("archive/completed-2026-01.jsonl")).write_text("")
    journal = {"version": 1, "created_at": "2026-01-25T10:00:00Z",
               "appends": {"archive/completed-2026-01.jsonl": {"offset": 500, "data": "{}\n"}},
               "files": {PENDING: {"version": 1, "tasks": []}}}
    Path(store.path("queue/.journal.json")).write_text(json.dumps(journal))
    stuck = cli(["queue", "list"], root=store.root)
    assert stuck.code == 1 and "truncated outside loki" in stuck.stderr and "doctor --repair" in stuck.stderr
    report = cli(["doctor", "--repair", "--json"], root=store.root, env={"LOKI_NOW": "2026-01-25T10:00:00Z"})
    assert report.code == 0, report.stdout + report.stderr
    moved = report.json()["moved_aside"][0]
    assert moved["file"] == "queue/.journal.json" and os.path.exists(store.path(moved["moved_to"]))
    assert cli(["queue", "list"], root=store.root).code == 0


def test_a_digest_record_that_cannot_be_written_does_not_fail_the_commit(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    with store.transaction(layout.QUEUE_LOCK) as txn:
        monkeypatch.setattr(os, "pwrite", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left")))
        txn.write(PENDING, {"version": 1, "tasks": [task("a")]})
    monkeypatch.undo()
    assert [t["id"] for t in store.read(PENDING)["tasks"]] == ["a"]


@pytest.mark.parametrize(("text", "reason"), [
    ('{"version": 1, "tasks": [], "x": 1e400}', "too large for a JSON float"),
    ('{"version": 1, "tasks": [], "x": ' + "9" * 5000 + "}", "invalid JSON"),
    ('{"version": 1, "tasks": [], "x": "\\ud800"}', "lone surrogate"),
])
def test_numbers_and_text_loki_could_not_write_back_are_refused(store: Store, text: str, reason: str) -> None:
    Path(store.path(PENDING)).write_text(text)
    with pytest.raises(StateFileError, match=reason):
        store.read(PENDING)
