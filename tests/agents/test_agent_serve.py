"""loki with the real Claude Code, its tool-call hooks over HTTP to `loki serve` (docs/serve.md).

The same scenarios as test_agent_claude.py's 3-strike test, with `loki hooks install --via http`: Claude
Code POSTs PreToolUse, PostToolUse and PostToolUseFailure to the tree's server, which answers with the
command hooks' own handlers. Then the server is killed in the middle of a session: what Claude Code does
then, and what loki says about it, is the documented safe behaviour (docs/serve.md, "When the server is
down").
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loki.resident import files
from tests.agents.claude import claude_session, loki_command, make_project
from tests.agents.modelserver import bash, text
from tests.helpers import tree_problems

pytestmark = [pytest.mark.slow, pytest.mark.agent]


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    path = make_project(tmp_path / "shop", hooks=False)
    loki_command(["hooks", "install", "--via", "http"], path)
    yield path
    run = files.read_run(str(path / ".loki"))
    if run is not None and isinstance(run.get("pid"), int):  # whichever server a test or a hook started
        with contextlib.suppress(ProcessLookupError):
            os.kill(run["pid"], signal.SIGTERM)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def token_env(project: Path) -> dict[str, str]:
    secret = files.token(str(project / ".loki"))
    assert secret is not None
    return {files.TOKEN_ENV: secret}


def loki_json(project: Path, *args: str) -> Any:
    return json.loads(loki_command([*args, "--json"], project).stdout)


def test_three_strikes_over_http_warn_then_deny(claude_code: Path, project: Path, home: Path) -> None:
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    assert settings["hooks"]["PreToolUse"][0]["hooks"][0]["type"] == "http"
    assert files.token(str(project / ".loki")) not in json.dumps(settings)  # the token never goes in the file
    loki_command(["serve", "--detach"], project)
    call = "echo attempt >> attempts.log; cargo-offline build --release"
    run, model = claude_session(claude_code, project, [bash(call), bash(call), bash(call), bash(call),
                                                       text("Stopping here.")],
                                home=home, env=token_env(project))

    assert "3-strike" not in model.new_input(1)
    assert "strike 2 of 3" in model.new_input(2) and "MUST use a different approach" in model.new_input(2)
    assert "has failed 3 times in a row" in model.new_input(3) and "STOP" in model.new_input(3)
    denied = model.tool_results(4)
    assert len(denied) == 1 and denied[0]["is_error"] is True
    assert "is stopped" in json.dumps(denied[0]) and "loki errors reset" in json.dumps(denied[0])
    assert (project / "attempts.log").read_text() == "attempt\n" * 3
    assert [(d["tool_name"], d["tool_input"]["command"]) for d in run.permission_denials] == [("Bash", call)]
    # The tool-call hooks were HTTP requests (Claude Code reports the status as their exit code), answered.
    assert {(h["hook_event"], h["exit_code"]) for h in run.hook_runs() if h["hook_event"] != "SessionStart"
            and h["hook_event"] != "Stop"} == {("PreToolUse", 200), ("PostToolUseFailure", 200)}
    (key,) = loki_json(project, "errors", "list")["strikes"]
    assert key["strike_count"] == 3 and key["tier"] == "stop"
    assert tree_problems(project / ".loki") == []


def test_server_killed_mid_session(claude_code: Path, project: Path, home: Path) -> None:
    """Measured with Claude Code 2.1.330: an HTTP hook that cannot connect is a non-blocking error (outcome
    "error", "connect ECONNREFUSED ..."); the call runs and the model is told nothing. loki's part: the Stop
    hook (a command) tells the person, `loki doctor` reports it, the next session's SessionStart starts the
    server again and the protocol goes on from the strikes it had."""
    loki_command(["serve", "--detach"], project)
    pid = files.read_run(str(project / ".loki"))["pid"]  # type: ignore[index]
    call = "cargo-offline build --release"
    run, model = claude_session(claude_code, project, [bash(call), bash(f"kill -9 {pid}"), bash(call), bash(call),
                                                       bash(call), text("done")],
                                home=home, env=token_env(project))

    pre = run.hook_runs("PreToolUse")
    assert [h["outcome"] for h in pre] == ["success", "success", "error", "error", "error"]
    # Refused (no server on the port), or reset (the kept-alive connection of the session, cut by the kill, is
    # found dead on the first call after it): either way Claude Code's "cannot reach the hook" error.
    gone = ("ECONNREFUSED", "ECONNRESET", "socket hang up")
    assert all(any(word in h["stderr"] for word in gone) for h in pre[2:]), [h["stderr"] for h in pre[2:]]
    # Nothing recorded after the kill: the one strike from before it, no denial although the call failed 4 times.
    (key,) = loki_json(project, "errors", "list")["strikes"]
    assert key["strike_count"] == 1
    assert run.permission_denials == []
    assert all("strike" not in model.new_input(n) for n in (3, 4, 5))
    # The person is told at the end of the session, and doctor reports it.
    (stop,) = run.hook_runs("Stop")
    assert "loki serve is not answering" in json.loads(stop["stdout"])["systemMessage"]
    doctor = loki_command_code(["doctor"], project)
    assert doctor.returncode == 1 and "loki serve is not answering" in doctor.stderr
    assert tree_problems(project / ".loki") == []

    # The next session: SessionStart starts the server and says so; the strikes go on from where they were.
    run, model = claude_session(claude_code, project, [bash(call), text("done")], home=home, env=token_env(project))
    assert "loki serve was not running: started it" in model.received(0)
    assert "strike 2 of 3" in model.new_input(1)
    assert files.probe(str(project / ".loki")) is not None
    assert loki_command_code(["doctor"], project).returncode == 0


def test_a_session_without_the_token_is_warned(claude_code: Path, project: Path, home: Path) -> None:
    """Without LOKI_SERVE_TOKEN the server refuses every HTTP hook (403): the briefing and the person say so."""
    run, model = claude_session(claude_code, project, [bash("ls missing.txt"), text("done")], home=home)
    assert "LOKI_SERVE_TOKEN is not set" in model.received(0)
    (session,) = run.hook_runs("SessionStart")
    assert "LOKI_SERVE_TOKEN is not set" in json.loads(session["stdout"])["systemMessage"]
    assert [h["outcome"] for h in run.hook_runs("PreToolUse")] == ["error"]
    assert loki_json(project, "errors", "list")["strikes"] == []


def loki_command_code(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    script = os.path.join(os.path.dirname(sys.executable), "loki")
    return subprocess.run([script, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_path_leases_over_http_answer_for_the_sessions_agent(claude_code: Path, project: Path, home: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The server answers every session's hooks: the agent is the session's LOKI_AGENT, sent in the
    X-Loki-Agent header, never the environment of the session that started the server (alice's here)."""
    from loki.queue.queue import Queue
    from loki.storage.store import Store
    from tests.agents.modelserver import tool

    queue = Queue(Store(project / ".loki"))
    queue.add("auth rewrite", task_id="t1", paths=["src/auth/**"])
    queue.claim("alice", task_id="t1")
    monkeypatch.setenv("LOKI_AGENT", "alice")
    files.start_detached(str(project / ".loki"))
    monkeypatch.delenv("LOKI_AGENT")

    def session(agent: str) -> Any:
        steps = [tool("Write", {"file_path": str(project / "src/auth/login.py"), "content": "x = 1\n"}),
                 text("Done.")]
        return claude_session(claude_code, project, steps, home=home, hook_events=False,
                              env={**token_env(project), "IS_SANDBOX": "1", "LOKI_AGENT": agent},
                              args=["--permission-mode", "bypassPermissions"])

    run, model = session("bob")
    (denied,) = model.tool_results(1)
    assert denied["is_error"] is True and "held by alice" in json.dumps(denied) and "you are bob" in json.dumps(denied)
    assert not (project / "src" / "auth" / "login.py").exists()
    run, model = session("alice")
    assert (project / "src" / "auth" / "login.py").read_text() == "x = 1\n"
    assert run.permission_denials == []
    assert tree_problems(project / ".loki") == []


