"""What a wrong clock can do: LOKI_NOW is checked and named, and a timestamp from the future (a clock
set ahead and then back) is bounded by what the rule that wrote it could have set. Time moves by
LOKI_NOW, never by sleeping."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from loki.clock import format_ts, parse_ts
from tests.helpers import cli, snapshot_bytes

T0 = "2026-01-25T10:00:00Z"
FUTURE = "2027-06-01T10:00:00Z"  # 16 months ahead


@pytest.mark.parametrize("value, why", [
    ("garbage", "is not a time loki can use"),
    ("2026-01-25T10:00:00", "has no time zone"),
    ("0001-01-01T00:00:00Z", "outside the supported range"),
    ("9999-12-31T23:59:59Z", "outside the supported range"),
    ("1999-12-31T23:59:59Z", "outside the supported range"),
])
def test_a_bad_loki_now_is_a_usage_error_naming_it(root: Path, value: str, why: str) -> None:
    before = snapshot_bytes(root)
    for args in (["breaker", "status"], ["queue", "claim", "--agent", "a"], ["deadletter", "review"], ["status"]):
        result = cli(args, root=root, env={"LOKI_NOW": value})
        assert result.code == 2, (args, result)
        assert "LOKI_NOW" in result.stderr and why in result.stderr and "2000 and 9998" in result.stderr, result
        assert "internal error" not in result.stderr
    assert snapshot_bytes(root) == before


def test_timestamps_always_have_four_digit_years() -> None:
    early = datetime(1, 1, 1, tzinfo=timezone.utc)
    assert format_ts(early) == "0001-01-01T00:00:00Z" and parse_ts(format_ts(early)) == early
    assert format_ts(parse_ts(T0)) == T0


def test_a_review_dated_in_the_future_does_not_switch_the_daily_review_off(root: Path) -> None:
    ahead = cli(["deadletter", "review", "--json"], root=root, env={"LOKI_NOW": FUTURE})
    assert ahead.code == 0 and ahead.json()["skipped"] is False
    back = cli(["deadletter", "review", "--json"], root=root, env={"LOKI_NOW": T0})
    assert back.code == 0, back.stderr
    result = back.json()
    assert result["skipped"] is False and "clock skew" in result["clock_skew"] and FUTURE in result["clock_skew"]
    assert result["metadata"]["last_reviewed"] == T0
    said = cli(["deadletter", "review", "--force"], root=root, env={"LOKI_NOW": T0})
    assert said.code == 0
    # Now dated correctly, the next review is due 24 h later, as usual.
    again = cli(["deadletter", "review", "--json"], root=root, env={"LOKI_NOW": "2026-01-25T12:00:00Z"})
    assert again.json()["skipped"] is True
    text = cli(["deadletter", "review"], root=root, env={"LOKI_NOW": FUTURE})
    back_text = cli(["deadletter", "review"], root=root, env={"LOKI_NOW": T0})
    assert text.code == back_text.code == 0 and "note: last_reviewed" in back_text.stdout


def test_a_backoff_set_under_a_clock_ahead_is_not_waited_out(root: Path) -> None:
    cli(["queue", "add", "flaky", "--id", "t1"], root=root, env={"LOKI_NOW": T0})
    assert cli(["queue", "claim", "--agent", "a"], root=root, env={"LOKI_NOW": FUTURE}).code == 0
    failed = cli(["queue", "fail", "t1", "--agent", "a", "--error", "boom", "--approach", "x", "--json"], root=root,
                 env={"LOKI_NOW": FUTURE})
    assert failed.code == 0 and failed.json()["retry_at"] > FUTURE
    # A real backoff is still waited for...
    assert cli(["queue", "claim", "--agent", "a"], root=root, env={"LOKI_NOW": FUTURE}).code == 3
    # ...but back at the right time, a retry time 16 months ahead is clock skew, not a backoff.
    claimed = cli(["queue", "claim", "--agent", "b", "--json"], root=root, env={"LOKI_NOW": T0})
    assert claimed.code == 0, claimed.stderr
    notes = [n["text"] for n in claimed.json()["task"]["notes"]]
    assert any("clock skew" in n and "longest backoff" in n for n in notes), notes


def test_a_breaker_opened_under_a_clock_ahead_is_not_held_open_by_the_jump(root: Path) -> None:
    assert cli(["breaker", "trip", "api"], root=root, env={"LOKI_NOW": FUTURE}).code == 0
    # A real cooldown is still waited for...
    assert cli(["breaker", "check", "api"], root=root, env={"LOKI_NOW": FUTURE}).code == 75
    # ...but back at the right time, a breaker opened 16 months ahead is clock skew: it probes now.
    back = cli(["breaker", "check", "api"], root=root, env={"LOKI_NOW": T0})
    assert back.code == 0, back.stderr
    status = cli(["breaker", "status", "api", "--json"], root=root, env={"LOKI_NOW": T0})
    assert status.json()["state"] == "HALF_OPEN", status.stdout
    # The probe slot it just took is dated now, so the next probe is one interval away, not 16 months.
    again = cli(["breaker", "check", "api"], root=root, env={"LOKI_NOW": "2026-01-25T10:00:30Z"})
    assert again.code == 0, again.stderr


def test_a_probe_slot_taken_under_a_clock_ahead_does_not_block_probes(root: Path) -> None:
    assert cli(["breaker", "trip", "api", "--for", "0"], root=root, env={"LOKI_NOW": FUTURE}).code == 0
    assert cli(["breaker", "check", "api"], root=root, env={"LOKI_NOW": FUTURE}).code == 0  # the probe slot
    back = cli(["breaker", "check", "api"], root=root, env={"LOKI_NOW": T0})
    assert back.code == 0, back.stderr


# -- leases on files: one clock is assumed, and what a clock that is wrong can do is bounded ---------------
# (docs/queue.md, "Leases and clock skew"; on PostgreSQL leases are on the database's clock:
# tests/storage/postgres/test_postgres_clock.py)


def _claim(root: Path, agent: str, now: str, *extra: str) -> dict[str, Any]:
    result = cli(["queue", "claim", "--agent", agent, "--lease", "300", "--json", *extra], root=root,
                 env={"LOKI_NOW": now})
    assert result.code == 0, result.stderr
    task: dict[str, Any] = result.json()["task"]
    return task


def test_a_claim_on_a_clock_two_hours_behind_does_not_hand_out_a_lease_that_is_already_over(root: Path) -> None:
    for name in ("t1", "t2", "t3"):
        assert cli(["queue", "add", name, "--id", name], root=root, env={"LOKI_NOW": T0}).code == 0
    assert _claim(root, "right", T0)["lease_until"] == "2026-01-25T10:05:00Z"
    behind = _claim(root, "slow", "2026-01-25T08:00:00Z")
    # Its lease starts from the newest claim in progress, not from its own clock two hours back...
    assert behind["id"] == "t2" and behind["claimed_at"] == T0 and behind["lease_until"] == "2026-01-25T10:05:00Z"
    beat = cli(["queue", "heartbeat", "t2", "--agent", "slow", "--token", behind["claim_token"], "--json"],
               root=root, env={"LOKI_NOW": "2026-01-25T08:01:00Z"})
    assert beat.code == 0 and beat.json()["task"]["lease_until"] == "2026-01-25T10:05:00Z", beat.stdout + beat.stderr
    # ...so a machine on the right time a minute later finds it live: nothing is requeued.
    assert _claim(root, "right", "2026-01-25T10:01:00Z")["id"] == "t3"
    done = cli(["queue", "complete", "t2", "--agent", "slow", "--token", behind["claim_token"]], root=root,
               env={"LOKI_NOW": "2026-01-25T08:02:00Z"})
    assert done.code == 0, done.stderr


def test_a_clock_a_day_or_more_off_is_not_followed(root: Path) -> None:
    for name in ("t1", "t2"):
        cli(["queue", "add", name, "--id", name], root=root, env={"LOKI_NOW": T0})
    _claim(root, "future", FUTURE)  # 16 months ahead: a wrong date, not drift
    assert _claim(root, "right", T0)["lease_until"] == "2026-01-25T10:05:00Z"


def test_a_lease_loki_never_gives_ends_at_once(root: Path, store: Any) -> None:
    import json

    from loki.queue.queue import Queue

    queue = Queue(store)
    queue.add("t", task_id="t1")
    claimed = queue.claim("a", lease_seconds=300)
    tasks = store.read("queue/in-progress.json")
    tasks["tasks"][0]["lease_until"] = "2099-01-01T00:00:00Z"  # by hand, or a clock set 73 years ahead
    store.write_text("queue/in-progress.json", json.dumps(tasks))
    assert queue.requeue_stale() == {"requeued": ["t1"], "dead_lettered": []}
    task = queue.show("t1")["task"]
    assert task["attempts"][-1]["error_type"] == "timeout" and claimed["claim_token"] != task.get("claim_token")
    assert any("is not one loki gives" in n["text"] for n in task["notes"]), task["notes"]


def test_a_complete_repeated_with_the_same_token_is_a_no_op(root: Path) -> None:
    cli(["queue", "add", "t", "--id", "t1"], root=root, env={"LOKI_NOW": T0})
    token = _claim(root, "a", T0)["claim_token"]
    args = ["queue", "complete", "t1", "--agent", "a", "--token", token, "--json"]
    first = cli(args, root=root, env={"LOKI_NOW": T0})
    before = snapshot_bytes(root)
    again = cli(args, root=root, env={"LOKI_NOW": "2026-01-25T10:01:00Z"})  # the first answer was lost
    assert first.code == again.code == 0 and again.json()["task"] == first.json()["task"], again.stderr
    assert snapshot_bytes(root) == before
    other = cli(["queue", "complete", "t1", "--agent", "a", "--token", "not-the-token"], root=root)
    assert other.code == 4 and "is completed, not in progress" in other.stderr


def test_validate_flags_a_task_stamped_in_the_future(root: Path) -> None:
    cli(["queue", "add", "t", "--id", "t1"], root=root, env={"LOKI_NOW": T0})
    token = _claim(root, "ahead", FUTURE)["claim_token"]
    assert cli(["queue", "complete", "t1", "--agent", "ahead", "--token", token], root=root,
               env={"LOKI_NOW": FUTURE}).code == 0
    before = snapshot_bytes(root)
    result = cli(["validate"], root=root, env={"LOKI_NOW": T0})
    assert result.code == 1, result.stdout + result.stderr
    said = result.stdout + result.stderr
    assert f"completed_at {FUTURE}" in said and "in the future" in said and "this machine's clock" in said, said
    assert "/tasks/0/claimed_at" not in said  # a completed task's claim is cleared: only what it still says
    assert snapshot_bytes(root) == before  # reported, nothing moved
    # At the time it was written, or later, it is no longer the future.
    assert cli(["validate"], root=root, env={"LOKI_NOW": FUTURE}).code == 0


def test_a_lease_given_on_a_clock_behind_follows_the_others_claims_and_heartbeats(root: Path) -> None:
    from loki.clock import ManualClock
    from loki.queue.queue import Queue
    from loki.storage.store import Store

    right, slow = ManualClock(T0), ManualClock("2026-01-25T08:00:00Z")
    on_time, behind = Queue(Store(root, clock=right)), Queue(Store(root, clock=slow))
    for name in ("t1", "t2", "t3"):
        on_time.add(name, task_id=name)
    on_time.claim("right", lease_seconds=300)
    held = behind.claim("slow", lease_seconds=300)
    assert (held["claimed_at"], held["lease_until"]) == (T0, "2026-01-25T10:05:00Z")
    slow.advance(240)
    assert behind.heartbeat("t2", "slow", token=held["claim_token"])["lease_until"] == "2026-01-25T10:05:00Z"
    right.advance(60)
    assert on_time.requeue_stale() == {"requeued": [], "dead_lettered": []}
    # The machine on the right time renews its own lease: the slow holder's next heartbeat follows it.
    on_time.heartbeat("t1", "right")
    slow.advance(60)
    assert behind.heartbeat("t2", "slow", token=held["claim_token"])["lease_until"] == "2026-01-25T10:06:00Z"
