"""The real Claude Code with loki as an MCP server (``--mcp-config`` naming the ``.mcp.json`` that ``loki hooks install
--mcp`` wrote), against the scripted model:
the model is offered loki's tools, lists what is ready, claims a task and completes it with the token the claim
returned; the tree shows the task completed by the agent the configuration names."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from loki.storage.store import Store
from tests.agents.claude import loki_command, make_project, run_claude
from tests.agents.modelserver import ModelServer, Request, Turn, text, tool
from tests.helpers import tasks_in, tree_problems

pytestmark = [pytest.mark.slow, pytest.mark.agent]

TOOL_NAMES = ["ready", "claim", "heartbeat", "complete", "fail", "release", "signal", "escalate"]


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
