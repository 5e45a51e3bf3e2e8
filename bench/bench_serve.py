"""`loki serve` (docs/serve.md): hook requests at the server, the board's live updates, the server's memory.

* **Hook request latency** at the server, p50 and p99, on files and on PostgreSQL, over one kept-alive connection
  per session, as Claude Code 2.1.330 sends them (measured: one connection for a whole session's hook requests):
  PreToolUse with no strike (the common call), PostToolUse of a success (the other half of every call) and
  PostToolUseFailure (a strike written). The floor, in the same run: ``GET /health`` on the same server (one
  loopback request and the guard, no handler). Also PreToolUse on a new connection per request.
* **8 sessions at once**: 8 threads, each over its own connection, sending PreToolUse/PostToolUseFailure pairs;
  p50/p99 of every request. The server answers up to 8 at once (loki/serve/app.py, HOOK_THREADS).
* **Board update latency**: a task added (files) or claimed (PostgreSQL) through the library by another writer
  until the board's server-sent event stream delivers the new region; p50/p99. The feed is the store's own
  (watchdog on the files; LISTEN/NOTIFY on PostgreSQL, whose task table NOTIFYs at commit).
* **RSS** of the server idle (after one board page), and with 20 boards' event streams open.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import QUICK, median, percentile, row
from tests.serve.boardstream import BoardStream, open_board_stream

REQUESTS = 60 if QUICK else 400
BOARD_CHANGES = 10 if QUICK else 40


def _start(root: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "loki", "--root", root, "serve", "--detach", "--json"],
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    run: dict[str, Any] = json.loads(done.stdout)
    return run


def _stop(run: dict[str, Any]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(run["pid"], signal.SIGTERM)


def _request(port: int, method: str, path: str, token: str, body: bytes = b"",
             connection: http.client.HTTPConnection | None = None) -> float:
    """One request's time, on ``connection`` (kept alive for the next) or on a new one closed after it."""
    started = time.perf_counter()
    kept = connection is not None
    if connection is None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request(method, path, body=body or None, headers={"X-Loki-Token": token})
    response = connection.getresponse()
    response.read()
    if not kept:
        connection.close()
    if response.status != 200:
        raise RuntimeError(f"{method} {path}: {response.status}")
    return (time.perf_counter() - started) * 1000


def _payload(project: str, event: str, n: int) -> bytes:
    data: dict[str, Any] = {"session_id": "bench", "cwd": project, "hook_event_name": event, "tool_name": "Bash",
                            "tool_input": {"command": f"make target-{n % 50}"}}
    if event == "PostToolUseFailure":
        data["error"] = "make: *** No rule to make target. Stop."
    if event == "PostToolUse":
        data["tool_response"] = {"stdout": "done", "stderr": "", "interrupted": False}
    return json.dumps(data).encode()


def _tree(top: Path, database: str | None) -> tuple[str, str]:
    from loki.storage.tree import init_tree

    project = top / ("pg" if database else "files")
    project.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(project)], check=True)
    root = str(project / ".loki")
    init_tree(root)
    if database:
        from bench.pgserver import point_tree

        point_tree(root, database)
    return str(project), root


