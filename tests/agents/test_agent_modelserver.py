"""The scripted model server (tests/agents/modelserver.py) speaks the Messages API as the end-to-end tests need.

The Claude Code tests only show that one client understood it; these pin the protocol itself, with a
plain HTTP client: the streamed events in their order, tool input rebuilt from its ``partial_json``
pieces, side queries that leave the scenario alone, refusals that are recorded, and a scenario that
ran out.
"""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlparse

from tests.agents.modelserver import JSON_CHUNK, ModelServer, bash, text, tool

TOOLS = [{"name": "Bash", "input_schema": {"type": "object"}}]


def post(model: ModelServer, path: str, body: Any, method: str = "POST") -> tuple[int, str, bytes]:
    url = urlparse(model.url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    try:
        connection.request(method, path, body=json.dumps(body) if body is not None else None,
                           headers={"content-type": "application/json"})
        response = connection.getresponse()
        return response.status, response.getheader("content-type") or "", response.read()
    finally:
        connection.close()


def events(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    """Parse server-sent events: ``event:`` and ``data:`` lines, a blank line between events."""
    parsed = []
    for chunk in data.decode().split("\n\n"):
        if not chunk.strip():
            continue
        fields = dict(line.split(": ", 1) for line in chunk.splitlines())
        parsed.append((fields["event"], json.loads(fields["data"])))
    return parsed


def conversation(messages: list[dict[str, Any]], stream: bool = True) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 100, "stream": stream, "tools": TOOLS, "messages": messages}


def test_a_tool_call_is_streamed_as_the_messages_api_does() -> None:
    command = "pytest tests/test_login.py -x -q --maxfail=1 && echo 'all \"good\"'"
    with ModelServer([bash(command, say="Running the tests."), text("Done.")]) as model:
        status, kind, data = post(model, "/v1/messages?beta=true",
                                  conversation([{"role": "user", "content": "go"}]))
    assert status == 200 and kind == "text/event-stream"
    stream = events(data)
    assert all(name == payload["type"] for name, payload in stream)
    start = stream[0][1]["message"]
    assert start["role"] == "assistant" and start["content"] == [] and start["stop_reason"] is None
    blocks = [p["content_block"] for n, p in stream if n == "content_block_start"]
    assert [b["type"] for b in blocks] == ["text", "tool_use"]
    assert blocks[1]["name"] == "Bash" and blocks[1]["id"].startswith("toolu_") and blocks[1]["input"] == {}
    pieces = [p["delta"]["partial_json"] for n, p in stream
              if n == "content_block_delta" and p["index"] == 1]
    assert len(pieces) > 1 and all(len(piece) <= JSON_CHUNK for piece in pieces)  # really cut into chunks
    assert [name for name, _ in stream] == [
        "message_start",
        "content_block_start", "content_block_delta", "content_block_stop",                      # the text
        "content_block_start", *["content_block_delta"] * len(pieces), "content_block_stop",     # the tool call
        "message_delta", "message_stop"]
    assert json.loads("".join(pieces)) == {"command": command, "description": "Run the command"}
    said = [p["delta"]["text"] for n, p in stream if n == "content_block_delta" and p["index"] == 0]
    assert said == ["Running the tests."]
    assert stream[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert model.turns_used == 1 and model.overrun == 0


def test_requests_are_recorded_and_side_queries_use_no_turn() -> None:
    with ModelServer([tool("Read", {"file_path": "/x"}), text("Done.")]) as model:
        first = post(model, "/v1/messages", conversation([{"role": "user", "content": "go"}], stream=False))
        side = post(model, "/v1/messages", {"model": "m", "max_tokens": 5, "messages": [
            {"role": "user", "content": "a title for this session"}]})
        counted = post(model, "/v1/messages/count_tokens", {"model": "m", "messages": []})
        second = post(model, "/v1/messages", conversation([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "file text"},
                                         {"type": "text", "text": "<system-reminder>hint</system-reminder>"}]},
        ], stream=False))
    message = json.loads(first[2])
    assert message["stop_reason"] == "tool_use" and message["content"][0]["input"] == {"file_path": "/x"}
    assert json.loads(side[2])["content"] == [{"type": "text", "text": "ok"}]
    assert counted[0] == 200 and json.loads(counted[2])["input_tokens"] > 0
    assert json.loads(second[2])["content"] == [{"type": "text", "text": "Done."}]
    assert [r.turn for r in model.requests] == [0, None, None, 1]
    assert len(model.conversation) == 2 and model.unexpected() == []
    assert model.tool_results(1) == [{"type": "tool_result", "tool_use_id": "t1", "content": "file text"}]
    assert "system-reminder>hint" in model.new_input(1) and "go" not in model.new_input(1)
    assert len(model.gaps_ms()) == 1 and model.gaps_ms()[0] >= 0


def test_other_paths_are_refused_and_reported() -> None:
    with ModelServer([text("x")]) as model:
        status, _, data = post(model, "/v1/models", None, method="GET")
        post(model, "/api/event_logging/batch", {"events": []})
    assert status == 404 and json.loads(data)["error"]["type"] == "not_found_error"
    assert model.unexpected() == ["GET /v1/models", "POST /api/event_logging/batch"]
    assert model.turns_used == 0


def test_a_scenario_that_ran_out_is_counted_not_looped() -> None:
    with ModelServer([text("only turn")]) as model:
        post(model, "/v1/messages", conversation([], stream=False))
        status, _, data = post(model, "/v1/messages", conversation([], stream=False))
    assert status == 200 and json.loads(data)["stop_reason"] == "end_turn"
    assert model.overrun == 1
