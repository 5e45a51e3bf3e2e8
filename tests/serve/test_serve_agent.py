"""Who the path lease gate answers for under `loki serve`: the agent the HTTP hook names in its
``X-Loki-Agent`` header (filled from the session's LOKI_AGENT), never the server's own environment."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loki.clock import ManualClock
from loki.hooks.agentsettings import http_entry
from loki.leases.leases import PathLeases
from loki.resident import files
from loki.serve.agentheader import AgentIdentity
from loki.serve.app import create_app
from loki.storage.store import Store
from tests.serve.asgi import request

TOKEN = "t0k3n-for-tests"
NOW = "2026-01-25T10:00:00Z"


@pytest.fixture
def leased(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """alice holds src/auth/** (exclusive, an hour)."""
    monkeypatch.setenv("LOKI_NOW", NOW)
    monkeypatch.delenv("LOKI_AGENT", raising=False)
    PathLeases(Store(project / ".loki", clock=ManualClock(NOW)), root=str(project)).acquire(
        ["src/auth/**"], agent="alice", task=None)
    return project


def edit(project: Path) -> bytes:
    return json.dumps({"session_id": "s1", "cwd": str(project), "hook_event_name": "PreToolUse",
                       "tool_name": "Edit", "tool_input": {"file_path": str(project / "src/auth/login.py")}}).encode()


def answer(app: Any, project: Path, agent: str | None) -> dict[str, Any]:
    headers = {"X-Loki-Token": TOKEN, **({"X-Loki-Agent": agent} if agent is not None else {})}
    done = request(app, "POST", "/hook/pre-tool-use", headers=headers, body=edit(project))
    assert done.status == 200
    found: dict[str, Any] = done.json()
    return found


def test_the_holders_edit_is_allowed_and_anothers_denied_by_the_request_header(leased: Path) -> None:
    app = AgentIdentity(create_app(str(leased / ".loki"), TOKEN, port=8800))
    assert answer(app, leased, "alice") == {}
    denied = answer(app, leased, "bob")["hookSpecificOutput"]
    assert denied["permissionDecision"] == "deny" and "held by alice" in denied["permissionDecisionReason"]
    assert "you are bob" in denied["permissionDecisionReason"]
    assert answer(app, leased, "alice") == {}  # one request's agent does not stay for the next


def test_no_header_is_someone_else_even_when_the_servers_environment_names_the_holder(
        leased: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOKI_AGENT", "alice")  # the session that happened to start the server
    app = AgentIdentity(create_app(str(leased / ".loki"), TOKEN, port=8800))
    for agent in (None, "", "   ", "$LOKI_AGENT"):  # the last: a session without it, if sent unfilled
        denied = answer(app, leased, agent)["hookSpecificOutput"]
        assert denied["permissionDecision"] == "deny"
        assert "this session has no agent name (LOKI_AGENT)" in denied["permissionDecisionReason"]


def test_the_http_hook_sends_the_agents_name_from_its_environment() -> None:
    entry = http_entry(8800, "pre-tool-use")
    assert entry["headers"] == {"X-Loki-Token": "$LOKI_SERVE_TOKEN", "X-Loki-Agent": "$LOKI_AGENT"}
    assert entry["allowedEnvVars"] == ["LOKI_SERVE_TOKEN", "LOKI_AGENT"]


@pytest.fixture
def tree(leased: Path) -> Iterator[str]:
    root = str(leased / ".loki")
    yield root
    run = files.read_run(root)
    if run is not None and isinstance(run.get("pid"), int):
        with contextlib.suppress(ProcessLookupError):
            os.kill(run["pid"], signal.SIGKILL)


@pytest.mark.slow
def test_a_started_server_has_no_agent_name_and_answers_for_the_header(tree: str, leased: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOKI_AGENT", "alice")  # the session starting it holds the lease
    run = files.start_detached(tree)
    pid = run["pid"]
    assert isinstance(pid, int)
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert not any(item.startswith(b"LOKI_AGENT=") for item in environ)
    token = files.token(tree)
    assert token is not None

    def ask(agent: str | None) -> dict[str, Any]:
        connection = http.client.HTTPConnection(str(run["host"]), int(str(run["port"])), timeout=10)
        headers = {"X-Loki-Token": token, "Content-Type": "application/json",
                   **({"X-Loki-Agent": agent} if agent else {})}
        connection.request("POST", "/hook/pre-tool-use", body=edit(leased), headers=headers)
        response = connection.getresponse()
        assert response.status == 200
        found: dict[str, Any] = json.loads(response.read())
        return found

    assert ask("alice") == {}
    assert ask("bob")["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert ask(None)["hookSpecificOutput"]["permissionDecision"] == "deny"
