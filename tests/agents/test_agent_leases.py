"""Path leases enforced where the edit happens, with the real Claude Code (docs/leases.md): its PreToolUse
hook denies a Write of a file another agent's claim holds and tells the model who holds it; the holder's
Write goes through; after the holder completes its task, anyone's does. The agent's identity is
``LOKI_AGENT`` (what ``loki work`` sets for its command)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loki.queue.queue import Queue
from loki.storage.store import Store
from tests.agents.claude import claude_session, make_project
from tests.agents.modelserver import text, tool
from tests.helpers import tree_problems

pytestmark = [pytest.mark.slow, pytest.mark.agent]

# An unattended loop's mode: no permission prompts at all; the hook still decides (as root Claude Code takes
# this only in a sandbox, IS_SANDBOX=1, which a test directory is).
BYPASS = {"args": ["--permission-mode", "bypassPermissions"]}


def write(project: Path, name: str) -> list:  # type: ignore[type-arg]
    return [tool("Write", {"file_path": str(project / name), "content": "x = 1\n"}), text("Done.")]


def session(claude_code: Path, project: Path, home: Path, name: str, agent: str):  # type: ignore[no-untyped-def]
    return claude_session(claude_code, project, write(project, name), home=home, hook_events=False,
                          env={"IS_SANDBOX": "1", "LOKI_AGENT": agent}, **BYPASS)


def test_claude_code_edits_respect_the_path_leases(claude_code: Path, tmp_path: Path) -> None:
    project = make_project(tmp_path / "shop")
    home = tmp_path / "home"
    queue = Queue(Store(project / ".loki"))
    queue.add("auth rewrite", task_id="t1", paths=["src/auth/**"])
    claim = queue.claim("alice", task_id="t1")

    # Another agent: denied, and the model is told who holds the file, for which task, until when.
    run, model = session(claude_code, project, home, "src/auth/login.py", "bob")
    (denied,) = model.tool_results(1)
    assert denied["is_error"] is True
    said = json.dumps(denied)
    assert "src/auth/** is held by alice for task t1 (its claim, until" in said and "you are bob" in said
    assert not (project / "src" / "auth" / "login.py").exists()
    assert [d["tool_name"] for d in run.permission_denials] == ["Write"]

    # The holder: goes through.
    run, model = session(claude_code, project, home, "src/auth/login.py", "alice")
    assert (project / "src" / "auth" / "login.py").read_text() == "x = 1\n"
    assert run.permission_denials == []

    # After the holder completes its task: anyone's edit goes through.
    queue.complete("t1", "alice", token=claim["claim_token"])
    run, model = session(claude_code, project, home, "src/auth/session.py", "bob")
    assert (project / "src" / "auth" / "session.py").read_text() == "x = 1\n"
    assert run.permission_denials == []
    assert tree_problems(project / ".loki") == []
