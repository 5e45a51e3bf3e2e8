"""The PostgreSQL state store's own promises, beyond the API suites it shares with the other backends.

Logs (positions never reused, appenders kept out of a compaction), published items (distinct names and
one claimer per item under real concurrency: several connections at once), the consumer's lock (one
per schema, free the moment its connection dies, its holder named), LISTEN/NOTIFY, error memory shared
through the database, and this machine's local copies for the hooks' hot path. Each test has a schema
of its own in the test server (tests/pgserver.py); concurrency is real: each thread has its own
connection, as each process would.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from loki.clock import ManualClock
from loki.errors import LockTimeout
from loki.storage import layout
from tests.conftest import postgres_store

LOG = "logs/test.jsonl"


@pytest.fixture
def opened() -> Iterator[list[Any]]:
    stores: list[Any] = []
    yield stores
    for store in stores:
        store.close()


@pytest.fixture
def store(root: Path, clock: ManualClock, opened: list[Any]) -> Any:
    made = postgres_store(root, clock)
    opened.append(made)
    return made


@pytest.fixture
def connect(store: Any, opened: list[Any]) -> Callable[..., Any]:
    """Another store over the same schema: another process's connection."""
    def make(url: str | None = None) -> Any:
        from loki.storage.postgres.store import PgStore

        other = PgStore.open(url or store.db.url, root=store.local_root, clock=store.clock)
        opened.append(other)
        return other

    return make


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll an observable condition against a deadline (never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.005)


def in_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            results[index] = work(index)
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    return results


# -- logs -------------------------------------------------------------------------------------------------


def test_a_position_is_never_reused_after_a_rewrite(store: Any) -> None:
    store.append_lines(LOG, [{"n": i} for i in range(3)])
    lines, end = store.read_after(LOG, None)
    with store.transaction(LOG):
        store.rewrite_lines(LOG, [{"n": i} for i in range(3)])  # the same content, the same size
    assert not store.log_valid(LOG, end)  # a file offset would still look valid here
    fresh, _ = store.read_after(LOG, None)
    assert [line.data for line in fresh] == [line.data for line in lines]
    assert not {line.position for line in fresh} & {line.position for line in lines}  # drift ids stay unique


def test_appenders_on_many_connections_get_dense_numbers_in_commit_order(store: Any,
                                                                         connect: Callable[..., Any]) -> None:
    writers = [connect() for _ in range(4)]

    def append(index: int) -> None:
        for n in range(25):
            writers[index].append_lines(LOG, [{"writer": index, "n": n}])

    in_threads(4, append)
    lines, end = store.read_after(LOG, None)
    records = [json.loads(line.data) for line in lines]
    assert len(records) == 100 and end == store.log_end(LOG)
    for index in range(4):  # each writer's lines in its own order, none lost, none twice
        assert [r["n"] for r in records if r["writer"] == index] == list(range(25))
    assert store.log_size(LOG) == sum(line.length + 1 for line in lines)


def test_a_compaction_keeps_appenders_out_until_it_commits(store: Any, connect: Callable[..., Any]) -> None:
    store.append_lines(LOG, [{"n": 1}, {"n": 1}])
    other = connect()
    appended = threading.Event()

    def append() -> None:
        other.append_lines(LOG, [{"n": 2}])
        appended.set()

    with store.transaction(LOG):
        assert len(store.read_after(LOG, None)[0]) == 2
        thread = threading.Thread(target=append)
        thread.start()
        wait_for(lambda: _waiting_for_a_lock(store))  # the appender is held at the log's lock
        assert not appended.is_set()
        store.rewrite_lines(LOG, [{"n": 1}])  # the two duplicates merged
    thread.join(timeout=30)
    assert [json.loads(line.data) for line in store.read_after(LOG, None)[0]] == [{"n": 1}, {"n": 2}]


def _waiting_for_a_lock(store: Any) -> bool:
    with store.db.transaction() as conn:
        row = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").fetchone()
    return bool(row and row[0])


# -- published items --------------------------------------------------------------------------------------


def test_publishers_on_many_connections_never_share_a_name(store: Any, connect: Callable[..., Any]) -> None:
    writers = [connect() for _ in range(6)]
    keys = in_threads(6, lambda index: [writers[index].create_unique("signals", "DOCS_NEEDED", b"{}", separator=".")
                                        for _ in range(10)])
    names = [key for batch in keys for key in batch]
    assert len(names) == len(set(names)) == 60
    assert sorted(store.list("signals")) == sorted(key.split("/", 1)[1] for key in names)


