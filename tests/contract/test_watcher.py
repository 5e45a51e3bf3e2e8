"""The watcher loop (loki/watch/watcher.py), driven in-process: cycles, ticks, one consumer, stopping,
the observer. Every test runs on each backend (tests/conftest.py: backend); a second watcher, or a
watcher running in a thread, gets a store of its own over the same state (``twin``: a second process
would have one)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from loki.clock import ManualClock
from loki.queue.queue import Queue
from loki.signals import emit as signals
from loki.signals import outcomes
from loki.storage import layout
from loki.storage.store import Store
from loki.watch.consumer import Consumer
from loki.watch.watcher import Watcher

OBSERVER = {"file": "native", "memory": "memory", "postgres": "notify"}
"""What wakes a watcher on each backend (store.observe): watchdog, the memory store's callbacks, LISTEN/NOTIFY."""


@pytest.fixture
def store(backend_store: Store) -> Store:
    return backend_store


@pytest.fixture
def twin(backend: str, root: Path) -> Iterator[Callable[[Any], Any]]:
    """Another store over the same state, as another process would open it (the memory store is its own)."""
    opened: list[Any] = []

    def make(store: Any) -> Any:
        if backend == "memory":
            return store
        if backend == "postgres":
            from loki.storage.postgres.store import PgStore

            other = PgStore.open(store.db.url, root=store.local_root, clock=store.clock)
            opened.append(other)
            return other
        return Store(root, clock=store.clock)

    yield make
    for other in opened:
        other.close()


class Timer:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def logged(store: Any) -> list[dict[str, Any]]:
    return outcomes.tail(store)


