"""The delivery protocol (loki/watch/consumer.py): claim, apply, log, delete; recovery; quarantine; the drift log."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from loki.clock import ManualClock
from loki.queue.escalations import list_escalations
from loki.queue.queue import Queue
from loki.signals import emit as signals
from loki.signals import outcomes
from loki.storage import layout
from loki.storage.locks import FileLock
from loki.storage.store import Store
from loki.watch.consumer import CONSUMER_LOCK, Consumer, ConsumerLock, consume_pending, consumer_status
from tests.helpers import store_problems


@pytest.fixture
def store(backend_store: Store) -> Store:
    """Every test here runs on the files and on the memory store (tests/conftest.py: backend)."""
    return backend_store


def log(where: Path | Store) -> list[dict[str, Any]]:
    """The outcome log's records (a tree's directory, or a store of either backend)."""
    store = Store(where) if isinstance(where, Path) else where
    return [json.loads(line) for line in (store.read_text("logs/signals.jsonl") or "").splitlines()]


def left(where: Path | Store, place: str = "") -> list[str]:
    """The names in ``signals/`` (or ``signals/<place>``)."""
    store = Store(where) if isinstance(where, Path) else where
    names = store.list(f"signals/{place}" if place else "signals")
    return sorted(n for n in names if (signals.is_signal_entry(n) if not place else n[0] != "."))


class Timer:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def old(path: Path) -> None:
    """Make a hand-written file look settled (written long ago)."""
    os.utime(path, (1, 1), follow_symlinks=False)


# -- the protocol -----------------------------------------------------------------------------------


def test_a_signal_is_claimed_applied_logged_and_deleted(store: Store, root: Path) -> None:
    Queue(store).add("login", task_id="t1")
    Queue(store).claim("eng-1")
    signals.emit(store, "TESTS_PASSED_auth", {"passed": 3}, task_id="t1", agent="qa")
    events: list[dict[str, Any]] = []
    done = Consumer(store, on_event=events.append).run_pass()
    [record] = log(store)
    assert done == [record] and events == [{"event": "signal", **record}]
    assert record["id"].startswith("TESTS_PASSED_auth.20260125T100000Z-") and record["name"] == "TESTS_PASSED_auth"
    assert record["type"] == "TESTS_PASSED_auth" and record["rule"] == "complete_task"
    assert record["outcome"] == "applied" and record["task_id"] == "t1" and record["signal"]["passed"] == 3
    assert left(store) == [] and left(store, ".processing") == []
    assert Queue(store).show("t1")["state"] == "completed"
    assert store_problems(store) == []


@pytest.mark.files("looks at or edits the files themselves")
def test_signals_are_consumed_oldest_first_and_each_gets_a_unique_id(store: Store, root: Path) -> None:
    for n in range(3):
        signals.emit(store, "DOCS_NEEDED", {"message": f"m{n}"})
        os.utime(root / "signals" / ("DOCS_NEEDED" if n == 0 else f"DOCS_NEEDED.{n + 1}"), (n + 10, n + 10))
    Consumer(store).run_pass()
    signals.emit(store, "DOCS_NEEDED", {"message": "m3"})  # the plain name again, after consumption
    Consumer(store).run_pass()
    records = log(store)
    assert [r["signal"]["message"] for r in records] == ["m0", "m1", "m2", "m3"]
    assert len({r["id"] for r in records}) == 4


def test_a_claimed_but_unlogged_signal_is_applied_once_by_the_next_consumer(store: Store, root: Path) -> None:
    Queue(store).add("flaky", task_id="t1")
    Queue(store).claim("eng-1")
    signals.emit(store, "TESTS_FAILED_api", {"error": "boom"}, task_id="t1")
    crashed = Consumer(store)
    entry = crashed.claim("TESTS_FAILED_api")  # ...and the process died here
    assert entry is not None and left(store, ".processing") == [entry]
    [record] = Consumer(store).recover()
    assert record["id"] == entry and record["recovered"] is True and record["outcome"] == "applied"
    assert left(store, ".processing") == [] and len(Queue(store).show("t1")["task"]["attempts"]) == 1


@pytest.mark.files("looks at or edits the files themselves")
def test_a_signal_applied_but_not_logged_is_logged_once_and_not_applied_again(store: Store, root: Path) -> None:
    Queue(store).add("flaky", task_id="t1")
    Queue(store).claim("eng-1")
    signals.emit(store, "TESTS_FAILED_api", {"error": "boom"}, task_id="t1")
    crashed = Consumer(store)
    entry = crashed.claim("TESTS_FAILED_api")
    assert entry is not None
    from loki.watch import rules

    body = json.loads((root / "signals" / ".processing" / entry).read_text())
    rules.apply(store, rules.Signal(entry, "TESTS_FAILED_api", body))  # applied, then killed before logging
    [record] = Consumer(store).recover()
    assert record["outcome"] == "already_applied"
    assert len(Queue(store).show("t1")["task"]["attempts"]) == 1
    assert [r["id"] for r in log(store)] == [entry]


def test_a_signal_logged_but_not_deleted_is_only_deleted(store: Store, root: Path) -> None:
    signals.emit(store, "DEPLOY_FINISHED", {"env": "prod"})
    entry = Consumer(store).claim("DEPLOY_FINISHED")
    assert entry is not None
    outcomes.append(store, [{"timestamp": "2026-01-25T10:00:00Z", "id": entry, "name": "DEPLOY_FINISHED",
                             "rule": "archive", "outcome": "archived", "detail": "archived",
                             "moved_to": f"signals/.archive/{entry}"}])
    assert Consumer(store).recover() == []
    assert [r["id"] for r in log(store)] == [entry]
    assert left(store, ".processing") == [] and left(store, ".archive") == [entry]


@pytest.mark.files("looks at or edits the files themselves")
def test_unknown_types_are_logged_and_archived_never_lost(store: Store, root: Path) -> None:
    signals.emit(store, "DEPLOY_FINISHED", {"env": "prod"})
    [record] = Consumer(store).run_pass()
    assert record["outcome"] == "archived" and record["signal"]["env"] == "prod"
    [kept] = left(store, ".archive")
    assert json.loads((root / "signals" / ".archive" / kept).read_text())["env"] == "prod"


@pytest.mark.files("looks at or edits the files themselves")
def test_a_big_signal_is_logged_without_its_content_and_kept(store: Store, root: Path) -> None:
    signals.emit(store, "DOCS_NEEDED", {"message": "x" * 20_000})
    [record] = Consumer(store).run_pass()
    assert record["outcome"] == "logged" and "signal" not in record and record["signal_bytes"] > 20_000
    assert json.loads((root / record["moved_to"]).read_text())["message"] == "x" * 20_000
    assert len((root / "logs" / "signals.jsonl").read_bytes()) < 2000


# -- malformed files -----------------------------------------------------------------------------------


def make_bad(root: Path) -> dict[str, str]:
    """Every kind of malformed signal file, with a word its quarantine reason must contain."""
    directory = root / "signals"
    (directory / "BAD_JSON").write_text('{"timestamp": ')
    (directory / "NOT_OBJECT").write_text("[1, 2]")
    (directory / "HUMAN_APPROVED").write_text(json.dumps({"timestamp": "2026-01-25T10:00:00Z", "task_id": "t1",
                                                          "decision": "perhaps"}))
    (directory / "DUPLICATE").write_text('{"timestamp": "2026-01-25T10:00:00Z", "a": 1, "a": 2}')
    (directory / "LINKED").symlink_to("/etc/hostname")
    (directory / "A_DIRECTORY").mkdir()
    (directory / "A_DIRECTORY" / "inside").write_text("x")
    (directory / "lower_case").write_text("{}")
    (directory / "HUGE").write_bytes(b" " * (signals.MAX_SIGNAL_BYTES + 1))
    (directory / "DRIFT_DETECTED.old").write_text("{}")
    for name in os.listdir(directory):
        old(directory / name)
    return {"BAD_JSON": "not valid JSON", "NOT_OBJECT": "not a JSON object", "HUMAN_APPROVED": "decision",
            "DUPLICATE": "duplicate key", "LINKED": "symbolic link", "A_DIRECTORY": "directory",
            "lower_case": "not a signal name", "HUGE": "over the", "DRIFT_DETECTED.old": "append-only log"}


@pytest.mark.files("looks at or edits the files themselves")
def test_malformed_files_are_quarantined_with_the_reason_and_the_rest_is_processed(store: Store,
                                                                                    root: Path) -> None:
    expected = make_bad(root)
    signals.emit(store, "DOCS_NEEDED", {"message": "still processed"})
    done = Consumer(store).run_pass()
    by_name = {r["name"]: r for r in done}
    assert set(by_name) == {*expected, "DOCS_NEEDED"}
    for name, word in expected.items():
        record = by_name[name]
        assert record["outcome"] == "quarantined" and word in record["reason"], record
        assert (root / record["moved_to"]).exists() or (root / record["moved_to"]).is_symlink()
    assert by_name["DOCS_NEEDED"]["outcome"] == "logged"
    assert left(store) == [] and left(store, ".processing") == []
    assert len(left(store, ".quarantine")) == len(expected)
    assert Path("/etc/hostname").exists()  # the link was moved, never followed
    assert store_problems(store) == []  # quarantined files are known bad and do not fail `loki validate`


@pytest.mark.files("looks at or edits the files themselves")
def test_a_young_half_written_file_waits_and_is_quarantined_only_once_settled(store: Store, root: Path) -> None:
    wall = [1_000_000_000.0]
    path = root / "signals" / "HUMAN_REVIEW_NEEDED"
    path.write_text('{"timestamp": "2026-01-25T10:00:00Z", ')  # `cat > ...` still writing
    os.utime(path, (wall[0], wall[0]))
    consumer = Consumer(store, wall=lambda: wall[0])
    assert consumer.run_pass() == [] and left(store) == ["HUMAN_REVIEW_NEEDED"]
    path.write_text('{"timestamp": "2026-01-25T10:00:00Z", "reason": "r"}')  # the writer finished
    os.utime(path, (wall[0], wall[0]))
    assert [r["outcome"] for r in consumer.run_pass()] == ["logged"]
    path.write_text("{ never finished")
    os.utime(path, (wall[0], wall[0]))
    assert consumer.run_pass() == []
    wall[0] += consumer.settle_seconds
    assert [r["outcome"] for r in consumer.run_pass()] == ["quarantined"]


# -- trouble applying: kept and retried -------------------------------------------------------------------


@pytest.mark.files("looks at or edits the files themselves")
def test_a_signal_whose_rule_cannot_run_now_is_kept_and_retried(store: Store, root: Path) -> None:
    Queue(store).add("t", task_id="t1")
    signals.emit(store, "HUMAN_REVIEW_NEEDED", {"reason": "r"}, task_id="t1")
    timer = Timer()
    events: list[dict[str, Any]] = []
    consumer = Consumer(Store(root, clock=store.clock, lock_timeout=0.05), on_event=events.append, timer=timer)
    with FileLock(str(root / "queue" / ".lock"), timeout=1):  # an agent holds the queue lock too long
        assert consumer.run_pass() == []
    assert [e["event"] for e in events] == ["error"] and "retry in 1s" in events[0]["detail"]
    assert len(left(store, ".processing")) == 1 and log(store) == [] and consumer.deferred == 1
    assert consumer.run_pass() == []  # not due yet
    timer.now += 1
    [record] = consumer.run_pass()
    assert record["outcome"] == "applied" and record["recovered"] is True and consumer.deferred == 0
    assert Queue(store).show("t1")["state"] == "blocked"


# -- the drift log -------------------------------------------------------------------------------------------


def drift_line(task_id: str, text: str, severity: str = "low") -> bytes:
    return json.dumps({"timestamp": "2026-01-25T10:00:00Z", "task_id": task_id, "severity": severity,
                       "detected_drift": text}).encode() + b"\n"


@pytest.mark.files("looks at or edits the files themselves")
def test_drift_lines_are_applied_once_each_and_a_torn_line_waits(store: Store, root: Path) -> None:
    drift = root / "signals" / "DRIFT_DETECTED"
    drift.write_bytes(drift_line("t1", "a") + drift_line("t2", "b"))
    consumer = Consumer(store)
    size = len(drift_line("t1", "a"))
    assert [r["id"] for r in consumer.run_pass()] == ["DRIFT_DETECTED@0", f"DRIFT_DETECTED@{size}"]
    whole = drift_line("t3", "c")
    with open(drift, "ab") as f:
        f.write(whole[:20])  # an agent's `cat >>` half way
    assert consumer.run_pass() == []
    assert store.read(layout.WATCH_STATE)["drift_offset"] == 2 * len(drift_line("t1", "a"))
    with open(drift, "ab") as f:
        f.write(whole[20:])
    [third] = Consumer(store).run_pass()  # a new consumer starts from the saved offset
    assert third["signal"]["task_id"] == "t3" and "consolidated into CONTINUITY.md" in third["detail"]
    assert Consumer(store).run_pass() == []
    state = store.read(layout.WATCH_STATE)
    assert state["drift_offset"] == drift.stat().st_size and state["drift_total"] == 3
    size = len(drift_line("t1", "a"))
    assert [r["id"] for r in log(store)] == ["DRIFT_DETECTED@0", f"DRIFT_DETECTED@{size}", f"DRIFT_DETECTED@{2 * size}"]


@pytest.mark.files("looks at or edits the files themselves")
def test_a_malformed_drift_line_is_rejected_and_the_next_one_applied(store: Store, root: Path) -> None:
    drift = root / "signals" / "DRIFT_DETECTED"
    drift.write_bytes(b'{"task_id": "t1"\n' + b'{"timestamp": "x"}\n' + drift_line("t1", "ok"))
    records = Consumer(store).run_pass()
    assert [r["outcome"] for r in records] == ["rejected", "rejected", "logged"]
    assert "not valid JSON" in records[0]["reason"] and "required" in records[1]["reason"]
    assert store.read(layout.WATCH_STATE)["drift_counts"] == {"t1": 1}
    assert drift.read_bytes().startswith(b'{"task_id": "t1"\n')  # the log itself is never rewritten


@pytest.mark.files("looks at or edits the files themselves")
def test_drift_lines_replayed_after_a_crash_are_neither_applied_nor_logged_twice(store: Store, root: Path,
                                                                                 clock: ManualClock) -> None:
    Queue(store).add("t", task_id="t1")
    for n in range(3):
        signals.emit(store, "DRIFT_DETECTED", {"detected_drift": f"d{n}"}, task_id="t1", severity="medium")
    saved = (root / "state" / "watch.json").read_bytes() if (root / "state" / "watch.json").exists() else None
    first = Consumer(store).run_pass()
    assert [r["drift_count"] for r in first] == [1, 2, 3]
    after = {p.name: p.read_bytes() for p in (root / "escalations").iterdir()}
    # The consumer died after logging but before saving its offset: back to the old watch.json.
    if saved is None:
        (root / "state" / "watch.json").unlink()
    else:
        (root / "state" / "watch.json").write_bytes(saved)
    again = Consumer(store)
    replayed = again.recover() + again.run_pass()
    assert [r["name"] for r in replayed] == ["HUMAN_REVIEW_NEEDED"]  # emitted by the escalation; not a replay
    assert [r["id"] for r in log(store) if r["name"] == "DRIFT_DETECTED"] == [r["id"] for r in first]
    assert {p.name: p.read_bytes() for p in (root / "escalations").iterdir()} == after
    assert len(list_escalations(store)) == 1
    assert (root / "CONTINUITY.md").read_text().count("## Drift consolidation") == 1
    assert store.read(layout.WATCH_STATE)["drift_counts"] == {"t1": 3}


# -- one consumer at a time ----------------------------------------------------------------------------------


@pytest.mark.files("looks at or edits the files themselves")
def test_only_one_consumer_holds_the_lock_and_status_says_who(store: Store, root: Path) -> None:
    assert consumer_status(store) is None
    first = ConsumerLock(store)
    assert first.try_acquire()
    holder = consumer_status(store)
    assert holder is not None and holder["pid"] == os.getpid()
    second = ConsumerLock(store)
    assert not second.try_acquire()
    signals.emit(store, "DOCS_NEEDED")
    result = consume_pending(store)
    assert result["consumed"] is False and result["consumer"]["pid"] == os.getpid()
    assert left(store) == ["DOCS_NEEDED"]
    first.release()
    assert consumer_status(store) is None
    result = consume_pending(store)
    assert result["consumed"] is True and [r["name"] for r in result["outcomes"]] == ["DOCS_NEEDED"]
    assert (root / CONSUMER_LOCK).exists()


def test_consume_pending_applies_a_human_decision_at_once(store: Store, root: Path) -> None:
    from loki.queue.escalations import escalate

    Queue(store).add("t", task_id="t1")
    escalate(store, "t1", "security_decision")
    signals.emit(store, "HUMAN_APPROVED", {"decision": "approve"}, task_id="t1")
    result = consume_pending(store)
    assert {r["name"]: r["outcome"] for r in result["outcomes"]} == {"HUMAN_REVIEW_NEEDED": "already_applied",
                                                                   "HUMAN_APPROVED": "applied"}
    assert Queue(store).show("t1")["state"] == "pending"
    assert store.read(layout.WATCH_STATE)["signals_processed"] == 2


@pytest.mark.files("looks at or edits the files themselves")
@pytest.mark.parametrize("place", [".processing", ".quarantine", ".archive"])
def test_loki_directories_inside_signals_are_never_consumed(store: Store, root: Path, place: str) -> None:
    (root / "signals" / place).mkdir()
    assert Consumer(store).waiting() == []


def test_signals_emitted_within_one_clock_tick_are_consumed_in_emission_order(store: Store, root: Path) -> None:
    # HUMAN_APPROVED sorts before HUMAN_REVIEW_NEEDED by name: only a fine mtime keeps the answer after the question.
    queue = Queue(store)
    queue.add_many([{"title": f"t{n}", "id": f"t{n}"} for n in range(20)])
    for n in range(20):
        signals.emit(store, "HUMAN_REVIEW_NEEDED", {"reason": "r"}, task_id=f"t{n}")
        signals.emit(store, "HUMAN_APPROVED", {"decision": "approve"}, task_id=f"t{n}")
    records = Consumer(store).run_pass()
    assert [r["type"] for r in records] == ["HUMAN_REVIEW_NEEDED", "HUMAN_APPROVED"] * 20
    assert {r["outcome"] for r in records} == {"applied"}
    assert all(queue.show(f"t{n}")["state"] == "pending" for n in range(20))


# -- two consumers at once (issue 22): what keeps a signal applied once when a lost lock overlaps a takeover ---


FRICTION = {"friction_id": "f1", "location": "a.py:1", "behavior": "sleeps"}


def test_a_friction_signal_still_claimed_counts_once_however_many_follow(store: Store) -> None:
    """Its id is remembered while it may be applied again (it is still in .processing/), not only among the
    last 20: a signal applied by a consumer that then lost its lock is counted once by the next."""
    from loki.watch import rules

    signals.emit(store, "FRICTION_DETECTED", FRICTION)
    first = Consumer(store)
    entry = first.claim("FRICTION_DETECTED")
    assert entry is not None
    body = json.loads(store.read_text(f"signals/.processing/{entry}") or "")
    applied = rules.apply(store, rules.Signal(entry, "FRICTION_DETECTED", body))  # then the lock was lost
    assert applied["outcome"] == "applied"
    for n in range(rules.MAX_SIGNAL_IDS + 5):  # meanwhile the new consumer applies many more reports of it
        later = rules.Signal(f"FRICTION_DETECTED.later-{n}", "FRICTION_DETECTED", body)
        assert rules.apply(store, later)["outcome"] == "applied"
    Consumer(store).recover()  # the next takeover finds the first one still claimed
    [friction] = store.read(layout.FRICTION_MAP)["frictions"]
    assert friction["reports"] == 1 + rules.MAX_SIGNAL_IDS + 5
    [again] = [r for r in log(store) if r["id"] == entry]
    assert again["outcome"] == "already_applied"
    assert left(store, ".processing") == [] and left(store) == []
    assert store_problems(store) == []


def test_a_signal_left_in_processing_is_finished_while_consuming_not_at_the_next_takeover(store: Store) -> None:
    """A consumer rescans .processing/ on every pass: what another consumer left there (it lost its lock
    between applying and logging) is finished now, once, instead of waiting for the next takeover."""
    from loki.watch import rules

    consumer = Consumer(store)
    consumer.recover()  # the live consumer's start: nothing to finish yet
    signals.emit(store, "FRICTION_DETECTED", FRICTION)
    old = Consumer(store)  # the consumer that lost its lock, still applying
    entry = old.claim("FRICTION_DETECTED")
    assert entry is not None
    body = json.loads(store.read_text(f"signals/.processing/{entry}") or "")
    rules.apply(store, rules.Signal(entry, "FRICTION_DETECTED", body))
    signals.emit(store, "DOCS_NEEDED")
    done = consumer.run_pass()
    assert sorted(r["name"] for r in done) == ["DOCS_NEEDED", "FRICTION_DETECTED"]
    [stuck] = [r for r in done if r["id"] == entry]
    assert stuck["outcome"] == "already_applied" and stuck["recovered"] is True
    assert left(store, ".processing") == []
    assert store.read(layout.FRICTION_MAP)["frictions"][0]["reports"] == 1
    assert consumer.run_pass() == [] and [r["id"] for r in log(store)].count(entry) == 1


def test_a_deferred_signal_is_not_taken_early_by_the_rescan(store: Store, root: Path) -> None:
    """The rescan of .processing/ leaves the consumer's own deferred signals to their retry time."""
    signals.emit(store, "DOCS_NEEDED")
    timer = Timer()
    consumer = Consumer(store, timer=timer)
    entry = consumer.claim("DOCS_NEEDED")
    assert entry is not None
    consumer._defer(entry, RuntimeError("the tree is busy"))
    assert consumer.run_pass() == [] and left(store, ".processing") == [entry]
    timer.now += 1
    assert [r["id"] for r in consumer.run_pass()] == [entry]


