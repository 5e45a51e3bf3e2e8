"""The MCP tools at ``/mcp`` of ``loki serve`` (loki/serve/mcpmount.py, docs/mcp.md "Over HTTP"): a real ``loki serve``
process driven by the SDK's own streamable-HTTP client (a claim race, a stale token, bad arguments), the guard
(token in a header, Host, Origin, the agent's name) refusing with nothing changed, and the answer without the extra."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loki.resident import files
from loki.storage.store import Store
from tests.helpers import (
    LazyModule,
    cli,
    lazy_module_or_skip,
    loki_proc,
    process_gone,
    snapshot_bytes,
    tasks_in,
    tree_problems,
)
from tests.serve.asgi import request

mcp = lazy_module_or_skip("mcp", reason="the mcp extra is not installed (pip install -e '.[dev]')")
anyio = LazyModule("anyio")  # both imported by the tests that use them, not by collection

from tests.mcpserver.test_mcp_stdio import Rounds, call, claim_in_rounds  # noqa: E402 (needs the SDK)
from tests.mcpserver.test_tools import BAD_ARGUMENTS  # noqa: E402

TOKEN = "t0k3n-for-tests"


@pytest.fixture
def served(project: Path) -> Iterator[tuple[str, str, str]]:
    """(tree, the /mcp URL, the token) of a real `loki serve --detach`; killed on the way out."""
    root = str(project / ".loki")
    done = loki_proc(["serve", "--detach", "--json"], root=root)
    assert done.code == 0, done.stderr
    run = done.json()
    token = files.token(root)
    assert token is not None
    try:
        yield root, f"http://127.0.0.1:{run['port']}/mcp", token
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(run["pid"], signal.SIGKILL)
        assert process_gone(run["pid"])


def client(url: str, token: str, agent: str, headers: dict[str, str] | None = None) -> Any:
    """The SDK's client over streamable HTTP, configured as an MCP host is: the token and the agent in headers."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    sent = headers if headers is not None else {"Authorization": f"Bearer {token}", "X-Loki-Agent": agent}
    return mcp.Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=sent)))


@pytest.mark.slow
def test_the_entry_hooks_install_writes_reaches_the_tools(served: tuple[str, str, str]) -> None:
    """`loki hooks install --mcp --via http`'s .mcp.json entry, its ${LOKI_SERVE_TOKEN} filled in as Claude Code
    fills it from its environment, lists the tools and claims as the configured agent."""
    root, url, token = served
    assert cli(["queue", "add", "one", "--id", "t1"], root=root).code == 0
    assert cli(["hooks", "install", "--mcp", "--via", "http", "--mcp-agent", "eng-7"], root=root).code == 0
    entry = json.loads((Path(root).parent / ".mcp.json").read_text())["mcpServers"]["loki"]
    assert entry["url"] == url
    headers = {k: v.replace("${LOKI_SERVE_TOKEN}", token) for k, v in entry["headers"].items()}

    async def scenario() -> dict[str, Any]:
        async with client(entry["url"], token, "", headers=headers) as session:
            listed = await session.list_tools()
            assert [t.name for t in listed.tools] == ["ready", "claim", "heartbeat", "complete", "fail", "release",
                                                      "signal", "escalate", "lease"]
            reply, _ = await call(session, "claim")
            return reply

    assert anyio.run(scenario)["status"] == "claimed"
    assert tasks_in(Store(root), "in-progress")[0]["claimed_by"] == "eng-7"


