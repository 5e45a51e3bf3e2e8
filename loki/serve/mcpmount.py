"""``/mcp`` of ``loki serve``: the MCP tools (:mod:`loki.mcpserver`) over streamable HTTP, behind the server's
guard (Host, Origin, the tree's token in a header), docs/mcp.md "Over HTTP".

The agent a call acts as is named by the client's configuration in the ``X-Loki-Agent`` header of every request,
never by the model: a request without a valid name is refused (400) before the SDK sees it. The SDK is imported
only here, only when the server starts; without the ``mcp`` extra ``/mcp`` answers 501 naming the extra.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from starlette.responses import PlainTextResponse

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from loki.mcpserver.tools import ToolSet

PATH = "/mcp"
AGENT_HEADER = "X-Loki-Agent"
MISSING_EXTRA = ("loki serve: /mcp needs the mcp extra of loki-state (the MCP SDK), which this installation "
                 "lacks: pip install 'loki-state[mcp]', then restart loki serve\n")


class Agents:
    """One tool set per agent name, over one store of the tree opened at the first call (in a worker thread)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.store: Any = None
        self.by_name: dict[str, ToolSet] = {}
        self.lock = threading.Lock()

    def for_request(self, ctx: Any) -> ToolSet:
        request = getattr(ctx, "request", None)
        name = request.headers.get(AGENT_HEADER) if request is not None else None
        return self.get(name or "")

    def get(self, name: str) -> ToolSet:
        from loki.mcpserver.tools import ToolSet

        with self.lock:
            if name not in self.by_name:
                if self.store is None:
                    from loki.storage.opening import open_store

                    self.store = open_store(self.root)
                self.by_name[name] = ToolSet(self.store, name)  # a bad name raises: the wrapper checked it first
            return self.by_name[name]

    def close(self) -> None:
        close = getattr(self.store, "close", None)
        if callable(close):
            close()


def agent_refusal(value: str | None) -> str | None:
    """Why ``value`` (the X-Loki-Agent header) names no agent, or None."""
    from loki.errors import LokiError
    from loki.text.textsafe import check_name

    if not value:
        return (f"no agent name: send the {AGENT_HEADER} header (set it in the MCP client's configuration, "
                "docs/mcp.md)")
    try:
        check_name(value, f"the {AGENT_HEADER} header")
    except LokiError as exc:
        return str(exc)
    return None


class NamedAgent:
    """Refuses (400, one line) an HTTP request whose ``X-Loki-Agent`` header names no valid agent."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            wanted = AGENT_HEADER.lower().encode()
            value = next((v.decode("latin-1") for k, v in scope["headers"] if k.lower() == wanted), None)
            reason = agent_refusal(value)
            if reason is not None:
                text = reason.replace("\n", " ").replace("\r", " ")
                await PlainTextResponse(f"loki serve /mcp: {text}\n", status_code=400)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class MissingExtra:
    """``/mcp`` without the SDK: 501 naming the extra."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await PlainTextResponse(MISSING_EXTRA, status_code=501)(scope, receive, send)


def mcp_mount(root: str, host: str) -> tuple[ASGIApp, Callable[[Any], contextlib.AbstractAsyncContextManager[None]]]:
    """(the app to mount at ``/mcp``, the lifespan the parent app runs). Without the SDK: the 501 answer and a
    lifespan that does nothing."""
    try:
        from loki.mcpserver.server import http_app
    except ImportError:
        @contextlib.asynccontextmanager
        async def nothing(app: Any) -> AsyncIterator[None]:
            yield

        return MissingExtra(), nothing

    agents = Agents(root)
    mcp_app: Any = http_app(agents.for_request, path=PATH, host=host)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        try:
            async with mcp_app.router.lifespan_context(mcp_app):
                yield
        finally:
            agents.close()

    return NamedAgent(mcp_app), lifespan