KNOWLEDGE_BODY = {"timestamp": "2026-01-25T10:00:00Z", "knowledge": "the cache is warmed at boot"}
KNOWLEDGE_ID = "INSTITUTIONAL_KNOWLEDGE_FOUND.x1"


def _race_the_knowledge_append(store: Any, start_other: Any, lock_waiter: Any) -> None:
    """A consumer applies a knowledge signal while another (which lost its lock, or is taking over) is
    appending the same section: the marker is looked for under the append's lock, so it is written once.
    ``start_other()`` starts the second applier and returns what waits for its outcome."""
    from loki.watch import rules

    marker = f"<!-- loki-signal {KNOWLEDGE_ID} -->"
    with store.transaction(layout.KNOWLEDGE):  # the first consumer is appending the section right now
        outcome_of_other = start_other()
        lock_waiter()  # the second applier waits for the append's lock
        store.append_text(layout.KNOWLEDGE, [rules.KNOWLEDGE_HEADER, "", "## 10:00 - the code", "",
                                             KNOWLEDGE_BODY["knowledge"], marker], lock=False, read_whole=True)
    assert outcome_of_other() == "already_applied"
    text = store.read_text(layout.KNOWLEDGE) or ""
    assert text.count("the cache is warmed at boot") == 1 and text.count("loki-signal") == 1