def test_an_item_is_claimed_by_exactly_one_of_many_claimers(store: Any, connect: Callable[..., Any]) -> None:
    for _ in range(40):
        store.create_unique("signals", "DOCS_NEEDED", b"{}", separator=".")
    names = store.list("signals")
    claimers = [connect() for _ in range(8)]
    won = in_threads(8, lambda index: [name for name in names
                                       if claimers[index].claim_into(f"signals/{name}", "signals/.processing",
                                                                     f"{name}.c{index}")])
    claimed = [name for batch in won for name in batch]
    assert sorted(claimed) == sorted(names)  # every item once, none twice
    assert store.list("signals") == [".processing"] and len(store.list("signals/.processing")) == 40


def test_items_are_ordered_by_the_databases_clock_not_the_publishers(store: Any) -> None:
    store.create_unique("signals", "HUMAN_REVIEW_NEEDED", b"{}", mtime_ns=2_000_000_000_000_000_000)
    store.create_unique("signals", "HUMAN_APPROVED", b"{}", mtime_ns=1)  # a machine whose clock is far behind
    order = [row["name"] for row in sorted(store.scan("signals"), key=lambda row: row["mtime_ns"])]
    assert order == ["HUMAN_REVIEW_NEEDED", "HUMAN_APPROVED"]


def test_an_escalation_is_an_item_read_listed_and_resolved_like_a_document(store: Any) -> None:
    from loki.queue import escalations

    values = {key: "-" for key in ("failure_count", "error_summary", "attempts_log", "agent_analysis",
                                   "recommended_options", "agent")}
    values.update(task_title="t", task_id="t1", trigger="stuck", timestamp="2026-01-25T10:00:00Z")
    rel = escalations.write_file(store, task_id="t1", values=values, now="2026-01-25T10:00:00Z")
    assert store.entry(rel)["kind"] == "file" and rel.rsplit("/", 1)[1] in store.list(layout.ESCALATIONS_DIR)
    (row,) = escalations.list_escalations(store, open_only=True)
    token = store.change_token(rel)
    escalations.mark_resolved(store, row["file"], "answered on the team channel")
    assert "answered on the team channel" in (store.read_text(rel) or "") and store.change_token(rel) != token
    assert escalations.list_escalations(store, open_only=True) == []
    assert store.remove(rel) and store.read_text(rel) is None


def test_finishing_moves_a_claimed_item_into_quarantine(store: Any) -> None:
    key = store.create_unique("signals", "BROKEN", b"not json")
    assert store.claim_into(key, "signals/.processing", "BROKEN.x1")
    store.finish("signals/.processing/BROKEN.x1", "signals/.quarantine")
    assert store.read_bytes("signals/.quarantine/BROKEN.x1") == b"not json"
    assert store.entry("signals/.processing/BROKEN.x1") is None and store.list("signals") == [".quarantine"]


# -- the consumer's lock: one per schema, free when its holder's connection dies ----------------------------


def test_one_consumer_lock_per_schema_and_its_holder_is_named(store: Any, connect: Callable[..., Any]) -> None:
    from loki.watch.consumer import CONSUMER_LOCK

    held = store.lock(CONSUMER_LOCK, 0.0).acquire()
    other = connect()
    with pytest.raises(LockTimeout) as refused:
        other.lock(CONSUMER_LOCK, 0.0).acquire()
    holder = other.lock_holder(CONSUMER_LOCK)
    assert holder is not None and holder["pid"] > 0 and holder["host"] and holder["since"]
    assert f"pid {holder['pid']}" in refused.value.message
    from tests.pgserver import fresh_schema_url  # another team: another schema of the same server

    neighbour = connect(fresh_schema_url())
    neighbour.lock(CONSUMER_LOCK, 0.0).acquire()  # not blocked by this schema's consumer
    held.release()
    assert other.lock_holder(CONSUMER_LOCK) is None
    other.lock(CONSUMER_LOCK, 0.0).acquire()


def test_a_lock_whose_connection_dies_is_free_at_once(store: Any, connect: Callable[..., Any]) -> None:
    from loki.watch.consumer import CONSUMER_LOCK

    held = store.lock(CONSUMER_LOCK, 0.0).acquire()
    other = connect()
    _terminate(other, held)
    wait_for(lambda: other.lock_holder(CONSUMER_LOCK) is None)  # the server ends the session, and the lock
    other.lock(CONSUMER_LOCK, 0.0).acquire()
    assert not held.held  # the old holder knows it lost it


def _terminate(store: Any, held: Any) -> None:
    """The holder's connection dies (as when its machine vanishes)."""
    pid = held._conn.info.backend_pid
    with store.db.transaction() as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


