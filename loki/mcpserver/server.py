"""The tool set (:mod:`loki.mcpserver.tools`) on the official ``mcp`` SDK (the ``loki-state[mcp]`` extra).

:func:`build_server` makes the protocol server; :func:`run_stdio` serves it over stdin/stdout (``loki mcp``);
:func:`http_app` is the same server as a streamable-HTTP ASGI app, for ``loki serve`` to mount at ``/mcp``
(and run standalone in the tests). Only this module imports the SDK, and only ``loki mcp`` imports it.

The library is synchronous (file locks, or one PostgreSQL connection): each tool call runs in a worker
thread, one at a time per server (:class:`_Serial`), so a slow lock never stalls the protocol's event loop
and two calls never share the store at once. Two servers (two agents) are two processes, fenced by the
queue's own locks.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server

from loki.mcpserver.tools import ToolSet
from loki.text.textsafe import json_for_terminal

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext
    from starlette.applications import Starlette

INSTRUCTIONS = ("loki's shared task queue. Loop: claim, do the task (heartbeat on long ones), then complete with "
                "evidence or fail with the error; pass the claim token each time. Every reply has a status.")


ToolsFor = Callable[[Any], ToolSet]
"""Given a call's request context, the tool set (the agent) it acts for: ``loki serve`` names the agent per
HTTP request (:mod:`loki.serve.mcpmount`). Called in the worker thread, so it may open a store."""


class _Serial:
    """Tool calls one at a time, each in a worker thread."""

    def __init__(self, tools: ToolSet | ToolsFor) -> None:
        self.tools = tools
        self.lock = anyio.Lock()

    async def call(self, ctx: Any, name: str, arguments: Any) -> tuple[dict[str, Any], bool]:
        tools = self.tools

        def run() -> tuple[dict[str, Any], bool]:
            return (tools if isinstance(tools, ToolSet) else tools(ctx)).call(name, arguments)

        async with self.lock:
            return await anyio.to_thread.run_sync(run)


def build_server(tools: ToolSet | ToolsFor) -> Server[Any]:
    """The protocol server for ``tools`` (one agent's, or a function of the request choosing them):
    ``tools/list`` and ``tools/call``, nothing else."""
    serial = _Serial(tools)
    listing = [types.Tool(name=t["name"], description=t["description"], input_schema=t["inputSchema"])
               for t in ToolSet.tools()]

    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
                         ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listing)

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        reply, is_error = await serial.call(ctx, params.name, params.arguments)
        # hosts show tool results to people too: a title's DEL, C1 or bidi character travels escaped (C0 already is)
        text = json_for_terminal(json.dumps(reply, ensure_ascii=False, default=str))
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    structured_content=reply, is_error=is_error)

    return Server("loki", version=_version(), instructions=INSTRUCTIONS, on_list_tools=list_tools,
                  on_call_tool=call_tool)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("loki-state")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return ""


async def serve_stdio(tools: ToolSet) -> None:
    from mcp.server.stdio import stdio_server

    server = build_server(tools)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def run_stdio(tools: ToolSet) -> None:
    """Serve ``tools`` on stdin/stdout until the client closes stdin."""
    anyio.run(serve_stdio, tools)


def http_app(tools: ToolSet | ToolsFor, *, path: str = "/mcp", host: str = "127.0.0.1") -> Starlette:
    """The same tools as a streamable-HTTP ASGI app answering at ``path`` (run it with its lifespan: the
    SDK's session manager starts there). ``host`` sets the SDK's DNS-rebinding protection (on for
    127.0.0.1/localhost: only those Host and Origin headers are accepted).

    Mounted in another Starlette app (``Mount("/", app=mcp_app)``), its lifespan does not run by itself:
    the parent's lifespan enters ``mcp_app.router.lifespan_context(mcp_app)``."""
    return build_server(tools).streamable_http_app(streamable_http_path=path, host=host)