APPLY_KNOWLEDGE = """
import json, sys
from loki.watch import rules
from loki.storage.store import Store
sig = rules.Signal(sys.argv[2], "INSTITUTIONAL_KNOWLEDGE_FOUND", json.loads(sys.argv[3]))
print(rules.apply(Store(sys.argv[1]), sig)["outcome"])
"""


def test_the_knowledge_marker_is_checked_under_the_appends_lock_on_files(root: Path, clock: ManualClock) -> None:
    import subprocess
    import sys
    import time

    lock = root / (layout.KNOWLEDGE + ".lock")

    def start_other() -> Any:
        proc = subprocess.Popen([sys.executable, "-c", APPLY_KNOWLEDGE, str(root), KNOWLEDGE_ID,
                                 json.dumps(KNOWLEDGE_BODY)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**os.environ, "LOKI_LOCK_TIMEOUT": "60"})

        def outcome() -> str:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            return out.strip()

        return outcome

    def waiting() -> None:
        deadline = time.monotonic() + 60
        while b"->" not in _proc_locks_of(str(lock)):  # a process blocked in flock on it
            assert time.monotonic() < deadline, "the second applier never waited for the lock"
            time.sleep(0.005)

    _race_the_knowledge_append(Store(root, clock=clock), start_other, waiting)


