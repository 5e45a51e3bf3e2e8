"""Every change stamps the time read inside its unit of work (under the queue lock), never a time read before it.

A process that waits seconds for the lock and then writes the instant it *asked* would stamp a
task earlier than the commit that preceded it (``completed_at`` before a re-claim's ``claimed_at``,
a backoff computed from the past). The probe clock below answers differently depending on whether
a unit of work is open at the moment it is read, so a read outside one shows up in the data. It runs
on every backend: on the files the queue lock is held, in memory the store's lock, on PostgreSQL a
transaction is open (a claim's too, which takes no queue-wide lock there).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from loki.clock import Clock, add_seconds, parse_ts
from loki.queue.deadletter import DeadLetter
from loki.queue.escalations import escalate, resolve
from loki.queue.queue import Queue
from loki.storage import layout
from loki.storage.locks import in_use
from loki.storage.store import Store
from loki.watch import rules
from loki.watch.ticks import Tick

STATES = [*layout.QUEUE_STATES, "dead-letter", "abandoned"]

BEFORE = "2026-01-25T10:00:00Z"  # what a read outside the lock sees
UNDER = "2026-01-25T10:00:07Z"  # what a read under the lock sees (the lock took 7 s to get)


class LockProbeClock(Clock):
    """BEFORE while no unit of work is open, UNDER while one (of this process) is."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.offset = 0.0  # lets a test move both instants forward together

    def inside(self) -> bool:
        if isinstance(self.store, Store):
            # flock belongs to the open file description: the probe's conflicts with the store's own.
            return in_use(self.store.path(layout.QUEUE_LOCK))
        if self.store.backend == "memory":
            return bool(self.store._lock._is_owned())
        return bool(self.store.db.in_transaction)

    def now(self) -> datetime:
        return add_seconds(parse_ts(UNDER if self.inside() else BEFORE), self.offset)


@pytest.fixture
def probe(backend_store: Any) -> tuple[Store, LockProbeClock]:
    clock = LockProbeClock(backend_store)
    backend_store.clock = clock
    if hasattr(backend_store, "lease_clock"):  # PostgreSQL: leases are stamped on the database's clock, probed too
        backend_store.lease_clock = clock
    return backend_store, clock


def stamps(store: Any) -> set[str]:
    """Every timestamp-looking string in the queue's tasks and entries."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str) and len(value) == 20 and value.endswith("Z") and value[10] == "T":
            found.add(value)

    walk(store.tasks().view(STATES))
    walk(store.tasks().dead_letter_doc())
    return found


def test_the_probe_tells_a_held_lock_from_a_free_one(probe: tuple[Store, LockProbeClock]) -> None:
    store, _ = probe
    assert store.now_ts() == BEFORE
    with store.tasks().transaction():
        assert store.now_ts() == UNDER
    with store.tasks().transaction(claim=True):
        assert store.now_ts() == UNDER


def test_queue_operations_stamp_the_time_under_the_lock(probe: tuple[Store, LockProbeClock]) -> None:
    store, _ = probe
    queue = Queue(store)
    queue.add("one", task_id="t1")
    queue.add("two", task_id="t2", max_attempts=1)
    claimed = queue.claim("a1")
    queue.complete(claimed["id"], "a1")
    queue.claim("a1")
    queue.fail("t2", "a1", error="boom")  # last attempt: dead-letter
    assert BEFORE not in stamps(store)


def test_dead_letter_and_escalation_operations_stamp_the_time_under_the_lock(
        probe: tuple[Store, LockProbeClock]) -> None:
    store, _ = probe
    queue = Queue(store)
    for task_id in ("t1", "t2", "t3", "t4"):
        queue.add(task_id, task_id=task_id, max_attempts=1)
        queue.claim("a1")
        queue.fail(task_id, "a1", error="boom")
    dead = DeadLetter(store)
    dead.abandon("t1", "not needed")
    dead.split("t2", ["smaller"])
    escalate(store, "t3", "security_decision")
    resolve(store, "t3", "approve")
    dead.review(force=True)
    assert BEFORE not in stamps(store)


def test_watcher_rules_stamp_the_time_under_the_lock(probe: tuple[Store, LockProbeClock]) -> None:
    store, _ = probe
    queue = Queue(store)
    for task_id in ("t1", "t2", "t3"):
        queue.add(task_id, task_id=task_id)
    for _ in range(3):
        queue.claim("a1")

    def signal(name: str, task_id: str, n: int, **body: Any) -> rules.Signal:
        return rules.Signal(f"{name}.20260125T100000Z-{n:08x}", name,
                            {"timestamp": BEFORE, "task_id": task_id, **body})

    rules.apply(store, signal("TESTS_PASSED_auth", "t1", 1))
    rules.apply(store, signal("TESTS_FAILED_auth", "t2", 2))
    rules.apply(store, signal("DRIFT_DETECTED", "t3", 3, detected_drift="off course"))
    assert BEFORE not in stamps(store)


def test_the_review_timeout_tick_stamps_the_time_under_the_lock(
        probe: tuple[Store, LockProbeClock]) -> None:
    store, clock = probe
    queue = Queue(store)
    queue.add("one", task_id="t1")
    escalate(store, "t1", "security_decision")
    clock.offset = 48 * 3600  # past the 24 h review deadline
    events = Tick(store).review_timeouts(clock.now())
    assert [e["action"] for e in events] == ["review_timeout"]
    entry = store.tasks().dead_letter_doc()["tasks"][0]
    assert entry["task_data"]["updated_at"] == "2026-01-27T10:00:07Z"  # UNDER + 48 h, not BEFORE + 48 h
