"""The MCP server's streamable-HTTP app (loki.mcpserver.server.http_app) served alone on 127.0.0.1, for the tests:
``python -m tests.mcpserver.httpserver ROOT AGENT [--mounted]`` binds a free port, prints it on one line, then
serves until killed (``--mounted``: inside a parent app, as ``loki serve`` mounts it at
``/mcp``)."""

from __future__ import annotations

import contextlib
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any


def mounted(mcp_app: Any) -> Any:
    """``mcp_app`` mounted in a parent Starlette app whose lifespan enters the MCP app's (docs/mcp.md)."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        async with mcp_app.router.lifespan_context(mcp_app):
            yield

    return Starlette(routes=[Mount("/", app=mcp_app)], lifespan=lifespan)


def main() -> None:
    import uvicorn

    from loki.mcpserver.server import http_app
    from loki.mcpserver.tools import ToolSet
    from loki.storage.opening import open_store

    root, agent = sys.argv[1], sys.argv[2]
    app: Any = http_app(ToolSet(open_store(root), agent))
    if "--mounted" in sys.argv[3:]:  # inside another app, as `loki serve` mounts it
        app = mounted(app)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # before the port is printed: a client connecting before uvicorn runs waits, not refused
    print(sock.getsockname()[1], flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
