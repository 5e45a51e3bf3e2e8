"""A scripted Anthropic Messages API on 127.0.0.1: the model, played by a list of turns.

Claude Code pointed at it (``ANTHROPIC_BASE_URL``) runs its real tools and hooks, and every request
it makes is recorded, so a test asserts on what the model *received*: the tool results, the context
loki's hooks injected, the briefing. Nothing here is Claude Code specific beyond the Messages API.

A scenario is data: a list of :class:`Turn`, each one model reply (``bash("make")``,
``text("done")``). Each conversation request (a ``POST /v1/messages`` whose body offers tools) takes
the next turn; a request without tools is a side query of the client (a title, a summary) and gets
a short text answer without using a turn. A conversation request after the last turn is answered
with ``end_turn`` text and counted in :attr:`ModelServer.overrun`, so a scenario that ran out shows
in the test instead of looping.

Replies are streamed as the API does (server-sent events: ``message_start``, per block
``content_block_start``/``content_block_delta``/``content_block_stop`` with ``text_delta`` or
``input_json_delta`` chunks, ``message_delta`` with the stop reason, ``message_stop``), or as one
JSON message when the request did not ask for ``stream``. ``/v1/messages/count_tokens`` is answered
(a rough count); any other path is refused with the API's 404 error body. All of it is recorded.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "claude-scripted-1"
JSON_CHUNK = 24
"""Tool input is streamed in pieces this long, as the API cuts ``partial_json``: a client that only
read whole chunks would be caught."""


@dataclass(frozen=True)
class Turn:
    """One model reply: optional text, then optional tool calls (``(name, input)`` pairs)."""

    text: str = ""
    tools: tuple[tuple[str, dict[str, Any]], ...] = ()

    @property
    def stop_reason(self) -> str:
        return "tool_use" if self.tools else "end_turn"


def text(message: str) -> Turn:
    return Turn(text=message)


def tool(name: str, tool_input: dict[str, Any], say: str = "") -> Turn:
    return Turn(text=say, tools=((name, tool_input),))


def bash(command: str, description: str = "Run the command", say: str = "") -> Turn:
    return tool("Bash", {"command": command, "description": description}, say=say)


def together(*turns: Turn) -> Turn:
    """One reply holding the tool calls of all ``turns`` (a client may run them concurrently)."""
    return Turn(tools=tuple(call for turn in turns for call in turn.tools))


@dataclass
class Request:
    """One HTTP request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float = field(default_factory=time.monotonic)
    """When it arrived (``time.monotonic``): the gaps between conversation requests are the client's time
    per turn (its tools and hooks), which bench/bench_agent_hooks.py measures."""
    turn: int | None = None
    """Index of the scenario turn this request was answered with; None for side queries and refusals."""

    @property
    def is_conversation(self) -> bool:
        return self.turn is not None


