"""The real agents with loki as an MCP server, each with the configuration ``loki hooks install --mcp`` wrote,
against a scripted model: the model is offered loki's tools, lists what is ready, claims a task and completes it
with the token the claim returned; the tree shows the task completed by the agent the configuration names.
Claude Code gets the ``.mcp.json`` (``--mcp-config``), Gemini CLI the ``mcpServers`` entry in
``.gemini/settings.json``, Codex CLI the ``[mcp_servers.loki]`` table in ``.codex/config.toml``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loki.storage.store import Store
from tests.agents.claude import loki_command, make_project, run_claude
from tests.agents.modelserver import ModelServer, Request, Turn, text, tool
from tests.helpers import tasks_in, tree_problems

pytestmark = [pytest.mark.slow, pytest.mark.agent]

TOOL_NAMES = ["ready", "claim", "heartbeat", "complete", "fail", "release", "signal", "escalate", "lease"]


class ReplyingModel(ModelServer):
    """The scripted model, where a turn may be a function of the request it answers: what the model says
    next depends on what a tool returned (a claim token) and cannot be written down in advance."""

    def _take_turn(self) -> tuple[int, Turn]:
        index, turn = super()._take_turn()
        if callable(turn):
            current = next(r for r in reversed(self.requests)
                           if isinstance(r.body, dict) and r.body.get("tools") and r.turn is None)
            turn = turn(current)
        return index, turn


def tool_result_json(request: Request) -> dict[str, Any]:
    """The JSON reply of the one tool result the model got with ``request``."""
    last_user = next(m for m in reversed(request.body["messages"]) if m["role"] == "user")
    [result] = [b for b in last_user["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
    content = result["content"]
    text_block = content if isinstance(content, str) else next(c["text"] for c in content if c.get("type") == "text")
    reply: dict[str, Any] = json.loads(text_block)
    return reply


def complete_what_was_claimed(request: Request) -> Turn:
    claimed = tool_result_json(request)
    assert claimed["status"] == "claimed", claimed
    return tool("mcp__loki__complete", {"task_id": claimed["task_id"], "token": claimed["token"],
                                        "evidence": ["the scripted model did it"]})


def test_claude_code_claims_and_completes_a_task_through_loki_mcp(claude_code: Path, tmp_path: Path) -> None:
    project = make_project(tmp_path / "shop")
    added = json.loads(loki_command(["queue", "add", "Add rate limiting to login", "--json"], project).stdout)
    task_id = added["task"]["id"]
    # the configuration `loki hooks install --mcp` writes (.mcp.json), handed to Claude Code as it is
    loki = os.path.join(os.path.dirname(sys.executable), "loki")
    loki_command(["hooks", "install", "--mcp", "--command", loki, "--mcp-agent", "claude-mcp"], project)
    config = project / ".mcp.json"
    turns: list[Any] = [
        tool("mcp__loki__ready", {}),
        tool("mcp__loki__claim", {}),
        complete_what_was_claimed,
        text("Done: the task is completed."),
    ]
    with ReplyingModel(turns) as model:
        run = run_claude(claude_code, "Work on loki's queue.", cwd=project, model_url=model.url, home=tmp_path / "home",
                         args=["--mcp-config", str(config), "--strict-mcp-config", "--allowedTools", "mcp__loki"],
                         # every tool in each request (else MCP tools wait behind its ToolSearch tool)
                         env={"ENABLE_TOOL_SEARCH": "false"})
    assert run.code == 0, f"claude exit {run.code}: {run.stderr[-2000:]} {run.stdout[-1500:]}"
    assert not model.unexpected() and model.overrun == 0, run.stdout[-1500:]

    offered = {t["name"]: t for t in model.conversation[0].body["tools"] if t["name"].startswith("mcp__loki__")}
    assert sorted(offered) == sorted(f"mcp__loki__{name}" for name in TOOL_NAMES)
    assert "claim token" in json.dumps(offered["mcp__loki__complete"]["input_schema"])
    listed = tool_result_json(model.conversation[1])
    assert listed["status"] == "ok" and [t["id"] for t in listed["tasks"]] == [task_id]
    completed = tool_result_json(model.conversation[3])
    assert completed == {"status": "completed", "task_id": task_id, "completed_at": completed["completed_at"]}

    [task] = tasks_in(Store(project / ".loki"), "completed")
    assert task["id"] == task_id and task["completed_by"] == "claude-mcp"
    assert task["result"] == {"evidence": ["the scripted model did it"]}
    assert tree_problems(project / ".loki") == []


# -- Gemini CLI ---------------------------------------------------------------------------------------------


def _untrusted(output: str) -> dict[str, Any]:
    """A tool's reply as Gemini CLI hands it to the model: the text inside ``<untrusted_context>``."""
    inner = output.split("<untrusted_context>", 1)[-1].rsplit("</untrusted_context>", 1)[0]
    reply: dict[str, Any] = json.loads(inner)
    return reply