def _proc_locks_of(path: str) -> bytes:
    """The /proc/locks lines of the file at ``path`` (a waiter's line has ``->``)."""
    st = os.stat(path)
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}".encode()
    with open("/proc/locks", "rb") as f:
        return b"\n".join(line for line in f.read().splitlines() if wanted in line)


def test_the_knowledge_marker_is_checked_under_the_appends_lock_on_postgres(root: Path, clock: ManualClock) -> None:
    import time

    from tests.conftest import postgres_store

    store = postgres_store(root, clock)
    from loki.storage.postgres.store import PgStore

    other = PgStore.open(store.db.url, root=str(root), clock=clock)

    pid = other.db.conn.info.backend_pid  # the second applier's connection
    probe = PgStore.open(store.db.url, clock=clock)

    def waiting() -> None:
        deadline = time.monotonic() + 30
        while True:
            found = probe.rows("SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted", (pid,))
            if found[0][0]:
                return
            assert time.monotonic() < deadline, "the second applier never waited for the lock"
            time.sleep(0.005)

    def start_other() -> Any:
        import threading

        from loki.watch import rules

        results: list[str] = []
        sig = rules.Signal(KNOWLEDGE_ID, "INSTITUTIONAL_KNOWLEDGE_FOUND", KNOWLEDGE_BODY)
        thread = threading.Thread(target=lambda: results.append(rules.apply(other, sig)["outcome"]))
        thread.start()

        def outcome() -> str:
            thread.join(60)
            return results[0]

        return outcome

    try:
        _race_the_knowledge_append(store, start_other, waiting)
    finally:
        probe.close()
        other.close()
        store.close()


