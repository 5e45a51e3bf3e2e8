"""The board's routes: pages (GET, read only, no JavaScript needed), actions (POST with the CSRF token), and the
live feed (server-sent events, woken by the store's own change feed: :class:`Feed`)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from loki.serve import board
from loki.serve.tokens import COOKIE, derived

RESCAN_SECONDS = 10.0
"""A change feed is a hint (docs/design.md §4): the feed also looks again this often, in this process. It is not
what shows a change: on the files the observer does, on PostgreSQL every write to the task table, the state
documents and the escalations sends a NOTIFY with its commit (loki/storage/postgres/tasks.py, documents.py,
items.py)."""
COALESCE_SECONDS = 0.02
"""One commit is several filesystem events (temp file, rename, directory): one look after a burst."""
WATCHED = ("queue", "signals", "escalations", "state")
MAX_FORM_BYTES = 64 * 1024
FILTERS = ("state", "type", "agent", "q")


def waker(loop: asyncio.AbstractEventLoop, dirty: asyncio.Event) -> Any:
    """What the store's observer calls, from its own thread, to wake the feed's loop. The observer can outlive that
    loop (a server shutting down, an app whose client closed): a wake then finds nobody to wake and is dropped,
    instead of raising "Event loop is closed" in the observer's thread."""

    def wake() -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed between the check and the call
            if not loop.is_closed():
                loop.call_soon_threadsafe(dirty.set)

    return wake


def _store(root: str) -> Any:
    from loki.storage.opening import open_store

    return open_store(root)


