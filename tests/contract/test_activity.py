"""What other processes did, as events for the live view's feed (loki/watch/activity.py): breaker
changes, strikes, escalations, dead-letter reviews run elsewhere; the history the view starts with;
each happening reported once by the watcher."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loki.breakers.breakers import Breakers
from loki.clock import ManualClock
from loki.queue.deadletter import DeadLetter
from loki.queue.escalations import close, escalate
from loki.queue.queue import Queue
from loki.signals import emit as signals
from loki.storage.store import Store
from loki.strikes.strikes import Strikes
from loki.watch.activity import Activity, breaker_event, history, identity
from loki.watch.watcher import Watcher


@pytest.fixture
def store(backend_store: Store) -> Store:
    """Every test here runs on the files and on the memory store, unless marked files."""
    return backend_store


def started(store: Store) -> Activity:
    activity = Activity(store)
    activity.start()
    return activity


def kinds(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(e["event"], e.get("change")) for e in events]


def dead_letter_one(store: Store, task_id: str = "t1") -> None:
    queue = Queue(store)
    queue.add("flaky", task_id=task_id, max_attempts=1)
    queue.claim("a")
    queue.fail(task_id, "a", error="boom")


# -- breakers -------------------------------------------------------------------------------------------


def test_breaker_changes_made_by_anyone_are_reported_once_each(store: Store, clock: ManualClock) -> None:
    Breakers(store).trip("before-start")  # already on record: not news
    activity = started(store)
    assert activity.poll() == []
    breakers = Breakers(store)
    for _ in range(3):
        breakers.record_failure("api/claude", error="HTTP 529")
    breakers.trip("odd (name)", for_seconds=60)
    events = activity.poll()
    assert [(e["breaker"], e["change"]) for e in events] == [("api/claude", "opened"),
                                                             ("odd (name)", "tripped manually")]
    assert events[0]["timestamp"] == "2026-01-25T10:00:00Z"
    assert events[0]["reason"] == "3 failures within 60s; cooldown until 2026-01-25T10:05:00Z"
    assert events[0]["detail"] == "api/claude (3 failures within 60s; cooldown until 2026-01-25T10:05:00Z)"
    assert activity.poll() == []
    clock.advance(300)
    breakers.reset("api/claude")
    # The cooldown was over: the reset first writes down the HALF_OPEN that time made, then closes it.
    assert [(e["breaker"], e["change"]) for e in activity.poll()] == [("api/claude", "half-open"),
                                                                      ("api/claude", "reset")]


def test_a_recovery_line_is_read_back_into_its_parts() -> None:
    assert breaker_event("2026-01-25T10:10:50Z Circuit recovered: api (v2)") == {
        "event": "breaker", "timestamp": "2026-01-25T10:10:50Z", "breaker": "api (v2)", "change": "recovered",
        "reason": "", "detail": "api (v2)"}
    half = breaker_event("2026-01-25T10:05:00Z Circuit half-open: a (b) (cooldown over; probing one call at a time)")
    assert half is not None and half["breaker"] == "a (b)" and half["reason"].startswith("cooldown over")
    assert breaker_event("2026-01-25T10:05:00Z something else") is None


# -- strikes --------------------------------------------------------------------------------------------


def test_strikes_and_their_clearing_are_reported(store: Store, clock: ManualClock) -> None:
    strikes = Strikes(store, branch="main")
    strikes.record_failure("Bash", {"command": "make"}, "make: *** [all] Error 2")  # before: not news
    activity = started(store)
    clock.advance(10)
    strikes.record_failure("Bash", {"command": "npm test"}, "FAIL login.test.ts")
    clock.advance(10)
    strikes.record_failure("Bash", {"command": "npm test"}, "FAIL login.test.ts")
    events = activity.poll()
    assert [(e["strike"], e["tier"], e["call"], e["branch"]) for e in events] == [
        (1, "record", "Bash `npm test`", "main"), (2, "warn", "Bash `npm test`", "main")]
    assert events[1]["detail"] == "Bash `npm test` on main: FAIL login.test.ts"
    assert events[1]["timestamp"] == "2026-01-25T10:00:20Z"
    assert activity.poll() == []
    clock.advance(10)
    strikes.record_success("Bash", {"command": "npm test"})
    [cleared] = activity.poll()
    assert (cleared["change"], cleared["call"], cleared["strike"]) == ("cleared", "Bash `npm test`", 2)
    assert cleared["timestamp"] == "2026-01-25T10:00:30Z"


def test_a_third_strike_brings_its_escalation_along(store: Store, clock: ManualClock) -> None:
    activity = started(store)
    strikes = Strikes(store, branch="feature/x")
    for _ in range(3):
        strikes.record_failure("Bash", {"command": "npm test"}, "FAIL")
    assert kinds(activity.poll()) == [("strike", "strike")] * 3 + [("escalation", "opened")]


@pytest.mark.files("writes a broken file by hand")
def test_a_broken_strike_file_is_one_warning_and_the_other_sources_go_on(store: Store, root: Path) -> None:
    activity = started(store)
    (root / "state" / "errors" / "main.json").write_text("{not json")
    Breakers(store).trip("api/claude")
    first = activity.poll()
    assert kinds(first) == [("breaker", "tripped manually"), ("warning", None)]
    assert "cannot follow strikes: " in first[1]["detail"] and "state/errors/main.json" in first[1]["detail"]
    assert activity.poll() == []  # the same problem is not reported again every second
    (root / "state" / "errors" / "main.json").unlink()
    assert activity.poll() == []


# -- escalations and reviews ----------------------------------------------------------------------------


def test_escalations_opened_and_resolved_are_reported(store: Store, clock: ManualClock) -> None:
    Queue(store).add("deploy", task_id="t1")
    activity = started(store)
    written = escalate(store, "t1", "security_decision")
    [opened] = activity.poll()
    name = opened["escalation"]
    assert written["file"].endswith(f"{name}.md")
    assert (opened["change"], opened["task_id"], opened["trigger"]) == ("opened", "t1", "security_decision")
    assert opened["detail"] == f"{name} (task t1, security_decision)"
    clock.advance(60)
    close(store, name, note="answered on the call", by="alice")
    [resolved] = activity.poll()
    assert (resolved["change"], resolved["escalation"], resolved["timestamp"]) == (
        "resolved", name, "2026-01-25T10:01:00Z")
    assert "alice" in resolved["detail"]


def test_a_dead_letter_review_run_elsewhere_is_reported(store: Store, clock: ManualClock) -> None:
    dead_letter_one(store)
    activity = started(store)
    assert activity.poll() == []
    clock.advance(60)
    DeadLetter(store).review(force=True)  # the session-start hook, or `loki deadletter review`
    [review] = activity.poll()
    assert review["event"] == "review" and review["reviewed_at"] == "2026-01-25T10:01:00Z"
    assert review["detail"] == "dead-letter review: 0 recovered, 0 abandoned, 1 left"
    assert activity.poll() == []


# -- the watcher reports each happening once ----------------------------------------------------------------


@pytest.mark.files("a watcher takes the consumer lock of a tree")
def test_the_tick_and_the_breaker_log_report_a_half_open_once(store: Store, clock: ManualClock) -> None:
    seen: list[dict[str, Any]] = []
    watcher = Watcher(store, on_event=seen.append, observer="polling")
    watcher.start(observe=False)
    watcher.follow_activity()
    Breakers(store).trip("api/claude")
    dead_letter_one(store)
    clock.advance(300)
    watcher.step(force_tick=True)
    watcher.close()
    reported = [(e["event"], e.get("action") or e.get("change")) for e in seen if e["event"] != "started"]
    assert reported[:2] == [("tick", "breaker_half_open"), ("tick", "deadletter_review")]
    assert reported.count(("breaker", "tripped manually")) == 1
    assert ("breaker", "half-open") not in reported and ("review", None) not in reported
    assert identity(seen[1]) == ("half-open", "api/claude", "2026-01-25T10:05:00Z")


@pytest.mark.files("two watchers share a tree's consumer lock")
def test_a_display_only_watcher_reports_them_once_too(store: Store, clock: ManualClock, root: Path) -> None:
    consumer = Watcher(store, observer="polling")
    assert consumer.start(observe=False)
    seen: list[dict[str, Any]] = []
    viewer = Watcher(Store(root, clock=clock), on_event=seen.append, observer="polling")
    assert viewer.start(observe=False) is False
    viewer.follow_activity()
    Breakers(store).trip("api/claude")
    clock.advance(300)
    consumer.run_tick()
    viewer.step()
    reported = [(e["event"], e.get("action") or e.get("change")) for e in seen if e["event"] != "started"]
    assert reported == [("tick", "breaker_half_open"), ("breaker", "tripped manually")]
    consumer.close()
    viewer.close()


# -- what the view starts with -----------------------------------------------------------------------------


def test_the_history_is_every_kind_in_time_order_each_once(store: Store, clock: ManualClock) -> None:
    from loki.watch.consumer import Consumer
    from loki.watch.ticks import Tick

    Queue(store).add("deploy", task_id="t1")
    Strikes(store, branch="main").record_failure("Bash", {"command": "npm test"}, "FAIL")
    clock.advance(10)
    escalate(store, "t1", "security_decision")
    clock.advance(10)
    signals.emit(store, "DOCS_NEEDED")
    Consumer(store).run_pass()
    clock.advance(10)
    Breakers(store).trip("api/claude")
    dead_letter_one(store, "t2")
    clock.advance(300)
    Tick(store).run()  # HALF_OPEN (in the tick's log and the breaker's) and the review (the tick's and the file's)
    events = history(store)
    assert [(e["event"], e.get("change") or e.get("action") or e.get("name")) for e in events] == [
        ("strike", "strike"), ("escalation", "opened"),
        ("signal", "HUMAN_REVIEW_NEEDED"), ("signal", "DOCS_NEEDED"), ("breaker", "tripped manually"),
        ("task", "dead-letter"), ("breaker", "half-open"), ("tick", "deadletter_review")]
    assert [e["timestamp"] for e in events] == sorted(e["timestamp"] for e in events)
    assert history(store, limit=2) == events[-2:]
