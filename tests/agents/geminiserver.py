"""A scripted Gemini API on 127.0.0.1: the model's side of an end-to-end test, as data.

Gemini CLI talks to ``$GOOGLE_GEMINI_BASE_URL/v1beta/models/<model>:streamGenerateContent?alt=sse``
(the Gemini API: a JSON request of ``contents``, answered by server-sent events, each ``data:`` line
a ``GenerateContentResponse``). This server answers the n-th request with the n-th turn of its
script (a tool call, or text that ends the session) and records every request, so a test asserts on
what the model was told: a tool's result, the context a hook appended to it (``<hook_context>``),
a denial, the briefing prepended to the prompt.

A request past the end of the script gets a closing text ("done."), so the CLI always ends.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Parts = list[dict[str, Any]]


def shell(command: str, description: str = "") -> Parts:
    """A turn calling Gemini CLI's shell tool."""
    args = {"command": command, **({"description": description} if description else {})}
    return [{"functionCall": {"name": "run_shell_command", "args": args}}]


def tool(name: str, **args: Any) -> Parts:
    return [{"functionCall": {"name": name, "args": args}}]


def say(text: str) -> Parts:
    """A closing turn: text, no tool call (the CLI ends the session)."""
    return [{"text": text}]


class GeminiServer:
    """``with GeminiServer([turn, ...]) as server:`` then ``server.url`` for GOOGLE_GEMINI_BASE_URL."""

    def __init__(self, script: list[Parts], *, usage: dict[str, int] | None = None) -> None:
        self.script = list(script)
        self.usage = usage or {"promptTokenCount": 10, "candidatesTokenCount": 5}
        """What each reply's ``usageMetadata`` reports (``cachedContentTokenCount`` too, when given)."""
        self.requests: list[dict[str, Any]] = []
        """Every streamGenerateContent body, in order."""
        self.others: list[str] = []
        """Paths of any other request (none are expected: the model is named, so no router call)."""
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> GeminiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def _next(self, body: dict[str, Any]) -> Parts:
        with self._lock:
            index = len(self.requests)
            self.requests.append(body)
        return self.script[index] if index < len(self.script) else say("done.")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet: the test reports what matters
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if ":streamGenerateContent" not in self.path:
                    server.others.append(self.path)
                    self.send_error(404, "only streamGenerateContent is scripted")
                    return
                parts = server._next(body)
                chunk = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP",
                                         "index": 0}],
                         "usageMetadata": {**server.usage, "totalTokenCount": server.usage["promptTokenCount"]
                                           + server.usage["candidatesTokenCount"]}}
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n")

        return Handler


# -- reading what the model was sent --------------------------------------------------------------


def prompt_text(request: dict[str, Any]) -> str:
    """The text of the first user turn (Gemini CLI prepends SessionStart's context to the prompt)."""
    first = request["contents"][0]
    return "\n".join(part["text"] for part in first["parts"] if "text" in part)


def tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The function responses of the request's last user turn: what the tool calls just returned."""
    last = request["contents"][-1]
    return [part["functionResponse"]["response"] for part in last["parts"] if "functionResponse" in part]


def last_tool_result(request: dict[str, Any]) -> str:
    """The one tool result of the last turn, as the model reads it (``output``, or ``error``)."""
    (result,) = tool_results(request)
    return str(result.get("output", result.get("error", "")))