def wait_for(condition: Any, timeout: float = 10.0) -> None:
    """Poll an observable condition with a deadline (never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.005)


def test_a_cycle_consumes_and_ticks_when_the_tick_is_due(store: Store, clock: ManualClock) -> None:
    queue = Queue(store)
    queue.add("t", task_id="t1")
    queue.claim("eng-1", lease_seconds=10)
    timer = Timer()
    events: list[dict[str, Any]] = []
    watcher = Watcher(store, on_event=events.append, observer="polling", timer=timer)
    assert watcher.start() is True
    signals.emit(store, "DOCS_NEEDED")
    assert watcher.step() == 1
    state = store.read(layout.WATCH_STATE)
    assert state["last_tick"] == "2026-01-25T10:00:00Z" and state["consumer"]["pid"] > 0
    clock.advance(60)  # the lease expired, but the next tick is 5 s of watcher time away
    assert watcher.step() == 0 and queue.show("t1")["state"] == "in-progress"
    timer.now += watcher.tick_seconds
    watcher.step()
    assert queue.show("t1")["state"] == "pending"
    assert [e["action"] for e in events if e["event"] == "tick"] == ["lease_expired"]
    watcher.close()
    assert store.read(layout.WATCH_STATE)["consumer"] is None
    assert events[0]["event"] == "started" and events[-1]["event"] == "stopped"


def test_start_finishes_what_a_crashed_consumer_left(store: Store) -> None:
    signals.emit(store, "DOCS_NEEDED")
    entry = Consumer(store).claim("DOCS_NEEDED")
    watcher = Watcher(store, observer="polling")
    watcher.start()
    watcher.close()
    assert [r["id"] for r in logged(store)] == [entry] and logged(store)[0]["recovered"] is True


def test_a_second_watcher_is_display_only_then_takes_over(store: Store, twin: Callable[[Any], Any]) -> None:
    first = Watcher(store, observer="polling")
    assert first.start()
    timer = Timer()
    seen: list[dict[str, Any]] = []
    second = Watcher(twin(store), on_event=seen.append, observer="polling", timer=timer)
    assert second.start() is False
    assert seen[0]["consuming"] is False and "display-only" in seen[0]["detail"]
    assert second.holder is not None and second.holder["pid"] > 0
    signals.emit(store, "DOCS_NEEDED")
    assert second.step() == 0 and signals.entries(store) != []  # display-only never consumes
    first.step()
    second.step()
    assert [(e["name"], e["observed"]) for e in seen if e["event"] == "signal"] == [("DOCS_NEEDED", True)]
    first.close()
    signals.emit(store, "BLOG_POST_QUEUED")
    timer.now += second.rescan_seconds
    second.step()
    assert second.consuming and [e["event"] for e in seen].count("started") == 2
    assert signals.entries(store) == [] and [r["name"] for r in logged(store)] == ["DOCS_NEEDED", "BLOG_POST_QUEUED"]
    second.close()


def test_stop_finishes_the_signal_in_hand_and_leaves_the_rest_waiting(store: Store) -> None:
    for _ in range(5):
        signals.emit(store, "DOCS_NEEDED")
    watcher = Watcher(store, observer="polling")

    def stop_after_the_first(event: dict[str, Any]) -> None:
        if event["event"] == "signal":
            watcher.stop()

    watcher.on_event = stop_after_the_first
    watcher.start()
    assert watcher.step() == 1
    watcher.close()
    assert len(logged(store)) == 1
    assert len(signals.entries(store, "waiting")) == 4 and signals.entries(store, "processing") == []


def test_run_once_summarises_what_it_did(store: Store) -> None:
    signals.emit(store, "DOCS_NEEDED")
    signals.emit(store, "DEPLOY_DONE")
    result = Watcher(store).run_once()
    assert result["consuming"] is True and result["signals"] == 2
    assert result["outcomes"] == {"logged": 1, "archived": 1}
    assert result["events"][0]["event"] == "started"


def test_the_stores_observer_wakes_the_loop_long_before_the_rescan(make_store: Callable[..., Any], backend: str,
                                                                    twin: Callable[[Any], Any]) -> None:
    store = make_store({"version": 1, "watch": {"rescan_seconds": 60, "tick_seconds": 60}})
    watcher = Watcher(twin(store), observer="native")  # the loop's thread has a store of its own
    loop = threading.Thread(target=watcher.run)
    loop.start()
    try:
        wait_for(lambda: watcher.consuming)
        assert watcher.observer == OBSERVER[backend]
        started = time.monotonic()
        signals.emit(store, "DOCS_NEEDED")
        wait_for(lambda: len(logged(store)) == 1, timeout=10)
        assert time.monotonic() - started < 30  # the rescan alone would take 60 s
    finally:
        watcher.stop()
        loop.join(timeout=10)
    assert not loop.is_alive()


def test_without_an_observer_the_rescan_still_finds_signals(make_store: Callable[..., Any],
                                                             twin: Callable[[Any], Any]) -> None:
    store = make_store({"version": 1, "watch": {"rescan_seconds": 0.05, "tick_seconds": 60}})
    watcher = Watcher(twin(store), observer="polling")
    loop = threading.Thread(target=watcher.run)
    loop.start()
    try:
        wait_for(lambda: watcher.consuming)
        assert watcher.observer == "polling"
        signals.emit(store, "DOCS_NEEDED")
        wait_for(lambda: len(logged(store)) == 1)
    finally:
        watcher.stop()
        loop.join(timeout=10)


def test_an_unknown_observer_mode_is_refused(store: Store) -> None:
    from loki.errors import InvalidInput

    with pytest.raises(InvalidInput, match="--observer"):
        Watcher(store, observer="kqueue")


def test_a_display_only_watcher_shows_the_consumers_tick_events(store: Store, twin: Callable[[Any], Any],
                                                                  clock: ManualClock) -> None:
    from loki.breakers.breakers import Breakers
    from loki.cli.watch import event_text

    queue = Queue(store)
    queue.add("t", task_id="t1")
    queue.claim("eng-1", lease_seconds=10)
    Breakers(store).trip("api/claude")
    first = Watcher(store, observer="polling")
    assert first.start()
    seen: list[dict[str, Any]] = []
    second = Watcher(twin(store), on_event=seen.append, observer="polling", timer=Timer())
    assert second.start() is False
    clock.advance(300)
    first.run_tick()  # the consumer requeues the lease and saves HALF_OPEN
    second.step()
    ticks = [e for e in seen if e["event"] == "tick"]
    assert [(e["action"], e["observed"]) for e in ticks] == [("lease_expired", True), ("breaker_half_open", True)]
    line = event_text(ticks[0], "2026-01-25T10:05:00Z")
    assert line == ("10:05:00 tick lease_expired: t1: lease expired, back to pending (a timeout attempt) "
                    "(seen in the log)")
    second.step()
    assert len([e for e in seen if e["event"] == "tick"]) == 2  # each event shown once
    first.close()
    second.close()


# -- a consumer that loses its lock (issue 22: two consumers at once) -------------------------------------------


def test_a_consumer_whose_lock_connection_dies_stops_before_the_next_signal(root: Path, clock: ManualClock) -> None:
    """The lock is checked between two signals, not once a step: when its connection dies (the server has
    freed the lock for another watcher, which runs recover()), the consumer applies nothing more."""
    from loki.storage.postgres.store import PgStore
    from loki.watch.consumer import CONSUMER_LOCK
    from tests.conftest import postgres_store

    store = postgres_store(root, clock)
    killer = PgStore.open(store.db.url, clock=clock)
    try:
        for n in range(30):
            signals.emit(store, "DOCS_NEEDED", {"n": n})
        events: list[dict[str, Any]] = []
        watcher = Watcher(store, observer="polling")
        assert watcher.start()
        lock_pid = watcher.lock._lock._conn.info.backend_pid  # type: ignore[union-attr]

        def cut_after_the_first(event: dict[str, Any]) -> None:
            events.append(event)
            if event["event"] == "signal" and len([e for e in events if e["event"] == "signal"]) == 1:
                killer.rows("SELECT pg_terminate_backend(%s)", (lock_pid,))
                wait_for(lambda: killer.lock_holder(CONSUMER_LOCK) is None)  # free for another watcher now

        watcher.on_event = cut_after_the_first
        assert watcher.step() == 1
        assert not watcher.consuming
        assert any(e["event"] == "warning" and "lost the consumer lock" in e["detail"] for e in events)
        assert len(signals.entries(store, "waiting")) == 29 and signals.entries(store, "processing") == []
        assert [r["signal"]["n"] for r in logged(store)] == [0]
        watcher.close()
    finally:
        killer.close()
        store.close()
