"""Path leases across machines on PostgreSQL (docs/leases.md, "This machine's copy on a database tree").

The PreToolUse hook never connects: it answers from this machine's copy under ``.loki/cache/``. Each lease
change made here rewrites it, and so do claims of tasks with paths, SessionStart and the watcher (for
changes made on other machines). Two "machines" are two trees joined to one database; the database made
unreachable leaves the hook answering from the copy; an old copy says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loki.clock import ManualClock
from loki.leases import hotcopy
from loki.leases.leases import PathLeases
from loki.queue.queue import Queue
from loki.storage import layout
from tests import pgserver
from tests.conftest import postgres_store
from tests.helpers import Result, loki_proc
from tests.storage.postgres.test_postgres_machines import machine

pgserver.driver()

NOW = "2026-01-25T10:00:00Z"


def copy_of(root: Path) -> hotcopy.Index | None:
    return hotcopy.open_index(str(root / layout.LOCAL_CACHE_DIR), None)


def edit(root: Path, env: dict[str, str], path: str, agent: str, now: str | None = None,
         importtime: bool = False) -> tuple[Result, str | None, str]:
    payload = {"session_id": "s1", "hook_event_name": "PreToolUse", "tool_name": "Edit",
               "tool_input": {"file_path": str(root.parent / path), "old_string": "a", "new_string": "b"},
               "cwd": str(root.parent)}
    extra = {"LOKI_AGENT": agent, **({"LOKI_NOW": now} if now else {})}
    if importtime:
        done = subprocess.run([sys.executable, "-X", "importtime", "-m", "loki", "--root", str(root), "hook",
                               "pre-tool-use"], input=json.dumps(payload).encode(), capture_output=True,
                              env={**os.environ, **env, **extra}, timeout=60)
        result = Result(done.returncode, done.stdout.decode(), done.stderr.decode())
    else:
        result = loki_proc(["hook", "pre-tool-use"], root=root, env={**env, **extra}, input=json.dumps(payload))
    assert result.code == 0, result.stderr
    if not result.stdout:
        return result, None, ""
    output = json.loads(result.stdout)["hookSpecificOutput"]
    if "permissionDecision" in output:
        return result, output["permissionDecision"], output["permissionDecisionReason"]
    return result, "context", output["additionalContext"]


# -- the library: who writes this machine's copy ------------------------------------------------------


def test_every_lease_change_and_claim_here_rewrites_this_machines_copy(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    here_root, there_root = tmp_path / "here" / ".loki", tmp_path / "there" / ".loki"
    here_root.mkdir(parents=True), there_root.mkdir(parents=True)
    here = postgres_store(here_root, clock)
    try:
        from loki.storage.postgres.store import PgStore

        url = here.db.url
        there = PgStore.open(url, root=str(there_root), clock=clock, lease_clock=clock)
        try:
            _check_copies(here, there, here_root, there_root, clock)
        finally:
            there.close()
    finally:
        here.close()


def _check_copies(here: Any, there: Any, here_root: Path, there_root: Path, clock: ManualClock) -> None:
    lease = PathLeases(here).acquire(["src/auth/**"], agent="alice")
    mine = copy_of(here_root)
    assert mine is not None and mine.claims and mine.refreshed_at == NOW
    assert [h["lease_id"] for h in mine.candidates("src/auth/a.py")] == [lease["lease_id"]]
    assert copy_of(there_root) is None  # the other machine learns of it when it refreshes (the watcher)

    queue = Queue(there)
    queue.add("billing", paths=["src/billing/**"])
    clock.advance(1)
    claimed = queue.claim("carol")  # a claim of a task with paths here rewrites this machine's copy
    theirs = copy_of(there_root)
    assert theirs is not None
    held = {h["lease_id"]: h for h in theirs.everything()}
    assert set(held) == {lease["lease_id"], f"task:{claimed['id']}"}
    assert held[f"task:{claimed['id']}"]["agent"] == "carol"

    queue.complete(claimed["id"], "carol")
    theirs = copy_of(there_root)
    assert theirs is not None and [h["lease_id"] for h in theirs.everything()] == [lease["lease_id"]]
    PathLeases(here).release(lease["lease_id"], agent="alice")
    mine = copy_of(here_root)
    assert mine is not None and mine.count == 0


def test_the_watcher_refreshes_the_copy_when_the_holders_change_elsewhere_and_every_tick(tmp_path: Path) -> None:
    from loki.storage.postgres.store import PgStore
    from loki.watch.watcher import Watcher

    clock = ManualClock(NOW)
    here_root, there_root = tmp_path / "here" / ".loki", tmp_path / "there" / ".loki"
    here_root.mkdir(parents=True), there_root.mkdir(parents=True)
    here = postgres_store(here_root, clock)
    there = PgStore.open(here.db.url, root=str(there_root), clock=clock, lease_clock=clock)
    try:
        seconds = [0.0]
        watcher = Watcher(there, observer="polling", timer=lambda: seconds[0])
        assert watcher.refresh_lease_copy() is True  # the first cycle writes it
        copy = copy_of(there_root)
        assert copy is not None and copy.count == 0
        assert watcher.refresh_lease_copy() is False  # nothing changed, the tick not due: not rewritten

        PathLeases(here).acquire(["src/auth/**"], agent="alice")  # on the other machine
        assert watcher.refresh_lease_copy() is True
        copy = copy_of(there_root)
        assert copy is not None and [h["agent"] for h in copy.candidates("src/auth/x.py")] == ["alice"]

        clock.advance(30)
        seconds[0] += watcher.tick_seconds  # nothing changed, but the tick is due: the stamp moves on
        assert watcher.refresh_lease_copy() is True
        copy = copy_of(there_root)
        assert copy is not None and copy.refreshed_at == "2026-01-25T10:00:30Z"
    finally:
        there.close()
        here.close()


def test_a_file_tree_keeps_no_copy(tmp_path: Path, root: Path) -> None:
    from loki.storage.store import Store
    from loki.watch.watcher import Watcher

    assert Watcher(Store(root, clock=ManualClock(NOW)), observer="polling").refresh_lease_copy() is False
    assert not (root / layout.LOCAL_CACHE_DIR).exists()  # the hot path's root stays the tree


# -- two machines, the real hook ---------------------------------------------------------------------------


@pytest.mark.slow  # a dozen real processes
def test_a_lease_taken_on_one_machine_is_denied_on_the_other_also_with_the_database_gone(tmp_path: Path) -> None:
    url = pgserver.fresh_schema_url(migrate=False)
    (one, env_one), (two, env_two) = machine(tmp_path, "one", url), machine(tmp_path, "two", url)
    taken = loki_proc(["lease", "acquire", "src/auth/**", "--agent", "alice", "--ttl", "2h", "--json"],
                      root=one, env=env_one)
    assert taken.code == 0, taken.stderr
    until = taken.json()["expires_at"]
    _, said, _ = edit(two, env_two, "src/auth/login.py", "bob")
    assert said is None  # machine two has no copy yet: nothing known there

    watched = loki_proc(["watch", "--once", "--no-tui"], root=two, env=env_two)  # the watcher refreshes it
    assert watched.code == 0, watched.stderr
    _, said, why = edit(two, env_two, "src/auth/login.py", "bob")
    assert said == "deny"
    assert f"src/auth/** is held by alice (exclusive lease L1, until {until}); you are bob" in why
    assert edit(two, env_two, "src/auth/login.py", "alice")[1] is None
    assert edit(two, env_two, "src/billing/x.py", "bob")[1] is None

    # The database unreachable: the hook never connects, so it answers from the copy as before.
    config = two / layout.CONFIG
    config.write_text(json.dumps({"version": 1, "storage": {"backend": "postgresql",
                                                            "database": "postgresql://loki@unreachable.invalid:1/x"}}))
    done, said, why = edit(two, env_two, "src/auth/login.py", "bob", importtime=True)
    assert said == "deny" and "held by alice" in why
    assert "psycopg" not in done.stderr and "loki.storage.postgres" not in done.stderr


@pytest.mark.slow  # real processes
def test_an_old_copy_says_how_old_and_a_claim_elsewhere_arrives_with_the_watcher(tmp_path: Path) -> None:
    url = pgserver.fresh_schema_url(migrate=False)
    (one, env_one), (two, env_two) = machine(tmp_path, "one", url), machine(tmp_path, "two", url)
    env_one = {**env_one, "LOKI_NOW": NOW}
    env_two = {**env_two, "LOKI_NOW": NOW}
    added = loki_proc(["queue", "add", "billing", "--paths", "src/billing/**", "--json"], root=one, env=env_one)
    assert added.code == 0, added.stderr
    claimed = loki_proc(["queue", "claim", "--agent", "carol", "--lease", "3600", "--json"], root=one, env=env_one)
    assert claimed.code == 0, claimed.stderr
    task = claimed.json()["task"]["id"]
    assert loki_proc(["watch", "--once", "--no-tui"], root=two, env=env_two).code == 0
    _, said, why = edit(two, env_two, "src/billing/a.py", "bob", now=NOW)
    assert said == "deny" and f"held by carol for task {task} (its claim" in why

    five_minutes = "2026-01-25T10:05:00Z"
    _, said, why = edit(two, env_two, "src/billing/a.py", "bob", now=five_minutes)
    assert said == "deny" and "this machine's copy of the path leases is 5 min old" in why
    _, said, why = edit(two, env_two, "docs/a.md", "bob", now=five_minutes)
    assert said == "context" and why.startswith("loki: this machine's copy of the path leases is 5 min old")

    done = loki_proc(["queue", "complete", task, "--agent", "carol"], root=one, env=env_one)
    assert done.code == 0, done.stderr
    assert edit(two, env_two, "src/billing/a.py", "bob", now=NOW)[1] == "deny"  # not refreshed here yet
    assert loki_proc(["watch", "--once", "--no-tui"], root=two, env=env_two).code == 0
    assert edit(two, env_two, "src/billing/a.py", "bob", now=NOW)[1] is None


@pytest.mark.parametrize("end", ["landed", "unlanded", "cancel", "close"])
def test_a_task_with_paths_in_landing_stays_in_this_machines_copy_until_it_leaves_landing(tmp_path: Path,
                                                                                        end: str) -> None:
    """docs/leases.md, "Landing tasks keep their paths": a completion that moves the task to ``landing`` hands its
    paths from its claim to its landing (held by the agent that completed it, until the landing deadline), and this
    machine's copy says so at once; when it lands or is unlanded (a real git repository: its commit merged, its
    branch deleted), cancelled or closed, the copy is rewritten at once, not at the watcher's next refresh."""
    from loki.queue import edits

    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root.parent), *args], capture_output=True, text=True, check=True,
                              env={**os.environ, **env}).stdout.strip()

    clock = ManualClock(NOW)
    root = tmp_path / "here" / ".loki"
    root.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(root.parent)], check=True, env={**os.environ, **env})
    git("commit", "-q", "--allow-empty", "-m", "one")
    store = postgres_store(root, clock)
    try:
        queue = Queue(store)
        queue.add("billing", paths=["src/billing/**"], land="main")
        claimed = queue.claim("carol")
        copy = copy_of(root)
        assert copy is not None and [h["lease_id"] for h in copy.everything()] == [f"task:{claimed['id']}"]
        clock.advance(1)
        git("checkout", "-q", "-b", "feature")
        git("commit", "-q", "--allow-empty", "-m", "fix")
        done = queue.complete(claimed["id"], "carol", head=git("rev-parse", "HEAD"), work_branch="feature")
        assert done["status"] == "landing"
        deadline = done["landing"]["deadline"]
        held = [(h["lease_id"], h["agent"], h["expires_at"], h.get("landing")) for h in PathLeases(store).claims()]
        assert held == [(f"task:{claimed['id']}", "carol", deadline, True)]
        copy = copy_of(root)
        assert copy is not None
        assert [(h["lease_id"], h["agent"], h["expires_at"], h["landing"]) for h in copy.everything()] == held
        git("checkout", "-q", "main")
        if end == "landed":
            git("merge", "-q", "--no-ff", "feature", "-m", "merge")
            assert [e["action"] for e in queue.land_check()] == ["landed"]
        elif end == "unlanded":
            git("branch", "-q", "-D", "feature")
            assert [e["action"] for e in queue.land_check()] == ["unlanded"]
        elif end == "cancel":
            queue.cancel(claimed["id"], by="boss", reason="not wanted")
        else:
            edits.close(queue, claimed["id"], reason="merged by hand", by="boss")
        assert PathLeases(store).claims() == []
        copy = copy_of(root)
        assert copy is not None and copy.everything() == [], copy.everything()
    finally:
        store.close()


