"""Two "machines" that share nothing but a database URL: real processes, separate working directories,
separate HOMEs, each with its own ``.loki/`` whose config names the same database.

* a signal emitted on one is applied by the watcher on the other, woken by LISTEN/NOTIFY (its rescan is
  an hour away, so nothing else could wake it);
* one consuming watcher per database: a second one only displays, and takes over when the first is
  killed with SIGKILL (the server frees the lock with its connection);
* strikes recorded on one machine stop the call on the other once its hooks refresh the local copies,
  and the PreToolUse hook never imports the database driver; error memory captured on one is found on
  the other.

No fixed sleeps: every wait polls something observable against a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from loki.storage import layout
from loki.storage.tree import init_tree
from tests.conftest import postgres_store
from tests.helpers import NOW, Result

pytestmark = pytest.mark.slow
PAYLOADS = Path(__file__).resolve().parents[2] / "hook_payloads"


class Machine:
    """A checkout of ``main`` with its own HOME and ``.loki/``, on the team's database."""

    def __init__(self, base: Path, name: str, url: str) -> None:
        self.home = base / name / "home"
        self.top = base / name / "shop"
        self.home.mkdir(parents=True)
        (self.top / ".git").mkdir(parents=True)
        (self.top / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
        self.root = self.top / ".loki"
        init_tree(str(self.root))
        (self.root / layout.CONFIG).write_text(json.dumps(
            {"version": 1, "storage": {"backend": "postgresql", "database": url}}))
        self.processes: list[subprocess.Popen[bytes]] = []

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOKI_")}
        return {**env, "HOME": str(self.home)}

    def loki(self, *args: str, stdin: dict[str, Any] | None = None, python: tuple[str, ...] = ()) -> Result:
        data = json.dumps(stdin).encode() if stdin is not None else None
        done = subprocess.run([sys.executable, *python, "-m", "loki", *args], input=data, capture_output=True,
                              cwd=self.top, env={**self.env(), "LOKI_NOW": NOW} if stdin is not None else self.env(),
                              timeout=120)
        return Result(done.returncode, done.stdout.decode(), done.stderr.decode())

    def watch(self) -> Watching:
        watching = Watching(self)
        self.processes.append(watching.proc)
        return watching

    def hook(self, event: str, name: str, **changes: Any) -> Result:
        data: dict[str, Any] = json.loads((PAYLOADS / f"{name}.json").read_text())
        data.update(cwd=str(self.top), **changes)
        return self.loki("hook", event, stdin=data)


class Watching:
    """``loki watch --no-tui --json`` on a machine, its output going to a file."""

    def __init__(self, machine: Machine) -> None:
        self.out = machine.home / f"watch-{time.monotonic_ns()}.out"
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "loki", "watch", "--no-tui", "--json"],
                                         cwd=machine.top, env=machine.env(), stdout=out, stderr=subprocess.STDOUT)

    def events(self) -> list[dict[str, Any]]:
        found = []
        for line in self.out.read_text(errors="replace").splitlines():
            try:
                found.append(json.loads(line))
            except ValueError:
                continue
        return found

    def wait_for(self, condition: Callable[[dict[str, Any]], bool], what: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            found = [event for event in self.events() if condition(event)]
            if found:
                return found[-1]
            assert self.proc.poll() is None, f"the watcher exited ({self.proc.returncode}) waiting for {what}: " \
                                             f"{self.out.read_text(errors='replace')[-2000:]}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.01)


@pytest.fixture
def team(root: Path, clock: Any) -> Iterator[Callable[[dict[str, Any]], str]]:
    """The team's database: a fresh schema with ``config`` as the team's settings; returns its URL."""
    stores: list[Any] = []

    def make(config: dict[str, Any]) -> str:
        store = postgres_store(root, clock, config)
        stores.append(store)
        return str(store.db.url)

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def machines(tmp_path: Path) -> Iterator[Callable[[str, str], Machine]]:
    made: list[Machine] = []

    def make(name: str, url: str) -> Machine:
        machine = Machine(tmp_path, name, url)
        made.append(machine)
        return machine

    yield make
    for machine in made:
        for proc in machine.processes:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)


