"""``loki hook --agent gemini <event>`` as Gemini CLI runs it: a real process, Gemini's payloads on stdin.

Payloads come from tests/hook_payloads/gemini/ (recorded from Gemini CLI 0.61.0, ids and paths made
up) with ``cwd`` pointed at a temporary checkout of branch ``main`` with ``.loki/`` at its top. The
decisions are the ones tests/hooks/test_hooks.py checks for Claude Code; these tests check the translation:
Gemini's events and payloads in, Gemini's answers out, and the same strikes, memory and briefing.
The real Gemini CLI runs them end to end in tests/agents/test_gemini_cli.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loki.hooks import gemini
from loki.storage.store import Store
from loki.strikes.strikes import Strikes
from tests import forkstart
from tests.helpers import NOW, Result, snapshot_bytes
from tests.hooks.test_hooks import FORBIDDEN, PROBE
from tests.hooks.test_hooks import hook as claude_hook
from tests.hooks.test_hooks import payload as claude_payload

PAYLOADS = Path(__file__).resolve().parents[1] / "hook_payloads" / "gemini"
CARGO = {"command": "cargo build --release"}


def payload(name: str, cwd: Path, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PAYLOADS / f"{name}.json").read_text())
    data["cwd"] = str(cwd)
    data.update(changes)
    return data


def hook(event: str, data: dict[str, Any] | bytes, *, cwd: Path, env: dict[str, str] | None = None,
         agent_args: tuple[str, ...] = ("--agent", "gemini")) -> Result:
    """``loki hook --agent gemini EVENT`` in a real process (forked warm: tests/forkstart.py), stdin = the
    payload, in directory ``cwd``."""
    args = ["hook", *agent_args, event]
    stdin = data if isinstance(data, bytes) else json.dumps(data).encode()
    done = forkstart.run(args, input=stdin, cwd=cwd, timeout=60, env={**os.environ, "LOKI_NOW": NOW, **(env or {})})
    return Result(done.returncode, done.stdout.decode(), done.stderr.decode())


def shell_failed(project: Path, command: str = "cargo build --release", output: str = "", code: int = 127,
                 **changes: Any) -> Result:
    data = payload("after_tool_shell_failed", project, **changes)
    data["tool_input"] = {**data["tool_input"], "command": command}
    if output:
        data["tool_response"] = {"llmContent": f"Output: {output}\nExit Code: {code}\nProcess Group PGID: 7",
                                 "returnDisplay": output}
    return hook("after-tool", data, cwd=project)


def shell_ok(project: Path, command: str, output: str = "ok") -> Result:
    data = payload("after_tool_shell_ok", project)
    data["tool_input"] = {"command": command}
    data["tool_response"] = {"llmContent": f"<untrusted_context>\nOutput: {output}\nProcess Group PGID: 8\n"
                                           "</untrusted_context>", "returnDisplay": output}
    return hook("after-tool", data, cwd=project)


def after_tool_context(result: Result) -> str:
    assert result.code == 0, result.stderr
    answer = result.json()
    assert answer == {"hookSpecificOutput": {"hookEventName": "AfterTool",
                                             "additionalContext": answer["hookSpecificOutput"]["additionalContext"]}}
    return str(answer["hookSpecificOutput"]["additionalContext"])


def strikes_of(project: Path) -> Strikes:
    return Strikes(Store(project / ".loki"), branch="main")


# -- the strike protocol through Gemini's events -------------------------------------------------


def test_three_failures_of_the_shell_tool_then_before_tool_denies(project: Path) -> None:
    first = shell_failed(project)
    assert (first.code, first.stdout, first.stderr) == (0, "", "")  # strike 1: recorded, nothing said
    second = after_tool_context(shell_failed(project))
    assert "strike 2 of 3" in second and "MUST use a different approach" in second
    assert "cargo: command not found" in second and "Check the command name" in second
    third = after_tool_context(shell_failed(project))
    assert "STOP" in third and len(os.listdir(project / ".loki" / "escalations")) == 1

    denied = hook("before-tool", payload("before_tool_shell", project), cwd=project)
    assert denied.code == 0, denied.stderr
    answer = denied.json()
    assert set(answer) == {"decision", "reason"} and answer["decision"] == "deny"
    assert "loki 3-strike protocol: Bash `cargo build --release` has failed 3 times" in answer["reason"]
    other = payload("before_tool_shell", project, tool_input={"command": "cargo --version"})
    assert hook("before-tool", other, cwd=project).stdout == ""  # another call goes ahead


def test_the_shell_tool_is_bash_so_claude_and_gemini_share_a_streak(project: Path) -> None:
    claude_hook("post-tool-use-failure", claude_payload("post_tool_use_failure_bash", project), cwd=project)
    second = after_tool_context(shell_failed(project))
    assert "strike 2 of 3" in second  # Claude Code's failure counted: the same command, the same call
    entry = strikes_of(project).lookup("Bash", CARGO)
    assert entry is not None and entry["strike_count"] == 2
    assert entry["sessions"] == ["9f0c6c1e-7a57-4b8f-9d0e-3a2b1c4d5e6f", "c7b1c429-537e-4d54-b18c-93664adfe496"]
    claude_hook("post-tool-use-failure", claude_payload("post_tool_use_failure_bash", project), cwd=project)
    pre = claude_hook("pre-tool-use", claude_payload("pre_tool_use_bash", project), cwd=project)
    assert pre.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert hook("before-tool", payload("before_tool_shell", project), cwd=project).json()["decision"] == "deny"


def test_a_success_of_the_shell_tool_clears_its_strikes(project: Path) -> None:
    for _ in range(2):
        shell_failed(project)
    ok = hook("after-tool", payload("after_tool_shell_ok", project), cwd=project)
    assert (ok.code, ok.stdout) == (0, "")
    assert strikes_of(project).lookup("Bash", CARGO) is None
    assert hook("before-tool", payload("before_tool_shell", project), cwd=project).stdout == ""


def test_a_hidden_failure_in_a_successful_shell_call_counts(project: Path) -> None:
    traceback = ("Traceback (most recent call last):\n  File \"app.py\", line 3, in <module>\n    main()\n"
                 "ZeroDivisionError: division by zero")
    for _ in range(2):
        result = shell_ok(project, "python app.py || true", traceback)
    assert "strike 2 of 3" in after_tool_context(result)
    assert shell_ok(project, "cat app.log", traceback).stdout == ""  # a viewer's output is content


def test_grep_finding_nothing_is_no_failure(project: Path) -> None:
    for _ in range(3):
        result = shell_failed(project, "grep -rn TODO src", output="(empty)", code=1)
        assert (result.code, result.stdout) == (0, "")
    assert strikes_of(project).active() == []


def test_a_failed_built_in_tool_gets_its_guidance_in_a_deny(project: Path) -> None:
    assert hook("after-tool", payload("after_tool_read_file_failed", project), cwd=project).stdout == ""
    result = hook("after-tool", payload("after_tool_read_file_failed", project), cwd=project)
    assert result.code == 0, result.stderr
    answer = result.json()
    assert set(answer) == {"decision", "reason"} and answer["decision"] == "deny"
    # Gemini sends the model only error.message for a failed tool: the reason keeps it first, then the guidance.
    assert answer["reason"].startswith("File not found: /home/dev/shop/src/nope.rs\n\n")
    assert "strike 2 of 3" in answer["reason"] and "MUST use a different approach" in answer["reason"]
    assert strikes_of(project).lookup("read_file", {"file_path": "/home/dev/shop/src/nope.rs"}) is not None


def test_a_built_in_tools_content_is_never_scanned(project: Path) -> None:
    for _ in range(3):
        result = hook("after-tool", payload("after_tool_read_file", project), cwd=project)
        assert (result.code, result.stdout, result.stderr) == (0, "", "")
    assert strikes_of(project).active() == []


def test_the_stop_decision_ask_is_geminis_ask(project: Path) -> None:
    (project / ".loki" / "config" / "loki.json").write_text(json.dumps({"strikes": {"stop_decision": "ask"}}))
    for _ in range(3):
        shell_failed(project)
    answer = hook("before-tool", payload("before_tool_shell", project), cwd=project).json()
    assert answer["decision"] == "ask" and "3-strike protocol" in answer["systemMessage"]


def test_context_only_answers_are_not_given_before_a_tool(project: Path) -> None:
    (project / ".loki" / "config" / "loki.json").write_text(json.dumps({"strikes": {"stop_decision": "context"}}))
    for _ in range(3):
        shell_failed(project)
    # Gemini CLI drops additionalContext at BeforeTool: nothing is said there, the call goes ahead ...
    assert hook("before-tool", payload("before_tool_shell", project), cwd=project).stdout == ""
    # ... and the failure's answer says it instead.
    assert "STOP" in after_tool_context(shell_failed(project))


# -- error memory: the hint comes with the failure ------------------------------------------------


def test_the_memory_hint_comes_with_the_next_failure(project: Path) -> None:
    for _ in range(2):
        shell_failed(project, "cargo build", "/usr/bin/bash: line 1: cargo: command not found")
    assert shell_ok(project, "cargo build --offline", "Finished").stdout == ""  # the fix, recorded
    first = after_tool_context(shell_failed(project, "cargo build --release",
                                            "/usr/bin/bash: line 1: cargo: command not found"))
    assert first.startswith("loki memory: last time `cargo build` failed here with")  # strike 1 says only that
    assert "it was fixed by `cargo build --offline`" in first
    assert shell_ok(project, "cargo build --release", "Finished").stdout == ""  # no hint on a success
    assert hook("before-tool", payload("before_tool_shell", project), cwd=project).stdout == ""  # nor before


# -- session start and after agent ---------------------------------------------------------------


def test_session_start_briefs_the_agent(project: Path) -> None:
    with (project / ".loki" / "CONTINUITY.md").open("a") as f:
        f.write("\n## 2026-01-25\n- cargo is missing in the container; use the rust image\n")
    for _ in range(3):
        shell_failed(project)
    result = hook("session-start", payload("session_start", project), cwd=project)
    assert result.code == 0, result.stderr
    answer = result.json()["hookSpecificOutput"]
    assert answer["hookEventName"] == "SessionStart"
    assert "loki briefing" in answer["additionalContext"] and "STOPPED" in answer["additionalContext"]
    assert "cargo is missing in the container" in answer["additionalContext"]


def test_after_agent_is_advisory_only(project: Path) -> None:
    assert hook("after-agent", payload("after_agent", project), cwd=project).stdout == ""
    for _ in range(3):
        shell_failed(project)
    answer = hook("after-agent", payload("after_agent", project), cwd=project).json()
    assert set(answer) == {"systemMessage"}  # never a decision: that would make Gemini retry the turn
    assert "1 call stopped by the 3-strike protocol on branch main" in answer["systemMessage"]


# -- never blocking by its own failure -------------------------------------------------------------


@pytest.mark.parametrize(("stdin", "message"), [
    (b"", "stdin is empty"),
    (b"{\"hook_event_name\": \"BeforeTool\"", "ends early"),
    (b"{\"hook_event_name\": \"AfterTool\", \"cwd\": \"/\"}", "no tool_name"),
])
def test_bad_stdin_is_exit_1_which_gemini_treats_as_a_warning(project: Path, stdin: bytes, message: str) -> None:
    before = snapshot_bytes(project)
    result = hook("after-tool", stdin, cwd=project)
    assert result.code == 1 and result.stdout == "" and message in result.stderr
    assert result.stderr.count("\n") == 1
    assert snapshot_bytes(project) == before


def test_a_payload_of_the_other_agent_or_event_is_refused(project: Path) -> None:
    claude = hook("after-tool", claude_payload("post_tool_use_failure_bash", project), cwd=project)
    assert claude.code == 1
    assert "stdin is a PostToolUseFailure payload, but this hook handles AfterTool" in claude.stderr
    wrong_event = hook("pre-tool-use", payload("before_tool_shell", project), cwd=project)
    assert wrong_event.code == 1 and "unknown hook event 'pre-tool-use' for agent gemini" in wrong_event.stderr
    no_agent = hook("before-tool", payload("before_tool_shell", project), cwd=project, agent_args=("--agent=codex9",))
    assert no_agent.code == 1 and "unknown agent 'codex9'" in no_agent.stderr


def test_a_broken_tree_is_exit_1(project: Path) -> None:
    shell_failed(project)
    (project / ".loki" / "state" / "errors" / "main.json").write_text("{not json")
    for event, name in (("before-tool", "before_tool_shell"), ("after-tool", "after_tool_shell_failed")):
        result = hook(event, payload(name, project), cwd=project)
        assert result.code == 1 and "state/errors/main.json" in result.stderr and result.stdout == ""


def test_the_agent_option_may_follow_the_event(project: Path) -> None:
    result = hook("before-tool", payload("before_tool_shell", project), cwd=project, agent_args=())
    assert result.code == 1 and "unknown hook event 'before-tool' for agent claude" in result.stderr
    args = [sys.executable, "-m", "loki", "hook", "session-start", "--agent", "gemini"]
    done = subprocess.run(args, input=json.dumps(payload("session_start", project)).encode(), capture_output=True,
                          cwd=project, timeout=60)
    assert done.returncode == 0 and done.stderr == b""


def test_before_tool_imports_only_what_it_needs(project: Path, tmp_path: Path) -> None:
    for _ in range(3):
        shell_failed(project)
    out = tmp_path / "modules.json"
    probe = PROBE.replace('["loki", "hook", "pre-tool-use"]', '["loki", "hook", "--agent", "gemini", "before-tool"]')
    stdin = json.dumps(payload("before_tool_shell", project)).encode()
    done = subprocess.run([sys.executable, "-c", probe], input=stdin, capture_output=True, cwd=project, timeout=60,
                          env={**os.environ, "MODULES_OUT": str(out)})
    result = json.loads(out.read_text())
    assert result["code"] == 0 and json.loads(done.stdout)["decision"] == "deny"
    assert [m for m in result["modules"] if m.split(".")[0] in FORBIDDEN or m in FORBIDDEN] == []


# -- reading the shell tool's result -------------------------------------------------------------


@pytest.mark.parametrize(("response", "expected"), [
    ({"llmContent": "<untrusted_context>\nOutput: hi\nerr\nProcess Group PGID: 1\n</untrusted_context>",
      "returnDisplay": "hi\nerr"}, ("hi\nerr", 0, False, False)),
    ({"llmContent": "Output: (empty)\nExit Code: 2\nProcess Group PGID: 9",
      "returnDisplay": "Command exited with code: 2"}, ("", 2, True, False)),
    # An output that itself ends like the trailer: returnDisplay says where the output ends.
    ({"llmContent": "Output: fake\nExit Code: 1\nProcess Group PGID: 3", "returnDisplay": "fake\nExit Code: 1"},
     ("fake\nExit Code: 1", 0, False, False)),
    ({"llmContent": "Output: x\nSignal: 9\nBackground PIDs: 12, 13\nProcess Group PGID: 3", "returnDisplay": []},
     ("x", 137, True, False)),
    ({"llmContent": "Output: x\nSignal: SIGKILL\nProcess Group PGID: 3"}, ("x\nSignal: SIGKILL", None, True, False)),
    ({"llmContent": "Command was cancelled by user before it could complete. There was no output before it was "
                    "cancelled."}, (None, None, False, True)),
    ({"llmContent": "Command was automatically cancelled because it exceeded the timeout of 5.0 minutes without "
                    "output. There was no output before it was cancelled."}, (None, None, True, False)),
    ({"llmContent": "Command moved to background (PID: 42). Output hidden. Press Ctrl+B to view."},
     (None, None, False, False)),
    ({"llmContent": [{"text": "Output: a"}, {"text": "Exit Code: 3"}]}, ("a", 3, True, False)),
    (None, ("", None, False, False)),
])
def test_shell_result(response: Any, expected: tuple[str | None, int | None, bool, bool]) -> None:
    result = gemini.shell_result(response)
    output, exit_code, failed, interrupted = expected
    assert (result.exit_code, result.failed, result.interrupted) == (exit_code, failed, interrupted), result
    if output is not None:
        assert result.output == output
