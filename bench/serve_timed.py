"""``loki serve`` for one tree with every request's time at the server appended to a file (for
bench/bench_agent_hooks.py: what the real Claude Code's hook requests cost the server, beside what they cost the
session). ``python -m bench.serve_timed ROOT LOG``: the server's own code, with an ASGI wrapper around its
application that writes ``{"path": ..., "ms": ...}`` per request, from its first byte in to its last byte out."""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def main(root: str, log_path: str) -> None:
    import loki.serve.app as application

    log = open(log_path, "a", buffering=1)  # noqa: SIM115 (open for the server's life)
    made = application.create_app

    def create_app(*args: Any, **kwargs: Any) -> Any:
        inner = made(*args, **kwargs)

        async def timed(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await inner(scope, receive, send)
                return
            started, at = time.perf_counter(), time.monotonic()  # at: the model server's clock (tests/agents)

            async def sent(message: Any) -> None:
                await send(message)
                if message["type"] == "http.response.body" and not message.get("more_body"):
                    log.write(json.dumps({"path": scope["path"], "ms": (time.perf_counter() - started) * 1000,
                                          "at": at}) + "\n")

            await inner(scope, receive, sent)

        return timed

    application.create_app = create_app
    from loki.serve import server

    server.serve(root, ready=lambda run, url: print(json.dumps(run), flush=True))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