def test_consume_pending_stops_before_the_next_signal_when_its_lock_connection_dies(root: Path,
                                                                                      clock: ManualClock) -> None:
    """`loki approve`'s one pass asks its lock between signals too (PostgreSQL: the lock dies with its connection)."""
    from loki.storage.postgres.store import PgStore
    from tests.conftest import postgres_store

    store = postgres_store(root, clock)
    killer = PgStore.open(store.db.url, clock=clock)
    try:
        for n in range(10):
            signals.emit(store, "DOCS_NEEDED", {"n": n})
        seen: list[dict[str, Any]] = []

        def cut_after_the_first(event: dict[str, Any]) -> None:
            seen.append(event)
            if len(seen) == 1:
                # This schema's holder of the consumer's lock (the server may serve other tests).
                killer.rows("SELECT pg_terminate_backend(backend_pid) FROM loki_lock_holders WHERE name = %s",
                            (CONSUMER_LOCK,))

        result = consume_pending(store, on_event=cut_after_the_first)
        assert result["consumed"] is True and len(result["outcomes"]) == 1
        assert len(signals.entries(store, "waiting")) == 9 and signals.entries(store, "processing") == []
    finally:
        killer.close()
        store.close()


REVIEW_BODY = {"timestamp": "2026-01-25T10:00:00Z", "reason": "is this migration safe?", "task_id": "lm-7"}
REVIEW_ID = "HUMAN_REVIEW_NEEDED.x1"