def test_loki_work_gives_its_agent_the_token_and_the_name_the_http_hooks_send(claude_code: Path, project: Path,
                                                                              home: Path) -> None:
    """`loki work` runs the real Claude Code on a tree whose hooks go to `loki serve`, from an environment with
    neither LOKI_SERVE_TOKEN nor LOKI_AGENT: it passes both, so the session's HTTP hooks are let in (the strike-2
    message reaches the model) and answered for the agent that claimed the task (the task's path lease is its own:
    the Write in it is allowed, where "someone else" would be denied)."""
    from tests.agents.claude import DUMMY_KEY, QUIET_ENV, tool_dirs
    from tests.agents.modelserver import ModelServer, tool

    loki = os.path.join(os.path.dirname(sys.executable), "loki")
    loki_command(["queue", "add", "Fix the build", "--id", "t1", "--paths", "src/**"], project)
    loki_command(["serve", "--detach"], project)
    call = "cargo-offline build --release"
    write = tool("Write", {"file_path": str(project / "src" / "app.py"), "content": "x = 1\n"})
    steps = [bash(call), bash(call), write, text("Done.")]
    home.mkdir(parents=True, exist_ok=True)
    with ModelServer(steps) as model:
        env = {"PATH": os.pathsep.join(tool_dirs()), "HOME": str(home), "LANG": "C.UTF-8", "SHELL": "/bin/bash",
               "ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": DUMMY_KEY, "IS_SANDBOX": "1", **QUIET_ENV,
               **{k: v for k, v in os.environ.items() if k.startswith("LOKI_") and k not in (
                   "LOKI_AGENTS_CACHE", files.TOKEN_ENV, files.AGENT_ENV)}}
        done = subprocess.run([loki, "work", "--agent", "claude-1", "--json", "--", str(claude_code), "-p",
                               "Do task {id}: {title}", "--output-format", "json", "--allowedTools", "Bash",
                               "--permission-mode", "bypassPermissions"],
                              cwd=project, env=env, capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert "LOKI_SERVE_TOKEN is not set" not in model.received(0)
    assert "strike 2 of 3" in model.new_input(2)  # the hooks were let in: the token came from loki work
    (written,) = model.tool_results(3)
    assert written.get("is_error") is not True, written  # the lease's holder, named by X-Loki-Agent
    assert (project / "src" / "app.py").read_text() == "x = 1\n"
    (key,) = loki_json(project, "errors", "list")["strikes"]
    assert key["strike_count"] == 2
    assert tree_problems(project / ".loki") == []