@pytest.mark.slow
def test_two_clients_racing_on_loki_serve_never_get_the_same_task(served: tuple[str, str, str]) -> None:
    root, url, token = served
    ids = [f"t{n:02}" for n in range(24)]
    batch = Path(root).parent / "batch.json"
    batch.write_text(json.dumps([{"id": task_id, "title": f"task {task_id}"} for task_id in ids]))
    assert cli(["queue", "add", "--from-file", str(batch)], root=root).code == 0
    got: dict[str, list[str]] = {"a1": [], "a2": []}
    rounds = Rounds(2)

    async def agent(name: str) -> None:
        async with client(url, token, name) as session:
            got[name] = [reply["task_id"] for reply in await claim_in_rounds(session, rounds)]

    async def race() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(agent, "a1")
            group.start_soon(agent, "a2")

    anyio.run(race)
    assert sorted(got["a1"] + got["a2"]) == ids
    assert got["a1"] and got["a2"], got
    held = {t["id"]: t["claimed_by"] for t in tasks_in(Store(root), "in-progress")}
    assert held == {**dict.fromkeys(got["a1"], "a1"), **dict.fromkeys(got["a2"], "a2")}  # each as its header said
    assert tree_problems(root) == []


@pytest.mark.slow
def test_a_stale_token_and_bad_arguments_on_loki_serve_change_nothing(served: tuple[str, str, str]) -> None:
    root, url, token = served
    assert cli(["queue", "add", "one", "--id", "t1"], root=root).code == 0

    async def scenario() -> None:
        async with client(url, token, "a1") as session:
            first, _ = await call(session, "claim")
            await call(session, "release", task_id="t1", token=first["token"])
            second, _ = await call(session, "claim")
            before = snapshot_bytes(root)
            refused, is_error = await call(session, "complete", task_id="t1", token=first["token"])
            assert is_error and refused["status"] == "lease_lost"
            for name, arguments, field in BAD_ARGUMENTS:
                if arguments.get("token") == "x":
                    arguments = {**arguments, "token": second["token"]}
                reply, is_error = await call(session, name, **arguments)
                assert is_error and reply["status"] == "bad_input" and reply["field"] == field, (name, reply)
            assert snapshot_bytes(root) == before
        async with client(url, token, "a2") as other:  # another agent, same server: the tree's fencing holds
            stolen, is_error = await call(other, "complete", task_id="t1", token=second["token"])
            assert is_error and stolen["status"] == "conflict", stolen
            assert snapshot_bytes(root) == before
        async with client(url, token, "a1") as again:  # a new session: no session state, the token is enough
            done, _ = await call(again, "complete", task_id="t1", token=second["token"])
            assert done["status"] == "completed"

    anyio.run(scenario)
    assert tasks_in(Store(root), "completed")[0]["completed_by"] == "a1"


@pytest.mark.slow
def test_without_the_token_or_from_another_site_mcp_is_refused_and_nothing_changes(
        served: tuple[str, str, str]) -> None:
    import httpx2 as httpx

    root, url, token = served
    assert cli(["queue", "add", "one", "--id", "t1"], root=root).code == 0
    port = url.split(":")[2].split("/")[0]
    here = f"127.0.0.1:{port}"
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "probe", "version": "0"}}}
    claim = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "claim", "arguments": {}}}
    mcp_headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   "X-Loki-Agent": "a1"}
    bearer = {"Authorization": f"Bearer {token}"}
    from loki.serve.tokens import COOKIE, derived

    cookie = {"Cookie": f"{COOKIE}={derived(token, 'session')}"}
    before = snapshot_bytes(root)
    refused = [
        ({}, 403),                                                          # no token
        ({"Authorization": "Bearer wrong"}, 403),                           # a wrong token
        ({"X-Loki-Token": "wrong"}, 403),
        ({"Authorization": token}, 403),                                    # not a bearer token
        (cookie, 403),                                                      # the board's cookie: not for /mcp
        ({**bearer, "Host": f"evil.example:{port}"}, 403),                   # DNS rebinding: another name
        ({**bearer, "Origin": "http://evil.example"}, 403),                 # another site
        ({**bearer, "X-Loki-Agent": ""}, 400),                              # no agent name
        ({**bearer, "X-Loki-Agent": "x" * 201}, 400),                        # not a valid name (too long)
    ]
    with httpx.Client() as http:
        for extra, status in refused:
            for body in (initialize, claim):
                answer = http.post(url, json=body, headers={**mcp_headers, "Host": here, **extra})
                assert answer.status_code == status, (extra, answer.status_code, answer.text)
                assert len(answer.text.strip().splitlines()) == 1, answer.text  # one clear line
        assert "X-Loki-Agent" in http.post(url, json=initialize,
                                           headers={**mcp_headers, **bearer, "X-Loki-Agent": ""}).text
        ok = http.post(url, json=initialize, headers={**mcp_headers, "Host": here, "X-Loki-Token": token})
        assert ok.status_code == 200, ok.text  # the hooks' header opens it too
    assert snapshot_bytes(root) == before
    assert [t["id"] for t in tasks_in(Store(root), "pending")] == ["t1"]


