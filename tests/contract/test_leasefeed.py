"""Path leases in the live view's feed and in `loki status` (loki/watch/leasefeed.py): a lease acquired,
released, broken, expired, and an edit the PreToolUse hook denied, on the files, the memory store and
PostgreSQL; a watcher started later shows the same lines; `loki watch --json` and `loki status --json`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loki.admin.status import status
from loki.clock import ManualClock
from loki.hooks import leasegate
from loki.leases.leases import PathLeases
from loki.storage.store import Store
from loki.watch.activity import Activity, history
from loki.watch.feed import Feed, event_line
from loki.watch.watcher import Watcher
from tests.helpers import cli

LATER = "2026-01-25T12:00:00Z"


@pytest.fixture
def store(backend_store: Store) -> Store:
    return backend_store


def lines(events: list[dict[str, Any]]) -> list[str]:
    return [event_line(e, LATER) for e in events if e["event"] == "lease"]


def deny(store: Store, monkeypatch: pytest.MonkeyPatch, path: str, agent: str, now: str) -> dict[str, Any] | None:
    """The hook's answer to ``agent``'s Edit of ``path`` (its root: the store's tree; on PostgreSQL this machine's
    copy of the holders, refreshed by the lease writes). The memory store has no tree for a hook to run
    against: there the line the hook would append goes into the store's log of the same name."""
    if store.local_root is None:
        from loki.leases.hotcopy import DENIALS

        store.append_lines(DENIALS, [{"event": "lease", "change": "denied", "timestamp": now, "path": path,
                                      "agent": agent, "holder": "alice", "lease_id": "L1", "task": None,
                                      "pattern": "src/auth/**", "tool": "Edit"}] if agent != "alice" else [])
        return {"hookSpecificOutput": {"permissionDecision": "deny"}} if agent != "alice" else None
    root = Path(store.local_root)
    monkeypatch.setenv("LOKI_AGENT", agent)
    payload = {"tool_name": "Edit", "tool_input": {"file_path": str(root.parent / path)}, "cwd": str(root.parent)}
    return leasegate.check(payload, str(root), now)


def scene(store: Store, clock: ManualClock) -> PathLeases:
    """10:01 alice takes src/auth/** (L1); 10:02 bob takes docs/** for an hour (L2); 10:03 carol takes
    tests/** for two minutes (L3); 10:04 alice releases L1; 10:05 ops breaks L2; L3 expires at 10:05."""
    leases = PathLeases(store)
    clock.advance(60)
    leases.acquire(["src/auth/**"], agent="alice")
    clock.advance(60)
    leases.acquire(["docs/**"], agent="bob", ttl="1h")
    clock.advance(60)
    leases.acquire(["tests/**"], agent="carol", ttl="2m", exclusive=False)
    clock.advance(60)
    leases.release("L1", agent="alice")
    clock.advance(60)
    leases.break_("L2", by="ops", reason="bob left for the day")
    clock.advance(60)
    return leases


EXPECTED = [
    "10:01:00 lease acquired: L1 src/auth/** by alice (exclusive, until 11:01:00)",
    "10:02:00 lease acquired: L2 docs/** by bob (exclusive, until 11:02:00)",
    "10:03:00 lease acquired: L3 tests/** by carol (shared, until 10:05:00)",
    "10:04:00 lease released: L1 src/auth/** by alice",
    "10:05:00 lease expired: L3 tests/** of carol (not renewed)",
    "10:05:00 lease broken: L2 docs/** of bob by ops: bob left for the day",
]


def expected() -> list[str]:
    """EXPECTED with the day put back into the expiries (the feed shows them whole)."""
    return [line.replace("until 1", "until 2026-01-25T1").replace(":00)", ":00Z)") for line in EXPECTED]


def test_leases_acquired_released_broken_and_expired_are_in_the_feed(store: Store, clock: ManualClock) -> None:
    activity = Activity(store)
    activity.start()
    scene(store, clock)
    seen = activity.poll()
    assert lines(seen) == expected()
    feed = Feed()
    for event in seen:
        feed.add(event, LATER)
    assert [(e.label, e.tone) for e in feed.entries] == [("lease", ""), ("lease", ""), ("lease", ""),
                                                          ("lease", "ok"), ("lease", "warn"), ("lease", "bad")]
    assert activity.poll() == []
    assert lines(history(store)) == expected()  # a watcher started later begins with the same lines