class Feed:
    """The store's change feed for every open board: the observer on the files, LISTEN/NOTIFY on PostgreSQL
    (``store.observe``). Each change bumps :attr:`version`; each board's stream then renders again. It also
    keeps the recent task moves (the event list). :attr:`looks` counts its looks at the queue, and
    :attr:`woken` the looks a change feed asked for (the rest are the rescan's)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.version = 0
        self.events: collections.deque[dict[str, str]] = collections.deque(maxlen=30)
        self._known: dict[str, tuple[str, str]] | None = None
        self._changed: asyncio.Condition | None = None
        self._dirty: asyncio.Event | None = None
        self._observers: list[Any] = []
        self._task: asyncio.Task[None] | None = None
        self.rescan = RESCAN_SECONDS
        self.looks = 0
        self.woken = 0
        from loki.serve.warm import WarmStores

        self.warm = WarmStores()  # the feed's own connection on PostgreSQL (the hooks have theirs)
        self.lock = threading.Lock()
        """Held by every use of :attr:`warm` (one connection, used by one thread at a time)."""
        self._looked: tuple[tuple[int, tuple[tuple[str, str], ...]], dict[str, Any]] | None = None

    async def start(self) -> asyncio.Condition:
        if self._changed is None:
            loop = asyncio.get_running_loop()
            self._changed, self._dirty = asyncio.Condition(), asyncio.Event()
            dirty = self._dirty

            wake = waker(loop, dirty)

            store = await run_in_threadpool(self._open)
            self._observers = [store.observe(name, wake) for name in WATCHED]
            await run_in_threadpool(self._diff)
            self._task = loop.create_task(self._run())
        return self._changed

    async def _run(self) -> None:
        assert self._dirty is not None and self._changed is not None
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._dirty.wait(), self.rescan)
            woken = self._dirty.is_set()
            await asyncio.sleep(COALESCE_SECONDS)
            self._dirty.clear()
            self.woken += woken
            try:
                moved = await run_in_threadpool(self._diff)
            except Exception:  # a store that cannot be read now: the boards keep what they show
                continue
            if not (woken or moved):
                continue
            async with self._changed:
                self.version += 1
                self._changed.notify_all()

    def _open(self) -> Any:
        with self.lock:
            return self.warm.open(self.root)

    def snapshot(self, version: int | None, filters: dict[str, str]) -> dict[str, Any]:
        """What the boards with ``filters`` show at ``version``: read once per change, however many boards' streams
        are open (on PostgreSQL over the feed's connection, not a connection per board and change). ``None``: read
        now, whatever the feed has heard (a page loaded right after an action shows it)."""
        from loki.serve import board

        key = (-1 if version is None else version, tuple(sorted(filters.items())))
        with self.lock:
            if version is not None and self._looked is not None and self._looked[0] == key:
                return self._looked[1]
            data = board.snapshot(self.warm.open(self.root), filters)
            data["events"] = list(self.events)
            if version is not None:
                self._looked = (key, data)
            return data

    def _diff(self) -> bool:
        """Record the task moves since the last look; whether there were any."""
        from loki.queue.queue import Queue

        self.looks += 1
        with self.lock:
            tasks = Queue(self.warm.open(self.root)).list_tasks("all", limit=None)["tasks"]
        now = {str(t["id"]): (str(t.get("state")), str(t.get("claimed_by") or "")) for t in tasks}
        titles = {str(t["id"]): str(t.get("title") or "") for t in tasks}
        if self._known is not None:
            at = time.strftime("%H:%M:%S", time.gmtime())
            for ident, (state, agent) in now.items():
                before = self._known.get(ident)
                if before is None:
                    self.events.appendleft({"at": at, "text": f"{ident} added: {titles[ident]}"})
                elif before[0] != state:
                    by = f" ({agent})" if agent else ""
                    self.events.appendleft({"at": at, "text": f"{ident}: {before[0]} -> {state}{by}"})
        moved = self._known is None or any(self._known.get(ident) != value for ident, value in now.items())
        # A look that runs beside a claim can miss the task between its two files: it is remembered, so that the
        # next look reports the move (pending -> in-progress), not a task "added".
        self._known = {**(self._known or {}), **now}
        return moved

    def stop(self) -> None:
        for observer in self._observers:
            observer.stop()
        self.warm.close()


def board_routes(root: str, token: str) -> list[Route]:
    csrf = derived(token, "csrf")
    session = derived(token, "session")
    feed = Feed(root)

    def filters_of(request: Request) -> dict[str, str]:
        return {name: request.query_params.get(name, "")[:200] for name in FILTERS if request.query_params.get(name)}


    async def login(request: Request) -> Response:
        from loki.resident import files

        if not files.token_matches(token, request.query_params.get("token")):
            return PlainTextResponse("forbidden: no valid token (open the URL loki serve printed)\n", status_code=403)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, session, httponly=True, samesite="strict", path="/")
        return response

    async def index(request: Request) -> Response:
        await feed.start()
        filters = filters_of(request)
        data = await run_in_threadpool(feed.snapshot, None, filters)
        body = board.board_body(data, filters, csrf, root)
        return HTMLResponse(board.page("board", body, live=True), headers=_NO_STORE)

    async def task(request: Request) -> Response:
        from loki.errors import LokiError

        task_id = request.path_params["task_id"]
        try:
            detail = await run_in_threadpool(board.task_detail, _store(root), task_id)
        except LokiError as exc:
            text, status = board.message_page("not found", exc.message, 404)
            return HTMLResponse(text, status_code=status, headers=_NO_STORE)
        return HTMLResponse(board.page(f"task {task_id}", board.task_body(detail, csrf)), headers=_NO_STORE)

    async def action(request: Request) -> Response:
        from loki.errors import LokiError
        from loki.resident import files

        kind = request.path_params["kind"]
        body = await request.body()
        if len(body) > MAX_FORM_BYTES:
            return PlainTextResponse("the form is too large\n", status_code=413)
        form = {k: v[0] for k, v in urllib.parse.parse_qs(body.decode("utf-8", "replace")).items()}
        if not files.token_matches(csrf, form.get("csrf")):
            return PlainTextResponse("forbidden: the form's CSRF token is missing or wrong; reload the board\n",
                                     status_code=403)
        run = board.ACTIONS.get(kind)
        if run is None:
            return PlainTextResponse(f"no such action {kind!r}\n", status_code=404)
        try:
            await run_in_threadpool(run, _store(root), form)
        except LokiError as exc:
            status = {4: 409, 3: 409}.get(exc.exit_code, 404 if type(exc).__name__ == "NotFound" else 400)
            text, status = board.message_page("refused", exc.message, status)
            return HTMLResponse(text, status_code=status, headers=_NO_STORE)
        back = f"/task/{urllib.parse.quote(form['id'])}" if kind in ("priority", "cancel") else "/"
        return RedirectResponse(back, status_code=303)

    async def events(request: Request) -> Response:
        changed = await feed.start()
        filters = filters_of(request)

        async def stream() -> AsyncIterator[str]:
            seen, last = -1, request.query_params.get("since", "")[:64]
            yield "retry: 1000\n\n"
            while True:
                async with changed:
                    if feed.version == seen:
                        with contextlib.suppress(asyncio.TimeoutError):
                            await asyncio.wait_for(changed.wait(), 15.0)
                    seen = feed.version
                if await request.is_disconnected():
                    return
                data = await run_in_threadpool(feed.snapshot, seen, filters)
                region = board.live_region(data, csrf)
                if board.version(region) == last:
                    yield ": nothing new\n\n"  # a comment keeps the connection alive through proxies
                    continue
                last = board.version(region)
                lines = "".join(f"data: {line}\n" for line in region.splitlines() or [""])
                yield f"event: live\n{lines}\n"

        return StreamingResponse(stream(), media_type="text/event-stream", headers={**_NO_STORE,
                                                                                    "X-Accel-Buffering": "no"})

    return [
        Route("/login", login, methods=["GET"]),
        Route("/", index, methods=["GET"]),
        Route("/task/{task_id}", task, methods=["GET"]),
        Route("/action/{kind}", action, methods=["POST"]),
        Route("/events", events, methods=["GET"]),
    ]


# Referrer-Policy same-origin: a form POST then carries its Origin (under no-referrer it is "null", refused).
_NO_STORE = {"Cache-Control": "no-store", "X-Frame-Options": "DENY", "Referrer-Policy": "same-origin",
             "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
                                        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'"}