def test_without_the_mcp_extra_mcp_answers_what_to_install(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from loki.serve.app import create_app
    from loki.serve.mcpmount import PATH, mcp_mount

    for name in [n for n in sys.modules if n.split(".")[0] in ("mcp", "mcp_types")] + ["mcp", "mcp_types"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if the SDK were not installed
    monkeypatch.delitem(sys.modules, "loki.mcpserver.server", raising=False)
    root = str(project / ".loki")
    mounted, lifespan = mcp_mount(root, "127.0.0.1")
    app = create_app(root, TOKEN, port=8800, mounts={PATH: mounted}, lifespan=lifespan)
    answer = request(app, "POST", "/mcp", headers={"Authorization": f"Bearer {TOKEN}", "X-Loki-Agent": "a1"})
    assert answer.status == 501
    assert answer.body.decode() == ("loki serve: /mcp needs the mcp extra of loki-state (the MCP SDK), which this "
                                    "installation lacks: pip install 'loki-state[mcp]', then restart loki serve\n")
    assert request(app, "POST", "/mcp").status == 403  # still behind the guard
    assert request(app, "GET", "/health", headers={"Authorization": f"Bearer {TOKEN}"}).status == 200


def test_the_agent_header_is_checked_as_a_name() -> None:
    from loki.serve.mcpmount import agent_refusal

    assert agent_refusal("eng-001") is None
    assert "X-Loki-Agent" in (agent_refusal(None) or "") and "X-Loki-Agent" in (agent_refusal("") or "")
    for bad in ("   ", "a\x1b[31m", "a\u202eb", "x" * 201):
        assert agent_refusal(bad), bad


@pytest.mark.slow
def test_on_a_postgresql_tree_mcp_claims_through_the_servers_connection(project: Path) -> None:
    """The tools at /mcp on a tree whose state is in PostgreSQL: the server's one store serves every agent."""
    from loki.storage.opening import open_store
    from tests.pgserver import fresh_schema_url

    root = project / ".loki"
    (root / "config" / "loki.json").write_text(json.dumps(
        {"version": 1, "storage": {"backend": "postgresql", "database": fresh_schema_url()}}))
    assert cli(["queue", "add", "one", "--id", "t1"], root=root).code == 0
    assert cli(["queue", "add", "two", "--id", "t2"], root=root).code == 0
    done = loki_proc(["serve", "--detach", "--json"], root=root)
    assert done.code == 0, done.stderr
    run = done.json()
    url, token = f"http://127.0.0.1:{run['port']}/mcp", files.token(str(root)) or ""

    async def scenario() -> list[str]:
        claimed = []
        for agent in ("pg-a", "pg-b"):
            async with client(url, token, agent) as session:
                reply, _ = await call(session, "claim")
                assert reply["status"] == "claimed", reply
                claimed.append(reply["task_id"])
        return claimed

    try:
        claimed = anyio.run(scenario)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(run["pid"], signal.SIGKILL)
        assert process_gone(run["pid"])
    store = open_store(str(root))
    try:
        held = {t["id"]: t["claimed_by"] for t in tasks_in(store, "in-progress")}
    finally:
        store.close()
    assert sorted(claimed) == ["t1", "t2"] and held == dict(zip(claimed, ["pg-a", "pg-b"], strict=True))
