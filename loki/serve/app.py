"""The ASGI application of ``loki serve``: hooks over HTTP behind one guard (docs/serve.md).

:func:`create_app` builds it for one tree. Every request passes :class:`Guard` first:

* ``Host`` must name the server as the browser or agent reached it (``127.0.0.1:PORT``, ``localhost:PORT``,
  ``[::1]:PORT``, or the ``--host`` given): a page on another site that rebinds a DNS name to 127.0.0.1
  sends its own name and is refused;
* an ``Origin``, when sent, must be one of those too: a cross-site request is refused;
* the tree's token, in the ``X-Loki-Token`` header (the hooks), ``Authorization: Bearer`` (MCP clients) or the
  ``loki_session`` cookie (the board; never for ``/mcp``, which only programs call);
* anything else is 403 and reaches no route, so it changes nothing.

``POST /hook/<event>`` answers Claude Code's HTTP hooks with the command hooks' own handlers
(:data:`loki.hooks.handlers.HANDLERS`, through :func:`loki.hooks.boundary.parse_payload`): one code path.
More ASGI applications can be mounted (``mounts={"/mcp": app}``): they sit behind the same guard.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route

from loki.hooks import boundary
from loki.hooks.payload import HookError
from loki.resident import files
from loki.serve.routes import board_routes
from loki.serve.tokens import COOKIE, derived

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send



class Guard:
    """Host, Origin and token, checked before any route (pure ASGI, so it also covers mounted apps)."""

    def __init__(self, app: ASGIApp, token: str, hosts: frozenset[str], header_only: tuple[str, ...] = ()) -> None:
        self.app = app
        self.token = token
        self.hosts = hosts
        self.session = derived(token, "session")
        self.header_only = header_only  # path prefixes a browser's cookie does not open

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        reason = self.refusal(headers, scope)
        if reason is not None:
            await PlainTextResponse(f"forbidden: {reason}\n", status_code=403)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def refusal(self, headers: dict[str, str], scope: Scope) -> str | None:
        if headers.get("host", "").lower() not in self.hosts:
            return "the Host header does not name this server"
        origin = headers.get("origin")
        if origin is not None and origin.lower().removeprefix("http://") not in self.hosts:
            return "cross-origin request"
        if files.token_matches(self.token, headers.get(files.TOKEN_HEADER.lower())):
            return None
        if files.token_matches(self.token, _bearer(headers.get("authorization", ""))):
            return None
        path = str(scope.get("path", ""))
        if any(path == prefix or path.startswith(prefix + "/") for prefix in self.header_only):
            return "no valid token: send it as `Authorization: Bearer TOKEN` or X-Loki-Token"
        if files.token_matches(self.session, _cookie(headers.get("cookie", ""), COOKIE)):
            return None
        if scope.get("method") == "GET" and scope.get("path") == "/login":
            return None  # the login route checks the token it is given itself, and sets the cookie
        return "no valid token (open the URL loki serve printed)"


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


class _Asgi:
    """An ASGI app as a route's endpoint (Starlette takes a bare function for a request handler)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def _bearer(header: str) -> str | None:
    scheme, _, value = header.strip().partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def allowed_hosts(host: str, port: int) -> frozenset[str]:
    names = {"127.0.0.1", "localhost", "[::1]"}
    if host not in ("127.0.0.1", "0.0.0.0", "::", "localhost", ""):
        names.add(f"[{host}]" if ":" in host else host)
    return frozenset(f"{name}:{port}".lower() for name in names)


HOOK_THREADS = 8
"""Hook requests answered at once: the issue's 8 agents' sessions each get a thread (and on PostgreSQL a
connection of their own, :class:`loki.serve.warm.WarmStores`); a ninth waits for a free one."""


class HookAnswerer:
    """Answers hook requests for one tree, up to :data:`HOOK_THREADS` at once, each in a thread of its own pool.

    Concurrency is safe because it is the command hooks' own: every write a handler makes takes the tree's
    lock for it (a ``flock`` per open file on the files, which excludes two threads of this process as it
    excludes two processes; an advisory lock or row locks on PostgreSQL, over each thread's own connection),
    exactly as two hook processes running at once do. A request that waits for a lock (a strike being written
    for the same call) holds one thread; the others go on (tests/serve/test_serve_concurrency.py)."""

    def __init__(self, root: str, threads: int = HOOK_THREADS) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.root = root
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="loki hook")

    def answer(self, event: str, body: bytes) -> dict[str, Any] | None:
        event_name = boundary.EVENTS.get(event)
        if event_name is None:
            raise HookError(f"unknown hook event {event!r}; known: {', '.join(boundary.EVENTS)}")
        payload = boundary.parse_payload(body, event_name)
        return boundary.decide(boundary.DEFAULT_AGENT, event_name, payload, self.root)

    async def answer_in_pool(self, event: str, body: bytes) -> dict[str, Any] | None:
        """:meth:`answer` in one of the pool's threads, in a copy of the request's context (its agent:
        :mod:`loki.serve.agentheader`)."""
        import asyncio
        import contextvars
        import functools

        context = contextvars.copy_context()
        call = functools.partial(context.run, self.answer, event, body)
        return await asyncio.get_running_loop().run_in_executor(self.pool, call)

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def create_app(root: str, token: str, *, host: str = files.DEFAULT_HOST, port: int = 0,
               mounts: dict[str, ASGIApp] | None = None, lifespan: Any = None) -> ASGIApp:
    """The server's application for the tree at ``root`` (``.loki/``), reached at ``host:port``. ``mounts`` are
    reached by their token in a header only (never the board's cookie); ``lifespan`` is the app's (a mounted
    app's own lifespan does not run by itself)."""
    root = os.path.realpath(root)
    answerer = HookAnswerer(root)

    async def health(request: Request) -> Response:
        return JSONResponse({"root": root, "pid": os.getpid()})

    async def hook(request: Request) -> Response:
        event = request.path_params["event"]
        body = await request.body()
        if len(body) > boundary.MAX_STDIN_BYTES:
            return PlainTextResponse(f"loki hook {event}: the payload is over {boundary.MAX_STDIN_BYTES} bytes\n",
                                     status_code=413)
        try:
            answer = await answerer.answer_in_pool(event, body)
        except HookError as exc:
            return PlainTextResponse(f"loki hook {event}: {boundary.one_line(exc)}\n", status_code=422)
        except Exception as exc:  # a crashed request is this request's failure, never the server's
            return PlainTextResponse(f"loki hook {event}: {boundary.one_line(exc)}\n", status_code=500)
        return Response(json.dumps(answer or {}, ensure_ascii=False), media_type="application/json")

    routes: list[Route | Mount] = [
        Route("/health", health, methods=["GET"]),
        Route("/hook/{event}", hook, methods=["POST"]),
        *board_routes(root, token),
    ]
    for prefix, mounted in (mounts or {}).items():  # the prefix itself too, so a POST to /mcp is not redirected
        routes += [Route(prefix, endpoint=_Asgi(mounted)), Mount(prefix, app=mounted)]
    app = Starlette(routes=routes, lifespan=lifespan)
    return Guard(app, token, allowed_hosts(host, port), header_only=tuple(mounts or ()))
