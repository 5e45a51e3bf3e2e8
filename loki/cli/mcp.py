"""``loki mcp``: the queue's holder verbs as an MCP server over stdio (:mod:`loki.mcpserver`, docs/mcp.md)."""

from __future__ import annotations

import typer

from loki.cli.common import store_from


def mcp(
    ctx: typer.Context,
    agent: str = typer.Option(..., "--agent", "-a", envvar="LOKI_AGENT",
                              help="The agent the tools act as (or LOKI_AGENT): every claim is this agent's."),
) -> None:
    """Serve loki's tools (ready, claim, heartbeat, complete, fail, release, signal, escalate) to an MCP client on
    stdin/stdout, until it closes stdin. Needs the mcp extra of loki-state (docs/mcp.md)."""
    from loki.errors import LokiError
    from loki.mcpserver.tools import ToolSet

    tools = ToolSet(store_from(ctx), agent)  # a bad name or a missing tree is said now, not on every call
    try:
        from loki.mcpserver.server import run_stdio
    except ImportError as exc:
        raise LokiError("loki mcp needs the MCP SDK (the mcp package), which this installation lacks: "
                        "pip install 'loki-state[mcp]'", missing=exc.name) from exc
    run_stdio(tools)
