"""Hook requests to a real `loki serve` are answered at once, not one after another, and the 3-strike protocol
stays exactly-once under that concurrency (loki/serve/app.py, HookAnswerer; docs/serve.md); the server's
connections send without Nagle's delay (loki/serve/server.py, bind)."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from loki.resident import files
from loki.serve.app import HOOK_THREADS
from loki.serve.server import bind
from tests.helpers import loki_proc, tree_problems

pytestmark = pytest.mark.slow

CALL = {"command": "cargo-offline build --release"}


def _on(kind: str, root: Path) -> None:
    if kind == "postgresql":
        from tests.pgserver import fresh_schema_url

        (root / "config" / "loki.json").write_text(json.dumps(
            {"version": 1, "storage": {"backend": "postgresql", "database": fresh_schema_url()}}))


def _serve(root: Path) -> int:
    done = loki_proc(["serve", "--detach", "--json"], root=root)
    assert done.code == 0, done.stderr
    port = done.json()["port"]
    assert isinstance(port, int)
    return port


def _post(port: int, token: str, event: str, payload: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", f"/hook/{event}", body=json.dumps(payload).encode(),
                           headers={"X-Loki-Token": token, "Content-Type": "application/json"})
        response = connection.getresponse()
        body = response.read()
        assert response.status == 200, body
        answer: dict[str, Any] = json.loads(body)
        return answer
    finally:
        connection.close()


def _failure(project: Path, session: str) -> dict[str, Any]:
    return {"session_id": session, "cwd": str(project), "hook_event_name": "PostToolUseFailure", "tool_name": "Bash",
            "tool_input": CALL, "error": "/bin/bash: line 1: cargo-offline: command not found"}


def _pre(project: Path, session: str) -> dict[str, Any]:
    return {"session_id": session, "cwd": str(project), "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": CALL}


def test_accepted_connections_send_without_nagles_delay() -> None:
    """The listening socket says TCP, so asyncio sets TCP_NODELAY on every connection it accepts. Without it the
    response's body waited for the client's delayed ACK of its headers: +40 ms on each of Claude Code's hook
    requests over its kept-alive connection (measured, docs/serve.md)."""
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    seen: list[int] = []

    async def scenario() -> None:
        accepted = asyncio.Event()

        class Protocol(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                server_side = transport.get_extra_info("socket")
                seen.append(server_side.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                accepted.set()

        server = await asyncio.get_running_loop().create_server(Protocol, sock=sock)
        try:
            client = socket.create_connection(("127.0.0.1", port))
            await asyncio.wait_for(accepted.wait(), 30)
            client.close()
        finally:
            server.close()

    asyncio.run(scenario())
    assert seen and seen[0] != 0


@pytest.mark.parametrize("kind", ["files", "postgresql"])
def test_concurrent_failures_of_one_call_are_each_counted_once(project: Path, kind: str) -> None:
    """8 agents' sessions report the same failing call at the same moment (and one session twice at once): each
    failure is one strike, numbered 1..N with none lost or doubled, and the stop tier escalates once."""
    root = project / ".loki"
    _on(kind, root)
    port = _serve(root)
    token = files.token(str(root)) or ""
    sessions = [f"session-{n % HOOK_THREADS}" for n in range(HOOK_THREADS + 2)]  # two sessions send twice
    start = threading.Barrier(len(sessions))

    def report(session: str) -> dict[str, Any]:
        start.wait(timeout=60)
        return _post(port, token, "post-tool-use-failure", _failure(project, session))

    with ThreadPoolExecutor(len(sessions)) as pool:
        answers = list(pool.map(report, sessions))

    from loki.queue import escalations
    from loki.storage.opening import open_store
    from loki.strikes.strikes import Strikes

    store = open_store(str(root))
    state = Strikes(store, branch="main").state()
    entry = next(iter(state["keys"].values()))
    assert entry["strike_count"] == len(sessions)
    assert sorted(a["strike"] for a in state["attempts"]) == list(range(1, len(sessions) + 1))
    assert len(escalations.list_escalations(store, open_only=True)) == 1
    assert sum("strike 2 of 3" in json.dumps(a) for a in answers) == 1  # the warning went to one of them
    denied = _post(port, token, "pre-tool-use", _pre(project, "session-new"))["hookSpecificOutput"]
    assert denied["permissionDecision"] == "deny"
    if kind == "files":
        assert tree_problems(root) == []


def _holds_open(pid: int, path: str) -> bool:
    """The process has ``path`` open: a request of the server is inside FileLock.acquire for it."""
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            if os.readlink(os.path.join(fd_dir, fd)) == path:
                return True
        except OSError:
            continue
    return False


def _wait_for(condition: Any, what: str, timeout: float = 60.0) -> None:
    """Poll an observable condition against a deadline (never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_a_request_waiting_for_a_lock_holds_up_no_other(project: Path) -> None:
    """While sessions' failures wait for their branch's strike lock (held here, as another process's write would
    hold it), another session's PreToolUse is answered: the requests are not served one at a time (one at a
    time, the PreToolUse would wait behind them and time out). Then the lock is let go and every waiting failure
    is recorded."""
    from loki.storage.store import Store
    from loki.strikes.strikes import Strikes

    root = project / ".loki"
    port = _serve(root)
    pid = files.probe(str(root))["pid"]  # type: ignore[index]
    token = files.token(str(root)) or ""
    store = Store(root)
    rel = Strikes(store, branch="main").rel
    lock_path = os.path.realpath(files.path(str(root), rel + ".lock"))
    waiting = HOOK_THREADS - 1
    with ThreadPoolExecutor(waiting) as pool:
        with store.transaction(rel):
            failures = [pool.submit(_post, port, token, "post-tool-use-failure", _failure(project, f"s{n}"))
                        for n in range(waiting)]
            _wait_for(lambda: _holds_open(pid, lock_path), "a failure to wait for the strike lock")
            answer = _post(port, token, "pre-tool-use", _pre(project, "another"), timeout=30)
            assert answer == {}
            assert not any(f.done() for f in failures)  # still waiting for the lock: answered beside them
        assert all(f.result(timeout=60) is not None for f in failures)
    entry = next(iter(Strikes(store, branch="main").state()["keys"].values()))
    assert entry["strike_count"] == waiting
    assert tree_problems(root) == []
