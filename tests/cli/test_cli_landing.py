"""Landing on the command line (docs/verify.md, "Landing"): `queue add/edit --land`, `queue complete` of a task
that must land, `queue land-check`, `queue list --state landing`, what `status` and `agents` print, and the
refusals of a bad `--land` (exit 2, one line, nothing written). Real git repositories in the test's directory.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import cli, snapshot_bytes

ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env=ENV).stdout.strip()


@pytest.fixture
def repo(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The repository holding the tree, on main, with one commit: the current directory."""
    work = root.parent
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True, env=ENV)
    git(work, "commit", "-q", "--allow-empty", "-m", "one")
    monkeypatch.chdir(work)
    return work


def test_add_complete_land_check_and_the_views(root: Path, repo: Path) -> None:
    added = cli(["queue", "add", "Fix it", "--id", "t1", "--land", "main"], root=root)
    assert added.code == 0, added.stderr
    assert cli(["queue", "show", "t1", "--json"], root=root).json()["task"]["land"] == "main"
    assert cli(["queue", "claim", "--agent", "eng-1", "-q"], root=root).stdout.strip() == "t1"
    git(repo, "checkout", "-q", "-b", "feat")
    git(repo, "commit", "-q", "--allow-empty", "-m", "fix")
    commit = git(repo, "rev-parse", "HEAD")
    done = cli(["queue", "complete", "t1", "--agent", "eng-1"], root=root)
    assert done.code == 0, done.stderr
    assert done.stdout == f"verified t1 [medium] Fix it: landing, waiting for {commit[:12]} to reach main\n"
    listed = cli(["queue", "list", "--state", "landing", "--json"], root=root).json()
    assert [t["id"] for t in listed["tasks"]] == ["t1"]
    assert f"waiting for {commit[:12]} to reach main (until " in cli(["queue", "list", "--state", "landing"],
                                                                     root=root).stdout
    shown = cli(["queue", "show", "t1"], root=root).stdout
    assert "land\tmain\n" in shown and f"landing\t{commit[:12]} -> main; from feat; since " in shown
    status = cli(["status"], root=root).stdout
    assert "landing\t1" in status
    assert f"landing: 1 task verified, waiting for their commit to reach their branch: t1 {commit[:12]} -> main" \
        in status
    agents = cli(["agents"], root=root)
    assert "eng-1 verified t1, waiting to land" in agents.stderr
    waiting = cli(["queue", "land-check"], root=root)
    assert waiting.stdout == f"t1: waiting: {commit[:12]} is not on main yet\n"
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "feat", "-m", "merge")
    landed = cli(["queue", "land-check", "--json"], root=root).json()
    assert [(e["action"], e["task_id"]) for e in landed["tasks"]] == [("landed", "t1")]
    assert cli(["queue", "show", "t1", "--json"], root=root).json()["state"] == "completed"
    history = cli(["queue", "history", "t1"], root=root).stdout
    assert "landed" in history and f"{commit[:12]} is on refs/heads/main" in history
    assert cli(["queue", "land-check"], root=root).stdout == "no task is landing\n"


def test_the_watchers_once_resolves_landing(root: Path, repo: Path) -> None:
    cli(["queue", "add", "Fix it", "--id", "t1", "--land", "main"], root=root)
    cli(["queue", "claim", "--agent", "eng-1"], root=root)
    git(repo, "commit", "-q", "--allow-empty", "-m", "fix on main itself")
    assert cli(["queue", "complete", "t1", "--agent", "eng-1"], root=root).code == 0
    once = cli(["watch", "--once"], root=root)
    assert once.code == 0, once.stderr
    assert cli(["queue", "show", "t1", "--json"], root=root).json()["state"] == "completed"


def test_edit_land_and_no_land(root: Path, repo: Path) -> None:
    cli(["queue", "add", "x", "--id", "t1"], root=root)
    edited = cli(["queue", "edit", "t1", "--land", "release/2.0"], root=root)
    assert edited.code == 0 and "land: none -> release/2.0" in edited.stdout
    assert cli(["queue", "edit", "t1", "--no-land"], root=root).code == 0
    assert cli(["queue", "show", "t1", "--json"], root=root).json()["task"]["land"] is False
    both = cli(["queue", "edit", "t1", "--land", "main", "--no-land"], root=root)
    assert (both.code, both.stderr) == (2, "error: give either --land or --no-land, not both\n")


@pytest.mark.parametrize("args, says", [
    (["queue", "add", "x", "--land", ""], "error: --land: names no branch; give the branch the work must reach, "
                                          "e.g. --land main\n"),
    (["queue", "add", "x", "--land", "a..b"], "error: --land: 'a..b' is not a valid branch name (git "
                                              "check-ref-format)\n"),
    (["queue", "add", "x", "--land", "feat ure"], "error: --land: 'feat ure' is not a valid branch name (it "
                                                  "contains ' ')\n"),
    (["queue", "add", "x", "--land", "-rf"], "error: --land: '-rf' is not a valid branch name (git "
                                             "check-ref-format)\n"),
    (["queue", "edit", "t0", "--land", "a:b"], "error: --land: 'a:b' is not a valid branch name (it contains "
                                               "':')\n"),
])
def test_a_bad_land_is_exit_2_with_one_line_and_nothing_written(root: Path, args: list[str], says: str) -> None:
    cli(["queue", "add", "existing", "--id", "t0"], root=root)
    before = snapshot_bytes(root)
    refused = cli(args, root=root)
    assert (refused.code, refused.stderr) == (2, says)
    assert snapshot_bytes(root) == before


