"""The queue through the library, with an injected clock (no sleeps)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from loki.clock import ManualClock
from loki.errors import Conflict, InvalidInput, NotFound, NothingToDo
from loki.queue.queue import Queue
from loki.storage.store import Store
from tests.helpers import put_tasks, store_problems, task, tasks_in


@pytest.fixture
def store(backend_store: Store) -> Store:
    """Every test here runs on the files and on the memory store (tests/conftest.py: backend)."""
    return backend_store


@pytest.fixture
def queue(store: Store) -> Queue:
    return Queue(store)


def ids(tasks: list[dict]) -> list[str]:
    return [t["id"] for t in tasks]


def test_add_fills_every_field_and_validates(queue: Queue) -> None:
    task = queue.add("Write login", priority="high", labels=["api"], payload={"spec": "x"}, task_id="t1")
    assert task["id"] == "t1" and task.created is True  # the task itself, as claim returns it
    assert task["status"] == "pending" and task["created_at"] == task["available_at"] == "2026-01-25T10:00:00Z"
    assert task["max_attempts"] == 5 and task["attempts"] == [] and task["payload"] == {"spec": "x"}
    assert queue.show("t1")["state"] == "pending"
    assert store_problems(queue.store) == []


def test_priority_then_fifo_order(queue: Queue, clock: ManualClock) -> None:
    queue.add("low", priority="low", task_id="low")
    clock.advance(1)
    queue.add("medium-old", priority="medium", task_id="m1")
    clock.advance(1)
    queue.add("high", priority="high", task_id="high")
    clock.advance(1)
    queue.add("medium-new", priority="medium", task_id="m2")
    claimed = [queue.claim("a")["id"] for _ in range(4)]
    assert claimed == ["high", "m1", "m2", "low"]


def test_fifo_within_the_same_second_follows_insertion(queue: Queue) -> None:
    for n in range(5):
        queue.add(f"t{n}", task_id=f"t{n}")
    assert [queue.claim("a")["id"] for _ in range(5)] == ["t0", "t1", "t2", "t3", "t4"]


def test_claim_sets_the_claim_fields(queue: Queue) -> None:
    queue.add("x", task_id="t1")
    task = queue.claim("agent-1", lease_seconds=120)
    assert task["claimed_by"] == "agent-1" and task["claimed_at"] == "2026-01-25T10:00:00Z"
    assert task["lease_until"] == "2026-01-25T10:02:00Z" and len(task["claim_token"]) == 16
    assert queue.show("t1")["state"] == "in-progress"


def test_dependencies_gate_readiness(queue: Queue) -> None:
    queue.add("base", task_id="base", priority="low")
    queue.add("top", task_id="top", priority="high", depends_on=["base"])
    first = queue.claim("a")
    assert first["id"] == "base"  # top is higher priority but not ready
    with pytest.raises(NothingToDo, match="1 waiting on dependencies"):
        queue.claim("a")
    queue.complete("base", "a")
    assert queue.claim("a")["id"] == "top"


def test_available_at_gates_readiness_and_the_reason_says_until_when(queue: Queue, clock: ManualClock) -> None:
    queue.add("x", task_id="t1")
    queue.claim("a")
    outcome = queue.fail("t1", "a", error="boom")
    assert outcome["retry_at"] == "2026-01-25T10:00:05Z"
    with pytest.raises(NothingToDo) as caught:
        queue.claim("a")
    assert "backing off until 2026-01-25T10:00:05Z" in caught.value.message
    clock.advance(4)
    with pytest.raises(NothingToDo):
        queue.claim("a")
    clock.advance(1)
    assert queue.claim("a")["id"] == "t1"


def test_empty_queue_reason(queue: Queue) -> None:
    with pytest.raises(NothingToDo, match="pending queue is empty") as caught:
        queue.claim("a")
    assert caught.value.exit_code == 3


def test_type_filter(queue: Queue) -> None:
    queue.add("b", task_id="b", type="eng-backend")
    queue.add("f", task_id="f", type="eng-frontend", priority="high")
    assert queue.claim("a", types=["eng-backend"])["id"] == "b"
    with pytest.raises(NothingToDo, match="1 of other types"):
        queue.claim("a", types=["ops"])


def test_backoff_doubles_and_is_capped_then_dead_letter(store: Store, clock: ManualClock) -> None:
    queue = Queue(store)
    queue.add("flaky", task_id="t1", max_attempts=9)
    delays = []
    for attempt in range(1, 9):
        queue.claim("a")
        outcome = queue.fail("t1", "a", error=f"boom {attempt}", error_type="test_failure", approach=f"way {attempt}")
        assert outcome["state"] == "pending"
        retry_at = outcome["retry_at"]
        delays.append(_seconds_until(clock, retry_at))
        clock.set(retry_at)
    assert delays == [5, 10, 20, 40, 80, 160, 300, 300]
    queue.claim("a")
    outcome = queue.fail("t1", "a", error="boom 9", error_type="test_failure", approach="way 9")
    assert outcome["state"] == "dead-letter"


def _seconds_until(clock: ManualClock, when: str) -> float:
    from loki.clock import parse_ts

    return (parse_ts(when) - clock.now()).total_seconds()


def test_max_attempts_moves_the_task_to_dead_letter_with_every_attempt(store: Store, clock: ManualClock) -> None:
    queue = Queue(store)
    queue.add("flaky", task_id="t1", labels=["payments"], description="d", priority="high")
    for attempt in range(1, 6):
        queue.claim(f"agent-{attempt % 2}")
        outcome = queue.fail("t1", f"agent-{attempt % 2}", error=f"AssertionError {attempt}",
                             error_type="test_failure", approach=f"approach {attempt}")
        if attempt < 5:
            clock.set(outcome["retry_at"])
    assert outcome["state"] == "dead-letter"
    assert tasks_in(store, "pending") == []
    assert tasks_in(store, "in-progress") == []
    doc = store.tasks().dead_letter_doc()
    entry = doc["tasks"][0]
    assert set(entry) == {"task_id", "original_queue", "failure_count", "first_failure", "last_failure",
                          "error_summary", "attempts", "recovery_strategy", "task_data"}
    assert entry["task_id"] == "t1" and entry["original_queue"] == "in-progress" and entry["failure_count"] == 5
    assert [a["attempt_number"] for a in entry["attempts"]] == [1, 2, 3, 4, 5]
    assert entry["attempts"][0] == {"attempt_number": 1, "timestamp": "2026-01-25T10:00:00Z", "agent_id": "agent-1",
                                    "approach": "approach 1", "error_type": "test_failure",
                                    "error_message": "AssertionError 1"}
    assert entry["first_failure"] == entry["attempts"][0]["timestamp"]
    assert entry["last_failure"] == entry["attempts"][-1]["timestamp"]
    assert entry["recovery_strategy"] == "retry_with_simpler_approach"
    assert entry["task_data"]["title"] == "flaky" and entry["task_data"]["labels"] == ["payments"]
    assert entry["task_data"]["attempts"] == entry["attempts"]
    assert queue.show("t1")["state"] == "dead-letter"
    assert store_problems(store) == []


@pytest.mark.parametrize(("types", "strategy"), [
    (["timeout", "dependency"], "dependency_blocked"),
    (["validation", "timeout"], "requires_human_review"),
    (["dependency", "test_failure"], "retry_with_simpler_approach"),
])
def test_recovery_strategy_from_attempts(store: Store, clock: ManualClock, types: list[str], strategy: str) -> None:
    queue = Queue(store)
    queue.add("x", task_id="t1", max_attempts=len(types))
    for error_type in types:
        queue.claim("a")
        outcome = queue.fail("t1", "a", error="e", error_type=error_type)
        if outcome["retry_at"]:
            clock.set(outcome["retry_at"])
    assert outcome["entry"]["recovery_strategy"] == strategy


def test_fail_final_goes_to_failed_and_retry_brings_it_back(queue: Queue) -> None:
    queue.add("x", task_id="t1")
    queue.claim("a")
    assert queue.fail("t1", "a", error="cannot", final=True)["state"] == "failed"
    with pytest.raises(NothingToDo):
        queue.claim("a")
    result = queue.retry("t1")
    assert result["from"] == "failed"
    task = queue.claim("a")
    assert task["id"] == "t1" and len(task["attempts"]) == 1  # history kept


def test_retry_from_dead_letter_counts_a_recovery(store: Store, clock: ManualClock) -> None:
    queue = Queue(store)
    queue.add("x", task_id="t1", max_attempts=1)
    queue.claim("a")
    queue.fail("t1", "a", error="e")
    assert queue.retry("t1")["from"] == "dead-letter"
    doc = store.tasks().dead_letter_doc()
    assert doc["tasks"] == [] and doc["metadata"]["total_recovered"] == 1
    assert len(queue.claim("a")["attempts"]) == 1


def test_only_the_holder_may_complete_fail_release_or_heartbeat(queue: Queue) -> None:
    queue.add("x", task_id="t1")
    task = queue.claim("owner")
    before = tasks_in(queue.store, "in-progress")
    for call in (
        lambda: queue.complete("t1", "intruder"),
        lambda: queue.fail("t1", "intruder", error="e"),
        lambda: queue.release("t1", "intruder"),
        lambda: queue.heartbeat("t1", "intruder"),
        lambda: queue.complete("t1", "owner", token="0" * 16),
    ):
        with pytest.raises(Conflict) as caught:
            call()
        assert caught.value.exit_code == 4
    assert tasks_in(queue.store, "in-progress") == before
    queue.complete("t1", "owner", token=task["claim_token"], result={"commit": "abc"})
    assert queue.show("t1")["task"]["result"] == {"commit": "abc"}


def test_heartbeat_extends_the_lease(queue: Queue, clock: ManualClock) -> None:
    queue.add("x", task_id="t1")
    queue.claim("a", lease_seconds=60)
    clock.advance(50)
    assert queue.heartbeat("t1", "a", lease_seconds=60)["lease_until"] == "2026-01-25T10:01:50Z"
    clock.advance(50)
    assert queue.requeue_stale() == {"requeued": [], "dead_lettered": []}


def test_expired_lease_is_requeued_with_a_timeout_attempt_and_the_old_holder_gets_4(
        queue: Queue, clock: ManualClock) -> None:
    queue.add("x", task_id="t1")
    old = queue.claim("slow-agent", lease_seconds=60)
    clock.advance(60)
    assert queue.requeue_stale()["requeued"] == []  # at lease_until the lease still holds
    clock.advance(1)
    assert queue.requeue_stale()["requeued"] == ["t1"]
    task = queue.show("t1")["task"]
    assert task["attempts"][-1]["error_type"] == "timeout"
    assert task["attempts"][-1]["agent_id"] == "slow-agent"
    assert task["claimed_by"] is None
    with pytest.raises(Conflict, match="lease lost") as caught:
        queue.complete("t1", "slow-agent", token=old["claim_token"])
    assert caught.value.exit_code == 4
    clock.advance(5)
    fresh = queue.claim("fast-agent")
    with pytest.raises(Conflict):  # the old holder cannot clobber the fresh claim
        queue.complete("t1", "slow-agent", token=old["claim_token"])
    queue.complete("t1", "fast-agent", token=fresh["claim_token"])


def test_claim_requeues_expired_leases_itself(queue: Queue, clock: ManualClock) -> None:
    queue.add("x", task_id="t1")
    queue.claim("a", lease_seconds=10)
    clock.advance(11)
    with pytest.raises(NothingToDo, match="backing off"):
        queue.claim("b")  # t1 came back with a 5 s backoff, and that was committed
    assert queue.show("t1")["state"] == "pending"


def test_release_returns_the_task_untouched(queue: Queue) -> None:
    queue.add("x", task_id="t1")
    queue.claim("a")
    queue.release("t1", "a")
    task = queue.claim("b")
    assert task["id"] == "t1" and task["attempts"] == []


def test_idempotency_key_returns_the_existing_task(queue: Queue) -> None:
    first = queue.add("x", idempotency_key="k1")
    second = queue.add("something else", idempotency_key="k1")
    assert second == first and second.created is False and first.created is True
    assert queue.list_tasks()["total"] == 1


def test_idempotency_key_survives_completion_and_archiving(make_store: Callable[..., Store],
                                                           clock: ManualClock) -> None:
    queue = Queue(make_store({"version": 1, "queue": {"completed_hot_limit": 2}}))
    for n in range(4):
        queue.add(f"t{n}", task_id=f"t{n}", idempotency_key=f"key-{n}")
        queue.claim("a")
        queue.complete(f"t{n}", "a")
        clock.advance(60)
    assert queue.list_tasks("completed")["total"] < 4  # some were rotated out
    again = queue.add("dup", idempotency_key="key-0")
    assert again.created is False and again["id"] == "t0"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"depends_on": ["ghost"]}, "depends on 'ghost', which does not exist"),
    ({"priority": "urgent"}, "priority must be one of high, medium, low"),
    ({"task_id": "../x"}, "invalid task id"),
    ({"task_id": "a/b"}, "invalid task id"),
    ({"task_id": ""}, "invalid task id"),
    ({"depends_on": ["ok", "a\x00b"]}, "invalid dependency id"),
    ({"max_attempts": 0}, "max_attempts must be an integer"),
    ({"task_id": "self", "depends_on": ["self"]}, "depends on itself"),
])
def test_bad_add_is_refused_and_adds_nothing(queue: Queue, kwargs: dict, message: str) -> None:
    queue.add("ok", task_id="ok")
    before = json.dumps(tasks_in(queue.store, "pending"))
    with pytest.raises(InvalidInput, match=message):
        queue.add("x", **kwargs)
    assert json.dumps(tasks_in(queue.store, "pending")) == before


def test_duplicate_id_is_a_conflict(queue: Queue) -> None:
    queue.add("x", task_id="t1")
    with pytest.raises(Conflict, match="already exists"):
        queue.add("y", task_id="t1")


def test_batch_with_a_cycle_is_refused_as_a_whole(queue: Queue) -> None:
    specs = [{"title": "a", "id": "a", "dependencies": ["b"]}, {"title": "b", "id": "b", "dependencies": ["c"]},
             {"title": "c", "id": "c", "dependencies": ["a"]}]
    with pytest.raises(InvalidInput, match="dependency cycle a -> b -> c -> a"):
        queue.add_many(specs, where="batch.json")
    assert queue.list_tasks()["total"] == 0


def test_batch_may_reference_itself_in_any_order(queue: Queue) -> None:
    specs = [{"title": "top", "id": "top", "dependencies": ["base"]}, {"title": "base", "id": "base"}]
    assert [r["created"] for r in queue.add_many(specs)] == [True, True]
    assert queue.claim("a")["id"] == "base"


def test_batch_error_names_the_item(queue: Queue) -> None:
    with pytest.raises(InvalidInput, match=r"batch.json at /1: priority must be"):
        queue.add_many([{"title": "ok"}, {"title": "bad", "priority": "p0"}], where="batch.json")


def test_loki_mode_tasks_are_accepted_as_batch_input(queue: Queue) -> None:
    raw = [{"id": "task-001", "type": "eng-backend", "priority": 9, "payload": {"action": "build"},
            "createdAt": "2026-01-20T10:00:00Z", "claimedBy": None, "claimedAt": None, "timeout": 3600,
            "retries": 0, "maxRetries": 3}]
    result = queue.add_many(raw)
    assert result[0]["task"]["priority"] == "high" and result[0]["task"]["title"] == "build"


def test_cancel_reports_dependents_and_cascades(queue: Queue) -> None:
    queue.add("base", task_id="base")
    queue.add("mid", task_id="mid", depends_on=["base"])
    queue.add("top", task_id="top", depends_on=["mid"])
    queue.add("other", task_id="other")
    outcome = queue.cancel("base", reason="scope cut")
    assert outcome["cancelled"] == ["base"] and outcome["dependents"] == ["mid", "top"]
    assert queue.show("mid")["state"] == "pending"
    # What the warning suggests next: --cascade on the task already cancelled takes its dependents.
    assert queue.cancel("base", cascade=True)["cancelled"] == ["mid", "top"]
    queue.retry("mid")
    queue.retry("top")
    queue.retry("base")
    outcome = queue.cancel("base", cascade=True, reason="scope cut")
    assert outcome["cancelled"] == ["base", "mid", "top"]
    assert queue.show("top")["task"]["notes"][-1]["text"] == "cancelled with base (--cascade): scope cut"
    assert queue.show("other")["state"] == "pending"


def test_cancelled_in_progress_task_cannot_be_completed_by_its_old_holder(queue: Queue) -> None:
    queue.add("x", task_id="t1")
    queue.claim("a")
    with pytest.raises(Conflict, match=r"held by 'a' .*--force; nothing changed"):
        queue.cancel("t1")
    assert queue.show("t1")["state"] == "in-progress"
    queue.cancel("t1", force=True)
    with pytest.raises(Conflict, match="is cancelled"):
        queue.complete("t1", "a")


def test_completed_tasks_rotate_into_the_archive_and_show_still_finds_them(make_store: Callable[..., Store],
                                                                          clock: ManualClock) -> None:
    store = make_store({"version": 1, "queue": {"completed_hot_limit": 10}})
    queue = Queue(store)
    for n in range(12):
        queue.add(f"t{n}", task_id=f"t{n:02d}")
    for _ in range(12):
        task = queue.claim("a")
        queue.complete(task["id"], "a")
        clock.advance(3600 * 24 * 3)  # spread over two months
    hot = queue.list_tasks("completed", limit=100)
    # The 11th completion went over the limit: rotated down to 90 % of it (9), then the 12th made 10.
    assert hot["total"] == 10
    found = queue.show("t00")
    assert found["state"] == "completed" and found["archived"] is True
    assert [store.tasks().find_archived(t)[0] for t in ("t00", "t01")] == ["completed", "completed"]
    assert store.tasks().find_archived("t02") is None
    if isinstance(store, Store):  # the archive's form on disk: one JSON-lines file per month finished
        archived = sorted(Path(store.path("archive")).glob("completed-*.jsonl"))
        assert [p.name for p in archived] == ["completed-2026-01.jsonl"]
        lines = [json.loads(line) for p in archived for line in p.read_text().splitlines()]
        assert sorted(t["id"] for t in lines) == ["t00", "t01"]
    assert store_problems(store) == []


def test_dependency_on_an_archived_completed_task_is_satisfied(make_store: Callable[..., Store],
                                                               clock: ManualClock) -> None:
    queue = Queue(make_store({"version": 1, "queue": {"completed_hot_limit": 1}}))
    for name in ("old", "newer"):
        queue.add(name, task_id=name)
        queue.claim("a")
        queue.complete(name, "a")
        clock.advance(10)
    assert queue.show("old").get("archived") is True
    queue.add("after", task_id="after", depends_on=["old"])
    assert queue.claim("a")["id"] == "after"


def test_list_has_a_default_limit_and_reports_the_total(queue: Queue) -> None:
    queue.add_many([{"title": f"t{n}"} for n in range(60)])
    listed = queue.list_tasks()
    assert listed["total"] == 60 and listed["shown"] == 50 and len(listed["tasks"]) == 50
    assert set(listed["tasks"][0]) >= {"id", "title", "priority", "state", "attempts"}
    assert "description" not in listed["tasks"][0]  # summaries, not whole tasks
    assert queue.list_tasks(limit=5)["shown"] == 5


def test_list_filters_and_all_states(queue: Queue) -> None:
    queue.add("a", task_id="a", type="eng", labels=["x"])
    queue.add("b", task_id="b", type="ops")
    queue.claim("agent", types=["ops"])
    assert ids(queue.list_tasks("all")["tasks"]) == ["a", "b"]
    assert ids(queue.list_tasks("all", type="eng")["tasks"]) == ["a"]
    assert ids(queue.list_tasks("pending", label="x")["tasks"]) == ["a"]
    with pytest.raises(InvalidInput, match="unknown state"):
        queue.list_tasks("done")


def test_show_unknown_task(queue: Queue) -> None:
    with pytest.raises(NotFound):
        queue.show("nope")


def test_fail_with_a_discovered_dependency_waits_for_it(queue: Queue, clock: ManualClock) -> None:
    queue.add("migration", task_id="dep", type="db")
    queue.add("feature", task_id="t1", type="eng")
    queue.claim("a", types=["eng"])
    outcome = queue.fail("t1", "a", error="no column email", error_type="dependency", depends_on=["dep"])
    assert outcome["task"]["dependencies"] == ["dep"]
    clock.advance(600)
    with pytest.raises(NothingToDo, match="waiting on dependencies"):
        queue.claim("a", types=["eng"])
    queue.complete(queue.claim("a", types=["db"])["id"], "a")
    assert queue.claim("a")["id"] == "t1"


def test_fail_refuses_an_unknown_or_cyclic_discovered_dependency(queue: Queue) -> None:
    queue.add("base", task_id="base")
    queue.add("top", task_id="top", depends_on=["base"])
    queue.claim("a")
    before = tasks_in(queue.store, "in-progress")
    with pytest.raises(InvalidInput, match="no such task"):
        queue.fail("base", "a", error="e", depends_on=["ghost"])
    with pytest.raises(InvalidInput, match="cycle base -> top -> base"):
        queue.fail("base", "a", error="e", depends_on=["top"])
    assert tasks_in(queue.store, "in-progress") == before


def test_an_archived_id_cannot_be_reused(make_store: Callable[..., Store], clock: ManualClock) -> None:
    queue = Queue(make_store({"version": 1, "queue": {"completed_hot_limit": 1}}))
    for name in ("c1", "c2"):
        queue.add(name, task_id=name)
        queue.complete(queue.claim("a")["id"], "a")
        clock.advance(10)
    assert queue.show("c1").get("archived") is True
    with pytest.raises(Conflict, match="already exists"):
        queue.add("again", task_id="c1")
    with pytest.raises(Conflict, match="c1 is completed and archived"):
        queue.retry("c1")


def test_a_cycle_through_a_failed_task_is_refused(queue: Queue) -> None:
    queue.add("a", task_id="a")
    queue.add("b", task_id="b", depends_on=["a"])
    queue.claim("x")
    queue.fail("a", "x", error="e", final=True)  # a is failed: it can be retried
    queue.retry("a")
    queue.claim("x")
    with pytest.raises(InvalidInput, match="cycle a -> b -> a"):
        queue.fail("a", "x", error="needs b", error_type="dependency", depends_on=["b"])


def test_an_in_progress_task_without_a_lease_is_requeued(store: Store) -> None:
    put_tasks(store, "in-progress", [task("t1", status="in-progress", claimed_by="ghost")])
    queue = Queue(store)
    assert queue.requeue_stale()["requeued"] == ["t1"]
    attempt = queue.show("t1")["task"]["attempts"][-1]
    assert attempt["error_message"] == "in progress without a lease while held by ghost"


def test_lease_and_error_bounds(queue: Queue) -> None:
    queue.add("x", task_id="t1")
    with pytest.raises(InvalidInput, match="at most"):
        queue.claim("a", lease_seconds=1e12)
    with pytest.raises(InvalidInput, match="at most"):
        queue.claim("a", lease_seconds=float("inf"))
    queue.claim("a")
    with pytest.raises(InvalidInput, match="--error must say what went wrong"):
        queue.fail("t1", "a", error="  ")


def test_heartbeat_extends_by_the_claims_own_lease(queue: Queue, clock: ManualClock) -> None:
    queue.add("x", task_id="t1")
    queue.claim("a", lease_seconds=120)
    clock.advance(100)
    assert queue.heartbeat("t1", "a")["lease_until"] == "2026-01-25T10:03:40Z"  # now + 120 s, not 3600


def test_a_task_rotated_out_is_archived_for_the_rest_of_the_unit(store: Store) -> None:
    """Within one unit of work a rotated task is in the archive at once (TaskTxn.rotate): found by id and
    by key, and a dependency on it is met (both task stores answer the same)."""
    done = [task(f"d{n}", status="completed", completed_at=f"2026-01-0{n + 1}T00:00:00Z",
                 idempotency_key=f"key-{n}") for n in range(3)]
    put_tasks(store, "completed", done)
    put_tasks(store, "pending", [task("next", dependencies=["d0"])])
    with store.tasks().transaction() as unit:
        unit.rotate("completed", 1)
        assert [t["id"] for t in unit.tasks("completed")] == ["d2"]
        assert unit.find_archived("d0") == ("completed", done[0] | {"status": "completed"})
        assert unit.find_archived_by_key("key-1") is not None
        assert unit.find_outside("d1") is not None
        ready, _ = unit.next_ready((), "2026-01-25T10:00:00Z", not_after="2026-01-25T10:00:00Z")
        assert ready is not None and ready["id"] == "next"


def test_the_live_view_counts_the_queue_of_either_store(queue: Queue, clock: ManualClock) -> None:
    """The dashboard reads the queue through the task store, so it counts the same on both backends, and
    its cache sees a change."""
    from loki.watch.dashboard import Dashboard

    for n in range(3):
        queue.add(f"t{n}", task_id=f"t{n}")
    queue.claim("a")
    dashboard = Dashboard(queue.store)
    first = dashboard.snapshot()
    assert first["queue"]["pending"] == 2 and first["queue"]["in-progress"] == 1
    assert [row["id"] for row in first["in_progress"]["tasks"]] == ["t0"]
    queue.fail("t0", "a", error="boom", final=True)
    assert dashboard.snapshot()["queue"] | {} == {**first["queue"], "in-progress": 0, "failed": 1}


class _Spy:
    """A store whose task units record every whole-state read (``tasks``, ``dead_letters``, ``abandoned``)."""

    WHOLE = ("tasks", "dead_letters", "abandoned")

    def __init__(self, store: Store) -> None:
        self._store = store
        self.whole_reads: list[str] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    def tasks(self) -> object:
        spy = self

        class Tasks:
            def __getattr__(self, name: str) -> object:
                return getattr(spy._store.tasks(), name)

            def transaction(self, **kwargs: object) -> object:
                unit = spy._store.tasks().transaction(**kwargs)

                class Unit:
                    def __enter__(self) -> object:
                        unit.__enter__()
                        return self

                    def __exit__(self, *exc: object) -> None:
                        unit.__exit__(*exc)

                    def __getattr__(self, name: str) -> object:
                        if name in _Spy.WHOLE:
                            spy.whole_reads.append(name)
                        return getattr(unit, name)

                return Unit()

        return Tasks()


def test_adding_looks_ids_and_keys_up_and_reads_no_whole_state(store: Store) -> None:
    """``add`` on a big queue must not read the whole queue (it was O(n) per add): ids, idempotency keys,
    dependencies and cycles are looked up one task at a time (TaskTxn.find, find_by_key, waiting_chain)."""
    put_tasks(store, "pending", [task(f"p{n}", idempotency_key=f"k{n}") for n in range(30)])
    put_tasks(store, "completed", [task("done", status="completed")])
    spy = _Spy(store)
    queue = Queue(spy)  # type: ignore[arg-type]
    assert queue.add("new", task_id="n1", idempotency_key="fresh").created is True
    again = queue.add("other title", idempotency_key="k7")
    assert again.created is False and again["id"] == "p7"
    with pytest.raises(Conflict, match="'p3' already exists"):
        queue.add("dup", task_id="p3")
    queue.add("after done", task_id="n2", depends_on=["done"])
    queue.add("after pending", task_id="n3", depends_on=["p1", "n1"])
    with pytest.raises(InvalidInput, match="does not exist"):
        queue.add("dangling", depends_on=["nowhere"])
    queue.add_many([{"title": "a", "id": "b1", "dependencies": ["b2"]}, {"title": "b", "id": "b2"}])
    assert [t["id"] for t in tasks_in(store, "pending")][-5:] == ["n1", "n2", "n3", "b1", "b2"]
    # A claim asks for the expired leases and the best ready task; the holder's operations find their task.
    claimed = queue.claim("a")
    queue.complete(claimed["id"], "a", token=claimed["claim_token"])
    queue.fail(queue.claim("b")["id"], "b", error="boom")
    assert spy.whole_reads == []


def test_expired_returns_the_in_progress_tasks_whose_lease_ended(store: Store) -> None:
    now = "2026-01-25T10:00:00Z"
    put_tasks(store, "in-progress", [
        task("ended", status="in-progress", claimed_by="a", lease_until="2026-01-25T09:59:59Z"),
        task("running", status="in-progress", claimed_by="a", lease_until=now),  # ends at now: not yet
        task("no-lease", status="in-progress", claimed_by="a"),
        task("ended-too", status="in-progress", claimed_by="b", lease_until="2026-01-01T00:00:00Z"),
    ])
    with store.tasks().transaction(claim=True) as unit:
        assert [t["id"] for t in unit.expired(now)] == ["ended", "no-lease", "ended-too"]


def test_waiting_chain_is_what_the_dependencies_reach_in_listing_order(store: Store) -> None:
    put_tasks(store, "pending", [task("a", dependencies=["b"]), task("z"), task("c", dependencies=["gone"]),
                                 task("b", dependencies=["blk", "done"])])
    put_tasks(store, "blocked", [task("blk", status="blocked", dependencies=["c"])])
    put_tasks(store, "completed", [task("done", status="completed")])
    with store.tasks().transaction() as unit:
        assert [t["id"] for t in unit.waiting_chain(["a"])] == ["a", "c", "b", "blk"]
        assert [t["id"] for t in unit.waiting_chain(["done", "nowhere"])] == []
        assert [t["id"] for t in unit.waiting_chain(["blk", "z"])] == ["z", "c", "blk"]


def test_find_by_key_finds_a_key_wherever_its_task_is(make_store: Callable[..., Store], clock: ManualClock) -> None:
    queue = Queue(make_store({"version": 1, "queue": {"completed_hot_limit": 1, "max_attempts": 1}}))
    for name in ("old", "newer"):
        queue.add(name, task_id=name, idempotency_key=f"key-{name}")
        queue.claim("a")
        queue.complete(name, "a")  # the second rotates "old" out
    for name in ("failing", "waiting"):
        queue.add(name, task_id=name, idempotency_key=f"key-{name}")
    queue.claim("a")
    queue.fail("failing", "a", error="boom")  # one attempt allowed: dead-letter
    with queue.tasks.transaction() as unit:
        found = {name: unit.find_by_key(f"key-{name}") for name in ("old", "newer", "failing", "waiting")}
        assert unit.find_by_key("key-none") is None
    assert {name: (hit[0], hit[1]["id"]) for name, hit in found.items() if hit} == {
        "old": ("completed", "old"), "newer": ("completed", "newer"), "failing": ("dead-letter", "failing"),
        "waiting": ("pending", "waiting")}
    assert queue.show("old").get("archived") is True


def _scenario(store: Store, clock: ManualClock) -> list[object]:
    """A day of a queue, through the library; what a user would see after each step (tokens masked)."""
    from loki.queue.deadletter import DeadLetter

    queue, dead = Queue(store), DeadLetter(store)
    seen: list[object] = []

    def look(result: object) -> None:
        text = json.dumps(result, sort_keys=True)
        for token in {t["claim_token"] for t in queue.tasks.view(["in-progress"])["in-progress"]}:
            text = text.replace(token, "<token>")
        # a completed task (hot or archived) keeps the token of the claim that completed it
        text = re.sub(r'"claim_token": "[0-9a-f]{16}"', '"claim_token": "<token>"', text)
        seen.append(json.loads(text))
        seen.append(queue.list_tasks("all", limit=1000))
        seen.append(dead.entries())

    def attempt(call: Callable[[], object]) -> None:
        try:
            look(call())
        except (Conflict, InvalidInput, NotFound, NothingToDo) as exc:
            look({"error": type(exc).__name__, "message": exc.message})

    keys = ["k0", "k1", None, "k3", None, "k5", None, "k1"]  # t07's key is t01's: not created again
    for n, (priority, deps) in enumerate([("low", []), ("high", []), ("medium", ["t00"]), ("high", ["t02"]),
                                          ("medium", []), ("medium", []), ("low", ["t04", "t05"]), ("high", [])]):
        attempt(lambda n=n, p=priority, d=deps: queue.add(f"task {n}", task_id=f"t{n:02d}", priority=p,
                                                           depends_on=d, idempotency_key=keys[n]))
        clock.advance(n % 2)
    for agent in ("a", "b", "c", "d"):
        attempt(lambda agent=agent: queue.claim(agent, lease_seconds=60))
    attempt(lambda: queue.fail("t01", "a", error="flaky network"))
    attempt(lambda: queue.complete("t04", "b"))
    attempt(lambda: queue.cancel("t02", cascade=True, reason="dropped"))
    clock.advance(120)  # the leases of c and d expire
    attempt(lambda: queue.claim("e", lease_seconds=600))  # requeues them first
    attempt(lambda: queue.complete("t05", "c"))  # lease lost
    attempt(lambda: queue.fail("t01", "f", error="not mine"))
    attempt(queue.requeue_stale)
    clock.advance(3600)  # e's lease ends too; every backoff is over
    for round_number in range(8):
        def work(n: int = round_number) -> object:
            claimed = queue.claim(f"w{n}")
            if n % 3 == 1:
                return queue.fail(claimed["id"], f"w{n}", error=f"step {n} broke", final=n == 4)
            return queue.complete(claimed["id"], f"w{n}", result={"n": n})
        attempt(work)
        clock.advance(600)
    attempt(lambda: queue.retry("t00"))
    attempt(lambda: queue.retry("t03"))
    for entry in dead.entries()["tasks"][:1]:
        attempt(lambda entry=entry: dead.retry(entry["task_id"], approach="smaller steps"))
    attempt(lambda: queue.add("again", idempotency_key="k3"))
    attempt(lambda: queue.show("t04"))
    attempt(lambda: queue.list_tasks("completed"))
    return seen


def test_the_same_steps_give_the_same_results_in_the_same_order_as_the_files(
        make_store: Callable[..., Store], tmp_path: Path, clock: ManualClock, backend: str) -> None:
    """Claims, failures, backoff, expired leases, cascades, the dead-letter queue, idempotency keys and
    the archive give every backend the file store's answers, in its order."""
    from loki.storage.tree import init_tree

    config = {"version": 1, "queue": {"completed_hot_limit": 2, "max_attempts": 2}}
    files_root = tmp_path / "files" / ".loki"
    init_tree(str(files_root))
    (files_root / "config" / "loki.json").write_text(json.dumps(config))
    files_clock = ManualClock("2026-01-25T10:00:00Z")
    files = _scenario(Store(files_root, clock=files_clock), files_clock)
    assert sum(1 for step in files if isinstance(step, dict) and "error" in step) >= 3  # refusals are compared too
    if backend != "file":  # the file store is the reference itself
        assert _scenario(make_store(config), clock) == files


def test_an_idempotency_key_may_be_any_string(queue: Queue) -> None:
    """Long keys and keys holding a NUL name one task each on every backend (PostgreSQL indexes a digest)."""
    import random

    keys = ["a\x00b", "".join(random.Random(7).choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(5000))]
    first = [queue.add(f"task {n}", idempotency_key=key) for n, key in enumerate(keys)]
    again = [queue.add("again", idempotency_key=key) for key in keys]
    assert [a.created for a in again] == [False, False]
    assert [a["id"] for a in again] == [t["id"] for t in first]
    assert queue.add("other", idempotency_key="a\x00c").created is True
