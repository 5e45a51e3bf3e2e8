"""Path leases with the real Gemini CLI (docs/leases.md): its BeforeTool hook denies a write_file of a file
another agent's claim holds, naming the holder; the holder's goes through; after the holder completes its
task, anyone's does. The agent is ``LOKI_AGENT``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loki.queue.queue import Queue
from loki.storage.store import Store
from tests.agents.geminicli import gemini_bin, run_gemini
from tests.agents.geminiserver import last_tool_result, say, tool
from tests.helpers import tree_problems

pytestmark = pytest.mark.slow


@pytest.fixture
def project(tmp_path: Path) -> Path:
    gemini_bin()  # installs once (or skips with the reason)
    top = tmp_path / "shop"
    top.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(top)], check=True, timeout=60)
    for args in (["init"], ["hooks", "install", "--agent", "gemini"]):
        subprocess.run([sys.executable, "-m", "loki", *args], cwd=top, check=True, capture_output=True, timeout=60)
    return top


def write(project: Path, home: Path, name: str, agent: str) -> str:
    run = run_gemini(project, home, [tool("write_file", file_path=str(project / name), content="x = 1\n"),
                                     say("Done.")], env={"LOKI_AGENT": agent})
    assert run.code == 0, run.stderr
    return last_tool_result(run.requests[1])


def test_gemini_cli_writes_respect_the_path_leases(project: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    queue = Queue(Store(project / ".loki"))
    queue.add("auth rewrite", task_id="t1", paths=["src/auth/**"])
    claim = queue.claim("alice", task_id="t1")

    denied = write(project, home, "src/auth/login.py", "bob")
    assert denied.startswith("Tool execution blocked: loki: src/auth/login.py is leased: src/auth/** is held by "
                             "alice for task t1 (its claim, until"), denied
    assert not (project / "src" / "auth" / "login.py").exists()

    write(project, home, "src/auth/login.py", "alice")
    assert (project / "src" / "auth" / "login.py").read_text() == "x = 1\n"

    queue.complete("t1", "alice", token=claim["claim_token"])
    write(project, home, "src/auth/session.py", "bob")
    assert (project / "src" / "auth" / "session.py").read_text() == "x = 1\n"
    assert tree_problems(project / ".loki") == []
