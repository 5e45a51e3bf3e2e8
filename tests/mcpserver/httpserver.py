"""The MCP server's streamable-HTTP app (loki.mcpserver.server.http_app) served alone on 127.0.0.1, for the tests:
``python -m tests.mcpserver.httpserver ROOT AGENT`` binds a free port, prints it on one line, then serves until
killed. ``loki serve`` (another issue) mounts the same app at ``/mcp``; this runs it without it."""

from __future__ import annotations

import socket
import sys


def main() -> None:
    import uvicorn

    from loki.mcpserver.server import http_app
    from loki.mcpserver.tools import ToolSet
    from loki.storage.opening import open_store

    root, agent = sys.argv[1], sys.argv[2]
    app = http_app(ToolSet(open_store(root), agent))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
