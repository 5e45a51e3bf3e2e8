"""``/mcp`` of ``loki serve`` (issue 29, HTTP): a claim + complete round trip through MCP over streamable HTTP
against the same over stdio (``loki mcp``), in the same run, on the same queue of 100 pending tasks.

* Over HTTP: one ``loki serve --detach`` for the whole run, the SDK's client with the token and the agent in
  headers (as ``loki hooks install --mcp --via http`` configures Claude Code); each sample is ``claim`` then
  ``complete``.
* Over stdio: ``bench.bench_mcp``'s own measurement (one ``loki mcp`` server, the SDK's client).
* The floor: the same claim + complete in-process (``Queue``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from bench.bench_mcp import _through_mcp
from bench.bench_work import _refill, _tree
from bench.common import BASE_ENV, loki_executable, median, row, runs, time_call
from loki.queue.queue import Queue
from loki.storage.store import Store

PENDING = 100


def _through_http(root: str, repeat: int, serial: list[int]) -> list[float]:
    import anyio
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    from loki.resident import files

    env = {**BASE_ENV, "LOKI_ROOT": root}
    started = subprocess.run([*loki_executable(), "serve", "--detach", "--json"], env=env, capture_output=True,
                             check=True, text=True)
    run = json.loads(started.stdout)
    samples: list[float] = []
    headers = {"Authorization": f"Bearer {files.token(root)}", "X-Loki-Agent": "bench-http"}

    async def scenario() -> None:
        http = create_mcp_http_client(headers=headers)
        async with Client(streamable_http_client(f"http://127.0.0.1:{run['port']}/mcp", http_client=http)) as client:
            for index in range(repeat + 2):
                _refill(root, serial)
                begin = time.perf_counter()
                claimed = (await client.call_tool("claim", {})).structured_content
                done = (await client.call_tool("complete", {"task_id": claimed["task_id"],
                                                            "token": claimed["token"]})).structured_content
                elapsed = (time.perf_counter() - begin) * 1000
                assert done["status"] == "completed", done
                if index >= 2:
                    samples.append(elapsed)

    try:
        anyio.run(scenario)
    finally:
        os.kill(run["pid"], signal.SIGTERM)
    return samples


def run() -> list[dict[str, Any]]:
    repeat = runs(30)
    root = _tree(PENDING)
    store = Store(root, validate_all=False)
    serial = [0]
    queue = Queue(store)

    def claim_complete() -> None:
        task = queue.claim("bench-bare")
        queue.complete(task["id"], "bench-bare", token=task["claim_token"])

    bare = []
    for _ in range(repeat):
        _refill(root, serial)
        bare.extend(time_call(claim_complete, repeat=1, warmup=0))
    in_process = median(bare)
    try:
        http = median(_through_http(root, repeat, serial))
        stdio = median(_through_mcp(root, repeat, serial)[0])
    except ImportError:
        return [row("mcp http: not run (no mcp SDK or no serve extra)", 0.0)]
    note = f"{PENDING} pending; one server for the run"
    return [
        row("mcp http: claim + complete at /mcp of loki serve", http, floor_name="in-process", floor_ms=in_process,
            note=f"{note}; {http / stdio:.2f}x the time over stdio"),
        row("mcp http: claim + complete over stdio (loki mcp)", stdio, floor_name="in-process", floor_ms=in_process,
            note=note),
        row("mcp http: claim + complete in-process (Queue)", in_process, note="the queue's own share of both"),
    ]


if __name__ == "__main__":
    os.environ.setdefault("LOKI_BENCH_QUICK", "")
    for result in run():
        print(result)
    sys.exit(0)
