"""Every change stamps the time read while holding the queue lock, never a time read before it.

A process that waits seconds for the lock and then writes the instant it *asked* would stamp a
task earlier than the commit that preceded it (``completed_at`` before a re-claim's ``claimed_at``,
a backoff computed from the past). The probe clock below answers differently depending on whether
the queue lock is held at the moment it is read, so a read outside the lock shows up in the data.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from loki.clock import Clock, add_seconds, parse_ts
from loki.queue.deadletter import DeadLetter
from loki.queue.escalations import escalate, resolve
from loki.queue.queue import Queue
from loki.signals import rules
from loki.signals.ticks import Tick
from loki.storage import layout
from loki.storage.locks import in_use
from loki.storage.store import Store

BEFORE = "2026-01-25T10:00:00Z"  # what a read outside the lock sees
UNDER = "2026-01-25T10:00:07Z"  # what a read under the lock sees (the lock took 7 s to get)


class LockProbeClock(Clock):
    """BEFORE while nobody holds ``queue/.lock``, UNDER while somebody (this process) does."""

    def __init__(self, root: Path) -> None:
        self.lock_path = str(root / layout.QUEUE_LOCK)
        self.offset = 0.0  # lets a test move both instants forward together

    def now(self) -> datetime:
        # flock belongs to the open file description: the probe's conflicts with the store's own.
        return add_seconds(parse_ts(UNDER if in_use(self.lock_path) else BEFORE), self.offset)


@pytest.fixture
def probe(root: Path) -> tuple[Store, LockProbeClock]:
    clock = LockProbeClock(root)
    return Store(root, clock=clock), clock


def stamps(root: Path) -> set[str]:
    """Every timestamp-looking string in the queue files."""
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

    for rel in [*(layout.queue_file(s) for s in layout.QUEUE_STATES), layout.DEADLETTER, layout.ABANDONED]:
        path = root / rel
        if path.exists():
            walk(json.loads(path.read_text()))
    return found


def test_the_probe_tells_a_held_lock_from_a_free_one(probe: tuple[Store, LockProbeClock]) -> None:
    store, _ = probe
    assert store.now_ts() == BEFORE
    with store.transaction(layout.QUEUE_LOCK):
        assert store.now_ts() == UNDER


def test_queue_operations_stamp_the_time_under_the_lock(probe: tuple[Store, LockProbeClock], root: Path) -> None:
    store, _ = probe
    queue = Queue(store)
    queue.add("one", task_id="t1")
    queue.add("two", task_id="t2", max_attempts=1)
    claimed = queue.claim("a1")
    queue.complete(claimed["id"], "a1")
    queue.claim("a1")
    queue.fail("t2", "a1", error="boom")  # last attempt: dead-letter
    assert BEFORE not in stamps(root)


def test_dead_letter_and_escalation_operations_stamp_the_time_under_the_lock(
        probe: tuple[Store, LockProbeClock], root: Path) -> None:
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
    assert BEFORE not in stamps(root)


def test_watcher_rules_stamp_the_time_under_the_lock(probe: tuple[Store, LockProbeClock], root: Path) -> None:
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
    assert BEFORE not in stamps(root)


def test_the_review_timeout_tick_stamps_the_time_under_the_lock(
        probe: tuple[Store, LockProbeClock], root: Path) -> None:
    store, clock = probe
    queue = Queue(store)
    queue.add("one", task_id="t1")
    escalate(store, "t1", "security_decision")
    clock.offset = 48 * 3600  # past the 24 h review deadline
    events = Tick(store).review_timeouts(clock.now())
    assert [e["action"] for e in events] == ["review_timeout"]
    entry = json.loads((root / layout.DEADLETTER).read_text())["tasks"][0]
    assert entry["task_data"]["updated_at"] == "2026-01-27T10:00:07Z"  # UNDER + 48 h, not BEFORE + 48 h
