"""A scripted OpenAI Responses API on 127.0.0.1: the model's side of a Codex CLI end-to-end test.

Codex CLI, given a model provider whose ``base_url`` is this server (``wire_api = "responses"``),
sends ``POST /v1/responses`` with the whole conversation as ``input`` (messages, ``function_call``
and ``function_call_output`` items) and reads server-sent events: ``response.created``, one
``response.output_item.done`` per output item, ``response.completed``. This server answers the n-th
request with the n-th item of its script (a shell command through Codex's ``exec_command`` tool, or
a closing message) and records every request: the context hooks add arrives as ``developer``
messages, a denied command as the call's output.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Item = dict[str, Any]


def run(command: str) -> Item:
    """A turn calling Codex's shell tool (``exec_command``)."""
    return {"type": "function_call", "name": "exec_command", "arguments": json.dumps({"cmd": command})}


def apply_patch(patch: str) -> Item:
    """A turn calling Codex's ``apply_patch`` tool (a freeform tool: the patch is the call's whole input; offered
    only for a model Codex knows, :data:`tests.agents.codexcli.PATCH_MODEL`)."""
    return {"type": "custom_tool_call", "name": "apply_patch", "input": patch}


def say(text: str) -> Item:
    """A closing turn: an assistant message, no tool call (``codex exec`` ends)."""
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


class ResponsesServer:
    """``with ResponsesServer([item, ...]) as server:`` then ``server.url`` as the provider's base_url."""

    def __init__(self, script: list[Item], *, usage: dict[str, int] | None = None) -> None:
        self.script = list(script)
        self.usage = usage or {"input_tokens": 10, "cached_tokens": 0, "output_tokens": 5}
        """What each response reports: ``input_tokens`` (cached ones included, as the API counts them),
        ``cached_tokens`` (``input_tokens_details.cached_tokens``), ``output_tokens``."""
        self.replies = 0
        self.requests: list[dict[str, Any]] = []
        self.others: list[str] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> ResponsesServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def _next(self, body: dict[str, Any]) -> tuple[int, Item]:
        with self._lock:
            index = len(self.requests)
            self.requests.append(body)
        item = self.script[index] if index < len(self.script) else say("done.")
        if item["type"] in ("function_call", "custom_tool_call"):
            item = {**item, "call_id": f"call_{index}"}
        return index, item

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # model lists and the like: not scripted
                server.others.append(self.path)
                self.send_error(404)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.endswith("/responses"):
                    server.others.append(self.path)
                    self.send_error(404)
                    return
                index, item = server._next(body)
                response = {"id": f"resp_{index}"}
                figures = server.usage
                details = {"cached_tokens": figures["cached_tokens"]} if figures.get("cached_tokens") else None
                usage = {"input_tokens": figures["input_tokens"], "input_tokens_details": details,
                         "output_tokens": figures["output_tokens"], "output_tokens_details": None,
                         "total_tokens": figures["input_tokens"] + figures["output_tokens"]}
                with server._lock:
                    server.replies += 1
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for event in ({"type": "response.created", "response": response},
                              {"type": "response.output_item.done", "output_index": 0, "item": item},
                              {"type": "response.completed", "response": {**response, "usage": usage}}):
                    self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())

        return Handler


# -- reading what the model was sent --------------------------------------------------------------


def developer_texts(request: dict[str, Any]) -> list[str]:
    """Every developer message's text, in order (the hooks' context is among them)."""
    return ["".join(part.get("text", "") for part in item["content"]) for item in request["input"]
            if item.get("type") == "message" and item.get("role") == "developer"]


def call_outputs(request: dict[str, Any]) -> list[str]:
    """The outputs of the conversation's tool calls, in order."""
    return [str(item["output"]) for item in request["input"]
            if item.get("type") in ("function_call_output", "custom_tool_call_output")]


def after_last_call(request: dict[str, Any]) -> str:
    """The developer messages after the last tool call: what the hooks said about it (before and after)."""
    items = request["input"]
    last = max(i for i, item in enumerate(items) if item.get("type") in ("function_call", "custom_tool_call"))
    return "\n".join("".join(part.get("text", "") for part in item["content"]) for item in items[last + 1:]
                     if item.get("type") == "message" and item.get("role") == "developer")
