"""The watcher's periodic tick (loki/watch/ticks.py), with time moved by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loki.breakers.breakers import Breakers
from loki.clock import ManualClock
from loki.queue.deadletter import DeadLetter
from loki.queue.escalations import escalate
from loki.queue.queue import Queue
from loki.signals import emit as signals
from loki.storage import layout
from loki.storage.store import Store
from loki.watch.consumer import Consumer
from loki.watch.ticks import EVENTS_LOG, Tick
from tests.helpers import snapshot_bytes, tree_problems


@pytest.fixture
def store(backend_store: Store) -> Store:
    """Every test here runs on the files and on the memory store (tests/conftest.py: backend)."""
    return backend_store


def events_log(root: Path) -> list[dict[str, object]]:
    path = root / EVENTS_LOG
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.files("looks at or edits the files themselves")
def test_a_quiet_tick_changes_nothing(store: Store, root: Path) -> None:
    Queue(store).add("t", task_id="t1")
    before = snapshot_bytes(root)
    assert Tick(store).run() == []
    assert snapshot_bytes(root) == before


@pytest.mark.files("looks at or edits the files themselves")
def test_expired_leases_are_requeued(store: Store, clock: ManualClock, root: Path) -> None:
    queue = Queue(store)
    queue.add("t", task_id="t1")
    queue.claim("eng-1", lease_seconds=60)
    tick = Tick(store)
    clock.advance(60)
    assert tick.run() == []  # at the deadline, not past it
    clock.advance(1)
    [event] = tick.run()
    assert event["action"] == "lease_expired" and event["task_id"] == "t1"
    task = queue.show("t1")["task"]
    assert queue.show("t1")["state"] == "pending" and task["attempts"][-1]["error_type"] == "timeout"
    assert events_log(root)[-1]["action"] == "lease_expired" and events_log(root)[-1]["source"] == "loki watch"


@pytest.mark.files("looks at or edits the files themselves")
def test_no_human_decision_by_the_deadline_moves_the_task_to_dead_letter(store: Store, clock: ManualClock,
                                                                          root: Path) -> None:
    Queue(store).add("deploy", task_id="t1", labels=["infra"])
    result = escalate(store, "t1", "security_decision")
    tick = Tick(store)
    clock.advance(24 * 3600 - 1)
    assert [e for e in tick.run() if e["action"] == "review_timeout"] == []
    clock.advance(1)
    events = tick.run()
    assert [e["action"] for e in events][:1] == ["review_timeout"]
    found = Queue(store).show("t1")
    assert found["state"] == "dead-letter"
    entry = found["entry"]
    assert entry["recovery_strategy"] == "requires_human_review" and entry["original_queue"] == "pending"
    # A human already has the escalation file: the dead-letter review must not write a second one.
    assert entry["escalation"] == result["file"].rsplit("/", 1)[-1]
    assert "blocked" not in entry["task_data"] and "no human decision" in entry["task_data"]["notes"][-1]["text"]
    assert len(list((root / "escalations").iterdir())) == 1
    assert tree_problems(root) == []


@pytest.mark.files("looks at or edits the files themselves")
def test_a_task_blocked_by_a_signal_alone_times_out_and_the_review_escalates_it(store: Store, clock: ManualClock,
                                                                                root: Path) -> None:
    queue = Queue(store)
    queue.add("t", task_id="t1")
    queue.claim("eng-1")
    signals.emit(store, "HUMAN_REVIEW_NEEDED", {"reason": "ambiguous requirements"}, task_id="t1")
    Consumer(store).run_pass()
    assert queue.show("t1")["task"]["blocked"]["previous_status"] == "in-progress"
    clock.advance(24 * 3600)
    actions = [e["action"] for e in Tick(store).run()]
    assert actions == ["review_timeout", "deadletter_review"]
    entry = DeadLetter(store).show("t1")
    assert entry["original_queue"] == "in-progress" and entry["escalation"].endswith("-t1.md")


@pytest.mark.files("looks at or edits the files themselves")
@pytest.mark.files("looks at or edits the files themselves")
def test_a_breaker_whose_cooldown_ended_is_reported_once(store: Store, clock: ManualClock) -> None:
    breakers = Breakers(store)
    breakers.trip("api/claude")
    tick = Tick(store)
    assert tick.run() == []
    clock.advance(300)
    [event] = tick.run()
    assert event["action"] == "breaker_half_open" and event["breaker"] == "api/claude"
    assert tick.run() == []
    # Saved, dated when the cooldown ended, and logged once: a new watcher does not report it again.
    entry = store.read(layout.BREAKERS)["api/claude"]
    assert entry["state"] == "HALF_OPEN" and entry["last_state_change"] == "2026-01-25T10:05:00Z"
    assert Tick(store).run() == []
    log = (Path(store.root) / "logs" / "circuit-recovery.log").read_text().splitlines()
    assert [line for line in log if "half-open" in line] == [
        "2026-01-25T10:05:00Z Circuit half-open: api/claude (cooldown over; probing one call at a time)"]


def test_the_dead_letter_review_runs_when_due(store: Store, clock: ManualClock) -> None:
    queue = Queue(store)
    queue.add("t", task_id="t1", max_attempts=1)
    queue.claim("a")
    queue.fail("t1", "a", error="boom")
    tick = Tick(store)
    [event] = tick.run()
    assert event["action"] == "deadletter_review"
    clock.advance(23 * 3600)
    assert tick.run() == []
    clock.advance(3600)
    assert [e["action"] for e in tick.run()] == ["deadletter_review"]