def _hook_rows(label: str, project: str, root: str, note: str) -> list[dict[str, Any]]:
    from loki.resident import files

    run = _start(root)
    token = files.token(root) or ""
    port = int(run["port"])
    kept = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        for n in range(20):  # warm: imports, the store, the first strike file
            _request(port, "POST", "/hook/pre-tool-use", token, _payload(project, "PreToolUse", n), kept)
            _request(port, "GET", "/health", token, connection=kept)
        floor = [_request(port, "GET", "/health", token, connection=kept) for _ in range(REQUESTS)]
        pre = [_request(port, "POST", "/hook/pre-tool-use", token, _payload(project, "PreToolUse", 10_000 + n), kept)
               for n in range(REQUESTS)]
        success = [_request(port, "POST", "/hook/post-tool-use", token, _payload(project, "PostToolUse", 20_000 + n),
                            kept) for n in range(REQUESTS)]
        fresh = [_request(port, "POST", "/hook/pre-tool-use", token, _payload(project, "PreToolUse", 30_000 + n))
                 for n in range(REQUESTS)]
        fail = [_request(port, "POST", "/hook/post-tool-use-failure", token,
                         _payload(project, "PostToolUseFailure", n), kept) for n in range(REQUESTS)]
        together: list[float] = []
        lock = threading.Lock()

        def session(number: int) -> None:
            mine = []
            own = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            for n in range(REQUESTS // 8):
                mine.append(_request(port, "POST", "/hook/pre-tool-use", token,
                                     _payload(project, "PreToolUse", number * 1000 + n), own))
                mine.append(_request(port, "POST", "/hook/post-tool-use-failure", token,
                                     _payload(project, "PostToolUseFailure", number * 1000 + n), own))
            own.close()
            with lock:
                together.extend(mine)

        threads = [threading.Thread(target=session, args=(number,)) for number in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        kept.close()
        _stop(run)
    base = median(floor)
    load = os.getloadavg()
    rows = [row(f"serve ({label}): GET /health, one loopback request (floor)", base,
                note=f"p99 {percentile(floor, 99):.2f} ms; {note}; load average {load[0]:.1f}")]
    for name, values in (("PreToolUse, no strike", pre), ("PostToolUse, a success", success),
                         ("PreToolUse, a new connection each", fresh),
                         ("PostToolUseFailure, a strike written", fail),
                         ("8 sessions at once, Pre + Failure", together)):
        rows.append(row(f"serve ({label}): hook {name}", median(values), floor_name="GET /health", floor_ms=base,
                        note=f"p50 {median(values):.2f} ms, p99 {percentile(values, 99):.2f} ms, {len(values)} "
                             "requests"))
    return rows


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _read_until(sock: socket.socket, marker: bytes) -> None:
    seen = b""
    while marker not in seen:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("the event stream closed")
        seen = seen[-len(marker):] + chunk


def _board_latency(root: str, port: int, cookie: str, change: Any, count: int) -> tuple[list[float], list[float]]:
    """Milliseconds from ``change(n)`` returning (another writer's commit) to the board's next region, and the
    change's own time (the claim or the add, which the store's feed cannot see before it commits)."""
    events = BoardStream(port, cookie)
    events.next_live()  # the region as it is when the board opens
    latencies, changes = [], []
    for n in range(count):
        started = time.perf_counter()
        change(n)
        committed = time.perf_counter()
        events.next_live()
        latencies.append((time.perf_counter() - committed) * 1000)
        changes.append((committed - started) * 1000)
    events.close()
    return latencies, changes


def _board_pg_rows(top: Path, url: str, where: str) -> list[dict[str, Any]]:
    from loki.queue.queue import Queue
    from loki.resident import files
    from loki.serve.tokens import derived
    from loki.storage.opening import open_store

    _project, root = _tree(top, url)
    queue = Queue(open_store(root))
    for n in range(BOARD_CHANGES):
        queue.add(f"board bench task {n}", task_id=f"task-{n:03d}")
    run = _start(root)
    token = files.token(root) or ""
    cookie = f"loki_session={derived(token, 'session')}"
    try:
        latencies, claims = _board_latency(root, int(run["port"]), cookie,
                                           lambda n: queue.claim("bench-agent", task_id=f"task-{n:03d}"), BOARD_CHANGES)
    finally:
        _stop(run)
    return [row("serve (PostgreSQL): board update, a claim committed -> event received", median(latencies),
                note=f"p50 {median(latencies):.1f} ms, p99 {percentile(latencies, 99):.1f} ms over {len(latencies)} "
                     f"claims by another writer (LISTEN/NOTIFY: the task table's NOTIFY at commit; no poll); the claim "
                     f"itself p50 {median(claims):.1f} ms; {where}")]


def _board_rows(top: Path) -> list[dict[str, Any]]:
    from loki.queue.queue import Queue
    from loki.resident import files
    from loki.serve.tokens import derived
    from loki.storage.store import Store

    _project, root = _tree(top, None)
    run = _start(root)
    token = files.token(root) or ""
    port = int(run["port"])
    cookie = f"loki_session={derived(token, 'session')}"
    try:
        page = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        page.request("GET", "/", headers={"Cookie": cookie, "Host": f"127.0.0.1:{port}"})
        page.getresponse().read()
        page.close()
        idle = _rss_kb(run["pid"])
        queue = Queue(Store(root))
        latencies, _adds = _board_latency(root, port, cookie, lambda n: queue.add(f"board bench task {n}"),
                                          BOARD_CHANGES)
        boards = [open_board_stream(port, cookie) for _ in range(20)]
        for board in boards:
            _read_until(board, b"retry: 1000")
        queue.add("one more, for all 20 boards")
        for board in boards:
            _read_until(board, b"event: live")
        busy = _rss_kb(run["pid"])
        for sock in boards:
            sock.close()
    finally:
        _stop(run)
    return [
        row("serve: board update, a task added -> event received", median(latencies),
            note=f"p50 {median(latencies):.1f} ms, p99 {percentile(latencies, 99):.1f} ms over {len(latencies)} "
                 "changes (a task added by another writer; the watchdog observer wakes the feed)"),
        row("serve: RSS idle (MB)", idle / 1024, note=f"{idle / 1024:.1f} MB after one board page (the value is MB)"),
        row("serve: RSS with 20 boards' event streams open (MB)", busy / 1024, floor_name="idle",
            floor_ms=idle / 1024, note=f"{busy / 1024:.1f} MB (the value is MB)"),
    ]


def run() -> list[dict[str, Any]]:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        return [row("serve (not run)", 0.0, note=f"the serve extra is not installed: {exc}")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        top = Path(tmp)
        project, root = _tree(top, None)
        rows += _hook_rows("files", project, root, "files tree")
        from bench.pgserver import schema_url

        url, where = schema_url()
        if url is None:
            rows.append(row("serve (PostgreSQL): not run", 0.0, note=where))
        else:
            project, root = _tree(top, url)
            rows += _hook_rows("PostgreSQL", project, root, where)
            second, _ = schema_url()
            assert second is not None
            rows += _board_pg_rows(top / "board-pg", second, where)
        rows += _board_rows(top / "board")
    return rows
