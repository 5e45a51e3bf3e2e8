"""``loki hook --agent codex <event>`` as Codex CLI runs it: a real process, Codex's payloads on stdin.

Codex CLI speaks Claude Code's hook format (tests/hooks/test_hooks.py has the decisions); these tests check
what differs: a failed command arrives in PostToolUse with its output alone (no exit code, no
PostToolUseFailure), and Codex refuses ``permissionDecision: "ask"``. Payloads: tests/hook_payloads/
codex/ (recorded from Codex CLI 0.169.0). The real CLI runs them in tests/agents/test_codex_cli.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from loki.storage.store import Store
from loki.strikes.strikes import Strikes
from tests import forkstart
from tests.helpers import NOW, Result
from tests.hooks.test_hooks import hook as claude_hook
from tests.hooks.test_hooks import payload as claude_payload

PAYLOADS = Path(__file__).resolve().parents[1] / "hook_payloads" / "codex"
CARGO = {"command": "cargo build --release"}


def payload(name: str, cwd: Path, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PAYLOADS / f"{name}.json").read_text())
    data["cwd"] = str(cwd)
    data.update(changes)
    return data


def hook(event: str, data: dict[str, Any], *, cwd: Path) -> Result:
    """``loki hook --agent codex EVENT`` in a real process (forked warm: tests/forkstart.py)."""
    args = ["hook", "--agent", "codex", event]
    done = forkstart.run(args, input=json.dumps(data).encode(), cwd=cwd, timeout=60,
                         env={**os.environ, "LOKI_NOW": NOW})
    return Result(done.returncode, done.stdout.decode(), done.stderr.decode())


def post(project: Path, command: str, output: str) -> Result:
    return hook("post-tool-use", payload("post_tool_use_bash_failed", project, tool_input={"command": command},
                                         tool_response=output), cwd=project)


def context_of(result: Result, event: str) -> str:
    assert result.code == 0, result.stderr
    answer = result.json()["hookSpecificOutput"]
    assert answer["hookEventName"] == event
    return str(answer["additionalContext"])


def strikes_of(project: Path) -> Strikes:
    return Strikes(Store(project / ".loki"), branch="main")


def test_a_failure_read_from_the_output_counts_and_the_third_is_denied(project: Path) -> None:
    failed = payload("post_tool_use_bash_failed", project)
    first = hook("post-tool-use", failed, cwd=project)
    assert (first.code, first.stdout, first.stderr) == (0, "", "")
    second = context_of(hook("post-tool-use", failed, cwd=project), "PostToolUse")
    assert "strike 2 of 3" in second and "cargo: command not found" in second
    # Strike 2 is said once per session (docs/hooks.md): the PostToolUse answer above said it, so the
    # next PreToolUse of the same call stays quiet instead of repeating it.
    quiet = hook("pre-tool-use", payload("pre_tool_use_bash", project), cwd=project)
    assert (quiet.code, quiet.stdout) == (0, "")
    assert "STOP" in context_of(hook("post-tool-use", failed, cwd=project), "PostToolUse")
    denied = hook("pre-tool-use", payload("pre_tool_use_bash", project), cwd=project).json()["hookSpecificOutput"]
    assert denied["permissionDecision"] == "deny" and "3-strike protocol" in denied["permissionDecisionReason"]


def test_codex_and_claude_share_a_streak(project: Path) -> None:
    claude_hook("post-tool-use-failure", claude_payload("post_tool_use_failure_bash", project), cwd=project)
    hook("post-tool-use", payload("post_tool_use_bash_failed", project), cwd=project)
    entry = strikes_of(project).lookup("Bash", CARGO)
    assert entry is not None and entry["strike_count"] == 2


def test_a_success_clears_and_content_never_counts(project: Path) -> None:
    for _ in range(2):
        hook("post-tool-use", payload("post_tool_use_bash_failed", project), cwd=project)
    ok = hook("post-tool-use", payload("post_tool_use_bash_ok", project), cwd=project)
    assert (ok.code, ok.stdout) == (0, "")
    assert strikes_of(project).lookup("Bash", CARGO) is None
    traceback = "Traceback (most recent call last):\n  File \"app.py\", line 3\nZeroDivisionError: division by zero\n"
    for _ in range(3):
        assert post(project, "cat app.log", traceback).stdout == ""  # a viewer prints content
        assert post(project, "true", "").stdout == ""
    assert strikes_of(project).active() == []
    post(project, "python app.py", traceback)
    assert "strike 2 of 3" in context_of(post(project, "python app.py", traceback), "PostToolUse")


def test_the_memory_hint_comes_before_the_command(project: Path) -> None:
    missing = "/bin/bash: line 1: cargo: command not found\n"
    for _ in range(2):
        post(project, "cargo build", missing)
    hook("post-tool-use", payload("post_tool_use_bash_ok", project, tool_input={"command": "cargo build --offline"}),
         cwd=project)
    hint = context_of(hook("pre-tool-use", payload("pre_tool_use_bash", project), cwd=project), "PreToolUse")
    assert "it was fixed by `cargo build --offline`" in hint


def test_ask_becomes_deny_which_codex_supports(project: Path) -> None:
    (project / ".loki" / "config" / "loki.json").write_text(json.dumps({"strikes": {"stop_decision": "ask"}}))
    for _ in range(3):
        hook("post-tool-use", payload("post_tool_use_bash_failed", project), cwd=project)
    denied = hook("pre-tool-use", payload("pre_tool_use_bash", project), cwd=project).json()["hookSpecificOutput"]
    assert denied["permissionDecision"] == "deny"


@pytest.mark.parametrize(("event", "name"), [("session-start", "session_start"), ("stop", "stop")])
def test_session_start_and_stop_answer_as_for_claude_code(project: Path, event: str, name: str) -> None:
    for _ in range(3):
        hook("post-tool-use", payload("post_tool_use_bash_failed", project), cwd=project)
    answer = hook(event, payload(name, project), cwd=project).json()
    if event == "stop":
        assert set(answer) == {"systemMessage"} and "stopped by the 3-strike protocol" in answer["systemMessage"]
    else:
        assert "loki briefing" in answer["hookSpecificOutput"]["additionalContext"]


def test_a_broken_tree_is_exit_1(project: Path) -> None:
    hook("post-tool-use", payload("post_tool_use_bash_failed", project), cwd=project)
    (project / ".loki" / "state" / "errors" / "main.json").write_text("{not json")
    result = hook("pre-tool-use", payload("pre_tool_use_bash", project), cwd=project)
    assert result.code == 1 and "state/errors/main.json" in result.stderr and result.stdout == ""
