"""The board on a PostgreSQL tree is live from the database's own change feed: a claim made by `loki queue claim`
in another process reaches an open board's server-sent event stream through LISTEN/NOTIFY (the task table's
writes NOTIFY queue/'s channel at commit: loki/storage/postgres/tasks.py), with the feed's rescan set to an hour,
so no look on a timer can be what delivered it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loki.queue.queue import Queue
from loki.serve.app import create_app
from loki.serve.server import bind
from loki.serve.tokens import derived
from loki.storage.opening import open_store
from tests.helpers import loki_proc
from tests.serve.boardstream import BoardStream

pytestmark = pytest.mark.slow

TOKEN = "t0k3n-for-tests"


@pytest.fixture
def pg_root(root: Path) -> Path:
    from tests.pgserver import fresh_schema_url

    (root / "config" / "loki.json").write_text(json.dumps(
        {"version": 1, "storage": {"backend": "postgresql", "database": fresh_schema_url()}}))
    return root


@pytest.fixture
def served(pg_root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The board's application for ``pg_root`` under uvicorn in a thread of this process, its rescan an hour."""
    import uvicorn

    from loki.serve import routes

    monkeypatch.setattr(routes, "RESCAN_SECONDS", 3600.0)
    sock = bind("127.0.0.1", 0)
    port = int(sock.getsockname()[1])
    app = create_app(str(pg_root), TOKEN, port=port)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:  # an observable condition against a deadline
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.005)
    yield port
    server.should_exit = True
    thread.join(timeout=30)
    sock.close()


class Wakes:
    """How many times the board's change feed was woken (the store's listeners call the feed's waker)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from loki.serve import routes

        self.count = 0
        self.changed = threading.Condition()
        real = routes.waker

        def counting(loop: Any, dirty: Any) -> Any:
            wake = real(loop, dirty)

            def counted() -> None:
                with self.changed:
                    self.count += 1
                    self.changed.notify_all()
                wake()

            return counted

        monkeypatch.setattr(routes, "waker", counting)

    def wait_for(self, count: int) -> int:
        """The count once it reaches ``count`` (a failure after 30 s)."""
        with self.changed:
            assert self.changed.wait_for(lambda: self.count >= count, timeout=30), (self.count, count)
            return self.count


def test_a_claim_in_another_process_reaches_the_board_by_notify_not_by_a_poll(
        pg_root: Path, served: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from loki.serve import routes

    wakes = Wakes(monkeypatch)
    Queue(open_store(str(pg_root))).add("Ship it on postgres", task_id="task-pg")
    stream = BoardStream(served, f"loki_session={derived(TOKEN, 'session')}")
    try:
        first = stream.next_live()
        assert 'data-task="task-pg"' in first and "bot-pg" not in first
        # each listener wakes the feed once as it starts (for what was published before it listened)
        started = wakes.wait_for(len(routes.WATCHED))
        claimed = loki_proc(["queue", "claim", "--agent", "bot-pg", "--json"], root=pg_root)
        assert claimed.code == 0, claimed.stderr
        # the rescan is an hour away: the board shows the claim, and a wake came after the listeners' own, the
        # claim's NOTIFY (a late start wake could otherwise have shown it alone)
        region = stream.next_live_showing("task-pg: pending -&gt; in-progress (bot-pg)")
        assert 'data-count="in-progress">1<' in region
        assert wakes.wait_for(started + 1) > started
        completed = loki_proc(["queue", "complete", "task-pg", "--agent", "bot-pg"], root=pg_root)
        assert completed.code == 0, completed.stderr
        assert 'data-count="completed">1<' in stream.next_live_showing("task-pg: in-progress -&gt; completed")
    finally:
        stream.close()


def test_the_writes_the_board_shows_each_notify_their_directory(pg_root: Path) -> None:
    """Every kind of write the board shows announces itself at commit on its directory's channel: the task table
    (queue/: an add, a claim), a state document (state/: a breaker's failure), an escalation resolved or removed
    (escalations/)."""
    from loki.breakers.breakers import Breakers

    store: Any = open_store(str(pg_root))
    woken = {name: threading.Event() for name in ("queue", "state", "escalations")}
    listeners = [store.observe(name, event.set) for name, event in woken.items()]

    def announced(name: str) -> bool:
        seen = woken[name].wait(30)
        woken[name].clear()
        return seen

    try:
        for name in woken:  # a listener wakes once as it starts (for what it missed): start from quiet
            announced(name)
        queue = Queue(store)
        queue.add("Ship it", task_id="task-n")
        assert announced("queue")
        queue.claim("bot-n")
        assert announced("queue")
        Breakers(store).record_failure("deploy", "connection refused")
        assert announced("state")
        name = store.create_unique("escalations", "esc-test", b"# an escalation\n", suffix=".md")
        assert announced("escalations")
        store.write_text(name, "# resolved\n")  # an escalation is an item: rewritten in place (PgStore's routing)
        assert store.read_text(name) == "# resolved\n"
        assert announced("escalations")
        assert store.remove(name)
        assert announced("escalations")
    finally:
        for listener in listeners:
            listener.stop()
