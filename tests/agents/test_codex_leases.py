"""Path leases with the real Codex CLI 0.169.0 (docs/leases.md, "Codex CLI"): its PreToolUse hook reports an
``apply_patch`` call with the whole patch, so loki decides on the files the patch names. An edit of a file
another agent's claim holds is denied and the model is told who holds it; the holder's edit goes through;
after the holder completes its task, anyone's does. A patch sent through the shell (``apply_patch <<'EOF'``)
is decided the same way. The agent is ``LOKI_AGENT``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loki.queue.queue import Queue
from loki.storage.store import Store
from tests.agents.codexcli import PATCH_MODEL, codex_bin, run_codex
from tests.agents.responsesserver import apply_patch, call_outputs, run, say
from tests.helpers import tree_problems

pytestmark = pytest.mark.slow

ADD = "*** Begin Patch\n*** Add File: {name}\n+x = 1\n*** End Patch\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    codex_bin()  # installs once (or skips with the reason)
    top = tmp_path / "shop"
    top.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(top)], check=True, timeout=60)
    for args in (["init"], ["hooks", "install", "--agent", "codex"]):
        subprocess.run([sys.executable, "-m", "loki", *args], cwd=top, check=True, capture_output=True, timeout=60)
    return top


def edit(project: Path, home: Path, name: str, agent: str, *, shell: bool = False) -> str:
    """One Codex session whose model adds ``name`` by a patch; what the model got back for the call."""
    patch = ADD.format(name=name)
    call = run(f"apply_patch <<'EOF'\n{patch}EOF\n") if shell else apply_patch(patch)
    done = run_codex(project, home, [call, say("Done.")], env={"LOKI_AGENT": agent}, model=PATCH_MODEL)
    assert done.code == 0, done.stderr
    assert len(done.requests) == 2, done.stderr
    return call_outputs(done.requests[1])[-1]


def test_codex_cli_patches_respect_the_path_leases(project: Path, tmp_path: Path) -> None:
    home = tmp_path / "home" / ".codex"
    queue = Queue(Store(project / ".loki"))
    queue.add("auth rewrite", task_id="t1", paths=["src/auth/**"])
    claim = queue.claim("alice", task_id="t1")

    denied = edit(project, home, "src/auth/login.py", "bob")
    assert denied.startswith("Command blocked by PreToolUse hook: loki: src/auth/login.py is leased: src/auth/** is "
                             "held by alice for task t1 (its claim, until"), denied
    assert "you are bob" in denied
    assert not (project / "src" / "auth" / "login.py").exists()

    through_shell = edit(project, home, "src/auth/token.py", "bob", shell=True)
    assert "src/auth/token.py is leased: src/auth/** is held by alice for task t1" in through_shell, through_shell
    assert not (project / "src" / "auth" / "token.py").exists()

    edit(project, home, "src/auth/login.py", "alice")
    assert (project / "src" / "auth" / "login.py").read_text() == "x = 1\n"

    queue.complete("t1", "alice", token=claim["claim_token"])
    edit(project, home, "src/auth/session.py", "bob")
    assert (project / "src" / "auth" / "session.py").read_text() == "x = 1\n"
    assert tree_problems(project / ".loki") == []
