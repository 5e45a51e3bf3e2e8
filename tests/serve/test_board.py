"""The board's pages and actions in this process: login, the guard, CSRF, no change on GET, escaped text, and the
actions recorded as the CLI records them."""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from loki.queue.queue import Queue
from loki.serve.app import create_app
from loki.serve.tokens import derived
from loki.storage.store import Store
from tests.helpers import snapshot_bytes
from tests.serve.asgi import request

TOKEN = "board-token-for-tests"
HOSTILE = '<script>alert("x")</script><b onmouseover=alert(1)>bold</b>'
SESSION = {"Cookie": f"loki_session={derived(TOKEN, 'session')}"}
CSRF = derived(TOKEN, "csrf")


@pytest.fixture
def app(project: Path) -> Any:
    return create_app(str(project / ".loki"), TOKEN, port=8800)


def form(fields: dict[str, str]) -> bytes:
    return urllib.parse.urlencode(fields).encode()


def post(app: Any, action: str, fields: dict[str, str], headers: dict[str, str] | None = None) -> Any:
    sent = {**SESSION, "Content-Type": "application/x-www-form-urlencoded", "Origin": "http://127.0.0.1:8800",
            **(headers or {})}
    return request(app, "POST", f"/action/{action}", headers=sent, body=form(fields))


def test_the_printed_url_logs_in_once_with_an_httponly_strict_cookie(app: Any) -> None:
    assert request(app, "GET", "/").status == 403
    assert request(app, "GET", "/login?token=wrong").status == 403
    login = request(app, "GET", f"/login?token={TOKEN}")
    assert login.status == 303 and login.header("location") == ["/"]
    (cookie,) = login.header("set-cookie")
    assert cookie.startswith(f"loki_session={derived(TOKEN, 'session')};")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and TOKEN not in cookie
    page = request(app, "GET", "/", headers=SESSION)
    assert page.status == 200 and b'id="queue"' in page.body


def test_every_stored_text_is_escaped(app: Any, store: Store) -> None:
    task = Queue(store).add(HOSTILE, description=HOSTILE)
    for path in ("/", f"/task/{task['id']}"):
        body = request(app, "GET", path, headers=SESSION).body.decode()
        assert "<script>alert" not in body and "<b onmouseover" not in body
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in body


def test_actions_need_the_csrf_token_the_cookie_and_the_same_origin(app: Any, project: Path, store: Store) -> None:
    task = Queue(store).add("Ship it")
    before = snapshot_bytes(project / ".loki")
    fields = {"id": task["id"], "priority": "high"}
    assert post(app, "priority", fields).status == 403                                   # no CSRF token
    assert post(app, "priority", {**fields, "csrf": "forged"}).status == 403             # a wrong one
    assert post(app, "priority", {**fields, "csrf": CSRF}, {"Cookie": ""}).status == 403  # no session
    cross = post(app, "priority", {**fields, "csrf": CSRF}, {"Origin": "http://evil.example"})
    assert cross.status == 403                                                            # a cross-site POST
    rebound = request(app, "POST", "/action/priority", host="evil.example:8800", body=form({**fields, "csrf": CSRF}),
                      headers={**SESSION, "Content-Type": "application/x-www-form-urlencoded"})
    assert rebound.status == 403                                                          # DNS rebinding
    # No state change on GET: the action routes take POST only.
    assert request(app, "GET", f"/action/priority?id={task['id']}&priority=high&csrf={CSRF}",
                   headers=SESSION).status == 405
    assert snapshot_bytes(project / ".loki") == before
    done = post(app, "priority", {**fields, "csrf": CSRF})
    assert done.status == 303 and done.header("location") == [f"/task/{task['id']}"]
    assert Queue(store).show(task["id"])["task"]["priority"] == "high"


