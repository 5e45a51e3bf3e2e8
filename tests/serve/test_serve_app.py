"""The ASGI application of `loki serve` in this process: hooks over HTTP answered by the command hooks'
own handlers, and the guard every request passes (Host, Origin, token)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loki.hooks import handlers
from loki.serve.app import create_app
from tests.helpers import NOW, snapshot_bytes, tree_problems
from tests.hooks.test_hooks import hook
from tests.serve.asgi import request

TOKEN = "t0k3n-for-tests"
CALL = {"command": "cargo-offline build --release"}


def failure(project: Path, session: str = "s1") -> dict[str, Any]:
    return {"session_id": session, "cwd": str(project), "hook_event_name": "PostToolUseFailure",
            "tool_name": "Bash", "tool_input": CALL, "error": "/bin/bash: line 1: cargo-offline: command not found"}


def pre(project: Path, session: str = "s1") -> dict[str, Any]:
    return {"session_id": session, "cwd": str(project), "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": CALL}


def post(app: Any, event: str, payload: dict[str, Any] | bytes, token: str = TOKEN, **headers: str) -> Any:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return request(app, "POST", f"/hook/{event}", headers={"X-Loki-Token": token, **headers}, body=body)


@pytest.fixture
def app(project: Path) -> Any:
    return create_app(str(project / ".loki"), TOKEN, port=8800)


def test_the_three_strike_protocol_over_http_is_the_command_hooks(app: Any, project: Path, tmp_path: Path,
                                                                  template_tree: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """One code path: the server's answers are the ones `loki hook` prints for the same payloads."""
    import shutil

    monkeypatch.setenv("LOKI_NOW", NOW)  # the time the command hooks below are given

    twin = tmp_path / "twin"
    shutil.copytree(template_tree, twin / ".loki")
    (twin / ".git").mkdir()
    (twin / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    for step in range(3):
        served = post(app, "post-tool-use-failure", failure(project))
        assert served.status == 200
        command = hook("post-tool-use-failure", failure(twin), cwd=twin)
        assert command.code == 0
        expected = json.loads(command.stdout) if command.stdout.strip() else {}
        assert _without_paths(served.json(), project) == _without_paths(expected, twin)
        if step == 1:
            assert "strike 2 of 3" in json.dumps(served.json())
    denied = post(app, "pre-tool-use", pre(project)).json()["hookSpecificOutput"]
    assert denied["permissionDecision"] == "deny" and "is stopped" in denied["permissionDecisionReason"]
    assert tree_problems(project / ".loki") == []


def _without_paths(answer: Any, project: Path) -> str:
    return json.dumps(answer).replace(str(project), "PROJECT")


def test_nothing_to_say_is_an_empty_object(app: Any, project: Path) -> None:
    reply = post(app, "pre-tool-use", pre(project))
    assert (reply.status, reply.json()) == (200, {})


@pytest.mark.parametrize(("headers", "host"), [
    ({}, "127.0.0.1:8800"),                                                   # no token
    ({"X-Loki-Token": "wrong"}, "127.0.0.1:8800"),                             # a wrong token
    ({"X-Loki-Token": TOKEN}, "attacker.example:8800"),                        # DNS rebinding: another name
    ({"X-Loki-Token": TOKEN}, "127.0.0.1:9999"),                               # another port
    ({"X-Loki-Token": TOKEN, "Origin": "http://attacker.example"}, "127.0.0.1:8800"),  # cross-site
    ({"Cookie": "loki_session=wrong"}, "127.0.0.1:8800"),
])
def test_a_request_without_the_token_or_from_elsewhere_is_refused_and_changes_nothing(
        app: Any, project: Path, headers: dict[str, str], host: str) -> None:
    before = snapshot_bytes(project / ".loki")
    reply = request(app, "POST", "/hook/post-tool-use-failure", headers=headers, host=host,
                    body=json.dumps(failure(project)).encode())
    assert reply.status == 403 and reply.body.startswith(b"forbidden: ")
    assert request(app, "GET", "/health", headers=headers, host=host).status == 403
    assert snapshot_bytes(project / ".loki") == before


def test_the_hosts_a_server_on_loopback_answers_to(app: Any, project: Path) -> None:
    for host in ("127.0.0.1:8800", "localhost:8800", "[::1]:8800", "LOCALHOST:8800"):
        reply = request(app, "GET", "/health", headers={"X-Loki-Token": TOKEN}, host=host)
        assert reply.status == 200 and reply.json()["root"] == str((project / ".loki").resolve())
    same_origin = {"X-Loki-Token": TOKEN, "Origin": "http://127.0.0.1:8800"}
    assert request(app, "GET", "/health", headers=same_origin).status == 200


def test_bad_input_is_one_line_and_a_4xx(app: Any, project: Path) -> None:
    before = snapshot_bytes(project / ".loki")
    reply = post(app, "post-tool-use-failure", b"{not json")
    assert reply.status == 422
    assert reply.body.decode().startswith("loki hook post-tool-use-failure: stdin is not valid JSON")
    assert reply.body.decode().count("\n") == 1
    assert post(app, "no-such-event", pre(project)).status == 422
    assert post(app, "pre-tool-use", {**pre(project), "hook_event_name": "Stop"}).status == 422
    assert snapshot_bytes(project / ".loki") == before


def test_a_crashed_request_is_a_500_and_the_next_one_is_answered(app: Any, project: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(payload: dict[str, Any], root: str) -> None:
        raise RuntimeError("a bug in a handler")

    monkeypatch.setitem(handlers.HANDLERS, "PreToolUse", broken)
    reply = post(app, "pre-tool-use", pre(project))
    assert reply.status == 500 and b"internal error: RuntimeError: a bug in a handler" in reply.body
    monkeypatch.undo()
    assert post(app, "post-tool-use-failure", failure(project)).status == 200
    assert post(app, "pre-tool-use", pre(project)).status == 200


def test_another_asgi_app_mounts_behind_the_same_guard(project: Path) -> None:
    async def other(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": f"mounted at {scope['root_path']}".encode()})

    app = create_app(str(project / ".loki"), TOKEN, port=8800, mounts={"/mcp": other})
    assert request(app, "GET", "/mcp/x", headers={"X-Loki-Token": TOKEN}).body == b"mounted at /mcp"
    assert request(app, "GET", "/mcp/x").status == 403
    assert request(app, "POST", "/mcp", headers={"X-Loki-Token": TOKEN}).body == b"mounted at "  # no redirect
    assert request(app, "POST", "/mcp", headers={"Authorization": f"Bearer {TOKEN}"}).status == 200
    from loki.serve.tokens import COOKIE, derived

    cookie = {"Cookie": f"{COOKIE}={derived(TOKEN, 'session')}"}
    assert request(app, "GET", "/mcp/x", headers=cookie).status == 403  # the board's cookie opens no mount
    assert request(app, "GET", "/health", headers={"Authorization": f"Bearer {TOKEN}"}).status == 200


def test_on_a_postgresql_tree_the_server_answers_the_hooks_and_the_board(project: Path) -> None:
    """The hooks' decisions and the board on a tree whose state is in PostgreSQL: the connection is the server's;
    Claude Code's HTTP hook runs no process, so nothing imports a driver per tool call."""
    from tests.pgserver import fresh_schema_url

    root = project / ".loki"
    (root / "config" / "loki.json").write_text(json.dumps(
        {"version": 1, "storage": {"backend": "postgresql", "database": fresh_schema_url()}}))
    app = create_app(str(root), TOKEN, port=8800)
    answers = [post(app, "post-tool-use-failure", failure(project)).json() for _ in range(3)]
    assert "strike 2 of 3" in json.dumps(answers[1])
    denied = post(app, "pre-tool-use", pre(project)).json()["hookSpecificOutput"]
    assert denied["permissionDecision"] == "deny"
    from loki.queue.queue import Queue
    from loki.storage.opening import open_store

    Queue(open_store(str(root))).add("<b>on postgres</b>")
    from loki.serve.tokens import derived

    board = request(app, "GET", "/", headers={"Cookie": f"loki_session={derived(TOKEN, 'session')}"})
    assert board.status == 200 and b"&lt;b&gt;on postgres&lt;/b&gt;" in board.body


def test_the_server_keeps_a_database_connection_per_hook_thread(project: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """loki.serve.warm: on a PostgreSQL tree each thread answering hooks keeps one connection (made again after a
    break; at most HOOK_THREADS of them), never shared with a request running beside it; each request still reads
    the team's settings afresh (a new store over it)."""
    import threading

    from loki.serve.app import HOOK_THREADS
    from loki.serve.warm import WarmStores
    from tests.pgserver import fresh_schema_url

    root = project / ".loki"
    (root / "config" / "loki.json").write_text(json.dumps(
        {"version": 1, "storage": {"backend": "postgresql", "database": fresh_schema_url()}}))
    warm = WarmStores(per_thread=True)
    monkeypatch.setattr(handlers, "STORE_OPENER", warm.open)
    app = create_app(str(root), TOKEN, port=8800)
    answers = [post(app, "post-tool-use-failure", failure(project)).json() for _ in range(3)]
    assert "strike 2 of 3" in json.dumps(answers[1]) and "STOP" in json.dumps(answers[2])
    assert 1 <= warm.connections <= HOOK_THREADS and warm.db is None

    first, second = warm.open(str(root)), warm.open(str(root))
    assert first is not second and first.db is second.db  # type: ignore[attr-defined]  # this thread's, kept
    mine = first.db  # type: ignore[attr-defined]
    elsewhere: list[Any] = []
    thread = threading.Thread(target=lambda: elsewhere.append(warm.open(str(root)).db))  # type: ignore[attr-defined]
    thread.start()
    thread.join()
    assert elsewhere[0] is not mine  # another thread: a connection of its own
    connection = mine.conn
    connection.close()  # a break (the server restarted): the next use connects again
    from loki.queue.queue import Queue

    assert Queue(warm.open(str(root))).list_tasks("all")["total"] == 0 and mine.conn is not connection
    assert post(app, "pre-tool-use", pre(project)).json()["hookSpecificOutput"]["permissionDecision"] == "deny"
    warm.close()
    assert warm.connections == 0 and connection.closed

    single = WarmStores()  # the board's feed: one connection, one look at a time
    assert single.open(str(root)).db is single.open(str(root)).db is single.db  # type: ignore[attr-defined]
    single.close()
    assert single.db is None
    # A file tree gets a store per request, as the command hooks do.
    (root / "config" / "loki.json").write_text(json.dumps({"version": 1}))
    assert warm.open(str(root)).backend == "files" and warm.connections == 0


def test_a_host_given_explicitly_is_answered_too(project: Path) -> None:
    app = create_app(str(project / ".loki"), TOKEN, host="10.1.2.3", port=8800)
    ok = {"X-Loki-Token": TOKEN}
    assert request(app, "GET", "/health", headers=ok, host="10.1.2.3:8800").status == 200
    assert request(app, "GET", "/health", headers=ok, host="127.0.0.1:8800").status == 200
    assert request(app, "GET", "/health", headers=ok, host="10.1.2.4:8800").status == 403
