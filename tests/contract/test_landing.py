"""Landing (docs/verify.md, "Landing") through the library, on every storage backend: a verified task that
must land waits in ``landing`` until its commit is reachable from its branch, in real git repositories in
the test's directory (local branches, a fetched remote, a merge commit, a deleted branch). Time is injected
(the ManualClock) for the deadline.
"""

from __future__ import annotations

import os
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from loki.clock import ManualClock, parse_ts
from loki.errors import InvalidArgument, InvalidInput
from loki.queue.landing import Landing
from loki.queue.queue import Queue
from loki.tasks.landing import check_branch, land_branch
from loki.tasks.verify import Unverified
from loki.watch.ticks import Tick
from loki.work.loop import Summary, Worker, WorkOptions
from tests.helpers import state_snapshot

ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env=ENV).stdout.strip()


@pytest.fixture
def repo(backend_store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The repository that holds the tree (where the watcher asks git; the memory store has no tree, so
    the current directory), on branch main with one commit, made the current directory (the agent's)."""
    local = getattr(backend_store, "local_root", None)
    work = Path(os.path.dirname(os.path.abspath(local))) if local else tmp_path / "repo"
    work.mkdir(exist_ok=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True, env=ENV)
    git(work, "commit", "-q", "--allow-empty", "-m", "one")
    monkeypatch.chdir(work)
    return work


def commit_on(repo: Path, branch: str, message: str = "work") -> str:
    git(repo, "checkout", "-q", "-B", branch)
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def merge(repo: Path, branch: str, into: str = "main") -> None:
    git(repo, "checkout", "-q", into)
    git(repo, "merge", "-q", "--no-ff", branch, "-m", f"Merge pull request: {branch}")


def verified(queue: Queue, task_id: str, repo: Path, branch: str = "feat", **add: Any) -> str:
    """Add, claim and complete ``task_id`` on a commit of ``branch``; returns the commit."""
    queue.add("Fix it", task_id=task_id, **add)
    claimed = queue.claim("eng-1", task_id=task_id)
    commit = commit_on(repo, branch)
    queue.complete(task_id, "eng-1", token=claimed["claim_token"], head=commit, work_branch=branch)
    return commit


def test_a_task_that_must_land_waits_until_its_merge_commit_contains_it(backend_store: Any, repo: Path) -> None:
    queue = Queue(backend_store)
    commit = verified(queue, "t1", repo, land="main")
    queue.add("After it", task_id="t2", depends_on=["t1"])
    shown = queue.show("t1")
    assert shown["state"] == "landing"
    landing = shown["task"]["landing"]
    assert (landing["branch"], landing["commit"], landing["work_branch"]) == ("main", commit, "feat")
    assert parse_ts(landing["deadline"]) - parse_ts(landing["since"]) == timedelta(hours=24)
    assert shown["task"]["completed_at"] is None
    # its dependents wait: landing is not done
    from loki.errors import NothingToDo

    with pytest.raises(NothingToDo):
        queue.claim("eng-2")
    events = queue.land_check()
    assert [(e["action"], e["task_id"]) for e in events] == [("waiting", "t1")]
    assert "is not on main yet" in events[0]["detail"]
    assert queue.show("t1")["state"] == "landing"
    merge(repo, "feat")
    events = queue.land_check()
    assert [(e["action"], e["task_id"]) for e in events] == [("landed", "t1")]
    shown = queue.show("t1")
    assert shown["state"] == "completed"
    assert shown["task"]["landing"]["ref"] == "refs/heads/main"
    assert shown["task"]["completed_at"] == shown["task"]["landing"]["landed_at"]
    kinds = [(e["event"], e.get("to")) for e in queue.history("t1")["events"]]
    assert kinds[-2:] == [("completed", "landing"), ("landed", "completed")]
    assert queue.claim("eng-2")["id"] == "t2"  # now its dependent is ready
    # never completed twice: another resolution finds nothing to do
    assert queue.land_check() == []
    assert [e["event"] for e in queue.history("t1")["events"]].count("landed") == 1


def test_a_repeated_complete_of_a_landing_task_changes_nothing(backend_store: Any, repo: Path) -> None:
    queue = Queue(backend_store)
    queue.add("Fix it", task_id="t1", land="main")
    claimed = queue.claim("eng-1")
    commit = commit_on(repo, "feat")
    first = queue.complete("t1", "eng-1", token=claimed["claim_token"], head=commit, work_branch="feat")
    again = queue.complete("t1", "eng-1", token=claimed["claim_token"], head=commit, work_branch="feat")
    assert again["status"] == first["status"] == "landing"
    assert [e["event"] for e in queue.history("t1")["events"]].count("completed") == 1


def test_a_commit_that_reached_a_fetched_remote_branch_lands(backend_store: Any, repo: Path,
                                                             tmp_path: Path) -> None:
    """The agent pushes its branch; the pull request is merged on the remote (another clone); the commit
    lands once the watcher's repository has fetched the remote's main (loki never fetches)."""
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True, env=ENV)
    git(repo, "remote", "add", "origin", str(origin))
    git(repo, "push", "-q", "origin", "main")
    queue = Queue(backend_store)
    commit = verified(queue, "t1", repo, branch="agent/t1", land="main")
    git(repo, "push", "-q", "origin", "agent/t1")
    reviewer = tmp_path / "reviewer"
    subprocess.run(["git", "clone", "-q", str(origin), str(reviewer)], check=True, env=ENV)
    git(reviewer, "merge", "-q", "--no-ff", "origin/agent/t1", "-m", "Merge pull request #7")
    git(reviewer, "push", "-q", "origin", "main")
    git(repo, "checkout", "-q", "main")
    assert [e["action"] for e in queue.land_check()] == ["waiting"]  # not fetched yet
    git(repo, "fetch", "-q", "origin")
    events = queue.land_check()
    assert [(e["action"], e["task_id"]) for e in events] == [("landed", "t1")]
    assert queue.show("t1")["task"]["landing"]["ref"] == "refs/remotes/origin/main"
    assert git(repo, "rev-parse", "main") != git(repo, "rev-parse", "origin/main")  # the local main never moved
    assert commit in git(repo, "rev-list", "origin/main")


def test_a_branch_deleted_unmerged_sends_the_task_back_to_pending_naming_its_commit(backend_store: Any,
                                                                                   repo: Path) -> None:
    queue = Queue(backend_store)
    commit = verified(queue, "t1", repo, land="main")
    git(repo, "checkout", "-q", "main")
    git(repo, "branch", "-q", "-D", "feat")
    events = queue.land_check()
    assert [(e["action"], e["task_id"]) for e in events] == [("unlanded", "t1")]
    shown = queue.show("t1")
    assert shown["state"] == "pending"
    assert "landing" not in shown["task"]
    note = shown["task"]["notes"][-1]["text"]
    assert commit in note and "feat" in note and "deleted" in note
    assert [(e["event"], e.get("to")) for e in queue.history("t1")["events"]][-1] == ("unlanded", "pending")
    assert queue.claim("eng-2")["id"] == "t1"  # its work is to be done again (or recovered from the commit)


def test_a_detached_head_or_a_branch_still_there_keeps_waiting(backend_store: Any, repo: Path) -> None:
    queue = Queue(backend_store)
    verified(queue, "t1", repo, land="main")
    git(repo, "checkout", "-q", "main")
    assert [e["action"] for e in queue.land_check()] == ["waiting"]  # feat still exists
    queue.add("Other", task_id="t2", land="release")
    claimed = queue.claim("eng-1", task_id="t2")
    detached = commit_on(repo, "feat2")
    queue.complete("t2", "eng-1", token=claimed["claim_token"], head=detached, work_branch=None)
    waiting = {e["task_id"]: e["detail"] for e in queue.land_check()}
    assert "no branch release here" in waiting["t2"]


def test_past_the_deadline_a_human_is_asked_once_and_the_task_still_lands(backend_store: Any, repo: Path,
                                                                         clock: ManualClock) -> None:
    from loki.queue.escalations import list_escalations
    from loki.signals.emit import entries

    queue = Queue(backend_store)
    verified(queue, "t1", repo, land="main")
    clock.advance(24 * 3600 - 1)
    assert Landing(backend_store).resolve() == []
    clock.advance(1)
    events = Landing(backend_store).resolve()
    assert [(e["action"], e["task_id"]) for e in events] == [("landing_overdue", "t1")]
    shown = queue.show("t1")
    assert shown["state"] == "landing"
    assert shown["task"]["landing"]["escalation"] == list_escalations(backend_store)[0]["file"]
    signals = entries(backend_store, "waiting")
    assert [s["type"] for s in signals] == ["HUMAN_REVIEW_NEEDED"]
    clock.advance(3600)
    assert Landing(backend_store).resolve() == []  # asked once
    assert len(list_escalations(backend_store)) == 1
    merge(repo, "feat")
    assert [e["action"] for e in Landing(backend_store).resolve()] == ["landed"]
    assert queue.show("t1")["state"] == "completed"


@pytest.mark.parametrize("outcome", ["landed", "unlanded", "cancelled"])
def test_the_deadlines_escalation_is_answered_when_the_task_lands_or_is_unlanded_by_itself(
        backend_store: Any, repo: Path, clock: ManualClock, outcome: str) -> None:
    """The overdue escalation asks a person to merge the commit; once the commit is on the branch (or its branch was
    deleted and the task went back to pending, or a person cancelled it as the escalation offers) the question is
    answered: the escalation is resolved, as a person's `queue close` resolves it, not left open asking to merge
    what is merged."""
    from loki.queue.escalations import list_escalations

    queue = Queue(backend_store)
    commit = verified(queue, "t1", repo, land="main")
    clock.advance(24 * 3600)
    assert [e["action"] for e in Landing(backend_store).resolve()] == ["landing_overdue"]
    assert len(list_escalations(backend_store, open_only=True)) == 1
    if outcome == "landed":
        merge(repo, "feat")
    elif outcome == "unlanded":
        git(repo, "checkout", "-q", "main")
        git(repo, "branch", "-q", "-D", "feat")
    else:  # the escalation's second option
        queue.cancel("t1", reason="not wanted", by="boss")
    assert [e["action"] for e in Landing(backend_store).resolve()] == ([] if outcome == "cancelled" else [outcome])
    assert list_escalations(backend_store, open_only=True) == []
    row = list_escalations(backend_store)[0]
    assert outcome in row["resolution"] and commit[:12] in row["resolution"]


def test_the_deadline_comes_from_the_settings(make_store: Any, repo: Path) -> None:
    store = make_store(config={"version": 1, "verify": {"land_deadline_hours": 2}})
    queue = Queue(store)
    queue.add("Fix it", task_id="t1", land="main")
    claimed = queue.claim("eng-1")
    task = queue.complete("t1", "eng-1", token=claimed["claim_token"], head=commit_on(repo, "feat"))
    assert parse_ts(task["landing"]["deadline"]) - parse_ts(task["landing"]["since"]) == timedelta(hours=2)


def test_the_type_default_and_no_land(make_store: Any, repo: Path) -> None:
    store = make_store(config={"version": 1, "verify": {"land": {"backend": "main"}}})
    queue = Queue(store)
    queue.add("Backend", task_id="t1", type="backend")
    queue.add("Docs", task_id="t2", type="docs")
    queue.add("Backend, no landing", task_id="t3", type="backend")
    assert queue.edit("t3", land=False)["changed"]["land"]["to"] is False
    assert land_branch(queue.show("t1")["task"], store.config) == "main"
    commit = commit_on(repo, "feat")
    for task_id in ("t1", "t2", "t3"):
        claimed = queue.claim("eng-1", task_id=task_id)
        queue.complete(task_id, "eng-1", token=claimed["claim_token"], head=commit)
    assert [queue.show(t)["state"] for t in ("t1", "t2", "t3")] == ["landing", "completed", "completed"]


def test_edit_land_sets_and_refuses(backend_store: Any, repo: Path) -> None:
    queue = Queue(backend_store)
    queue.add("x", task_id="t1")
    assert queue.edit("t1", land="release/2.0")["changed"]["land"] == {"from": None, "to": "release/2.0"}
    before = state_snapshot(backend_store)
    with pytest.raises(InvalidArgument, match=r"--land: 'a\.\.b' is not a valid branch name"):
        queue.edit("t1", land="a..b")
    assert state_snapshot(backend_store) == before


def test_a_task_that_must_land_without_a_commit_is_refused_and_unchanged(backend_store: Any, repo: Path) -> None:
    queue = Queue(backend_store)
    queue.add("x", task_id="t1", land="main")
    claimed = queue.claim("eng-1")
    before = state_snapshot(backend_store)
    with pytest.raises(Unverified, match="must land on main and no commit names its work"):
        queue.complete("t1", "eng-1", token=claimed["claim_token"], head=None)
    assert state_snapshot(backend_store) == before
    forced = queue.complete("t1", "eng-1", token=claimed["claim_token"], forced_by="Ada")
    assert forced["status"] == "completed"  # a person's word stands for the landing too


@pytest.mark.parametrize("bad, says", [
    ("", "names no branch"), ("   ", "names no branch"), ("a\x00b", "contains NUL"), ("a b", "contains ' '"),
    ("-x", "not a valid branch name"), ("a..b", "not a valid branch name"), ("x.lock", "not a valid branch name"),
    ("a/", "not a valid branch name"), ("/a", "not a valid branch name"), ("@", "not a valid branch name"),
    ("a@{1}", "not a valid branch name"), ("a:b", "contains ':'"), ("a~1", "contains '~'"),
    ("x" * 201, "the limit is 200"),
])
def test_bad_branch_names_are_refused_with_nothing_written(backend_store: Any, bad: str, says: str) -> None:
    queue = Queue(backend_store)
    before = state_snapshot(backend_store)
    with pytest.raises(InvalidArgument, match=None) as raised:
        queue.add("x", land=bad)
    assert says in raised.value.message and raised.value.exit_code == 2
    assert raised.value.message.startswith("--land: ") and "\n" not in raised.value.message
    with pytest.raises(InvalidInput, match="at /0: land"):
        queue.add_many([{"title": "x", "land": bad}], where="batch.json")
    assert state_snapshot(backend_store) == before


def test_good_branch_names() -> None:
    for name in ("main", "release/2.0", "origin/main", "feature/x-y_z", "v1.2"):
        assert check_branch(name) == name


def test_the_watchers_tick_resolves_landing_and_logs_it(backend_store: Any, repo: Path) -> None:
    queue = Queue(backend_store)
    verified(queue, "t1", repo, land="main")
    assert [e for e in Tick(backend_store).run() if e["action"] == "landed"] == []
    merge(repo, "feat")
    landed = [e for e in Tick(backend_store).run() if e["action"] == "landed"]
    assert [e["task_id"] for e in landed] == ["t1"]
    assert queue.show("t1")["state"] == "completed"
    logged = [line for line in backend_store.read_tail("logs/events.jsonl", 100_000) if b'"landed"' in line]
    assert len(logged) == 1


def test_a_landing_task_can_be_cancelled_and_is_not_edited(backend_store: Any, repo: Path) -> None:
    from loki.errors import Conflict

    queue = Queue(backend_store)
    commit = verified(queue, "t1", repo, land="main")
    with pytest.raises(Conflict, match="landing"):
        queue.edit("t1", title="new")
    assert queue.cancel("t1", reason="dropped")["cancelled"] == ["t1"]
    shown = queue.show("t1")
    assert shown["state"] == "cancelled" and "landing" not in shown["task"]
    assert f"its work was commit {commit} for main" in shown["task"]["notes"][-1]["text"]
    assert queue.land_check() == []


def test_status_agents_briefing_and_the_live_view_show_landing(backend_store: Any, repo: Path) -> None:
    import json

    from loki.admin.status import status
    from loki.hooks.handlers import briefing
    from loki.queue.agents import roster
    from loki.watch.dashboard import Dashboard
    from loki.watch.screen import queue_lines

    queue = Queue(backend_store)
    commit = verified(queue, "t1", repo, land="main")
    report = status(backend_store)
    assert report["queue"]["landing"] == 1
    assert [(r["task_id"], r["branch"], r["commit"]) for r in report["landing"]] == [("t1", "main", commit)]
    row = next(r for r in roster(backend_store)["agents"] if r["agent"] == "eng-1")
    assert row["landing"] == ["t1"] and row["done_today"] == 0
    said = json.dumps(briefing(backend_store, {}))
    assert f"- Landing: 1 task verified and waiting to land: t1 {commit[:12]} -> main" in said
    snap = Dashboard(backend_store).snapshot()
    assert snap["queue"]["landing"] == 1
    line = "".join(text for text, _tone in queue_lines(snap, 300, rows=1)[0])
    assert "landing 1" in line


def test_tests_passed_with_a_commit_lands_and_without_one_completes(backend_store: Any, repo: Path) -> None:
    from loki.signals.emit import emit
    from loki.watch.watcher import Watcher

    queue = Queue(backend_store)
    queue.add("x", task_id="t1", land="main")
    queue.add("y", task_id="t2", land="main")
    commit = commit_on(repo, "feat")
    emit(backend_store, "TESTS_PASSED_t1", {"commit": commit, "branch": "feat", "summary": "9 passed"},
         task_id="t1")
    emit(backend_store, "TESTS_PASSED_t2", {"summary": "9 passed"}, task_id="t2")
    Watcher(backend_store).run_once()
    assert queue.show("t1")["state"] == "landing"
    assert queue.show("t1")["task"]["landing"]["commit"] == commit
    assert queue.show("t2")["state"] == "completed"


def work(store: Any, command: list[str], notes: list[str]) -> Summary:
    worker = Worker(store, WorkOptions(command=command, agent="eng-1", max_tasks=1), sleep=store.clock.advance,
                    stdout=lambda data: None, stderr=lambda data: None, notify=notes.append)
    return worker.run_unguarded()


def test_loki_work_waits_for_the_agents_commit(backend_store: Any, repo: Path) -> None:
    queue = Queue(backend_store)
    queue.add("Fix it", task_id="t1", land="main", verify=["true"])
    notes: list[str] = []
    script = "git checkout -q -b agent/t1 && git commit -q --allow-empty -m fix"
    summary = work(backend_store, ["sh", "-c", script], notes)
    assert summary.exit_code == 0
    shown = queue.show("t1")
    assert shown["state"] == "landing"
    commit = git(repo, "rev-parse", "agent/t1")
    assert shown["task"]["landing"] == {**shown["task"]["landing"], "commit": commit, "work_branch": "agent/t1"}
    assert shown["task"]["result"]["verification"]["commit"] == commit  # the HEAD its checks ran on
    assert any(f"waiting to land {commit[:12]} on main" in note for note in notes)


def test_loki_work_outside_a_git_work_tree_fails_the_attempt(backend_store: Any, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    monkeypatch.chdir(outside)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    queue = Queue(backend_store)
    queue.add("Fix it", task_id="t1", land="main")
    notes: list[str] = []
    work(backend_store, ["true"], notes)
    shown = queue.show("t1")
    assert shown["state"] == "pending"
    attempt = shown["task"]["attempts"][-1]
    assert attempt["error_type"] == "validation"
    assert "not_committed" in attempt["error_message"] and "must land on main" in attempt["error_message"]


def test_a_person_closes_a_squash_merged_task_and_its_escalation_is_answered(backend_store: Any, repo: Path,
                                                                            clock: ManualClock) -> None:
    from loki.queue.escalations import list_escalations

    queue = Queue(backend_store)
    verified(queue, "t1", repo, land="main")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--squash", "feat")
    git(repo, "commit", "-q", "--allow-empty", "-m", "Fix it (#12)")
    clock.advance(24 * 3600)
    assert [e["action"] for e in queue.land_check()] == ["landing_overdue"]  # a squash merge is a new commit
    closed = queue.close("t1", reason="squash-merged in #12", by="Ada")
    assert (closed["from"], closed["state"]) == ("landing", "completed")
    assert closed["resolved"] == [list_escalations(backend_store)[0]["file"]]
    assert queue.land_check() == []


def test_a_quiet_tick_asks_git_once_and_resolves_only_on_a_change_or_a_deadline(
        backend_store: Any, repo: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    resolve = Landing.resolve

    def counted(self: Landing, **kwargs: Any) -> list[dict[str, Any]]:
        calls.append(1)
        return resolve(self, **kwargs)

    monkeypatch.setattr(Landing, "resolve", counted)
    queue = Queue(backend_store)
    tick = Tick(backend_store)
    assert tick.landings() == [] and calls == []  # nothing landing: not even git is asked
    verified(queue, "t1", repo, land="main")
    assert tick.landings() == [] and len(calls) == 1
    assert tick.landings() == [] and len(calls) == 1  # the same refs, the same tasks: no resolution
    clock.advance(24 * 3600)
    assert [e["action"] for e in tick.landings()] == ["landing_overdue"] and len(calls) == 2  # a deadline
    assert tick.landings() == [] and len(calls) == 2  # escalated once: no longer due
    merge(repo, "feat")  # main moved: the refs changed
    assert [e["action"] for e in tick.landings()] == ["landed"] and len(calls) == 3
    assert tick.landings() == [] and len(calls) == 3


def test_loki_work_refuses_work_left_uncommitted(backend_store: Any, repo: Path) -> None:
    (repo / "limiter.py").write_text("LIMIT = 1\n")
    git(repo, "add", "limiter.py")
    git(repo, "commit", "-q", "-m", "limiter")
    queue = Queue(backend_store)
    queue.add("Fix it", task_id="t1", land="main")
    notes: list[str] = []
    work(backend_store, ["sh", "-c", "echo 'LIMIT = 5' > limiter.py"], notes)  # changed, never committed
    shown = queue.show("t1")
    assert shown["state"] == "pending"
    message = shown["task"]["attempts"][-1]["error_message"]
    assert "1 changed file(s) are not committed (limiter.py)" in message and "must land on main" in message


def test_a_head_that_is_not_a_commit_id_is_refused(backend_store: Any, repo: Path) -> None:
    queue = Queue(backend_store)
    queue.add("x", task_id="t1", land="main")
    claimed = queue.claim("eng-1")
    before = state_snapshot(backend_store)
    with pytest.raises(InvalidArgument, match="head must be a commit id"):
        queue.complete("t1", "eng-1", token=claimed["claim_token"], head="main; rm -rf /")
    assert state_snapshot(backend_store) == before


@pytest.mark.parametrize("end", ["landed", "unlanded", "cancelled", "deadline"])
def test_a_landing_task_keeps_its_paths_until_it_leaves_landing_or_its_deadline(
        backend_store: Any, repo: Path, clock: ManualClock, end: str) -> None:
    """docs/leases.md, "Landing tasks keep their paths": verified, its work not on its branch yet, a task with paths
    still holds them (by the agent that completed it, until its landing deadline): another task with overlapping
    paths is not ready (its reason names the landing task), a lease on them is refused, `lease list` and `agents`
    show them; landed, unlanded (its branch deleted), cancelled or past its deadline, they are free."""
    from loki.errors import Conflict, NothingToDo
    from loki.leases.leases import PathLeases
    from loki.queue.agents import roster

    queue = Queue(backend_store)
    verified(queue, "t1", repo, land="main", paths=["src/auth/**"])
    deadline = queue.show("t1")["task"]["landing"]["deadline"]
    queue.add("Touch login", task_id="t2", paths=["src/auth/login.py"])
    leases = PathLeases(backend_store)
    held = leases.claims()
    assert [(h["lease_id"], h["agent"], h["task"], h["expires_at"], h["landing"]) for h in held] == [
        ("task:t1", "eng-1", "t1", deadline, True)]
    with pytest.raises(NothingToDo):
        queue.claim("eng-2")
    (row,) = queue.ready()["not_ready"]
    reason = next(r for r in row["reasons"] if r["reason"] == "paths")
    assert (reason["task"], reason["holder"], reason["until"]) == ("t1", "eng-1", deadline)
    assert f"held by eng-1 for task t1 (waiting to land, until {deadline})" in reason["text"]
    with pytest.raises(Conflict, match="for task t1 \\(waiting to land"):
        leases.acquire(["src/auth/**"], agent="eng-2")
    assert {a["agent"]: a["paths"] for a in roster(backend_store)["agents"]}["eng-1"] == ["src/auth/**"]
    assert queue.claim("eng-1")["id"] == "t2"  # the holder itself may take overlapping work
    queue.release("t2", "eng-1")
    assert queue.show("t1")["state"] == "landing"
    if end == "landed":
        merge(repo, "feat")
        assert [e["action"] for e in queue.land_check()] == ["landed"]
    elif end == "unlanded":
        git(repo, "checkout", "-q", "main")
        git(repo, "branch", "-q", "-D", "feat")
        assert [e["action"] for e in queue.land_check()] == ["unlanded"]
    elif end == "cancelled":
        queue.cancel("t1", by="boss", reason="not wanted")
    else:
        clock.advance(24 * 3600)  # the deadline is the fixed expiry: nothing renews a landing task
        assert queue.show("t1")["state"] == "landing"
    assert leases.claims() == []
    assert queue.claim("eng-2", task_id="t2")["id"] == "t2"
    assert leases.acquire(["src/auth/x.py"], agent="eng-3")["agent"] == "eng-3"
