"""Running ``loki serve``: one per tree and machine, held by a lock for its whole life (docs/serve.md).

The order matters for the crash story: take ``serve.lock`` (a second server stops here and names the first),
bind the socket (a port in use is one clear error), write ``run.json``, serve until SIGTERM or SIGINT
(uvicorn's own handlers: requests in flight finish), remove ``run.json``. A ``kill -9`` anywhere leaves at
most a stale ``run.json``, which nothing trusts without an answer (:func:`loki.resident.files.probe`), and a
lock the kernel already dropped. Every state change a request makes goes through the store's own atomic
commits, so a killed server leaves no half-written state either.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import socket
from collections.abc import Callable, Iterator
from typing import IO, Any

from loki.errors import Conflict, LokiError
from loki.resident import files


@contextlib.contextmanager
def server_lock(root: str) -> Iterator[IO[bytes]]:
    """Hold ``serve.lock``, or raise :class:`Conflict` naming the server that holds it."""
    os.makedirs(files.path(root, files.SERVE_DIR), exist_ok=True)
    handle = open(files.path(root, files.LOCK_FILE), "ab")  # noqa: SIM115 (held for the server's life)
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            run = files.read_run(root) or {}
            where = f"pid {run.get('pid')} at {files.url_of(run)}" if run.get("port") else "starting up"
            raise Conflict(f"loki serve is already running for this tree ({where}); `loki serve --stop` stops it",
                           pid=run.get("pid"), port=run.get("port")) from None
        yield handle
    finally:
        handle.close()


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY on an accepted connection only when its socket says TCP
    # (base_events._set_nodelay). Without it Nagle holds the response's body until the client ACKs its headers,
    # and the client delays that ACK: +40 ms on every hook request (measured with Claude Code, docs/serve.md).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise LokiError(f"port {port} on {host} is in use by another program; choose another with "
                            "`loki serve --port N` (the tree keeps it; run `loki hooks install --via http` again)",
                            port=port) from None
        raise LokiError(f"cannot listen on {host}:{port}: {exc.strerror}", port=port) from None
    sock.listen(512)
    sock.set_inheritable(False)
    return sock


def serve(root: str, *, host: str = files.DEFAULT_HOST, port: int | None = None,
          ready: Callable[[dict[str, Any], str], None] | None = None) -> None:
    """Serve the tree at ``root`` until SIGTERM/SIGINT; ``ready(run, login_url)`` once it listens."""
    try:
        import uvicorn

        from loki.serve.agentheader import AgentIdentity
        from loki.serve.app import create_app
    except ImportError as exc:
        raise LokiError(f"loki serve needs the serve extra ({exc.name} is not installed): "
                        "pip install 'loki-state[serve]'") from None

    root = os.path.realpath(root)
    with server_lock(root):
        token = files.token(root)
        assert token is not None
        chosen = files.choose_port(root, port, host)
        sock = bind(host, chosen)
        from loki.hooks import handlers
        from loki.serve.warm import WarmStores

        warm = WarmStores(per_thread=True)  # a connection for each hook thread (loki.serve.app.HOOK_THREADS)
        handlers.STORE_OPENER = warm.open  # this process only: the hook handlers reuse its connection
        from loki.serve.mcpmount import PATH, mcp_mount

        mcp_app, lifespan = mcp_mount(root, host)  # the MCP tools at /mcp (the SDK only with the mcp extra)
        app = create_app(root, token, host=host, port=chosen, mounts={PATH: mcp_app}, lifespan=lifespan)
        app = AgentIdentity(app)  # the hook's agent is the request's X-Loki-Agent, never this process's
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                timeout_graceful_shutdown=5, server_header=False)
        server = uvicorn.Server(config)
        pid = os.getpid()
        files.write_run(root, pid, host, chosen)
        run = files.read_run(root) or {}
        try:
            if ready is not None:
                ready(run, f"{files.url_of(run)}login?token={token}")
            # uvicorn catches SIGTERM/SIGINT while it serves, finishes the requests in flight, then restores the
            # handlers it found and raises the signal again: these quiet ones let the cleanup below run.
            for number in (signal.SIGTERM, signal.SIGINT):
                signal.signal(number, _stopped)
            server.run(sockets=[sock])
        finally:
            files.remove_run(root, pid)
            sock.close()
            warm.close()


def _stopped(number: int, frame: object) -> None:
    """The signal uvicorn raises again after its graceful shutdown: already handled."""


def stop(root: str) -> dict[str, Any] | None:
    """SIGTERM the server answering for ``root``; its ``run.json`` (None when none answers)."""
    run = files.probe(root)
    if run is None or not isinstance(run.get("pid"), int):
        return None
    os.kill(run["pid"], signal.SIGTERM)
    return run