@dataclass
class ModelServer:
    """The scripted model: ``with ModelServer([...]) as model:`` then ``model.url``."""

    turns: list[Turn]
    usage: dict[str, int] = field(default_factory=dict)
    """What each reply reports it used, over the defaults (``input_tokens`` 100, ``output_tokens`` 10, no
    cache): ``{"cache_read_input_tokens": 5000}`` makes every reply report cache reads
    (tests/agents/test_agent_spend.py)."""
    replies: int = 0
    """How many /v1/messages replies were sent (each reports ``usage``): what a session's totals sum."""
    requests: list[Request] = field(default_factory=list)
    overrun: int = 0
    _next: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> ModelServer:
        handler = type("Handler", (_Handler,), {"model": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="model-server", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    @property
    def url(self) -> str:
        assert self._server is not None, "use the server inside `with`"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # -- what the model received -----------------------------------------------------------------

    @property
    def conversation(self) -> list[Request]:
        """The requests that were answered with a scenario turn, in order."""
        return [r for r in self.requests if r.is_conversation]

    @property
    def turns_used(self) -> int:
        return self._next

    def gaps_ms(self) -> list[float]:
        """Milliseconds between consecutive conversation requests: each is one turn on the client's side
        (running the tool calls of the previous reply, with their hooks, and sending the next request)."""
        times = [r.at for r in self.conversation]
        return [(later - earlier) * 1000 for earlier, later in itertools.pairwise(times)]

    def unexpected(self) -> list[str]:
        """Requests that were neither a conversation turn, a side query nor a token count."""
        return [f"{r.method} {r.path}" for r in self.requests
                if not (r.method == "POST" and r.path.split("?")[0] in ("/v1/messages", "/v1/messages/count_tokens"))]

    def received(self, turn: int) -> str:
        """Everything the model was sent with request ``turn`` (0-based), as one text to search."""
        return json.dumps(self.conversation[turn].body, ensure_ascii=False)

    def tool_results(self, turn: int) -> list[dict[str, Any]]:
        """The ``tool_result`` blocks of the last user message the model got with request ``turn``."""
        messages = self.conversation[turn].body["messages"]
        last_user = next(m for m in reversed(messages) if m["role"] == "user")
        content = last_user["content"]
        return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"] if isinstance(
            content, list) else []

    def new_input(self, turn: int) -> str:
        """What request ``turn`` carried that request ``turn - 1`` did not: the messages after the
        previous request's, as text (the tool results and whatever the client added with them)."""
        messages = self.conversation[turn].body["messages"]
        before = len(self.conversation[turn - 1].body["messages"]) if turn else 0
        return json.dumps(messages[before:], ensure_ascii=False)

    # -- answering -------------------------------------------------------------------------------

    def _take_turn(self) -> tuple[int, Turn]:
        with self._lock:
            index = self._next
            self._next += 1
            if index < len(self.turns):
                return index, self.turns[index]
            self.overrun += 1
            return index, text("(the scripted scenario has no more turns)")

    def _message_id(self) -> str:
        with self._lock:
            return f"msg_scripted_{next(self._ids):04d}"

    def _tool_id(self) -> str:
        with self._lock:
            return f"toolu_scripted_{next(self._ids):04d}"


def _blocks(model: ModelServer, turn: Turn) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": turn.text}] if turn.text else []
    blocks += [{"type": "tool_use", "id": model._tool_id(), "name": name, "input": tool_input}
               for name, tool_input in turn.tools]
    return blocks


def _usage(output_tokens: int, extra: dict[str, int] | None = None) -> dict[str, int]:
    usage = {"input_tokens": 100, "output_tokens": output_tokens, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0}
    usage.update({k: v for k, v in (extra or {}).items() if k != "output_tokens"})
    if extra and "output_tokens" in extra and output_tokens != 1:
        usage["output_tokens"] = extra["output_tokens"]
    return usage


def stream_events(message_id: str, blocks: list[dict[str, Any]],
                  stop_reason: str, usage: dict[str, int] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """The server-sent events of one streamed reply, as ``(event, data)`` pairs."""
    yield "message_start", {"type": "message_start", "message": {
        "id": message_id, "type": "message", "role": "assistant", "model": MODEL, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": _usage(1, usage)}}
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {"type": "text", "text": ""}}
            yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": {"type": "text_delta", "text": block["text"]}}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": {
                "type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}
            raw = json.dumps(block["input"])
            for start in range(0, len(raw), JSON_CHUNK):
                yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": {
                    "type": "input_json_delta", "partial_json": raw[start:start + JSON_CHUNK]}}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield "message_delta", {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                            "usage": {"output_tokens": (usage or {}).get("output_tokens", 10)}}
    yield "message_stop", {"type": "message_stop"}


class _Handler(BaseHTTPRequestHandler):
    model: ModelServer
    protocol_version = "HTTP/1.1"  # keep-alive, as the client expects of the API

    def log_message(self, format: str, *args: Any) -> None:  # the test output is not an access log
        pass

    def _read_body(self) -> Any:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")

    def _record(self, body: Any) -> Request:
        request = Request(self.command, self.path, dict(self.headers), body)
        with self.model._lock:
            self.model.requests.append(request)
        return request

    def _send(self, status: int, content_type: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", f"req_scripted_{len(self.model.requests):04d}")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _refuse(self) -> None:
        self._record(self._read_body())
        error = {"type": "error", "error": {"type": "not_found_error",
                                            "message": f"the scripted model serves no {self.command} {self.path}"}}
        self._send(404, "application/json", json.dumps(error).encode())

    do_GET = do_HEAD = do_PUT = do_DELETE = do_PATCH = _refuse

    def do_POST(self) -> None:
        path = self.path.split("?")[0]
        if path == "/v1/messages/count_tokens":
            body = self._read_body()
            self._record(body)
            tokens = max(1, len(json.dumps(body)) // 4)
            self._send(200, "application/json", json.dumps({"input_tokens": tokens}).encode())
            return
        if path != "/v1/messages":
            self._refuse()
            return
        body = self._read_body()
        request = self._record(body)
        if isinstance(body, dict) and body.get("tools"):
            request.turn, turn = self.model._take_turn()
        else:
            turn = text("ok")
        blocks = _blocks(self.model, turn)
        message_id = self.model._message_id()
        with self.model._lock:
            self.model.replies += 1
        if isinstance(body, dict) and body.get("stream"):
            data = "".join(f"event: {event}\ndata: {json.dumps(payload)}\n\n"
                           for event, payload in stream_events(message_id, blocks, turn.stop_reason,
                                                               self.model.usage))
            self._send(200, "text/event-stream", data.encode())
            return
        message = {"id": message_id, "type": "message", "role": "assistant", "model": MODEL, "content": blocks,
                   "stop_reason": turn.stop_reason, "stop_sequence": None, "usage": _usage(10, self.model.usage)}
        self._send(200, "application/json", json.dumps(message).encode())
