"""The same tools over streamable HTTP (loki.mcpserver.server.http_app, the ASGI app ``loki serve`` is to mount at
``/mcp``), served alone on 127.0.0.1 by uvicorn in a real process (tests/mcpserver/httpserver.py) and driven by the
SDK's own client: two clients racing to claim, a stale claim token, every bad argument refused, the DNS-rebinding
guard."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from loki.storage.store import Store
from tests.helpers import LazyModule, cli, lazy_module_or_skip, process_gone, snapshot_bytes, tasks_in, tree_problems
from tests.mcpserver.test_mcp_stdio import Rounds, call, claim_in_rounds
from tests.mcpserver.test_tools import BAD_ARGUMENTS

mcp = lazy_module_or_skip("mcp", reason="the mcp extra is not installed (pip install -e '.[dev]')")
anyio = LazyModule("anyio")  # both imported by the tests that use them, not by collection

pytestmark = pytest.mark.slow  # real server processes

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def http_server(root: Path, agent: str, *extra: str) -> Iterator[str]:
    """The URL of a server for ``agent`` over ``root``; killed on the way out."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "tests.mcpserver.httpserver", str(root), agent, *extra],
                            stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert process_gone(proc.pid)


def test_two_clients_racing_over_http_never_get_the_same_task(root: Path) -> None:
    ids = [f"t{n:02}" for n in range(24)]
    batch = root.parent / "batch.json"
    batch.write_text(json.dumps([{"id": task_id, "title": f"task {task_id}"} for task_id in ids]))
    assert cli(["queue", "add", "--from-file", str(batch)], root=root).code == 0
    got: dict[str, list[str]] = {"a1": [], "a2": []}
    rounds = Rounds(2)

    async def agent(url: str, name: str) -> None:
        async with mcp.Client(url) as client:
            got[name] = [reply["task_id"] for reply in await claim_in_rounds(client, rounds)]

    with http_server(root, "a1") as one, http_server(root, "a2") as two:

        async def race() -> None:
            async with anyio.create_task_group() as group:
                group.start_soon(agent, one, "a1")
                group.start_soon(agent, two, "a2")

        anyio.run(race)
    assert sorted(got["a1"] + got["a2"]) == ids
    assert got["a1"] and got["a2"], got
    held = {t["id"]: t["claimed_by"] for t in tasks_in(Store(root), "in-progress")}
    assert held == {**dict.fromkeys(got["a1"], "a1"), **dict.fromkeys(got["a2"], "a2")}
    assert tree_problems(root) == []


def test_a_stale_token_and_every_bad_argument_over_http_change_nothing(root: Path) -> None:
    assert cli(["queue", "add", "one", "--id", "t1"], root=root).code == 0

    async def scenario(url: str) -> None:
        async with mcp.Client(url) as client:
            first, _ = await call(client, "claim")
            await call(client, "release", task_id="t1", token=first["token"])
            second, _ = await call(client, "claim")
            before = snapshot_bytes(root)
            refused, is_error = await call(client, "complete", task_id="t1", token=first["token"])
            assert is_error and refused["status"] == "lease_lost"
            for name, arguments, field in BAD_ARGUMENTS:
                if arguments.get("token") == "x":
                    arguments = {**arguments, "token": second["token"]}
                reply, is_error = await call(client, name, **arguments)
                assert is_error and reply["status"] == "bad_input" and reply["field"] == field, (name, reply)
            assert snapshot_bytes(root) == before
            done, _ = await call(client, "complete", task_id="t1", token=second["token"])
            assert done["status"] == "completed"

    with http_server(root, "a1") as url:
        anyio.run(scenario, url)
    assert tasks_in(Store(root), "completed")[0]["completed_by"] == "a1"


def test_a_request_naming_another_host_is_refused(root: Path) -> None:
    """The SDK's DNS-rebinding guard, on for 127.0.0.1: a web page that resolved its own name to 127.0.0.1
    cannot call the tools."""
    import httpx2 as httpx

    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "Host": "evil.example:80"}
    with http_server(root, "a1") as url:
        answer = httpx.post(url, json=body, headers=headers)
    assert answer.status_code in (403, 421), answer.text


def test_mounted_in_another_app_with_the_documented_lifespan_it_serves_the_tools(root: Path) -> None:
    """What `loki serve` is to do: mount the app and enter its lifespan in its own (docs/mcp.md, "Over HTTP")."""
    assert cli(["queue", "add", "one", "--id", "t1"], root=root).code == 0

    async def scenario(url: str) -> dict[str, Any]:
        async with mcp.Client(url) as client:
            reply, _ = await call(client, "claim")
            return reply

    with http_server(root, "mounted-1", "--mounted") as url:
        claimed = anyio.run(scenario, url)
    assert claimed["status"] == "claimed" and tasks_in(Store(root), "in-progress")[0]["claimed_by"] == "mounted-1"
