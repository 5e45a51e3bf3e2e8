"""``loki agents``: every agent seen, derived from the queue and the strike files (loki/queue/agents.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loki.clock import ManualClock
from loki.queue.agents import branch_of, completer, roster
from loki.queue.queue import Queue
from loki.strikes.strikes import Strikes
from tests.helpers import NOW, cli, snapshot_bytes


def _team(store: Any, clock: ManualClock) -> Queue:
    """eng-1 works on t1; eng-2 failed t2 once and then took t3; eng-3 completed t4."""
    queue = Queue(store)
    for task_id in ("t1", "t2", "t3", "t4"):
        queue.add(task_id, task_id=task_id)
    t1 = queue.claim("eng-1")
    t2 = queue.claim("eng-2")
    queue.fail(t2["id"], "eng-2", error="AssertionError", token=t2["claim_token"])
    queue.claim("eng-2")
    t4 = queue.claim("eng-3")
    done = queue.complete(t4["id"], "eng-3", token=t4["claim_token"])
    assert t1["id"] == "t1" and done["completed_by"] == "eng-3"
    return queue


def test_every_agent_seen_with_its_task_lease_and_today(backend_store: Any, clock: ManualClock) -> None:
    _team(backend_store, clock)
    clock.advance(600)
    rows = {r["agent"]: r for r in roster(backend_store)["agents"]}
    assert set(rows) == {"eng-1", "eng-2", "eng-3"}
    one = rows["eng-1"]
    assert (one["status"], one["task"], one["lease_left"], one["last_heartbeat"]) == ("working", "t1", 3000, NOW)
    two = rows["eng-2"]
    assert (two["task"], two["failed_today"], two["done_today"]) == ("t3", 1, 0)
    three = rows["eng-3"]
    assert (three["status"], three["task"], three["done_today"], three["last_seen"]) == ("idle", None, 1, NOW)


def test_silent_is_an_expired_lease_or_half_a_lease_without_heartbeat(backend_store: Any,
                                                                       clock: ManualClock) -> None:
    queue = _team(backend_store, clock)
    clock.advance(1801)  # more than half the 3600 s lease
    queue.heartbeat("t1", "eng-1")  # eng-1 is alive, eng-2 is not
    rows = {r["agent"]: r for r in roster(backend_store)["agents"]}
    assert rows["eng-1"]["status"] == "working"
    assert rows["eng-2"]["status"] == "silent"
    assert rows["eng-2"]["silent_because"] == "no heartbeat for 30m01s (more than half of its 1h00m lease)"
    assert roster(backend_store)["agents"][0]["agent"] == "eng-2"  # silent ones first
    clock.advance(1800)
    assert {r["agent"]: r for r in roster(backend_store)["agents"]}["eng-2"]["silent_because"] == "lease expired"


def test_failures_and_completions_count_today_only(backend_store: Any, clock: ManualClock) -> None:
    _team(backend_store, clock)
    clock.advance(86400)
    rows = {r["agent"]: r for r in roster(backend_store)["agents"]}
    assert (rows["eng-2"]["failed_today"], rows["eng-3"]["done_today"]) == (0, 0)
    assert rows["eng-2"]["status"] == "silent"  # its lease ran out a day ago


def test_strikes_on_the_agents_branch(backend_store: Any, clock: ManualClock) -> None:
    _team(backend_store, clock)
    strikes = Strikes(backend_store, branch="agents/eng-1")
    for _ in range(2):
        strikes.record_failure("Bash", {"command": "npm test"}, "npm ERR! missing script: test")
    rows = {r["agent"]: r for r in roster(backend_store)["agents"]}
    assert (rows["eng-1"]["branch"], rows["eng-1"]["strikes"]) == ("agents/eng-1", {"calls": 1, "highest": 2})
    assert rows["eng-2"]["strikes"] is None


def test_the_branch_comes_from_the_task_payload_first() -> None:
    assert branch_of("eng-1", {"payload": {"branch": "feature/login"}}, ["eng-1"]) == "feature/login"
    assert branch_of("eng-1", None, ["main", "eng-1/login"]) == "eng-1/login"
    assert branch_of("eng-1", None, ["main", "eng-10"]) is None  # a part of the name, not a prefix


def test_who_completed_reads_completed_by_or_the_history() -> None:
    assert completer({"completed_by": "a"}) == "a"
    assert completer({"history": [{"event": "claimed", "agent": "x"}, {"event": "completed", "agent": "b"}]}) == "b"
    assert completer({"history": [{"event": "completed", "by": "c"}]}) == "c"
    assert completer({}) is None


@pytest.mark.files
def test_loki_agents_for_people_and_scripts(root: Path) -> None:
    env = {"LOKI_NOW": NOW}
    for args in (["queue", "add", "one", "--id", "t1"], ["queue", "add", "two", "--id", "t2"],
                 ["queue", "claim", "--agent", "eng-1"], ["queue", "claim", "--agent", "eng-2", "--lease", "60"]):
        assert cli(args, root=root, env=env).code == 0
    before = snapshot_bytes(root)
    later = {"LOKI_NOW": "2026-01-25T10:02:00Z"}
    document = cli(["agents", "--json"], root=root, env=later).json()
    assert set(document) == {"now", "today", "agents"}
    assert [(r["agent"], r["status"]) for r in document["agents"]] == [("eng-2", "silent"), ("eng-1", "working")]
    assert set(document["agents"][0]) == {"agent", "status", "silent_because", "last_seen", "last_heartbeat", "task",
                                          "task_title", "tasks_held", "lease_until", "lease_left", "done_today",
                                          "failed_today", "branch", "strikes", "failing_check", "spent_today",
                                          "paths", "landing"}
    assert cli(["agents", "-q"], root=root, env=later).stdout == "eng-2\neng-1\n"
    people = cli(["agents"], root=root, env={**later, "LOKI_FORCE_TTY": "80"})
    assert people.stdout.splitlines()[0].split()[:4] == ["agent", "status", "task", "lease"]
    assert people.stdout.splitlines()[2].split()[:4] == ["eng-2", "SILENT", "t2", "expired"]
    assert "eng-2 is silent: lease expired; t2 goes back to pending at the next claim or watcher tick" in \
        " ".join(people.stdout.split())  # wrapped between words at 80 columns
    assert snapshot_bytes(root) == before  # looking changes nothing (the lease is not requeued by it)


@pytest.mark.files
def test_loki_agents_on_an_empty_tree(root: Path) -> None:
    done = cli(["agents"], root=root)
    assert (done.code, done.stdout) == (0, "")
    assert done.stderr == "0 agents seen, 0 silent; done, failed and spent count today " \
                          f"({cli(['agents', '--json'], root=root).json()['today']}, UTC)\n"
