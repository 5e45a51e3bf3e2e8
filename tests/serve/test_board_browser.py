"""The board in a real browser (Debian's headless Chromium, tests/serve/browser.py) against a real `loki serve`.

The queue renders, a hostile title is text, a task a `loki work` agent claims in another process shows as
claimed within a second without a reload (server-sent events from the store's change feed), an escalation
approved in the browser is approved in the store, and the page is shot at phone and desktop widths.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loki.resident import files
from tests.helpers import loki_proc, tree_problems
from tests.serve.browser import chromium, require_browser, screenshot

pytestmark = pytest.mark.slow

HOSTILE = "<script>window.pwned=1</script><img src=x onerror=window.pwned=2> & \"quotes\""


@pytest.fixture
def server(project: Path) -> Iterator[dict[str, Any]]:
    require_browser()
    root = str(project / ".loki")
    done = loki_proc(["serve", "--detach", "--json"], root=root)
    assert done.code == 0, done.stderr
    run = done.json()
    yield {**run, "root": root, "login": f"{run['url']}login?token={files.token(root)}"}
    with contextlib.suppress(ProcessLookupError):
        os.kill(run["pid"], signal.SIGTERM)


def add(root: str, title: str) -> str:
    done = loki_proc(["queue", "add", title, "--json"], root=root)
    assert done.code == 0, done.stderr
    task_id: str = done.json()["task"]["id"]
    return task_id


def state_cell(driver: Any, task_id: str) -> str:
    """The state the board shows for a task ("" when it is not listed), read in one go (the live feed may
    replace the table at any moment)."""
    return str(driver.execute_script(
        "var c = document.querySelector('#queue tr[data-task=\"' + arguments[0] + '\"] td.state');"
        "return c ? c.textContent : '';", task_id))


def text_of(driver: Any, element_id: str) -> str:
    """The text a section of the board shows, read in one go: the live feed may replace the section between a
    `find_element` and a `.text` (a StaleElementReferenceException, seen once in `make test`)."""
    return str(driver.execute_script(
        "var e = document.getElementById(arguments[0]); return e ? e.innerText : '';", element_id))


def click(driver: Any, locator: tuple[str, str], attempts: int = 20) -> None:
    """Click what ``locator`` finds, finding it again when the live feed replaced it before the click landed."""
    from selenium.common.exceptions import StaleElementReferenceException

    for attempt in range(attempts):
        try:
            driver.find_element(*locator).click()
            return
        except StaleElementReferenceException:
            if attempt == attempts - 1:
                raise


def test_the_board_renders_the_queue_and_a_hostile_title_as_text(server: dict[str, Any]) -> None:
    hostile = add(server["root"], HOSTILE)
    plain = add(server["root"], "Write the release notes")
    with chromium() as driver:
        driver.get(server["login"])  # logs in (cookie), then the board
        assert driver.current_url == server["url"]
        titles = driver.execute_script(
            "var o = {}; document.querySelectorAll('#queue tbody tr').forEach(function (r) {"
            "o[r.getAttribute('data-task')] = r.querySelector('td.title').textContent; }); return o;")
        assert titles == {hostile: HOSTILE, plain: "Write the release notes"}
        assert driver.execute_script("return window.pwned === undefined")
        assert state_cell(driver, plain) == "pending"
        cookie = driver.get_cookie("loki_session")
        assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert cookie["value"] != files.token(server["root"])
        for width, height in ((390, 844), (1440, 900)):
            path = screenshot(driver, "board", width, height)
            assert path.stat().st_size > 1000
            # readable at that width: the page does not scroll sideways as a whole (tables scroll in their box)
            assert driver.execute_script("return document.documentElement.scrollWidth") <= width
        driver.get(f"{server['url']}task/{hostile}")
        assert text_of(driver, "task").count(HOSTILE) == 1
        assert driver.execute_script("return window.pwned === undefined")


def test_a_claim_by_loki_work_in_another_process_shows_within_a_second(server: dict[str, Any],
                                                                        tmp_path: Path) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    task_id = add(server["root"], "Migrate the orders table")
    started, release = tmp_path / "started", tmp_path / "release"
    os.mkfifo(started)
    os.mkfifo(release)
    with chromium() as driver:
        driver.get(server["login"])
        WebDriverWait(driver, 10, poll_frequency=0.02).until(
            lambda d: text_of(d, "live-status") == "live")
        assert state_cell(driver, task_id) == "pending"
        agent = subprocess.Popen(
            [sys.executable, "-m", "loki", "--root", server["root"], "work", "--agent", "bot-1", "--max-tasks", "1",
             "--", "sh", "-c", 'echo go > "$0"; read line < "$1"', str(started), str(release)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            with open(started) as ready:  # the agent's command runs: the task was claimed before it started
                assert ready.read() == "go\n"
            claimed_at = time.monotonic()
            WebDriverWait(driver, 1.0, poll_frequency=0.02).until(lambda d: state_cell(d, task_id) == "in-progress")
            shown_after = time.monotonic() - claimed_at
            assert shown_after < 1.0
            assert driver.execute_script(
                "return document.querySelector('b[data-count=\"in-progress\"]').textContent") == "1"
            events = text_of(driver, "events")
            assert f"{task_id}: pending -> in-progress (bot-1)" in events
        finally:
            with open(release, "w") as go:
                go.write("done\n")
            agent.wait(timeout=60)
        assert agent.returncode == 0, agent.stderr.read() if agent.stderr else ""
        WebDriverWait(driver, 5, poll_frequency=0.02).until(lambda d: state_cell(d, task_id) == "completed")
    assert tree_problems(server["root"]) == []


def test_an_escalation_approved_in_the_browser_is_approved_in_the_store(server: dict[str, Any]) -> None:
    from selenium.webdriver.common.by import By

    task_id = add(server["root"], "Rotate the payment API keys")
    assert loki_proc(["escalate", task_id, "--trigger", "security_decision"], root=server["root"]).code == 0
    (escalation,) = loki_proc(["escalations", "list", "--open", "--json"], root=server["root"]).json()["escalations"]
    with chromium() as driver:
        driver.get(server["login"])
        approve = (By.XPATH, f'//*[@id="escalations"]//tr[@data-escalation="{escalation["id"]}"]'
                             "//form[contains(@action, '/action/approve')]//button")
        click(driver, approve)
        assert driver.current_url == server["url"]  # back on the board (303)
        assert "none" in text_of(driver, "escalations")
    (after,) = loki_proc(["escalations", "list", "--json"], root=server["root"]).json()["escalations"]
    assert after["state"] == "resolved" and after["resolution"].startswith("approve by ")
    assert loki_proc(["queue", "show", task_id, "--json"], root=server["root"]).json()["state"] == "pending"
    history = loki_proc(["queue", "history", task_id, "--json"], root=server["root"]).json()["events"]
    assert any(e.get("event") == "approved" or "approve" in json.dumps(e) for e in history)
    assert tree_problems(server["root"]) == []