def test_actions_are_the_clis_with_the_same_history(app: Any, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("USER", "ops-anna")
    queue = Queue(store)
    task = queue.add("Ship it")
    assert post(app, "priority", {"id": task["id"], "priority": "low", "csrf": CSRF}).status == 303
    assert post(app, "cancel", {"id": task["id"], "reason": "superseded", "force": "yes", "csrf": CSRF}).status == 303
    events = queue.history(task["id"])["events"]
    assert [e["event"] for e in events][-2:] == ["edited", "cancelled"]
    assert all(e.get("by") == "ops-anna" for e in events[-2:])
    refused = post(app, "cancel", {"id": "task-000000000000", "csrf": CSRF})
    assert refused.status == 404 and b"task-000000000000" in refused.body
    assert post(app, "priority", {"id": task["id"], "priority": "urgent", "csrf": CSRF}).status == 400


def test_a_missing_browser_skips_locally_and_fails_where_it_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.serve import browser

    monkeypatch.setattr(browser, "CHROMIUM", "/nonexistent/chromium")
    monkeypatch.delenv(browser.REQUIRE, raising=False)
    with pytest.raises(pytest.skip.Exception, match="make browser"):
        browser.require_browser()
    monkeypatch.setenv(browser.REQUIRE, "1")
    with pytest.raises(pytest.fail.Exception, match="LOKI_REQUIRE_BROWSER=1"):
        browser.require_browser()


@pytest.mark.parametrize("kind", ["files", "postgresql"])
def test_the_feed_wakes_the_boards_when_another_writer_moves_a_task(root: Path, kind: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The change feed (files: the watchdog observer; PostgreSQL: LISTEN, the task table's writes NOTIFY): a task
    another writer adds, then claims, is an event. The rescan is an hour away: the feed woke for each."""
    import asyncio
    import json

    from loki.serve import routes
    from loki.serve.routes import Feed
    from loki.storage.opening import open_store

    monkeypatch.setattr(routes, "RESCAN_SECONDS", 3600.0)

    if kind == "postgresql":
        from tests.pgserver import fresh_schema_url

        (root / "config" / "loki.json").write_text(json.dumps(
            {"version": 1, "storage": {"backend": "postgresql", "database": fresh_schema_url()}}))
    writer = Queue(open_store(str(root)))

    async def scenario() -> list[str]:
        feed = Feed(str(root))
        changed = await feed.start()
        try:
            steps = ((lambda: writer.add("Ship it", task_id="task-feed"), "task-feed added: Ship it"),
                     (lambda: writer.claim("bot-2"), "task-feed: pending -> in-progress (bot-2)"))
            for step, event in steps:
                await asyncio.get_running_loop().run_in_executor(None, step)
                async with changed:  # the boards are woken (a new version) once the move is an event
                    await asyncio.wait_for(changed.wait_for(
                        lambda event=event: event in [e["text"] for e in feed.events]), 10)
            assert feed.woken >= 2  # each move came from the change feed, never the rescan
            return [event["text"] for event in feed.events]
        finally:
            feed.stop()

    texts = asyncio.run(scenario())
    assert texts[-1] == "task-feed added: Ship it"
    assert "task-feed: pending -> in-progress (bot-2)" in texts


def test_a_task_one_look_missed_beside_a_claim_is_a_move_not_an_addition(root: Path, store: Store,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A look at the queue that runs while a claim moves the task between its two files may not see it; the feed
    remembers it, so the next look reports the move."""
    from loki.serve.routes import Feed

    feed = Feed(str(root))
    Queue(store).add("Ship it", task_id="task-gap")
    assert feed._diff() is True
    monkeypatch.setattr(Queue, "list_tasks", lambda self, *args, **kwargs: {"tasks": []})
    assert feed._diff() is False
    monkeypatch.undo()
    Queue(store).claim("bot-3")
    assert feed._diff() is True
    assert [event["text"] for event in feed.events] == ["task-gap: pending -> in-progress (bot-3)"]


def test_a_wake_after_the_feeds_loop_closed_is_dropped_not_raised() -> None:
    """The store's observer thread can outlive the loop it wakes (an app whose client closed, a server shutting
    down): its wake must not raise "Event loop is closed" in that thread."""
    import asyncio

    from loki.serve.routes import waker

    loop = asyncio.new_event_loop()
    dirty = asyncio.Event()
    wake = waker(loop, dirty)
    wake()
    loop.run_until_complete(asyncio.sleep(0))  # the scheduled set runs
    assert dirty.is_set()
    dirty.clear()
    loop.close()
    wake()
    assert not dirty.is_set()
