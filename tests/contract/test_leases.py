"""Path leases as state (loki/leases/leases.py) on every backend: files, memory, PostgreSQL.

Time moves only when a test moves the ManualClock (on PostgreSQL it is the store's lease clock too).
"""

from __future__ import annotations

from typing import Any

import pytest

from loki.clock import ManualClock
from loki.errors import Conflict, ExitCode, InvalidArgument, InvalidInput, LokiError, NotFound
from loki.leases.leases import PathLeases
from loki.storage import layout
from tests.helpers import put_tasks, state_snapshot, store_problems, task


@pytest.fixture
def store(backend_store: Any) -> Any:
    return backend_store


@pytest.fixture
def leases(store: Any) -> PathLeases:
    return PathLeases(store, root="/repo")


def test_acquire_stores_a_valid_lease(leases: PathLeases, store: Any) -> None:
    lease = leases.acquire(["./src/auth/", "docs/*.md"], agent="alice", ttl="15m", reason="refactor")
    assert lease["lease_id"] == "L1" and lease["reused"] is False
    assert lease["patterns"] == ["src/auth", "docs/*.md"]
    assert lease["exclusive"] is True
    assert lease["acquired_at"] == "2026-01-25T10:00:00Z" and lease["expires_at"] == "2026-01-25T10:15:00Z"
    assert [x["lease_id"] for x in leases.live()] == ["L1"]
    assert store_problems(store) == []


def test_an_overlapping_exclusive_lease_of_another_agent_is_refused_both_ways(leases: PathLeases) -> None:
    leases.acquire(["src/**"], agent="alice")
    with pytest.raises(Conflict) as caught:
        leases.acquire(["src/a.py"], agent="bob")
    assert caught.value.exit_code == ExitCode.CONFLICT
    assert "src/** is held by alice" in caught.value.message and "until 2026-01-25T11:00:00Z" in caught.value.message
    assert caught.value.details["holder"] == "alice"
    leases.acquire(["lib/x.py"], agent="carol")
    with pytest.raises(Conflict):
        leases.acquire(["lib/**"], agent="dave")
    assert [x["agent"] for x in leases.live()] == ["alice", "carol"]


def test_the_holder_may_overlap_itself_and_disjoint_leases_coexist(leases: PathLeases) -> None:
    leases.acquire(["src/**"], agent="alice")
    leases.acquire(["src/a.py"], agent="alice")
    leases.acquire(["docs/**"], agent="bob")
    assert len(leases.live()) == 3
    assert leases.conflicts() == []


def test_shared_leases_only_conflict_with_exclusive_ones(leases: PathLeases) -> None:
    leases.acquire(["docs/**"], agent="alice", exclusive=False)
    leases.acquire(["docs/a.md"], agent="bob", exclusive=False)
    with pytest.raises(Conflict):
        leases.acquire(["docs/a.md"], agent="carol")
    leases.acquire(["src/**"], agent="carol")
    with pytest.raises(Conflict):
        leases.acquire(["src/x"], agent="alice", exclusive=False)
    assert [c["kind"] for c in leases.conflicts()] == ["shared"]


def test_the_idempotency_key_gives_the_same_lease_back(leases: PathLeases) -> None:
    first = leases.acquire(["src/**"], agent="alice", key="job-7")
    again = leases.acquire(["src/**"], agent="alice", key="job-7")
    assert again["reused"] is True and again["lease_id"] == first["lease_id"]
    assert len(leases.live()) == 1


def test_expiry_frees_the_paths_and_keeps_history(leases: PathLeases, clock: ManualClock) -> None:
    leases.acquire(["src/**"], agent="alice", ttl=60)
    clock.advance(59)
    with pytest.raises(Conflict):
        leases.acquire(["src/a.py"], agent="bob")
    clock.advance(1)
    assert leases.live() == []
    assert leases.acquire(["src/a.py"], agent="bob")["lease_id"] == "L2"
    [ended] = leases.history()
    assert (ended["lease_id"], ended["ended"], ended["ended_at"]) == ("L1", "expired", "2026-01-25T10:01:00Z")


def test_renew_pushes_the_expiry(leases: PathLeases, clock: ManualClock) -> None:
    leases.acquire(["src/**"], agent="alice", ttl=60)
    clock.advance(50)
    renewed = leases.renew("L1", agent="alice")
    assert renewed["expires_at"] == "2026-01-25T10:01:50Z"
    clock.advance(50)
    assert [x["lease_id"] for x in leases.live()] == ["L1"]
    with pytest.raises(InvalidInput, match="held by 'alice', not 'bob'"):
        leases.renew("L1", agent="bob")
    clock.advance(60)
    with pytest.raises(NotFound):
        leases.renew("L1", agent="alice")


