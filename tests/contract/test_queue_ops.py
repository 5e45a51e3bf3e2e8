"""The operator's side of the queue through the library, on every backend: claim by id, reuse and filters,
``ready`` and its explanations, a task's history, ``edit``, ``close``, ``defer``, ``cancel --force``, listings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from loki.breakers.breakers import Breakers
from loki.clock import ManualClock
from loki.errors import Conflict, InvalidArgument, InvalidInput, NotFound, NothingToDo
from loki.queue.deadletter import DeadLetter
from loki.queue.escalations import escalate, list_escalations, resolve
from loki.queue.queue import Queue
from loki.storage.store import Store
from loki.tasks import history
from loki.tasks.history import MAX_EVENTS
from loki.tasks.readiness import never_ready
from tests.helpers import put_tasks, state_snapshot, store_problems, task, tasks_in

T0 = "2026-01-25T10:00:00Z"


@pytest.fixture
def store(backend_store: Store) -> Store:
    """Every test here runs on the files, in memory and on PostgreSQL (tests/conftest.py: backend)."""
    return backend_store


@pytest.fixture
def queue(store: Store) -> Queue:
    return Queue(store)


def events(queue: Queue, task_id: str) -> list[str]:
    return [e["event"] for e in queue.history(task_id)["events"]]


def transitions(queue: Queue, task_id: str) -> list[str]:
    return [e["to"] for e in queue.history(task_id)["events"] if e.get("to")]


def dead_letter_one(queue: Queue, clock: ManualClock, task_id: str) -> None:
    queue.add(task_id, task_id=task_id, max_attempts=1)
    queue.claim("a", task_id=task_id)
    assert queue.fail(task_id, "a", error="boom")["state"] == "dead-letter"


# -- claim --id, --reuse, filters -------------------------------------------------------------------


def test_claim_by_id_takes_that_task_even_when_another_comes_first(queue: Queue) -> None:
    queue.add("first", task_id="t1", priority="high")
    queue.add("second", task_id="t2", priority="low")
    got = queue.claim("a", task_id="t2", lease_seconds=60)
    assert got["id"] == "t2" and got["claimed_by"] == "a" and got["lease_until"] == "2026-01-25T10:01:00Z"
    assert queue.claim("b")["id"] == "t1"


@pytest.mark.parametrize(("setup", "message"), [
    ("dependency", "t2 is not ready: waits on 't1' (pending)"),
    ("backoff", "t2 is not ready: backing off until 2026-01-25T10:00:05Z"),
    ("deferred", "t2 is not ready: deferred until 2026-01-25T12:00:00Z by bob: after the release"),
    ("breaker", "t2 is not ready: type deploy: circuit deploy is OPEN; retry in 300s"),
    ("never", "t2 is not ready: can never be ready: it depends on 't1', which is cancelled"),
])
def test_claim_by_id_of_a_task_not_ready_says_why_and_changes_nothing(queue: Queue, setup: str,
                                                                      message: str) -> None:
    queue.add("base", task_id="t1")
    queue.add("chosen", task_id="t2", type="deploy", depends_on=["t1"] if setup in ("dependency", "never") else [])
    if setup == "backoff":
        queue.claim("a", task_id="t2")
        queue.fail("t2", "a", error="boom")
    elif setup == "deferred":
        queue.defer("t2", until="2h", by="bob", reason="after the release")
    elif setup == "breaker":
        Breakers(queue.store).trip("deploy")
    elif setup == "never":
        queue.cancel("t1")
    before = state_snapshot(queue.store)
    with pytest.raises(NothingToDo) as caught:
        queue.claim("a", task_id="t2")
    assert caught.value.message.startswith(message) and caught.value.exit_code == 3
    assert state_snapshot(queue.store) == before


def test_claim_by_id_refusals(queue: Queue) -> None:
    queue.add("x", task_id="t1")
    queue.add("y", task_id="t2")
    queue.claim("a", task_id="t1")
    with pytest.raises(Conflict, match=r"t1 is already claimed by 'a' .*nothing changed"):
        queue.claim("b", task_id="t1")
    with pytest.raises(Conflict, match=r"already held by a \(you\).*--reuse"):
        queue.claim("a", task_id="t1")
    queue.complete("t1", "a")
    with pytest.raises(Conflict, match="t1 is completed; only a pending task can be claimed"):
        queue.claim("b", task_id="t1")
    with pytest.raises(NotFound, match="no task 'nope'"):
        queue.claim("b", task_id="nope")
    with pytest.raises(InvalidArgument, match="give one or the other") as caught:
        queue.claim("b", task_id="t2", types=["x"])
    assert caught.value.exit_code == 2


def test_reuse_returns_the_agents_live_claim_unchanged(queue: Queue, clock: ManualClock) -> None:
    queue.add("x", task_id="t1")
    queue.add("y", task_id="t2")
    first = queue.claim("a")
    assert first.reused is False
    clock.advance(10)
    again = queue.claim("a", reuse=True)
    assert again.reused is True and again["id"] == "t1"
    assert (again["claim_token"], again["lease_until"]) == (first["claim_token"], first["lease_until"])
    assert events(queue, "t1") == ["added", "claimed"]  # nothing new happened to it
    assert queue.claim("a")["id"] == "t2"  # without --reuse: a second task


def test_reuse_takes_a_new_task_when_the_claim_expired_or_does_not_fit(queue: Queue, clock: ManualClock) -> None:
    queue.add("x", task_id="t1", type="eng")
    queue.add("y", task_id="t2", type="docs")
    queue.add("z", task_id="t3", type="docs")
    queue.claim("a", types=["eng"], lease_seconds=60)
    assert queue.claim("a", types=["docs"], reuse=True, lease_seconds=60)["id"] == "t2"  # its claim: another type
    assert queue.claim("a", task_id="t1", reuse=True).reused is True  # --id names it: returned again
    clock.advance(61)  # both leases run out
    got = queue.claim("a", reuse=True)
    assert got.reused is False and got["id"] == "t3"  # t1 and t2 were requeued, and back off
    assert queue.show("t1")["task"]["attempts"][-1]["error_type"] == "timeout"


def test_claim_filters_by_label_and_priority(queue: Queue) -> None:
    queue.add("a", task_id="t1", priority="high", labels=["api"])
    queue.add("b", task_id="t2", priority="low", labels=["api", "db"])
    queue.add("c", task_id="t3", priority="medium", labels=["db"])
    assert queue.claim("x", labels=["api", "db"])["id"] == "t2"  # every label asked for
    assert queue.claim("x", priorities=["medium", "low"])["id"] == "t3"  # any priority asked for
    with pytest.raises(NothingToDo) as caught:
        queue.claim("x", labels=["db"])
    assert caught.value.message == "nothing ready among 1 pending: 1 without the asked label db"
    with pytest.raises(InvalidArgument, match="--priority must be one of high, medium, low"):
        queue.claim("x", priorities=["urgent"])
    assert queue.claim("x", labels=["api"], priorities=["high"])["id"] == "t1"


# -- ready -----------------------------------------------------------------------------------------


def _mixed_queue(queue: Queue, clock: ManualClock) -> None:
    queue.add("low first", task_id="r-low", priority="low")
    clock.advance(1)
    queue.add("medium", task_id="r-med")
    queue.add("high", task_id="r-high", priority="high")
    queue.add("waits", task_id="w-dep", priority="high", depends_on=["r-low"])
    queue.add("dies", task_id="gone")
    queue.add("stuck", task_id="w-never", depends_on=["gone"])
    queue.cancel("gone")
    queue.add("backs off", task_id="w-backoff")
    queue.claim("agent", task_id="w-backoff")
    queue.fail("w-backoff", "agent", error="flaky")
    queue.add("later", task_id="w-defer")
    queue.defer("w-defer", until="1d")
    queue.add("deploy one", task_id="w-breaker", type="deploy", priority="high")
    Breakers(queue.store).trip("deploy")


def test_ready_lists_what_claims_would_take_in_that_order_and_why_the_rest_wait(queue: Queue,
                                                                               clock: ManualClock) -> None:
    _mixed_queue(queue, clock)
    report = queue.ready()
    assert [t["id"] for t in report["ready"]] == ["r-high", "r-med", "r-low"]
    assert [t["position"] for t in report["ready"]] == [1, 2, 3]
    why = {t["id"]: [(r["reason"], r.get("dependency"), r.get("state")) for r in t["reasons"]]
           for t in report["not_ready"]}
    assert why == {"w-dep": [("dependency", "r-low", "pending")], "w-never": [("never", "gone", "cancelled")],
                   "w-backoff": [("backoff", None, None)], "w-defer": [("deferred", None, None)],
                   "w-breaker": [("breaker", None, None)]}
    texts = {t["id"]: t["reasons"][0]["text"] for t in report["not_ready"]}
    assert texts["w-backoff"] == "backing off until 2026-01-25T10:00:06Z (after a failed attempt)"
    assert texts["w-breaker"].startswith("type deploy: circuit deploy is OPEN; retry in 300s")
    assert report["pending"] == report["matching"] == 8
    # One rule: successive claims take exactly the ready list, in its order, then nothing.
    assert [queue.claim("z")["id"] for _ in report["ready"]] == ["r-high", "r-med", "r-low"]
    with pytest.raises(NothingToDo):
        queue.claim("z")


def test_ready_filters_like_claim(queue: Queue) -> None:
    queue.add("a", task_id="t1", labels=["api"], priority="high", type="eng")
    queue.add("b", task_id="t2", labels=["docs"])
    report = queue.ready(labels=["api"], types=["eng"], priorities=["high"])
    assert [t["id"] for t in report["ready"]] == ["t1"] and report["matching"] == 1 and report["pending"] == 2


def test_ready_changes_nothing_and_leaves_a_half_open_probe_to_the_claim(queue: Queue, clock: ManualClock) -> None:
    queue.add("one", task_id="d1", type="deploy", priority="high")
    queue.add("two", task_id="d2", type="deploy")
    Breakers(queue.store).trip("deploy", for_seconds=60)
    clock.advance(61)  # HALF_OPEN: one probe at a time
    before = state_snapshot(queue.store)
    report = queue.ready()
    assert [t["id"] for t in report["ready"]] == ["d1"]
    assert report["not_ready"][0]["reasons"][0]["reason"] == "breaker"
    assert "HALF_OPEN" in report["not_ready"][0]["reasons"][0]["text"]
    assert state_snapshot(queue.store) == before  # the probe slot is still free
    assert queue.claim("a")["id"] == "d1"  # and the claim gets it


def test_ready_reports_leases_the_next_claim_requeues(queue: Queue, clock: ManualClock) -> None:
    queue.add("x", task_id="t1")
    queue.claim("a", lease_seconds=30)
    clock.advance(31)
    assert queue.ready()["expired_leases"] == ["t1"]


def test_never_ready_is_linear_and_names_the_nearest_dead_task() -> None:
    # 20,000 tasks in a chain, listed in the worst order for a fixpoint: each depends on the next.
    chain = [task(f"c{n}", dependencies=[f"c{n + 1}"]) for n in range(20_000)]
    chain.append(task("c20000", dependencies=["dead"]))
    stuck = never_ready(chain, lambda task_id: "cancelled" if task_id == "dead" else None)
    assert len(stuck) == 20_001
    assert stuck["c0"] == {"dependency": "c1", "root": "dead", "state": "cancelled",
                           "why": "depends on 'c1', which waits on 'dead' (cancelled)"}
    both = [task("t", dependencies=["far", "near"]), task("far", dependencies=["dead"])]
    states = {"near": "abandoned", "dead": "cancelled"}
    assert never_ready(both, states.get)["t"]["dependency"] == "near"  # the shortest chain


# -- history -------------------------------------------------------------------------------------------


def test_history_keeps_every_change_with_who_and_where_it_went(queue: Queue, clock: ManualClock) -> None:
    queue.add("x", task_id="t1")
    queue.claim("a1", lease_seconds=600)
    for gap in (100, 400, 50):
        clock.advance(gap)
        queue.heartbeat("t1", "a1")
    queue.fail("t1", "a1", error="AssertionError: 1 != 2", error_type="test_failure", approach="first")
    clock.advance(5)
    queue.claim("a2", lease_seconds=60)
    clock.advance(61)
    queue.requeue_stale()
    clock.advance(600)
    queue.claim("a3")
    queue.complete("t1", "a3", result={"commit": "abc"})
    got = queue.history("t1")
    assert got["recorded"] is True and got["state"] == "completed"
    kinds = [(e["event"], e.get("by"), e.get("to")) for e in got["events"]]
    assert kinds == [("added", None, "pending"), ("claimed", "a1", "in-progress"), ("heartbeat", "a1", None),
                     ("failed", "a1", "pending"), ("claimed", "a2", "in-progress"), ("lease_expired", None, "pending"),
                     ("claimed", "a3", "in-progress"), ("completed", "a3", "completed")]
    beat = got["events"][2]
    assert beat["count"] == 3 and beat["longest_gap_seconds"] == 400 and beat["last_at"] == "2026-01-25T10:09:10Z"
    failed = got["events"][3]
    assert failed["attempt"] == 1 and failed["detail"] == "test_failure: AssertionError: 1 != 2"
    assert failed["until"] == "2026-01-25T10:09:15Z"
    assert "lease expired" in got["events"][5]["detail"] and "a2" in got["events"][5]["detail"]
    assert queue.show("t1")["completed_by"] == "a3"
    assert store_problems(queue.store) == []


def test_history_follows_the_task_through_dead_letter_escalation_and_decisions(queue: Queue,
                                                                               clock: ManualClock) -> None:
    dead_letter_one(queue, clock, "t1")
    DeadLetter(queue.store).retry("t1", by="bob", reset_count=True)
    queue.claim("a")
    escalate(queue.store, "t1", "security_decision", agent="a")
    resolve(queue.store, "t1", "approve", note="go ahead", approver="carol")
    got = queue.history("t1")["events"]
    kinds = [(e["event"], e.get("by"), e.get("to")) for e in got]
    assert kinds == [("added", None, "pending"), ("claimed", "a", "in-progress"), ("failed", "a", "dead-letter"),
                     ("retried", "bob", "pending"), ("claimed", "a", "in-progress"), ("blocked", "a", "blocked"),
                     ("approved", "carol", "pending")]
    assert got[5]["until"] == "2026-01-26T10:00:00Z" and "security_decision" in got[5]["detail"]
    assert "go ahead" in got[6]["detail"]


def test_history_travels_into_abandoned_and_the_archive(make_store: Callable[..., Store],
                                                        clock: ManualClock) -> None:
    queue = Queue(make_store({"version": 1, "queue": {"completed_hot_limit": 2}}))
    dead_letter_one(queue, clock, "dl")
    DeadLetter(queue.store).abandon("dl", "not worth it", by="dana")
    assert transitions(queue, "dl") == ["pending", "in-progress", "dead-letter", "abandoned"]
    assert queue.history("dl")["events"][-1]["by"] == "dana"
    for n in range(4):
        queue.add(f"t{n}", task_id=f"t{n}")
        queue.claim("a", task_id=f"t{n}")
        queue.complete(f"t{n}", "a")
        clock.advance(60)
    archived = queue.history("t0")
    assert archived["archived"] is True and [e["event"] for e in archived["events"]] == ["added", "claimed",
                                                                                       "completed"]


def test_history_is_bounded_keeping_the_first_event_and_counting_what_it_dropped(store: Store,
                                                                                  queue: Queue) -> None:
    long_lived = task("t1")
    history.record(long_lived, "added", T0, to="pending")
    for n in range(MAX_EVENTS + 25):
        history.record(long_lived, "edited", T0, by="ed", changes={"title": {"from": n, "to": n + 1}})
    put_tasks(store, "pending", [long_lived])
    queue.edit("t1", title="one more", by="ed")  # written (and validated) through the store
    got = queue.history("t1")["events"]
    assert len(got) == MAX_EVENTS
    assert got[0]["event"] == "added" and got[1]["event"] == "omitted" and got[1]["count"] == 28
    assert got[-2]["changes"]["title"]["to"] == MAX_EVENTS + 25 and got[-1]["changes"]["title"]["to"] == "one more"
    assert store_problems(queue.store) == []


def test_history_redacts_secrets_and_cuts_long_text(queue: Queue) -> None:
    queue.add("x", task_id="t1")
    queue.claim("a")
    queue.fail("t1", "a", error="login failed: password=hunter2hunter2 " + "x" * 2000)
    detail = queue.history("t1")["events"][-1]["detail"]
    assert "hunter2" not in detail and "[REDACTED:" in detail and len(detail) == 500 and detail.endswith("...")


def test_a_task_from_before_histories_gets_one_rebuilt_then_recorded(store: Store, queue: Queue) -> None:
    old = task("old", attempts=[{"attempt_number": 1, "timestamp": "2026-01-25T09:30:00Z", "agent_id": "a",
                                 "approach": "x", "error_type": "other", "error_message": "boom"}],
               created_at="2026-01-25T09:00:00Z", available_at="2026-01-25T09:00:00Z")
    put_tasks(store, "pending", [old])
    rebuilt = queue.history("old")
    assert rebuilt["recorded"] is False
    assert [(e["event"], e["at"]) for e in rebuilt["events"]] == [("added", "2026-01-25T09:00:00Z"),
                                                                  ("failed", "2026-01-25T09:30:00Z")]
    queue.claim("b")
    recorded = queue.history("old")["events"]
    assert [e["event"] for e in recorded] == ["added", "claimed"] and "before" in recorded[0]["detail"]


# -- edit ------------------------------------------------------------------------------------------------


def test_edit_changes_what_was_asked_and_records_it(queue: Queue) -> None:
    queue.add("base", task_id="base")
    queue.add("x", task_id="t1", labels=["old"], priority="low")
    result = queue.edit("t1", title=" New title ", priority="high", add_labels=["api"],
                        remove_labels=["old"], add_dependencies=["base"], max_attempts=3, description="d",
                        type="eng", by="erin")
    assert result["state"] == "pending" and set(result["changed"]) == {"title", "priority", "labels",
                                                                        "dependencies", "max_attempts",
                                                                        "description", "type"}
    assert result["changed"]["priority"] == {"from": "low", "to": "high"}
    shown = queue.show("t1")["task"]
    assert (shown["title"], shown["labels"], shown["dependencies"], shown["max_attempts"]) == (
        "New title", ["api"], ["base"], 3)
    last = queue.history("t1")["events"][-1]
    assert last["event"] == "edited" and last["by"] == "erin" and last["changes"]["labels"] == {
        "from": ["old"], "to": ["api"]}
    before = state_snapshot(queue.store)
    assert queue.edit("t1", priority="high", add_labels=["api"])["changed"] == {}
    assert state_snapshot(queue.store) == before  # nothing to change: nothing written
    assert queue.edit("t1", remove_dependencies=["base"])["changed"]["dependencies"]["to"] == []
    assert store_problems(queue.store) == []


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"add_dependencies": ["t2"]}, InvalidInput, "would make a dependency cycle t1 -> t2 -> t1"),
    ({"add_dependencies": ["ghost"]}, InvalidInput, "--add-dependency 'ghost': no such task"),
    ({"add_dependencies": ["gone"]}, InvalidInput, "depends on 'gone', which is cancelled"),
    ({"add_dependencies": ["t1"]}, InvalidArgument, "cannot depend on itself"),
    ({}, InvalidArgument, "nothing to edit"),
    ({"title": "  "}, InvalidArgument, "--title must be 1 to 500 characters"),
    ({"max_attempts": 0}, InvalidArgument, "--max-attempts must be an integer from 1 to 1000"),
    ({"priority": "urgent"}, InvalidArgument, "--priority must be one of high, medium, low"),
    ({"add_labels": ["bad\x1b[31m"]}, InvalidArgument, "control character"),
    ({"add_labels": ["x"], "remove_labels": ["x"]}, InvalidArgument, "--add-label and --remove-label both name 'x'"),
])
def test_edit_refuses_bad_changes_and_changes_nothing(queue: Queue, kwargs: dict[str, Any], error: type,
                                                       message: str) -> None:
    queue.add("one", task_id="t1")
    queue.add("two", task_id="t2", depends_on=["t1"])
    queue.add("gone", task_id="gone")
    queue.cancel("gone")
    before = state_snapshot(queue.store)
    with pytest.raises(error, match=message.replace("(", "\\(").replace(")", "\\)")):
        queue.edit("t1", **kwargs)
    assert state_snapshot(queue.store) == before


def test_edit_of_a_held_task_needs_force_and_never_touches_the_claim(queue: Queue) -> None:
    queue.add("x", task_id="t1")
    claim = queue.claim("a1")
    with pytest.raises(Conflict, match=r"t1 is held by 'a1' .*edit it anyway with --force; nothing changed"):
        queue.edit("t1", priority="high", by="bob")
    queue.edit("t1", priority="high", by="a1")  # the holder itself
    queue.edit("t1", title="renamed", by="bob", force=True)
    held = queue.show("t1")["task"]
    assert (held["claimed_by"], held["claim_token"], held["lease_until"]) == (
        "a1", claim["claim_token"], claim["lease_until"])
    assert "while held by a1 (--force)" in queue.history("t1")["events"][-1]["detail"]
    queue.complete("t1", "a1", token=claim["claim_token"])


def test_edit_a_dead_letter_task_then_retry_it(queue: Queue, clock: ManualClock) -> None:
    dead_letter_one(queue, clock, "t1")
    queue.edit("t1", description="simpler: only the happy path", max_attempts=3)
    assert queue.show("t1")["task"]["description"] == "simpler: only the happy path"
    assert queue.retry("t1")["task"]["max_attempts"] == 3
    queue.claim("a")
    queue.complete("t1", "a")
    with pytest.raises(Conflict, match="t1 is already completed; only pending, in-progress, blocked, failed or "
                                       "dead-letter tasks can be edited"):
        queue.edit("t1", title="late")


# -- close -------------------------------------------------------------------------------------------


def test_close_as_done_completes_it_and_its_dependents_become_ready(queue: Queue) -> None:
    queue.add("base", task_id="base")
    queue.add("top", task_id="top", depends_on=["base"])
    result = queue.close("base", reason="done by hand in 4f2a9c1", by="carol")
    assert (result["from"], result["state"], result["dependents"]) == ("pending", "completed", [])
    shown = queue.show("base")
    assert shown["completed_by"] == "carol" and shown["task"]["completed_at"] == T0
    assert [t["id"] for t in queue.ready()["ready"]] == ["top"]
    with pytest.raises(Conflict, match="base is already completed"):
        queue.close("base", reason="again")


def test_close_as_wont_do_cancels_it_and_reports_dependents(queue: Queue) -> None:
    queue.add("base", task_id="base")
    queue.add("top", task_id="top", depends_on=["base"])
    result = queue.close("base", reason="superseded by t9", wont_do=True, by="carol")
    assert (result["state"], result["dependents"]) == ("cancelled", ["top"])
    assert queue.history("base")["events"][-1]["detail"] == "closed as won't do by carol: superseded by t9"


def test_close_a_dead_letter_entry_done_or_wont_do(queue: Queue, clock: ManualClock) -> None:
    dead_letter_one(queue, clock, "d1")
    dead_letter_one(queue, clock, "d2")
    assert queue.close("d1", reason="fixed elsewhere")["state"] == "completed"
    assert queue.close("d2", reason="out of scope", wont_do=True)["state"] == "abandoned"
    assert tasks_in(queue.store, "dead-letter") == []
    assert [e["task_id"] for e in tasks_in(queue.store, "abandoned")] == ["d2"]
    assert store_problems(queue.store) == []


def test_close_of_a_held_task_needs_force_and_then_the_holder_is_told(queue: Queue) -> None:
    queue.add("x", task_id="t1")
    claim = queue.claim("a1")
    before = state_snapshot(queue.store)
    with pytest.raises(Conflict, match=r"held by 'a1'.*close it anyway with --force"):
        queue.close("t1", reason="done", by="bob")
    assert state_snapshot(queue.store) == before
    queue.close("t1", reason="done", by="bob", force=True)
    assert "the claim of a1 ended: --force" in queue.history("t1")["events"][-1]["detail"]
    with pytest.raises(Conflict, match="t1 is completed, not in progress"):
        queue.complete("t1", "a1", token=claim["claim_token"])


def test_close_answers_the_tasks_open_escalations(queue: Queue) -> None:
    queue.add("x", task_id="t1")
    escalate(queue.store, "t1", "needs a decision")
    assert [row["task_id"] for row in list_escalations(queue.store, open_only=True)] == ["t1"]
    result = queue.close("t1", reason="decided in the meeting", wont_do=True, by="carol")
    assert result["from"] == "blocked" and len(result["resolved"]) == 1
    assert list_escalations(queue.store, open_only=True) == []
    assert "blocked" not in queue.show("t1")["task"]


def test_close_needs_a_reason(queue: Queue) -> None:
    queue.add("x", task_id="t1")
    with pytest.raises(InvalidArgument, match="--reason must say why"):
        queue.close("t1", reason=" ")


# -- defer -------------------------------------------------------------------------------------------


def test_defer_holds_a_task_back_until_its_time_even_far_beyond_any_backoff(queue: Queue,
                                                                           clock: ManualClock) -> None:
    queue.add("x", task_id="t1")
    result = queue.defer("t1", until="3d", by="bob", reason="after the freeze")
    assert result["deferred_until"] == "2026-01-28T10:00:00Z" and result["changed"] is True
    with pytest.raises(NothingToDo, match="1 deferred until 2026-01-28T10:00:00Z"):
        queue.claim("a")
    clock.set("2026-01-28T09:59:59Z")
    with pytest.raises(NothingToDo):
        queue.claim("a")
    clock.advance(1)
    assert queue.claim("a")["id"] == "t1"
    assert [e["event"] for e in queue.history("t1")["events"]] == ["added", "deferred", "claimed"]


def test_defer_until_now_lifts_it_and_forms_of_until(queue: Queue) -> None:
    queue.add("x", task_id="t1")
    before = state_snapshot(queue.store)
    assert queue.defer("t1", until="now")["changed"] is False  # not deferred: nothing to lift
    assert state_snapshot(queue.store) == before
    for text, expected in (("90s", "2026-01-25T10:01:30Z"), ("2026-01-26", "2026-01-26T00:00:00Z"),
                           ("2026-01-25T13:00:00+02:00", "2026-01-25T11:00:00Z"), ("1w", "2026-02-01T10:00:00Z")):
        assert queue.defer("t1", until=text)["deferred_until"] == expected
    with pytest.raises(InvalidArgument, match="is not in the future"):
        queue.defer("t1", until="2026-01-25T12:00:00+02:00")  # 10:00 UTC: now, not later
    lifted = queue.defer("t1", until="now", by="bob")
    assert lifted["deferred_until"] is None and "deferred" not in queue.show("t1")["task"]
    assert queue.history("t1")["events"][-1]["event"] == "undeferred"
    for bad, why in (("tomorrowish", "not a time"), ("-5m", "not a time"), ("2026-13-01", "not a time"),
                     ("9999999d", "the year must be between 2000 and 9998")):
        with pytest.raises(InvalidArgument, match=f"--until '{bad}': {why}"):
            queue.defer("t1", until=bad)


def test_defer_a_held_task_ends_the_claim_only_when_asked(queue: Queue) -> None:
    queue.add("x", task_id="t1")
    queue.claim("a1")
    with pytest.raises(Conflict, match="held by 'a1'"):
        queue.defer("t1", until="1h", by="bob")
    result = queue.defer("t1", until="1h", by="bob", force=True)
    assert result["released"] == "a1" and queue.show("t1")["state"] == "pending"
    assert queue.show("t1")["task"]["claimed_by"] is None
    with pytest.raises(Conflict, match="t1 is pending, not in progress"):
        queue.heartbeat("t1", "a1")
    queue.add("y", task_id="t2")
    queue.claim("a2", task_id="t2")
    assert queue.defer("t2", until="1h", by="a2")["released"] == "a2"  # its holder needs no force
    queue.close("t2", reason="done")
    with pytest.raises(Conflict, match="t2 is already completed; only pending or in-progress tasks can be deferred"):
        queue.defer("t2", until="1h")


# -- cancel of a held task, listings ------------------------------------------------------------------


def test_cancel_of_a_held_task_names_the_holder_and_needs_force(queue: Queue) -> None:
    queue.add("base", task_id="base")
    queue.add("top", task_id="top", depends_on=["base"])
    queue.add("solo", task_id="solo")
    queue.claim("a1", task_id="solo")
    with pytest.raises(Conflict, match="solo is held by 'a1'") as caught:
        queue.cancel("solo")
    assert caught.value.exit_code == 4 and caught.value.details["holder"] == "a1"
    queue.cancel("solo", by="a1")  # its holder may
    queue.claim("a2", task_id="base")
    queue.release("base", "a2")
    assert queue.cancel("base", cascade=True, by="bob")["cancelled"] == ["base", "top"]
    assert queue.history("top")["events"][-1]["by"] == "bob"


def test_list_puts_ready_tasks_first_and_says_why_the_others_wait(queue: Queue, clock: ManualClock) -> None:
    _mixed_queue(queue, clock)
    rows = queue.list_tasks()["tasks"]
    assert [r["id"] for r in rows][:3] == ["r-high", "r-med", "r-low"] and all(r["ready"] for r in rows[:3])
    waiting = {r["id"]: r["why"] for r in rows[3:]}
    assert waiting["w-dep"] == "waits on r-low (pending)" and waiting["w-never"] == "never: gone is cancelled"
    assert waiting["w-defer"] == "deferred until 2026-01-26T10:00:01Z"
    escalate(queue.store, "r-med", "unclear spec")
    blocked = queue.list_tasks("blocked")["tasks"][0]
    assert blocked["why"] == "unclear spec (until 2026-01-26T10:00:01Z)" and blocked["ready"] is None


def test_list_by_agent_shows_what_it_holds_and_what_it_completed(queue: Queue) -> None:
    for n in range(4):
        queue.add(f"t{n}", task_id=f"t{n}")
    queue.claim("a1", task_id="t0")
    queue.claim("a1", task_id="t1")
    queue.complete("t1", "a1")
    queue.claim("a2", task_id="t2")
    assert [(t["id"], t["state"]) for t in queue.list_tasks("all", agent="a1")["tasks"]] == [
        ("t0", "in-progress"), ("t1", "completed")]
    assert queue.list_tasks("in-progress", agent="a2")["total"] == 1
    with pytest.raises(InvalidArgument, match="agent name"):
        queue.list_tasks(agent="bad\x07")


def test_a_long_approver_name_from_a_signal_is_cut_not_refused(queue: Queue) -> None:
    queue.add("x", task_id="t1")
    escalate(queue.store, "t1", "needs a decision")
    resolve(queue.store, "t1", "approve", approver="a" * 300)  # HUMAN_APPROVED's approver has no length limit
    last = queue.history("t1")["events"][-1]
    assert last["event"] == "approved" and last["by"] == "a" * 200
    assert store_problems(queue.store) == []
