"""The git pre-commit guard (loki/leases/guard.py): ``loki hooks install --git`` and ``loki lease guard``, with
a real git repository and real commits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loki.leases.leases import PathLeases
from loki.storage.store import Store
from loki.storage.tree import init_tree
from tests.helpers import cli

LOKI = f"{sys.executable} -m loki"


def git(repo: Path, *args: str, agent: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOKI_AGENT": agent or "", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env=env, timeout=60)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    top = tmp_path / "shop"
    top.mkdir()
    assert git(top, "init", "-q", "-b", "main").returncode == 0
    init_tree(str(top / ".loki"))
    result = cli(["hooks", "install", "--git", "--command", LOKI], root=top / ".loki")
    assert result.code == 0, result.stderr
    assert result.stdout == f"installed {top / '.git' / 'hooks' / 'pre-commit'}\n"
    PathLeases(Store(top / ".loki"), root=str(top)).acquire(["src/auth/**"], agent="alice")
    (top / "src" / "auth").mkdir(parents=True)
    (top / "src" / "auth" / "login.py").write_text("x = 1\n")
    (top / "README").write_text("shop\n")
    return top


def test_a_commit_of_a_file_another_agent_holds_is_refused(repo: Path) -> None:
    git(repo, "add", "src", "README")
    refused = git(repo, "commit", "-qm", "wip", agent="bob")
    assert refused.returncode == 1
    said = "loki: src/auth/login.py is leased: src/auth/** is held by alice (exclusive lease L1, until"
    assert said in refused.stderr
    assert "1 of 2 path(s) held by another agent" in refused.stderr
    assert git(repo, "log", "--oneline").returncode != 0  # no commit yet
    assert git(repo, "commit", "-qm", "wip", agent="alice").returncode == 0


def test_loki_state_and_free_files_pass(repo: Path) -> None:
    git(repo, "add", "README", ".loki")
    assert git(repo, "commit", "-qm", "state", agent="bob").returncode == 0


def test_the_install_is_idempotent_and_never_overwrites_a_foreign_hook(repo: Path, tmp_path: Path) -> None:
    hook = repo / ".git" / "hooks" / "pre-commit"
    again = cli(["hooks", "install", "--git", "--command", LOKI], root=repo / ".loki")
    assert again.stdout == f"unchanged {hook}\n"
    hook.write_text("#!/bin/sh\nmake lint\n")
    refused = cli(["hooks", "install", "--git", "--command", LOKI], root=repo / ".loki")
    assert refused.code == 1 and "exists and is not loki's" in refused.stderr
    assert hook.read_text() == "#!/bin/sh\nmake lint\n"


def test_guard_checks_named_paths_and_says_who(repo: Path) -> None:
    root = repo / ".loki"
    held = cli(["lease", "guard", "src/auth/login.py", "docs/a.md", "--agent", "bob", "--json"], root=root)
    assert held.code == 1
    assert [(h["path"], h["agent"]) for h in held.json()["held"]] == [("src/auth/login.py", "alice")]
    assert cli(["lease", "guard", "src/auth/login.py", "--agent", "alice"], root=root).code == 0
    assert cli(["lease", "guard"], root=root).code == 2