def _race_the_unknown_task_escalation(store: Any, start_other: Any, lock_waiter: Any) -> None:
    """A review request for a task loki does not know becomes one escalation file, even when two consumers
    apply it at once: its marker is looked for, and the file written, under the queue's lock."""
    from loki.queue.escalations import list_escalations, write_file
    from loki.watch import rules

    sig = rules.Signal(REVIEW_ID, "HUMAN_REVIEW_NEEDED", REVIEW_BODY)
    with store.tasks().transaction():  # the first consumer is writing the escalation right now
        outcome_of_other = start_other()
        lock_waiter()
        values = {key: "x" for key in ("task_title", "failure_count", "trigger", "error_summary", "attempts_log",
                                       "recommended_options", "timestamp", "agent")}
        write_file(store, task_id="lm-7", values={**values, "task_id": "lm-7",
                                                  "agent_analysis": f"asked {sig.marker}"}, now=store.now_ts())
    assert outcome_of_other() == "already_applied"
    assert len(list_escalations(store)) == 1


APPLY_REVIEW = """
import json, sys
from loki.watch import rules
from loki.storage.store import Store
sig = rules.Signal(sys.argv[2], "HUMAN_REVIEW_NEEDED", json.loads(sys.argv[3]))
print(rules._escalate_unknown_task(Store(sys.argv[1]), sig)["outcome"])  # past "no such task in the queue"
"""


