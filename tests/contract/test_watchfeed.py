"""The live view's feed shows what goes wrong with tasks, and a watcher started later shows the same history.

A task's failed attempt and its move to the dead-letter queue are in the feed (the README's two-agent
example showed five failures and a dead-letter move as nothing but a review line); every dead-letter
review, wherever it ran, is there in the same words; and :func:`loki.watch.activity.history`, which a
watcher started later begins with, holds the same lines as a watcher that saw them happen.
"""

from __future__ import annotations

from typing import Any

import pytest

from loki.clock import ManualClock
from loki.queue.deadletter import DeadLetter
from loki.queue.queue import Queue
from loki.storage.store import Store
from loki.watch.activity import Activity, history
from loki.watch.feed import Feed, event_line
from loki.watch.watcher import Watcher
from tests.helpers import cli


@pytest.fixture
def store(backend_store: Store) -> Store:
    """Every test here runs on the files, the memory store and PostgreSQL."""
    return backend_store


def fail_twice(store: Store, clock: ManualClock) -> None:
    """t1 fails its first attempt (back to pending), then its second and last (dead-letter)."""
    queue = Queue(store)
    queue.add("flaky build", task_id="t1", max_attempts=2)
    for error in ("make: *** [test] Error 2", "make: *** [test] Error 2 (again)"):
        clock.advance(600)
        queue.claim("eng-1", task_id="t1")
        queue.fail("t1", "eng-1", error=error, error_type="test_failure", approach="make test")


def lines(events: list[dict[str, Any]]) -> list[str]:
    return [event_line(e, "2026-01-25T11:00:00Z") for e in events]


def test_a_failed_attempt_and_the_move_to_the_dead_letter_queue_are_in_the_feed(store: Store,
                                                                               clock: ManualClock) -> None:
    activity = Activity(store)
    activity.start()
    fail_twice(store, clock)
    seen = activity.poll()
    assert lines(seen) == [
        "10:10:00 task t1: attempt 1 of 2 failed, retry after 10:10:05; test_failure: make: *** [test] Error 2",
        "10:20:00 task t1 moved to the dead-letter queue (attempt 2 of 2 failed); test_failure: "
        "make: *** [test] Error 2 (again)"]
    feed = Feed()
    for event in seen:
        feed.add(event, "2026-01-25T11:00:00Z")
    assert [(e.label, e.tone) for e in feed.entries] == [("task", "warn"), ("task", "bad")]
    assert activity.poll() == []


def test_every_review_is_in_the_feed_once_in_the_same_words(store: Store, clock: ManualClock) -> None:
    fail_twice(store, clock)
    activity = Activity(store)
    activity.start()
    clock.advance(60)
    DeadLetter(store).review(force=True)
    clock.advance(60)
    DeadLetter(store).propose("t1", "run the tests with -j1")
    DeadLetter(store).review(force=True)
    assert lines(activity.poll()) == ["10:21:00 review: dead-letter review: 0 recovered, 0 abandoned, 1 left",
                                      "10:22:00 review: dead-letter review: 1 recovered, 0 abandoned, 0 left"]


def test_a_watcher_started_later_shows_the_same_history(store: Store, clock: ManualClock) -> None:
    activity = Activity(store)
    activity.start()
    fail_twice(store, clock)
    clock.advance(60)
    DeadLetter(store).review(force=True)
    clock.advance(60)
    DeadLetter(store).review(force=True)
    live = lines(activity.poll())
    later = lines([e for e in history(store) if e["event"] in ("task", "review")])
    assert later == live
    assert len(live) == 4 and "1 left" in live[-1] and "0 recovered, 0 abandoned" in live[-1]


@pytest.mark.files("a watcher takes the consumer lock of a tree")
def test_the_watcher_reports_a_failure_through_the_cli_once(store: Store, clock: ManualClock) -> None:
    seen: list[dict[str, Any]] = []
    watcher = Watcher(store, on_event=seen.append, observer="polling")
    watcher.start(observe=False)
    watcher.follow_activity()
    env = {"LOKI_NOW": "2026-01-25T10:05:00Z"}
    assert cli(["queue", "add", "deploy", "--id", "t9", "--max-attempts", "1"], root=store.root, env=env).code == 0
    assert cli(["queue", "claim", "--agent", "eng-2", "--id", "t9"], root=store.root, env=env).code == 0
    failed = cli(["queue", "fail", "t9", "--agent", "eng-2", "--error", "exit 1", "--approach", "deploy.sh"],
                 root=store.root, env=env)
    assert failed.code == 0, failed.stderr
    watcher.step()
    watcher.close()
    tasks = [event_line(e, "") for e in seen if e["event"] == "task"]
    assert tasks == ["10:05:00 task t9 moved to the dead-letter queue (attempt 1 of 1 failed); other: exit 1"]


def test_a_watcher_started_later_shows_an_escalation_resolved_before_it_started(store: Store,
                                                                              clock: ManualClock) -> None:
    """The resolution is dated by what loki recorded (the header's ``resolved_at``), so the live feed and
    the history a later watcher begins with say the same line."""
    from loki.queue.escalations import close, escalate

    activity = Activity(store)
    activity.start()
    Queue(store).add("ship it", task_id="t7")
    clock.advance(60)
    opened = escalate(store, "t7", "security_decision", analysis="needs a human")
    clock.advance(60)
    close(store, opened["file"].rsplit("/", 1)[-1].removesuffix(".md"), note="answered on the ticket", by="ops")
    clock.advance(60)  # the live watcher looks a minute later: the line is still dated by the record
    live = lines([e for e in activity.poll() if e["event"] == "escalation"])
    later = lines([e for e in history(store) if e["event"] == "escalation"])
    assert later == live
    assert [line.split(" ", 2)[1] for line in later] == ["escalation", "escalation"]
    assert "resolved" in later[-1] and later[-1].startswith("10:02:00")
