"""One HTTP request to an ASGI application, in this process (no HTTP client library, no socket)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Reply:
    status: int
    body: bytes
    headers: list[tuple[str, str]] = field(default_factory=list)

    def json(self) -> Any:
        return json.loads(self.body)

    def header(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key.lower() == name.lower()]


def request(app: Any, method: str, path: str, *, headers: dict[str, str] | None = None, body: bytes = b"",
            host: str = "127.0.0.1:8800") -> Reply:
    path, _, query = path.partition("?")
    sent = {"host": host, **(headers or {})}
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": query.encode(), "root_path": "",
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in sent.items()],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8800),
    }
    chunks: list[bytes] = []
    start: dict[str, Any] = {}
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if delivered:
            await asyncio.sleep(3600)  # the client stays connected; only a streaming response waits here
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    asyncio.run(app(scope, receive, send))
    headers_out = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in start.get("headers", [])]
    return Reply(start["status"], b"".join(chunks), headers_out)