def test_gemini_cli_claims_and_completes_a_task_through_loki_mcp(tmp_path: Path) -> None:
    from tests.agents import geminicli
    from tests.agents.geminiserver import GeminiServer, Parts, last_tool_result, say
    from tests.agents.geminiserver import tool as gemini_tool

    binary = geminicli.gemini_bin()  # skips (or, in CI, fails) with the reason when it cannot be installed
    project = make_project(tmp_path / "shop", hooks=False)
    task_id = json.loads(loki_command(["queue", "add", "Add rate limiting", "--json"], project).stdout)["task"]["id"]
    loki = os.path.join(os.path.dirname(sys.executable), "loki")
    loki_command(["hooks", "install", "--mcp", "--agent", "gemini", "--command", loki, "--mcp-agent", "gemini-mcp"],
                 project)

    class Replying(GeminiServer):
        def _next(self, body: dict[str, Any]) -> Parts:
            parts = super()._next(body)
            if len(self.requests) == 3:  # after the claim: complete it with the token it returned
                claimed = _untrusted(last_tool_result(body))
                assert claimed["status"] == "claimed", claimed
                return gemini_tool("mcp_loki_complete", task_id=claimed["task_id"], token=claimed["token"],
                                   evidence=["gemini did it"])
            return parts

    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(geminicli.USER_SETTINGS))
    script = [gemini_tool("mcp_loki_ready"), gemini_tool("mcp_loki_claim"), say("(replaced)"), say("Done.")]
    with Replying(script) as server:
        done = subprocess.run([str(binary), "-m", geminicli.MODEL, "-p", "Work on loki's queue.", "--yolo",
                               "--output-format", "json"], cwd=project, env=geminicli.environment(home, server.url),
                              capture_output=True, text=True, timeout=geminicli.RUN_TIMEOUT, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    offered = [d["name"] for t in server.requests[0].get("tools", []) for d in t.get("functionDeclarations", [])]
    assert sorted(n for n in offered if n.startswith("mcp_loki_")) == sorted(f"mcp_loki_{n}" for n in TOOL_NAMES)
    listed = _untrusted(last_tool_result(server.requests[1]))
    assert [t["id"] for t in listed["tasks"]] == [task_id]
    assert _untrusted(last_tool_result(server.requests[3]))["status"] == "completed"
    [task] = tasks_in(Store(project / ".loki"), "completed")
    assert task["completed_by"] == "gemini-mcp" and task["result"] == {"evidence": ["gemini did it"]}
    assert tree_problems(project / ".loki") == []


# -- Codex CLI ----------------------------------------------------------------------------------------------


def _codex_reply(output: str) -> dict[str, Any]:
    """A tool's reply as Codex CLI hands it to the model: ``Wall time: ...\nOutput:\n{json}``."""
    reply: dict[str, Any] = json.loads(output.split("Output:\n", 1)[1])
    return reply


def test_codex_cli_claims_and_completes_a_task_through_loki_mcp(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.agents import codexcli
    from tests.agents.responsesserver import Item, ResponsesServer, call_outputs, say

    codexcli.codex_bin()  # skips (or, in CI, fails) with the reason when it cannot be installed
    project = make_project(tmp_path / "shop", hooks=False)
    task_id = json.loads(loki_command(["queue", "add", "Add rate limiting", "--json"], project).stdout)["task"]["id"]
    loki = os.path.join(os.path.dirname(sys.executable), "loki")
    loki_command(["hooks", "install", "--mcp", "--agent", "codex", "--command", loki, "--mcp-agent", "codex-mcp"],
                 project)
    # Codex starts MCP servers beside the first turn and offers their tools once they answer; `required` makes
    # it wait for this one (docs/mcp.md). A key added by hand, which install keeps.
    config = project / ".codex" / "config.toml"
    config.write_text(config.read_text() + "required = true\n")
    loki_command(["hooks", "install", "--mcp", "--agent", "codex", "--command", loki, "--mcp-agent", "codex-mcp"],
                 project)
    assert config.read_text().endswith("required = true\n")

    def loki_tool(name: str, **arguments: Any) -> Item:
        return {"type": "function_call", "namespace": "mcp__loki", "name": name, "arguments": json.dumps(arguments)}

    class Replying(ResponsesServer):
        def _next(self, body: dict[str, Any]) -> tuple[int, Item]:
            index, item = super()._next(body)
            if index == 2:  # after the claim: complete it with the token it returned
                claimed = _codex_reply(call_outputs(body)[-1])
                assert claimed["status"] == "claimed", claimed
                item = {**loki_tool("complete", task_id=claimed["task_id"], token=claimed["token"],
                                    evidence=["codex did it"]), "call_id": "call_2"}
            return index, item

    script = [loki_tool("ready"), loki_tool("claim"), say("(replaced)"), say("Done.")]
    monkeypatch.setattr(codexcli, "ResponsesServer", Replying)  # run_codex builds its server by this name
    run = codexcli.run_codex(project, tmp_path / "home" / ".codex", script, prompt="Work on loki's queue.")
    assert run.code == 0, run.stderr[-2000:]
    offered = [t for t in run.requests[0]["tools"] if t.get("name") == "mcp__loki"]
    assert sorted(t["name"] for t in offered[0]["tools"]) == sorted(TOOL_NAMES)
    outputs = [_codex_reply(output) for output in call_outputs(run.requests[3])]
    assert [t["id"] for t in outputs[0]["tasks"]] == [task_id]
    assert outputs[2]["status"] == "completed"
    [task] = tasks_in(Store(project / ".loki"), "completed")
    assert task["completed_by"] == "codex-mcp" and task["result"] == {"evidence": ["codex did it"]}
    assert tree_problems(project / ".loki") == []
