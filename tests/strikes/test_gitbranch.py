"""Branch detection from .git without running git (loki/strikes/gitbranch.py), checked against real repositories."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from loki.regularfile import NotRegularFile, read_regular
from loki.strikes.gitbranch import NO_GIT, current_branch, file_name, find_git_dir
from tests import forkstart

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
                               "HOME": str(repo), "PATH": "/usr/bin:/bin:/usr/local/bin"})
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "README").write_text("hi\n")
    git(path, "add", "README")
    git(path, "commit", "-q", "-m", "first")
    return path


@needs_git
def test_a_normal_branch_from_the_top_and_from_a_subdirectory(repo: Path) -> None:
    assert current_branch(str(repo)) == "main"
    (repo / "src" / "deep").mkdir(parents=True)
    assert current_branch(str(repo / "src" / "deep")) == "main"
    git(repo, "checkout", "-q", "-b", "feature/login")
    assert current_branch(str(repo)) == "feature/login" == git(repo, "rev-parse", "--abbrev-ref", "HEAD")


@needs_git
def test_a_detached_head_is_named_after_its_commit(repo: Path) -> None:
    sha = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "--detach")
    assert current_branch(str(repo)) == f"detached-{sha[:12]}"


@needs_git
def test_a_worktree_has_its_own_branch(repo: Path, tmp_path: Path) -> None:
    worktree = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "hotfix", str(worktree))
    assert (worktree / ".git").is_file()  # "gitdir: <repo>/.git/worktrees/wt"
    assert current_branch(str(worktree)) == "hotfix"
    assert current_branch(str(repo)) == "main"
    assert find_git_dir(str(worktree)) == str(repo / ".git" / "worktrees" / "wt")


def test_no_repository_is_no_git(tmp_path: Path) -> None:
    assert current_branch(str(tmp_path)) == NO_GIT


def test_a_relative_gitdir_file_and_an_unborn_branch(tmp_path: Path) -> None:
    real = tmp_path / "store" / "modules" / "lib"
    real.mkdir(parents=True)
    (real / "HEAD").write_text("ref: refs/heads/trunk\n")
    checkout = tmp_path / "lib"
    checkout.mkdir()
    (checkout / ".git").write_text("gitdir: ../store/modules/lib\n")
    assert current_branch(str(checkout)) == "trunk"  # no commit is needed to know the branch


def test_a_broken_head_is_no_git(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("garbage\n")
    assert current_branch(str(tmp_path)) == NO_GIT


def test_branch_file_names_are_safe_and_distinct() -> None:
    assert file_name("main") == "main"
    assert file_name("feature/login") == "feature%2Flogin"
    assert file_name("feature%2Flogin") == "feature%252Flogin"  # never collides with an encoded name
    assert file_name(".hidden") == "%2Ehidden"
    assert file_name("../../etc") == "%2E.%2F..%2Fetc"
    assert file_name("naïve") == "na%C3%AFve"
    long = "x" * 300
    assert len(file_name(long)) <= 120 and file_name(long) != file_name(long + "y")
    for name in ("main", "feature/login", "../../etc", ".hidden", "a b", long):
        encoded = file_name(name)
        assert "/" not in encoded and not encoded.startswith(".") and encoded != ".."


# A FIFO where git keeps HEAD (or a worktree's .git file): a plain open() would block until a writer
# comes. Each check runs in a subprocess with a timeout, so a hang fails the test instead of the suite.
FIFO_PAYLOADS = {
    "post-tool-use-failure": {"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "make"},
                              "error": "Exit code 2\nmake: *** No rule to make target"},
    "pre-tool-use": {"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "make"}},
    "session-start": {"session_id": "s", "source": "startup"},
    "stop": {"session_id": "s", "stop_hook_active": False},
}


def _run(args: list[str], cwd: Path, stdin: bytes = b"") -> forkstart.Done:
    """``python -m loki ARGS`` in a real process (forked warm: tests/forkstart.py)."""
    return forkstart.run(args, cwd=cwd, input=stdin, timeout=20, env={**os.environ, "LOKI_NOW": "2026-01-25T10:00:00Z"})


@pytest.mark.parametrize("where", ["HEAD", "gitfile"])
def test_a_fifo_is_never_opened_as_a_git_file(tmp_path: Path, where: str) -> None:
    if where == "HEAD":
        (tmp_path / ".git").mkdir()
        os.mkfifo(tmp_path / ".git" / "HEAD")
    else:
        os.mkfifo(tmp_path / ".git")
    assert _run(["init"], tmp_path).returncode == 0
    for event, data in FIFO_PAYLOADS.items():
        done = _run(["hook", event], tmp_path, json.dumps({**data, "cwd": str(tmp_path)}).encode())
        assert done.returncode == 0, (event, done.stderr)
    listed = _run(["errors", "list", "--json"], tmp_path)
    assert listed.returncode == 0 and json.loads(listed.stdout)["branch"] == NO_GIT
    assert current_branch(str(tmp_path)) == NO_GIT


def test_read_regular_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(NotRegularFile, match="FIFO"):
        read_regular(str(tmp_path / "pipe"), 100)
    with pytest.raises(NotRegularFile, match="directory"):
        read_regular(str(tmp_path), 100)
    (tmp_path / "f").write_bytes(b"x" * 50)
    assert read_regular(str(tmp_path / "f"), 10) == b"x" * 10