def test_a_batch_with_a_nul_in_land_is_refused_naming_the_item(root: Path, tmp_path: Path) -> None:
    batch = tmp_path / "batch.json"
    batch.write_text(json.dumps([{"title": "ok"}, {"title": "x", "land": "ma\u0000in"}]))
    before = snapshot_bytes(root)
    refused = cli(["queue", "add", "--from-file", str(batch)], root=root)
    assert refused.code == 1 and refused.stderr.count("\n") == 1  # a batch item: exit 1, as a bad --verify there
    assert "at /1: land: the branch 'ma\\x00in' contains NUL" in refused.stderr
    assert snapshot_bytes(root) == before


def test_complete_outside_a_git_work_tree_is_refused(root: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    monkeypatch.chdir(outside)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    cli(["queue", "add", "x", "--id", "t1", "--land", "main"], root=root)
    cli(["queue", "claim", "--agent", "eng-1"], root=root)
    before = snapshot_bytes(root)
    refused = cli(["queue", "complete", "t1", "--agent", "eng-1"], root=root)
    assert refused.code == 1
    assert "must land on main and no commit names its work" in refused.stderr
    assert snapshot_bytes(root) == before


def test_complete_runs_git_only_for_a_task_that_must_land(root: Path, repo: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`queue complete` is on every agent's path: a task with no landing completes without starting git; one
    that must land reads this directory's HEAD and branch (the real git, behind a wrapper that counts)."""
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True, check=True).stdout.strip()
    shim = tmp_path / "shim"
    shim.mkdir()
    calls = tmp_path / "git-calls"
    (shim / "git").write_text(f'#!/bin/sh\necho "$1" >> {calls}\nexec {real} "$@"\n')
    (shim / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
    for task_id, land in (("plain", []), ("lands", ["--land", "main"])):
        assert cli(["queue", "add", task_id, "--id", task_id, *land], root=root).code == 0
        assert cli(["queue", "claim", "--agent", "eng-1", "--id", task_id, "-q"], root=root).code == 0
        done = cli(["queue", "complete", task_id, "--agent", "eng-1", "--json"], root=root)
        assert done.code == 0, done.stderr
        if task_id == "plain":
            assert done.json()["task"]["status"] == "completed" and not calls.exists()
    assert done.json()["task"]["status"] == "landing"
    assert done.json()["task"]["landing"]["commit"] == git(repo, "rev-parse", "HEAD")
    assert calls.read_text().split() == ["rev-parse", "symbolic-ref"]


def test_a_landing_task_with_paths_holds_them_through_the_cli_until_it_lands(root: Path, repo: Path) -> None:
    """docs/leases.md, "Landing tasks keep their paths": `queue claim --id`, `ready --explain`, `lease acquire`,
    `lease list` and `agents` name the landing task as the holder; once it lands they are free."""
    assert cli(["queue", "add", "auth", "--id", "t1", "--paths", "src/auth/**", "--land", "main"], root=root).code == 0
    assert cli(["queue", "add", "login", "--id", "t2", "--paths", "src/auth/login.py"], root=root).code == 0
    assert cli(["queue", "claim", "--agent", "eng-1", "--id", "t1", "-q"], root=root).stdout == "t1\n"
    git(repo, "checkout", "-q", "-b", "feat")
    git(repo, "commit", "-q", "--allow-empty", "-m", "fix")
    assert cli(["queue", "complete", "t1", "--agent", "eng-1"], root=root).code == 0
    deadline = cli(["queue", "show", "t1", "--json"], root=root).json()["task"]["landing"]["deadline"]
    held = f"src/auth/login.py is leased: src/auth/** is held by eng-1 for task t1 (waiting to land, until {deadline})"
    refused = cli(["queue", "claim", "--agent", "eng-2", "--id", "t2"], root=root)
    assert (refused.code, refused.stderr) == (3, f"t2 is not ready: its paths are held: {held}\n")
    assert held in cli(["queue", "ready", "--explain"], root=root).stdout
    reason = cli(["queue", "ready", "--explain", "--json"], root=root).json()["not_ready"][0]["reasons"][0]
    assert (reason["reason"], reason["task"], reason["holder"], reason["until"]) == ("paths", "t1", "eng-1", deadline)
    acquire = cli(["lease", "acquire", "src/auth/x.py", "--agent", "eng-2"], root=root)
    assert acquire.code == 4 and "held by eng-1 for task t1 (waiting to land" in acquire.stderr
    listed = cli(["lease", "list", "--json"], root=root).json()["leases"]
    assert [(x["lease_id"], x["agent"], x["expires_at"], x["landing"]) for x in listed] == [
        ("task:t1", "eng-1", deadline, True)]
    agents = {row["agent"]: row["paths"] for row in cli(["agents", "--json"], root=root).json()["agents"]}
    assert agents["eng-1"] == ["src/auth/**"]
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "feat", "-m", "merge")
    assert cli(["queue", "land-check"], root=root).stdout.startswith("t1: landed")
    assert cli(["lease", "list", "--json"], root=root).json()["leases"] == []
    assert cli(["queue", "claim", "--agent", "eng-2", "--id", "t2", "-q"], root=root).stdout == "t2\n"