def test_an_unknown_tasks_review_request_is_escalated_once_by_two_consumers_on_files(root: Path) -> None:
    import subprocess
    import sys
    import time

    def start_other() -> Any:
        proc = subprocess.Popen([sys.executable, "-c", APPLY_REVIEW, str(root), REVIEW_ID, json.dumps(REVIEW_BODY)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "LOKI_LOCK_TIMEOUT": "60"})

        def outcome() -> str:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            return out.strip()

        return outcome

    def waiting() -> None:
        deadline = time.monotonic() + 30
        while b"->" not in _proc_locks_of(str(root / "queue" / ".lock")):
            assert time.monotonic() < deadline, "the second consumer never waited for the queue's lock"
            time.sleep(0.005)

    _race_the_unknown_task_escalation(Store(root), start_other, waiting)


def test_an_unknown_tasks_review_request_is_escalated_once_by_two_consumers_on_postgres(
        root: Path, clock: ManualClock) -> None:
    import threading
    import time

    from loki.storage.postgres.store import PgStore
    from loki.watch import rules
    from tests.conftest import postgres_store

    store = postgres_store(root, clock)
    other = PgStore.open(store.db.url, root=str(root), clock=clock)
    probe = PgStore.open(store.db.url, clock=clock)
    pid = other.db.conn.info.backend_pid

    def start_other() -> Any:
        results: list[str] = []
        sig = rules.Signal(REVIEW_ID, "HUMAN_REVIEW_NEEDED", REVIEW_BODY)
        # Past "no such task in the queue" (block_for_review's first step), where the race was.
        thread = threading.Thread(target=lambda: results.append(rules._escalate_unknown_task(other, sig)["outcome"]))
        thread.start()

        def outcome() -> str:
            thread.join(60)
            return results[0]

        return outcome

    def waiting() -> None:
        deadline = time.monotonic() + 30
        while not probe.rows("SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted", (pid,))[0][0]:
            assert time.monotonic() < deadline, "the second consumer never waited for the queue's lock"
            time.sleep(0.005)

    try:
        _race_the_unknown_task_escalation(store, start_other, waiting)
    finally:
        probe.close()
        other.close()
        store.close()


