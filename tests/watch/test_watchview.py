"""The live view's data: a dashboard snapshot (loki/watch/dashboard.py) of a busy tree, laid out by
loki/watch/screen.py (its layout at each size: test_watchscreen.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loki.breakers.breakers import Breakers
from loki.clock import ManualClock
from loki.queue.escalations import escalate
from loki.signals import emit as signals
from loki.storage import layout
from loki.storage.store import Store
from loki.tasks.record import make_task
from loki.watch.consumer import Consumer
from loki.watch.dashboard import Dashboard
from loki.watch.feed import Feed
from loki.watch.screen import View, compose, plain

NOW = "2026-01-25T10:00:00Z"


def draw(snapshot: dict[str, object], *events: dict[str, object]) -> str:
    feed = Feed()
    feed.extend(list(events), NOW)
    return plain(compose(snapshot, feed, View(), 160, 60))


# The view's content does not depend on the tree's size past a few hundred tasks (every count, the 12 soonest of many
# leases, a breaker, signals, an escalation), so the fast lane draws a tree of 1,000; the 10,000 of docs/signals.md's
# frame timing, ~7 s of CPU for these two tests, runs in `make test`.
SIZES = [1_000, pytest.param(10_000, marks=pytest.mark.slow)]


@pytest.fixture(params=SIZES)
def size(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture
def busy(store: Store, clock: ManualClock, size: int) -> Store:
    """``size`` tasks (10,000 in make test): 90% pending, 10% in progress with leases ending every second."""
    holding = size // 10
    pending = [make_task(task_id=f"p{i:05d}", title=f"pending work {i}", now=NOW) for i in range(size - holding)]
    held = []
    for i in range(holding):
        task = make_task(task_id=f"w{i:04d}", title=f"feature {i}", now=NOW, status="in-progress")
        task.update(claimed_by=f"eng-{i % 7:03d}", claimed_at=NOW, claim_token="t",
                    lease_until=f"2026-01-25T{10 + (i + 1) // 3600:02d}:{(i + 1) // 60 % 60:02d}:{(i + 1) % 60:02d}Z")
        held.append(task)
    with store.transaction(layout.QUEUE_LOCK) as txn:
        txn.write(layout.queue_file("pending"), {"version": 1, "tasks": pending}, changed=[])
        txn.write(layout.queue_file("in-progress"), {"version": 1, "tasks": held}, changed=[])
    return store


def test_the_view_shows_counts_holders_leases_breakers_signals_and_escalations(busy: Store, clock: ManualClock,
                                                                                root: Path, size: int) -> None:
    pending, holding, middle = size - size // 10, size // 10, f"w{size // 20:04d}"  # 9000, 1000, w0500 at 10,000
    Breakers(busy).trip("api/claude")
    escalate(busy, "p00001", "security_decision")
    signals.emit(busy, "TESTS_PASSED_auth", task_id=middle)
    signals.emit(busy, "DOCS_NEEDED")
    Consumer(busy).run_pass()  # consumes the HUMAN_REVIEW_NEEDED, TESTS_PASSED_auth and DOCS_NEEDED
    signals.emit(busy, "PLAN_APPROVED")  # one left waiting
    clock.advance(2)
    snapshot = Dashboard(busy).snapshot(consuming=True)
    text = draw(snapshot, *[{"event": "signal", **r} for r in snapshot["recent"]],
                {"event": "tick", "timestamp": "2026-01-25T10:00:02Z", "action": "lease_expired",
                 "detail": "w0000: lease expired"})
    assert "loki watch · consuming" in text and "1 waiting  0 processing  0 quarantined" in text
    assert snapshot["queue"] == {"pending": pending - 1, "in-progress": holding - 1, "landing": 0, "blocked": 1,
                                 "completed": 1, "failed": 0, "cancelled": 0, "dead-letter": 0, "abandoned": 0}
    assert str(pending - 1) in text and str(holding - 1) in text
    assert f"in progress ({holding - 1}, the 12 soonest leases)" in text
    assert "w0000" in text and "eng-000" in text and "EXPIRED 1s ago" in text and "w0002" in text and "1s" in text
    assert "api/claude" in text and "OPEN" in text and "298s left" in text
    assert f"TESTS_PASSED_auth applied: {middle}: in-progress -> completed" in text
    assert "open escalations (1)" in text and "p00001" in text and "security_decision" in text
    assert "10:00:02 lease  w0000: lease expired" in text


def test_display_only_says_who_consumes(store: Store) -> None:
    text = draw(Dashboard(store).snapshot(consuming=False, holder={"pid": 4242}))
    assert "loki watch · display-only (pid 4242 consumes)" in text


def test_a_snapshot_rereads_only_files_that_changed(busy: Store) -> None:
    dashboard = Dashboard(busy)
    first = dashboard.snapshot()
    reads: list[str] = []
    original = busy.read

    def counting(rel: str, digests: object = None) -> object:
        reads.append(rel)
        return original(rel)

    busy.read = counting  # type: ignore[method-assign]
    dashboard.snapshot()
    assert not [r for r in reads if r.startswith("queue/")]
    signals.emit(busy, "DOCS_NEEDED")
    Consumer(busy).run_pass()
    busy.read = original  # type: ignore[method-assign]
    assert dashboard.snapshot()["queue"] == first["queue"]