def test_release_by_the_holder_and_break_by_a_person_are_kept_in_history(leases: PathLeases) -> None:
    leases.acquire(["src/**"], agent="alice")
    leases.acquire(["docs/**"], agent="bob")
    leases.release("L1", agent="alice")
    leases.break_("L2", by="ops", reason="bob's session died")
    assert leases.live() == []
    assert [(h["lease_id"], h["ended"], h["ended_by"], h["end_reason"]) for h in leases.history()] == [
        ("L1", "released", "alice", None), ("L2", "broken", "ops", "bob's session died")]


def test_a_lease_may_name_a_live_task(leases: PathLeases, store: Any) -> None:
    put_tasks(store, "pending", [task("t1")])
    lease = leases.acquire(["src/**"], agent="alice", task="t1")
    assert lease["task"] == "t1"
    with pytest.raises(Conflict, match="held by alice for task t1"):
        leases.acquire(["src/x"], agent="bob")


BAD: list[tuple[dict[str, Any], type[LokiError], str]] = [
    ({"patterns": ["../x"]}, InvalidArgument, "climbs out of the repository"),
    ({"patterns": ["/elsewhere/x"]}, InvalidArgument, "outside the repository /repo"),
    ({"patterns": [""]}, InvalidArgument, "is empty"),
    ({"patterns": ["a\x00b"]}, InvalidArgument, "control character U+0000"),
    ({"patterns": ["a\x07b"]}, InvalidArgument, "control character U+0007"),
    ({"patterns": []}, InvalidArgument, "at least one pattern"),
    ({"ttl": 0}, InvalidArgument, "at least one second"),
    ({"ttl": "-5m"}, InvalidArgument, "at least one second"),
    ({"ttl": "30d"}, InvalidArgument, "over a week is absurd"),
    ({"ttl": "soon"}, InvalidArgument, "give seconds or a duration"),
    ({"task": "no-such-task"}, NotFound, "no task 'no-such-task'"),
    ({"task": "../etc"}, InvalidArgument, "invalid task id"),
    ({"agent": ""}, InvalidArgument, "agent name"),
    ({"agent": "a\x1b[2Jb"}, InvalidArgument, "control character"),
]


@pytest.mark.parametrize(("change", "error", "says"), BAD)
def test_bad_input_is_refused_with_one_line_and_nothing_written(leases: PathLeases, store: Any,
                                                                change: dict[str, Any], error: type[LokiError],
                                                                says: str) -> None:
    leases.acquire(["keep/**"], agent="zed")
    before = state_snapshot(store)
    args: dict[str, Any] = {"patterns": ["src/**"], "agent": "alice", **change}
    with pytest.raises(error) as caught:
        leases.acquire(args.pop("patterns"), **args)
    assert says in caught.value.message and "\n" not in caught.value.message
    assert caught.value.exit_code in (1, 2)
    assert state_snapshot(store) == before


def test_releasing_someone_elses_lease_is_refused_and_nothing_written(leases: PathLeases, store: Any) -> None:
    leases.acquire(["src/**"], agent="alice")
    before = state_snapshot(store)
    with pytest.raises(InvalidInput) as caught:
        leases.release("L1", agent="bob")
    assert caught.value.exit_code == 1
    with pytest.raises(NotFound):
        leases.release("L9", agent="alice")
    assert state_snapshot(store) == before


def test_the_document_is_a_state_file_every_backend_validates(store: Any, leases: PathLeases) -> None:
    leases.acquire(["src/**"], agent="alice")
    doc = store.read(layout.LEASES)
    assert doc["version"] == 1 and doc["next_id"] == 2 and len(doc["leases"]) == 1
    assert layout.kind_for(layout.LEASES) is layout.LEASES_KIND


def test_agents_status_show_the_paths_held(store: Any, leases: PathLeases) -> None:
    from loki.admin.status import status
    from loki.queue.agents import roster
    from loki.queue.queue import Queue

    queue = Queue(store)
    queue.add("auth", task_id="t1", paths=["src/auth/**"])
    queue.claim("alice", task_id="t1")
    leases.acquire(["docs/**"], agent="alice")
    leases.acquire(["lib/**"], agent="zed")
    rows = {r["agent"]: r for r in roster(store)["agents"]}
    assert rows["alice"]["paths"] == ["docs/**", "src/auth/**"]
    assert rows["zed"]["paths"] == ["lib/**"] and rows["zed"]["status"] == "idle"  # seen only through a lease
    assert status(store)["path_leases"] == {"live": 2, "task_claims": 1, "conflicts": 0, "denied": 0, "broken": 0,
                                            "expired": 0}