def test_an_expiry_is_reported_when_the_time_passes_before_any_write_sweeps_it(store: Store,
                                                                                clock: ManualClock) -> None:
    leases = PathLeases(store)
    leases.acquire(["a/**"], agent="alice", ttl="90s")
    activity = Activity(store)
    activity.start()
    assert lines(activity.poll()) == []
    clock.advance(120)
    assert lines(activity.poll()) == ["10:01:30 lease expired: L1 a/** of alice (not renewed)"]
    leases.sweep()  # now the write moves it to the history, dated at its expiry: not reported twice
    assert lines(activity.poll()) == []


def test_an_edit_the_hook_denied_is_in_the_feed_and_counted_by_status(store: Store, clock: ManualClock,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    activity = Activity(store)
    activity.start()
    PathLeases(store).acquire(["src/auth/**"], agent="alice", task=None)
    answer = deny(store, monkeypatch, "src/auth/login.py", "bob", "2026-01-25T10:00:30Z")
    assert answer is not None and answer["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert deny(store, monkeypatch, "src/auth/login.py", "alice", "2026-01-25T10:00:30Z") is None
    assert lines(activity.poll()) == [
        "10:00:00 lease acquired: L1 src/auth/** by alice (exclusive, until 2026-01-25T11:00:00Z)",
        "10:00:30 lease denied: Edit of src/auth/login.py by bob: src/auth/** is held by alice (L1)"]
    assert lines(history(store))[-1] == lines([{"event": "lease", **_last_denial(store)}])[-1]
    counted = status(store)["path_leases"]
    assert counted == {"live": 1, "task_claims": 0, "conflicts": 0, "denied": 1, "broken": 0, "expired": 0}


def _last_denial(store: Store) -> dict[str, Any]:
    from loki.watch.leasefeed import history as lease_history

    return [e for e in lease_history(store) if e["change"] == "denied"][-1]


def test_status_counts_the_last_day(store: Store, clock: ManualClock) -> None:
    scene(store, clock)
    assert status(store)["path_leases"] == {"live": 0, "task_claims": 0, "conflicts": 0, "denied": 0,
                                            "broken": 1, "expired": 1}
    clock.advance(86400)
    assert status(store)["path_leases"]["broken"] == 0  # older than a day: not counted


@pytest.mark.files("the CLI works on a tree")
def test_through_the_cli_watch_json_and_status(store: Store, clock: ManualClock, monkeypatch: pytest.MonkeyPatch,
                                              project: Path) -> None:
    seen: list[dict[str, Any]] = []
    watcher = Watcher(store, on_event=seen.append, observer="polling")
    watcher.start(observe=False)
    watcher.follow_activity()
    env = {"LOKI_NOW": "2026-01-25T10:05:00Z"}
    taken = cli(["lease", "acquire", "src/**", "--agent", "alice"], root=store.root, env=env)
    assert taken.code == 0, taken.stderr
    broken = cli(["lease", "break", "L1", "--by", "ops", "--reason", "stuck"], root=store.root, env=env)
    assert broken.code == 0, broken.stderr
    watcher.step()
    watcher.close()
    assert lines(seen) == ["10:05:00 lease acquired: L1 src/** by alice (exclusive, until 2026-01-25T11:05:00Z)",
                           "10:05:00 lease broken: L1 src/** of alice by ops: stuck"]
    done = cli(["status", "--json"], root=store.root, env=env)
    assert done.code == 0, done.stderr
    assert json.loads(done.stdout)["path_leases"]["broken"] == 1
    said = cli(["status"], root=store.root, env=env).stdout
    assert "path leases: 0 live, 0 tasks holding paths; in the last 24 h: 0 edits denied, 1 broken, 0 expired" \
        in said
    # `loki watch --json` writes each event as it is (loki/cli/watch.py): the facts, not only the words
    broke = json.loads(json.dumps([e for e in seen if e["event"] == "lease"][-1]))
    assert {k: broke[k] for k in ("change", "lease_id", "agent", "patterns", "timestamp")} == {
        "change": "broken", "lease_id": "L1", "agent": "alice", "patterns": ["src/**"],
        "timestamp": "2026-01-25T10:05:00Z"}
