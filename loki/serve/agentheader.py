"""Who a hook request to ``loki serve`` is for: the ``X-Loki-Agent`` header (Claude Code fills it from the
session's ``LOKI_AGENT``) becomes the path lease gate's agent for that request (loki/hooks/leasegate.py,
``REQUEST_AGENT``). A request without it, or with it empty, is "someone else" (docs/leases.md): the server's
own environment never names the agent."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from loki.hooks.leasegate import REQUEST_AGENT
from loki.resident.files import AGENT_HEADER

MAX_AGENT_CHARS = 200
"""A longer header is no name (agent names are short); it counts as none."""
_HEADER = AGENT_HEADER.lower().encode("latin-1")


def requested_agent(scope: Scope) -> str | None:
    """The agent a request names in its header, else None."""
    for key, value in scope.get("headers", []):
        if key.lower() == _HEADER:
            text = bytes(value).decode("latin-1").strip()
            if text.startswith("$"):  # the placeholder itself: the session's LOKI_AGENT was not set
                return None
            if text and len(text) <= MAX_AGENT_CHARS and text.isprintable():
                return text
            return None
    return None


class AgentIdentity:
    """Sets :data:`REQUEST_AGENT` for each HTTP request it passes on (the thread that answers a hook runs in a
    copy of the request's context)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = REQUEST_AGENT.set((requested_agent(scope),))
        try:
            await self.app(scope, receive, send)
        finally:
            REQUEST_AGENT.reset(token)
