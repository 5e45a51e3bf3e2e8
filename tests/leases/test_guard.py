"""The git pre-commit guard (loki/leases/guard.py): ``loki hooks install --git`` and ``loki lease guard``, with
a real git repository and real commits."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loki.leases import guard
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


def test_dry_run_shows_the_hook_and_writes_nothing(tmp_path: Path) -> None:
    top = tmp_path / "shop"
    top.mkdir()
    assert git(top, "init", "-q", "-b", "main").returncode == 0
    init_tree(str(top / ".loki"))
    hook = top / ".git" / "hooks" / "pre-commit"
    shown = cli(["hooks", "install", "--git", "--dry-run", "--command", LOKI], root=top / ".loki")
    assert shown.code == 0, shown.stderr
    assert shown.stdout.splitlines() == [f"would install {hook}", "#!/bin/sh", guard.MARK,
                                         f"exec {LOKI} lease guard --staged", "(dry run: nothing written)"]
    assert not hook.exists()
    as_json = cli(["hooks", "install", "--git", "--dry-run", "--json", "--command", LOKI], root=top / ".loki")
    assert json.loads(as_json.stdout) == {"path": str(hook), "action": "would install", "dry_run": True}
    assert not hook.exists()
    path, done = guard.install(str(top), LOKI, dry_run=True)  # the library's
    assert (path, done) == (str(hook), "would install") and not hook.exists()


# (--mcp --via http is the HTTP form of the MCP entry: tests/cli/test_cli_hooks_mcp_http.py)
@pytest.mark.parametrize("args", [["--mcp", "--git"], ["--git", "--via", "http"], ["--git", "--via", "command"]])
def test_two_install_targets_are_a_usage_error_and_nothing_is_written(repo: Path, args: list[str]) -> None:
    hook = repo / ".git" / "hooks" / "pre-commit"
    before = hook.read_text()
    result = cli(["hooks", "install", *args, "--command", LOKI], root=repo / ".loki")
    assert result.code == 2 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and "cannot be combined" in result.stderr, result.stderr
    assert hook.read_text() == before and not (repo / ".claude").exists() and not (repo / ".mcp.json").exists()


def test_the_default_command_works_from_git_where_no_agent_variable_is_set(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings' default may be project-relative ("$CLAUDE_PROJECT_DIR"/.venv/bin/loki): git sets no such
    variable, so the hook's default is ``loki`` on PATH or an absolute path, and a real commit runs it."""
    from loki.hooks import agentsettings

    here = str(Path(sys.executable).parent.parent.parent)  # a project holding this installation (its .venv)
    if (Path(sys.executable).parent / "loki").exists() and shutil.which("loki") is None:
        assert agentsettings.default_command(here).startswith('"$CLAUDE_PROJECT_DIR"')  # what --git used
    command = guard.default_command()
    assert "$" not in command
    assert command == "loki" or os.path.isabs(shlex.split(command)[0])
    # as when this installation is inside the project (its .venv): the settings' form, which git cannot run
    monkeypatch.setattr(agentsettings, "default_command", lambda *_: '"$CLAUDE_PROJECT_DIR"/.venv/bin/loki')
    top = tmp_path / "shop"
    top.mkdir()
    assert git(top, "init", "-q", "-b", "main").returncode == 0
    init_tree(str(top / ".loki"))
    result = cli(["hooks", "install", "--git"], root=top / ".loki")  # no --command: the default
    assert result.code == 0, result.stderr
    assert f"exec {command} lease guard --staged" in (top / ".git" / "hooks" / "pre-commit").read_text()
    PathLeases(Store(top / ".loki"), root=str(top)).acquire(["src/**"], agent="alice")
    (top / "src").mkdir()
    (top / "src" / "a.py").write_text("x = 1\n")
    (top / "README").write_text("shop\n")
    git(top, "add", "README")
    free = git(top, "commit", "-qm", "free", agent="bob")
    assert free.returncode == 0, free.stderr  # the hook ran (exit 127 would refuse it)
    git(top, "add", "src")
    held = git(top, "commit", "-qm", "held", agent="bob")
    assert held.returncode == 1 and "src/a.py is leased" in held.stderr