def test_a_signal_emitted_on_one_machine_is_applied_by_the_watcher_on_the_other(
        team: Callable[[dict[str, Any]], str], machines: Callable[[str, str], Machine]) -> None:
    url = team({"version": 1, "watch": {"rescan_seconds": 3600, "tick_seconds": 3600}})
    laptop, runner = machines("laptop", url), machines("runner", url)
    watching = runner.watch()
    started = watching.wait_for(lambda e: e.get("event") == "started" and e.get("consuming") is True, "consuming")
    assert started["observer"] == "notify"
    assert laptop.loki("queue", "add", "ship the release", "--id", "t1").code == 0
    emitted = laptop.loki("signal", "emit", "TESTS_PASSED", "--subject", "unit", "--task", "t1", "--json")
    assert emitted.code == 0, emitted.stderr
    applied = watching.wait_for(lambda e: e.get("event") == "signal" and e.get("task_id") == "t1", "the signal",
                                timeout=30)  # the rescan is an hour away: only the notification wakes it
    assert applied["outcome"] == "applied" and applied["name"] == "TESTS_PASSED_unit"
    shown = laptop.loki("queue", "show", "t1", "--json")
    assert shown.code == 0 and shown.json()["state"] == "completed"
    watching.proc.send_signal(signal.SIGTERM)
    assert watching.proc.wait(timeout=60) == 0


def test_one_consuming_watcher_per_database_and_a_killed_one_is_replaced(
        team: Callable[[dict[str, Any]], str], machines: Callable[[str, str], Machine]) -> None:
    url = team({"version": 1, "watch": {"rescan_seconds": 0.2, "tick_seconds": 3600}})
    laptop, runner, ci = machines("laptop", url), machines("runner", url), machines("ci", url)
    first = runner.watch()
    first.wait_for(lambda e: e.get("event") == "started" and e.get("consuming") is True, "the first consumer")
    second = ci.watch()
    shown = second.wait_for(lambda e: e.get("event") == "started", "the second watcher")
    assert shown["consuming"] is False and shown["holder"]["pid"] == first.proc.pid
    first.proc.kill()  # SIGKILL: no release, the server frees the lock with the connection
    first.proc.wait(timeout=30)
    second.wait_for(lambda e: e.get("event") == "started" and e.get("consuming") is True, "the takeover")
    assert laptop.loki("signal", "emit", "DOCS_NEEDED").code == 0
    second.wait_for(lambda e: e.get("event") == "signal" and e.get("name") == "DOCS_NEEDED", "the signal")
    second.proc.send_signal(signal.SIGTERM)
    assert second.proc.wait(timeout=60) == 0


def test_strikes_and_error_memory_are_shared_and_the_hot_path_stays_local(
        team: Callable[[dict[str, Any]], str], machines: Callable[[str, str], Machine]) -> None:
    url = team({"version": 1})
    laptop, runner = machines("laptop", url), machines("runner", url)
    for _ in range(3):
        failed = laptop.hook("post-tool-use-failure", "post_tool_use_failure_bash")
        assert failed.code == 0, failed.stderr
    denied = laptop.hook("pre-tool-use", "pre_tool_use_bash")
    assert denied.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
    # The runner has not connected since: its copy is empty, so the call goes ahead there ...
    assert runner.hook("pre-tool-use", "pre_tool_use_bash").stdout == ""
    assert runner.hook("session-start", "session_start").code == 0  # ... until a hook that connects refreshes it
    data: dict[str, Any] = json.loads((PAYLOADS / "pre_tool_use_bash.json").read_text())
    data["cwd"] = str(runner.top)
    timed = runner.loki("hook", "pre-tool-use", stdin=data, python=("-X", "importtime"))
    assert json.loads(timed.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "psycopg" not in timed.stderr  # the hot path read the local copy, never the database
    found = runner.loki("errors", "search", "cargo", "--json")  # captured on the laptop, found on the runner
    assert found.code == 0, found.stderr
    assert [hit["command"] for hit in found.json()["results"]] == ["cargo build --release"]
    cleared = runner.hook("post-tool-use", "post_tool_use_bash")  # the call succeeds on the runner
    assert cleared.code == 0, cleared.stderr
    assert runner.hook("pre-tool-use", "pre_tool_use_bash").stdout == ""
    listed = laptop.loki("errors", "list", "--json")
    assert listed.code == 0 and listed.json()["strikes"] == []  # cleared for the whole team
