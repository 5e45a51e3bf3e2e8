"""Tasks declare paths (docs/leases.md): a claim holds them, readiness says who holds them, the claim's end
frees them. On the files, the memory store and PostgreSQL; time moves only with the ManualClock."""

from __future__ import annotations

from typing import Any

import pytest

from loki.clock import ManualClock
from loki.errors import Conflict, InvalidArgument, InvalidInput, NothingToDo
from loki.leases.leases import PathLeases
from loki.queue.queue import Queue
from tests.helpers import state_snapshot, store_problems


@pytest.fixture
def store(backend_store: Any) -> Any:
    return backend_store


@pytest.fixture
def queue(store: Any) -> Queue:
    q = Queue(store)
    q.add("auth rewrite", task_id="t1", paths=["src/auth/**", "./tests/auth/"])
    q.add("login fix", task_id="t2", paths=["src/auth/login.py"])
    q.add("docs", task_id="t3", paths=["docs/*.md"])
    return q


def test_paths_are_normalised_and_stored(queue: Queue, store: Any) -> None:
    assert queue.show("t1")["task"]["paths"] == ["src/auth/**", "tests/auth"]
    assert "paths" not in queue.add("no paths", task_id="t4")
    assert store_problems(store) == []


def test_a_bad_path_is_refused_and_nothing_written(queue: Queue, store: Any) -> None:
    before = state_snapshot(store)
    for bad, says in (("../x", "climbs out"), ("", "is empty"), ("a\x00", r"U\+0000")):
        with pytest.raises(InvalidArgument, match=says) as caught:
            queue.add("bad", task_id="bad", paths=[bad])
        assert caught.value.exit_code == 2
    assert state_snapshot(store) == before


def test_overlapping_tasks_never_held_at_once_disjoint_ones_are(queue: Queue) -> None:
    assert queue.claim("alice")["id"] == "t1"
    assert queue.claim("bob")["id"] == "t3"  # t2 overlaps alice's t1: skipped, not a failure
    with pytest.raises(NothingToDo) as caught:
        queue.claim("carol")
    assert caught.value.message == (
        "nothing ready among 1 pending: 1 held back by path leases (t2: its paths are held: src/auth/login.py "
        "is leased: src/auth/** is held by alice for task t1 (its claim, until 2026-01-25T11:00:00Z))")


def test_the_holder_itself_may_take_an_overlapping_task(queue: Queue) -> None:
    queue.claim("alice", task_id="t1")
    assert queue.claim("alice", task_id="t2")["id"] == "t2"


def test_claim_by_id_says_which_lease_whose_for_which_task_until_when(queue: Queue) -> None:
    queue.claim("alice", task_id="t1")
    with pytest.raises(NothingToDo) as caught:
        queue.claim("bob", task_id="t2")
    assert caught.value.message == ("t2 is not ready: its paths are held: src/auth/login.py is leased: src/auth/** "
                                    "is held by alice for task t1 (its claim, until 2026-01-25T11:00:00Z)")


def test_ready_explain_names_the_holder(queue: Queue) -> None:
    queue.claim("alice", task_id="t1")
    report = queue.ready()
    [row] = report["not_ready"]
    [reason] = row["reasons"]
    assert row["id"] == "t2"
    assert {k: reason[k] for k in ("reason", "lease", "holder", "task", "until", "overlap")} == {
        "reason": "paths", "lease": "task:t1", "holder": "alice", "task": "t1", "until": "2026-01-25T11:00:00Z",
        "overlap": ["src/auth/login.py", "src/auth/**"]}
    assert [r["id"] for r in report["ready"]] == ["t3"]


def _complete(q: Queue, task: dict[str, Any]) -> None:
    q.complete("t1", "alice", token=task["claim_token"])


def _fail(q: Queue, task: dict[str, Any]) -> None:
    q.fail("t1", "alice", token=task["claim_token"], error="boom")


def _release(q: Queue, task: dict[str, Any]) -> None:
    q.release("t1", "alice", token=task["claim_token"])


def _cancel(q: Queue, task: dict[str, Any]) -> None:
    q.cancel("t1", force=True, reason="not needed")


@pytest.mark.parametrize("end", [_complete, _fail, _release, _cancel])
def test_the_end_of_the_claim_frees_the_paths(queue: Queue, end: Any) -> None:
    task = queue.claim("alice", task_id="t1")
    end(queue, task)
    assert queue.claim("bob", task_id="t2")["id"] == "t2"


def test_expiry_frees_the_paths_and_a_heartbeat_keeps_them(queue: Queue, clock: ManualClock) -> None:
    task = queue.claim("alice", task_id="t1", lease_seconds=60)
    clock.advance(50)
    queue.heartbeat("t1", "alice", token=task["claim_token"])
    clock.advance(50)  # past the first lease, inside the renewed one
    with pytest.raises(NothingToDo, match="held by alice for task t1"):
        queue.claim("bob", task_id="t2")
    clock.advance(11)
    assert queue.claim("bob", task_id="t2")["id"] == "t2"