def test_a_watcher_that_loses_its_lock_stops_consuming(store: Any, connect: Callable[..., Any]) -> None:
    from loki.signals import emit as signals
    from loki.watch.consumer import CONSUMER_LOCK
    from loki.watch.watcher import Watcher

    events: list[dict[str, Any]] = []
    first = Watcher(store, on_event=events.append, observer="polling")
    assert first.start()
    _terminate(store, first.lock._lock)
    first.lock._lock._probed = 0.0  # ask the connection now, not after the next second
    wait_for(lambda: store.lock_holder(CONSUMER_LOCK) is None)
    second = Watcher(connect(), observer="polling")
    assert second.start()
    signals.emit(store, "DOCS_NEEDED")
    assert first.step() == 0 and not first.consuming  # display-only: it does not consume any more
    assert any(e["event"] == "warning" and "lost the consumer lock" in e["detail"] for e in events)
    assert second.step() == 1
    first.close()
    second.close()


# -- LISTEN/NOTIFY ---------------------------------------------------------------------------------------------


def test_a_publication_on_another_connection_wakes_an_observer(store: Any, connect: Callable[..., Any]) -> None:
    from loki.storage.postgres import listen

    woken = threading.Event()
    observer = store.observe("signals", woken.set)
    try:
        assert observer.kind == "notify" and observer.listening
        woken.clear()  # the first wake-up says "you may have missed something"
        connect().create_unique("signals", "DOCS_NEEDED", b"{}")
        assert woken.wait(10)
        woken.clear()
        connect().append_lines("signals/DRIFT_DETECTED", [{"message": "drift"}])  # a drift line wakes it too
        assert woken.wait(10)
    finally:
        observer.stop()
        observer.join(5)
    assert listen.channel("t_1", "signals") != listen.channel("t_2", "signals")
    assert len(listen.channel("s" * 80, "signals")) <= listen.MAX_CHANNEL


# -- error memory, shared through the database -----------------------------------------------------------------


def test_what_one_machine_captures_another_finds(store: Any, connect: Callable[..., Any]) -> None:
    from loki.memory.memory import ErrorMemory

    ErrorMemory(store).capture("Bash", {"command": "terraformx plan"},
                               "Exit code 127\nbash: terraformx: command not found", branch="main")
    other = ErrorMemory(connect())
    (hit,) = other.search("terraformx")
    assert hit["command"] == "terraformx plan" and hit["score"] > 0
    assert ErrorMemory(connect()).sync()["added"] == 0  # indexed once, for everyone


def test_a_compacted_log_makes_the_search_rebuild(store: Any) -> None:
    from loki.memory.memory import ErrorMemory

    memory = ErrorMemory(store)
    for _ in range(3):
        memory.capture("Bash", {"command": "terraformx plan"}, "Exit code 127\nterraformx: not found", branch="main")
    assert memory.search("terraformx")[0]["occurrences"] == 3
    report = memory.compact()
    assert report["index"]["rebuilt"] and memory.sync()["added"] == 0
    (hit,) = memory.search("terraformx")
    assert hit["occurrences"] == 3  # the merged record stands for all three


# -- this machine's copies for the hooks' hot path ---------------------------------------------------------------


def test_strike_writes_refresh_this_machines_copy(root: Path, clock: ManualClock, opened: list[Any]) -> None:
    from loki.strikes import view as strikeview
    from loki.strikes.strikes import Strikes

    store = postgres_store(root, clock, {"version": 1, "strikes": {"warn_at": 2, "stop_at": 3}})
    opened.append(store)
    strikes = Strikes(store, branch="main")
    for _ in range(3):
        strikes.record_failure("Bash", {"command": "cargo build"}, "Exit code 127\ncargo: command not found")
    view = strikeview.hot_root(str(root))
    assert view == str(root / layout.LOCAL_CACHE_DIR)
    (entry,) = strikeview.read_keys(view, "main").values()
    assert entry["strike_count"] == 3
    assert strikeview.read_config(view) == store.config
    strikes.reset(all_keys=True)
    assert strikeview.read_keys(view, "main") == {}


def test_keep_local_follows_the_database_and_drops_what_is_gone(store: Any, root: Path,
                                                                connect: Callable[..., Any]) -> None:
    other = connect()  # another machine writes a hint this machine has never seen
    other.write_text(f"{layout.MEMORY_HINTS_DIR}/a.json", '{"v": 1}\n')
    stale = root / layout.LOCAL_CACHE_DIR / layout.MEMORY_HINTS_DIR / "gone.json"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    store.keep_local([], [layout.MEMORY_HINTS_DIR])
    assert (stale.parent / "a.json").read_text() == '{"v": 1}\n' and not stale.exists()