@pytest.mark.parametrize("end", ["cancel", "close", "defer", "escalate", "edit-paths", "TESTS_PASSED_billing",
                                 "TESTS_FAILED_billing"])
def test_every_way_a_claim_of_a_task_with_paths_ends_or_changes_here_rewrites_this_machines_copy(
        tmp_path: Path, end: str) -> None:
    """docs/leases.md: complete, fail, release, cancel, close (and defer, an escalation's parking) free the paths
    because the task then holds no live claim; ``edit --paths`` changes them. The hook reads this machine's copy,
    so each must rewrite it at once, as a claim or a completion does, not leave the old holder until the
    watcher's next refresh."""
    from loki.queue import edits
    from loki.queue.escalations import escalate

    clock = ManualClock(NOW)
    root = tmp_path / "here" / ".loki"
    root.mkdir(parents=True)
    store = postgres_store(root, clock)
    try:
        queue = Queue(store)
        queue.add("billing", paths=["src/billing/**"])
        claimed = queue.claim("carol")
        copy = copy_of(root)
        assert copy is not None and [h["patterns"] for h in copy.everything()] == [["src/billing/**"]]
        clock.advance(1)
        if end == "cancel":
            queue.cancel(claimed["id"], force=True, by="boss")
        elif end == "close":
            edits.close(queue, claimed["id"], reason="done elsewhere", force=True, by="boss")
        elif end == "defer":
            edits.defer(queue, claimed["id"], until="1h", force=True, by="boss")
        elif end == "escalate":
            escalate(store, claimed["id"], trigger="security_decision", agent="carol")
        elif end.startswith("TESTS_"):  # the testing stream's word, applied by a watcher (loki/watch/rules.py)
            from loki.watch import rules

            body = {"timestamp": "2026-01-25T10:00:00Z", "task_id": claimed["id"]}
            applied = rules.apply(store, rules.Signal(f"{end}.20260125T100000Z-00000001", end, body))
            assert applied["outcome"] == "applied", applied
        else:
            edits.edit(queue, claimed["id"], paths=["src/payments/**"], by="carol")
        held = [h["patterns"] for h in PathLeases(store).claims()]
        assert held == ([["src/payments/**"]] if end == "edit-paths" else [])
        copy = copy_of(root)
        assert copy is not None and [h["patterns"] for h in copy.everything()] == held
    finally:
        store.close()