@pytest.mark.files("makes a claimed signal that cannot be finished, with a directory in its way")
def test_a_claimed_signal_that_cannot_be_finished_does_not_hold_up_the_others(store: Store, root: Path) -> None:
    """The rescan of .processing/ meets a signal whose last step fails every time: it is kept for a retry
    with backoff, like a rule that cannot run now, and the signals waiting behind it are consumed."""
    timer = Timer()
    consumer = Consumer(store, timer=timer)
    consumer.recover()
    processing = root / "signals" / ".processing"
    processing.mkdir(exist_ok=True)
    (processing / "BROKEN.x1").write_bytes(b"{not json")  # left there by another consumer
    blocker = root / "signals" / ".quarantine" / "BROKEN.x1"
    blocker.mkdir(parents=True)
    (blocker / "in-the-way").write_text("x")  # the move into quarantine cannot replace a full directory
    signals.emit(store, "DOCS_NEEDED")
    events: list[dict[str, Any]] = []
    consumer.on_event = events.append
    done = consumer.run_pass()
    assert [r["name"] for r in done] == ["DOCS_NEEDED"]
    assert consumer.deferred == 1 and any(e["event"] == "error" and "BROKEN.x1" in e["detail"] for e in events)
    (blocker / "in-the-way").unlink()
    (blocker / "in-the-way").mkdir()  # in the way once more: still only finishing is retried
    timer.now += 1
    assert consumer.run_pass() == [] and consumer.deferred == 1
    (blocker / "in-the-way").rmdir()
    blocker.rmdir()
    timer.now += 2
    assert consumer.run_pass() == [] and consumer.deferred == 0  # finished, not quarantined and logged again
    assert left(store, ".processing") == [] and left(store, ".quarantine") == ["BROKEN.x1"]
    assert [r["id"] for r in log(store)].count("BROKEN.x1") == 1