def test_a_path_lease_holds_tasks_back_and_a_claim_holds_leases_back(queue: Queue, store: Any) -> None:
    leases = PathLeases(store)
    lease = leases.acquire(["src/**"], agent="dave")
    with pytest.raises(NothingToDo, match=r"src/\*\* is held by dave \(exclusive lease L1, until"):
        queue.claim("alice", task_id="t1")
    leases.release(lease["lease_id"], agent="dave")
    queue.claim("alice", task_id="t1")
    before = state_snapshot(store)
    with pytest.raises(Conflict, match=r"src/auth/\*\* is held by alice for task t1 \(its claim, until"):
        leases.acquire(["src/auth/session.py"], agent="dave")
    assert state_snapshot(store) == before
    assert [c["lease_id"] for c in leases.claims()] == ["task:t1"]


def test_edit_replaces_and_clears_the_paths(queue: Queue) -> None:
    changed = queue.edit("t2", paths=["lib/**"])["changed"]
    assert changed["paths"] == {"from": ["src/auth/login.py"], "to": ["lib/**"]}
    queue.claim("alice", task_id="t1")
    assert queue.claim("bob", task_id="t2")["id"] == "t2"  # no longer overlapping
    assert queue.edit("t3", paths=[])["task"]["paths"] == []
    with pytest.raises(InvalidArgument, match="climbs out"):
        queue.edit("t3", paths=["../../etc"])


def test_edit_of_a_held_tasks_paths_is_checked_against_the_other_holders(queue: Queue, store: Any) -> None:
    """As a claim and ``lease acquire`` are: a claimed task's new paths may not overlap another agent's claim
    or live lease (exit 4 naming the holder); nothing changes."""
    queue.claim("alice", task_id="t1")
    queue.claim("bob", task_id="t3")
    before = state_snapshot(store)
    shown = queue.show("t3")
    with pytest.raises(Conflict) as caught:
        queue.edit("t3", by="bob", paths=["src/auth/session.py"])
    assert caught.value.exit_code == 4
    assert caught.value.message == ("cannot give t3 these paths: src/auth/session.py is leased: src/auth/** is held "
                                    "by alice for task t1 (its claim, until 2026-01-25T11:00:00Z); nothing changed")
    assert state_snapshot(store) == before
    lease = PathLeases(store).acquire(["lib/**"], agent="dave")
    with pytest.raises(Conflict, match=r"lib/\*\* is held by dave \(exclusive lease L1, until"):
        queue.edit("t3", by="bob", paths=["docs/*.md", "lib/x.py"])
    PathLeases(store).release(lease["lease_id"], agent="dave")
    assert queue.show("t3") == shown
    assert queue.edit("t3", by="bob", paths=["docs/**", "lib/x.py"])["task"]["paths"] == ["docs/**", "lib/x.py"]
    assert queue.edit("t1", by="alice", paths=["src/**"])["task"]["paths"] == ["src/**"]  # its own claims only
    with pytest.raises(Conflict, match="is held by bob for task t3"):
        queue.edit("t1", by="alice", paths=["src/**", "lib/**"])


def test_paths_are_normalised_or_refused_in_loki_s_full_format_too(queue: Queue, store: Any) -> None:
    """A batch file's task in loki's full format keeps no raw path the hook would never match."""
    full = {k: v for k, v in queue.show("t3")["task"].items() if k not in ("paths", "history")}
    added = queue.add_many([{**full, "id": "t9", "paths": ["./a", "a//b/", "docs/./x.md"]}], where="batch.json")
    assert added[0]["task"]["paths"] == queue.show("t9")["task"]["paths"] == ["a", "a/b", "docs/x.md"]
    before = state_snapshot(store)
    with pytest.raises(InvalidInput, match=r"^batch\.json at /0: lease pattern '\.\./x': climbs out") as caught:
        queue.add_many([{**full, "id": "t10", "paths": ["../x"]}], where="batch.json")
    assert caught.value.exit_code == 1  # a bad file, as every other field of it
    assert state_snapshot(store) == before


def test_a_task_in_loki_modes_shape_keeps_its_paths(queue: Queue, store: Any) -> None:
    """A Loki Mode task (camelCase, ``retries``) with ``paths``: they are its paths, normalised, and hold it
    back like any task's, not a foreign field kept aside under ``payload.loki_mode``."""
    added = queue.add_many([{"id": "lm-1", "title": "Port the auth module", "status": "pending", "retries": 0,
                             "maxRetries": 3, "createdAt": "2026-01-25T09:00:00Z", "priority": 5,
                             "paths": ["./src/auth/"]}], where="loki-mode.json")
    task = queue.show("lm-1")["task"]
    assert added[0]["task"]["paths"] == task["paths"] == ["src/auth"]
    assert "paths" not in task["payload"].get("loki_mode", {})
    queue.claim("alice", task_id="t1")  # src/auth/** is alice's now: lm-1 is held back for bob
    with pytest.raises(NothingToDo, match="src/auth is leased: src/auth/\\*\\* is held by alice for task t1"):
        queue.claim("bob", task_id="lm-1")
    assert store_problems(store) == []
