"""``loki watch`` as real processes: concurrent emitters, SIGTERM/SIGINT, kill -9 and restart, two watchers, tmux.

No fixed sleeps: every wait polls something observable (a log line count, a line of the
watcher's output, a file) against a deadline.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loki.queue.queue import Queue
from loki.signals import emit as signals
from loki.storage import layout
from loki.storage.store import Store
from tests.helpers import loki_proc, tree_problems

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def outcomes(root: Path) -> list[dict[str, Any]]:
    path = root / "logs" / "signals.jsonl"
    if not path.exists():
        return []
    records = []
    for line in path.read_bytes().split(b"\n"):
        try:
            records.append(json.loads(line))
        except ValueError:
            continue  # empty, or torn by a kill
    return records


def wait_until(condition: Callable[[], bool], *, timeout: float = 120, proc: subprocess.Popen[bytes] | None = None,
               what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the watcher exited ({proc.returncode}) while waiting for {what}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


class WatchProcess:
    """``loki watch`` with its output going to files (a pipe would fill up and block it)."""

    def __init__(self, root: Path, directory: Path, *args: str, env: dict[str, str] | None = None) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.out = directory / f"watch-{time.monotonic_ns()}.out"
        self.err = self.out.with_suffix(".err")
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "loki", "--root", str(root), "watch", *args],
                                         cwd=REPO, stdout=out, stderr=err, env={**os.environ, **(env or {})})

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_for_output(self, text: str, timeout: float = 60) -> None:
        wait_until(lambda: text in self.output(), timeout=timeout, proc=self.proc, what=repr(text))

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 60) -> int:
        self.proc.send_signal(signum)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


def leftovers(root: Path) -> tuple[list[str], list[str]]:
    store = Store(root)
    return ([e["id"] for e in signals.entries(store, "waiting")],
            [e["id"] for e in signals.entries(store, "processing")])


# -- throughput and exactly-once ------------------------------------------------------------------------


def test_1000_signals_from_8_emitters_are_each_applied_exactly_once(root: Path, tmp_path: Path) -> None:
    watcher = WatchProcess(root, tmp_path, "--no-tui")
    try:
        watcher.wait_for_output("started: consuming")
        emitters = [subprocess.Popen([sys.executable, "-m", "tests.procs.emit_worker", str(root), f"w{n}", "125"],
                                     cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for n in range(8)]
        for emitter in emitters:
            _, err = emitter.communicate(timeout=300)
            assert emitter.returncode == 0, err.decode()
        wait_until(lambda: len(outcomes(root)) >= 1000, proc=watcher.proc, what="1000 outcomes")
        assert watcher.stop() == 0, watcher.err.read_text()
    finally:
        watcher.kill()
    records = outcomes(root)
    assert len(records) == 1000
    assert len({r["id"] for r in records}) == 1000
    applied = Counter((r["signal"]["worker"], r["signal"]["seq"]) for r in records)
    assert set(applied) == {(f"w{n}", seq) for n in range(8) for seq in range(125)}
    assert max(applied.values()) == 1
    custom = 8 * sum(1 for seq in range(125) if seq % 4 == 2)  # emit_worker's CUSTOM_EVENT: unknown, archived
    assert Counter(r["outcome"] for r in records) == {"logged": 1000 - custom, "archived": custom}
    assert leftovers(root) == ([], [])
    assert len(os.listdir(root / "signals" / ".archive")) == custom
    output = watcher.output().splitlines()
    assert sum(1 for line in output if " logged: " in line or " archived: " in line) == 1000
    assert output[-1].endswith("stopped: watcher stopped")
    assert tree_problems(root) == []


def test_signals_that_arrived_while_no_watcher_ran_are_processed_at_start(root: Path, tmp_path: Path) -> None:
    for n in range(5):
        result = loki_proc(["signal", "emit", "DOCS_NEEDED", f"n:={n}"], root=root)
        assert result.code == 0, result.stderr
    assert sorted(os.listdir(root / "signals")) == ["DOCS_NEEDED", *[f"DOCS_NEEDED.{n}" for n in range(2, 6)]]
    watcher = WatchProcess(root, tmp_path, "--json")
    try:
        wait_until(lambda: len(outcomes(root)) == 5, proc=watcher.proc, what="5 outcomes")
        assert watcher.stop() == 0
    finally:
        watcher.kill()
    assert sorted(r["signal"]["n"] for r in outcomes(root)) == [0, 1, 2, 3, 4]
    events = [json.loads(line) for line in watcher.output().splitlines()]
    assert events[0]["event"] == "started" and events[0]["consuming"] is True
    assert [e["event"] for e in events].count("signal") == 5 and events[-1]["event"] == "stopped"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_ctrl_c_finish_the_signal_in_hand_and_exit_cleanly(root: Path, tmp_path: Path,
                                                                        signum: int) -> None:
    store = Store(root, validate_all=False)
    for n in range(400):
        signals.emit(store, "DOCS_NEEDED", {"n": n})
    watcher = WatchProcess(root, tmp_path, "--no-tui")
    try:
        wait_until(lambda: len(outcomes(root)) >= 5, proc=watcher.proc, what="the first outcomes")
        assert watcher.stop(signum) == 0, watcher.err.read_text()
    finally:
        watcher.kill()
    waiting, processing = leftovers(root)
    assert processing == []  # the signal in hand was applied, logged and deleted before exiting
    logged = [r["signal"]["n"] for r in outcomes(root)]
    assert len(logged) == len(set(logged)) and len(logged) + len(waiting) == 400
    assert "Traceback" not in watcher.err.read_text()
    assert Store(root).read(layout.WATCH_STATE)["consumer"] is None


# -- crashes -------------------------------------------------------------------------------------------------


def seed_effects(root: Path, tasks: int) -> list[str]:
    """Tasks in progress and one effectful signal per task (fail, complete, friction, knowledge, drift)."""
    store = Store(root, validate_all=False)
    queue = Queue(store)
    queue.add_many([{"title": f"task {n}", "id": f"t{n:03d}"} for n in range(tasks)])
    for _ in range(tasks):
        queue.claim("eng-1")
    kinds = []
    for n in range(tasks):
        task_id = f"t{n:03d}"
        kind = n % 5
        if kind == 0:
            signals.emit(store, "TESTS_FAILED_api", {"error": f"boom {n}"}, task_id=task_id)
        elif kind == 1:
            signals.emit(store, "TESTS_PASSED_api", {"passed": n}, task_id=task_id)
        elif kind == 2:
            signals.emit(store, "FRICTION_DETECTED", {"friction_id": f"f{n}", "location": f"a.py:{n}",
                                                      "behavior": "sleep"})
        elif kind == 3:
            signals.emit(store, "INSTITUTIONAL_KNOWLEDGE_FOUND", {"knowledge": f"fact number {n}."})
        else:
            signals.emit(store, "DRIFT_DETECTED", {"detected_drift": f"d{n}"}, task_id=task_id, severity="medium")
        kinds.append(task_id)
    return kinds


def check_effects_exactly_once(root: Path, tasks: int) -> None:
    store = Store(root)
    queue = Queue(store)
    knowledge = (root / layout.KNOWLEDGE).read_text() if (root / layout.KNOWLEDGE).exists() else ""
    frictions = {f["friction_id"]: f for f in store.read(layout.FRICTION_MAP)["frictions"]}
    for n in range(tasks):
        found = queue.show(f"t{n:03d}")
        kind = n % 5
        if kind == 0:
            assert len(found["task"]["attempts"]) == 1, found
            assert found["state"] == "pending"
        elif kind == 1:
            assert found["state"] == "completed"
            assert sum("completed by TESTS_PASSED_api" in note["text"] for note in found["task"]["notes"]) == 1
        elif kind == 2:
            assert frictions[f"f{n}"]["reports"] == 1
        elif kind == 3:
            assert knowledge.count(f"fact number {n}.") == 1
    drifts = [n for n in range(tasks) if n % 5 == 4]
    state = store.read(layout.WATCH_STATE)
    assert state["drift_total"] == len(drifts)
    assert state["drift_offset"] == (root / "signals" / "DRIFT_DETECTED").stat().st_size
    records = outcomes(root)
    ids = Counter(r["id"] for r in records)
    assert max(ids.values()) == 1, [i for i, c in ids.items() if c > 1]
    assert len(ids) == tasks
    assert leftovers(root) == ([], [])
    continuity = (root / "CONTINUITY.md").read_text()
    threshold = 3
    assert continuity.count("## Drift consolidation") == len(drifts) // threshold


@pytest.mark.parametrize("point", ["signal-linked", "signal-claimed", "signal-applied", "signal-logged",
                                   "drift-applied"])
def test_a_consumer_killed_at_each_step_loses_nothing_and_applies_nothing_twice(root: Path, point: str) -> None:
    tasks = 25
    seed_effects(root, tasks)
    crashed = loki_proc(["watch", "--once"], root=root, env={"LOKI_CRASHPOINT": point})
    assert crashed.code == 137, crashed.stderr
    processing = leftovers(root)[1]
    if point != "drift-applied":
        assert len(processing) == 1  # died with one signal in hand
    finished = loki_proc(["watch", "--once", "--json"], root=root)
    assert finished.code == 0, finished.stderr
    check_effects_exactly_once(root, tasks)
    assert tree_problems(root) == []


def test_random_kill_9_of_a_live_watcher_then_restart(root: Path, tmp_path: Path) -> None:
    tasks = 150
    seed_effects(root, tasks)
    rng = random.Random(6)
    rounds = int(os.environ.get("LOKI_CRASH_ROUNDS", "8"))
    for round_number in range(rounds):
        watcher = WatchProcess(root, tmp_path, "--no-tui")
        try:
            target = len(outcomes(root)) + rng.randint(1, 12)
            wait_until(lambda t=target: len(outcomes(root)) >= t or not leftovers(root)[0],  # type: ignore[misc]
                       proc=watcher.proc, what=f"round {round_number}")
        finally:
            watcher.kill()  # SIGKILL, wherever it is
    final = loki_proc(["watch", "--once"], root=root)
    assert final.code == 0, final.stderr
    check_effects_exactly_once(root, tasks)
    assert tree_problems(root) == []


# -- two watchers ---------------------------------------------------------------------------------------------


def test_a_second_watcher_is_display_only_and_takes_over_when_the_first_dies(root: Path, tmp_path: Path) -> None:
    first = WatchProcess(root, tmp_path, "--no-tui")
    second = None
    try:
        first.wait_for_output("started: consuming")
        second = WatchProcess(root, tmp_path, "--no-tui")
        second.wait_for_output("display-only: pid")
        assert f"pid {first.proc.pid}" in second.output()
        assert loki_proc(["signal", "emit", "DOCS_NEEDED", "n:=1"], root=root).code == 0
        second.wait_for_output("DOCS_NEEDED logged")  # followed in the log, consumed by the first
        assert "(seen in the log)" in second.output()
        first.kill()
        second.wait_for_output("started: consuming", timeout=30)
        assert loki_proc(["signal", "emit", "DOCS_NEEDED", "n:=2"], root=root).code == 0
        wait_until(lambda: len(outcomes(root)) == 2, proc=second.proc, what="the second outcome")
        assert second.stop() == 0
    finally:
        first.kill()
        if second is not None:
            second.kill()
    assert [r["signal"]["n"] for r in outcomes(root)] == [1, 2]


# -- what other processes do, in the event lines ------------------------------------------------------------------


def test_no_tui_prints_breaker_changes_strikes_escalations_and_reviews_made_elsewhere(root: Path,
                                                                                     tmp_path: Path) -> None:
    from loki.strikes.strikes import Strikes

    env = {"LOKI_NOW": "2026-01-25T10:00:00Z"}
    queue = Queue(Store(root))
    queue.add("deploy", task_id="t1")
    queue.add("flaky", task_id="t2", max_attempts=1)
    queue.claim("a", lease_seconds=60)  # t1
    watcher = WatchProcess(root, tmp_path, "--no-tui", "--observer", "polling", env=env)
    try:
        watcher.wait_for_output("started: consuming")
        assert loki_proc(["breaker", "trip", "api/claude"], root=root, env=env).code == 0
        watcher.wait_for_output("10:00:00 breaker tripped manually: api/claude (for 300s; cooldown until "
                                "2026-01-25T10:05:00Z)")
        Strikes(Store(root), branch="main").record_failure("Bash", {"command": "npm test"}, "FAIL login.test.ts")
        watcher.wait_for_output("strike 1 (record): Bash `npm test` on main: FAIL login.test.ts")
        assert loki_proc(["escalate", "t1", "--trigger", "security_decision"], root=root, env=env).code == 0
        watcher.wait_for_output("escalation opened: 20260125T100000Z-t1 (task t1, security_decision)")
        closed = loki_proc(["escalations", "close", "20260125T100000Z-t1", "--note", "done elsewhere", "--by", "bo"],
                           root=root, env=env)
        assert closed.code == 0, closed.stderr
        watcher.wait_for_output("escalation resolved: 20260125T100000Z-t1: ")
        queue.claim("b")  # t2, whose one attempt fails into the dead-letter queue
        queue.fail("t2", "b", error="boom")
        assert loki_proc(["deadletter", "review", "--force"], root=root, env=env).code == 0
        watcher.wait_for_output("review: dead-letter review: 0 recovered, 0 abandoned, 1 left")
        assert watcher.stop() == 0
    finally:
        watcher.kill()
    lines = watcher.output().splitlines()
    assert sum(1 for line in lines if "escalation opened" in line) == 1  # each happening once
    assert sum(1 for line in lines if " breaker " in line) == 1


# -- the live view in a real terminal ----------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_live_view_renders_in_a_terminal_and_exits_on_ctrl_c(root: Path, tmp_path: Path) -> None:
    Queue(Store(root)).add("login endpoint", task_id="t1")
    Queue(Store(root)).claim("eng-007")
    session = f"loki-watch-{os.getpid()}-{time.monotonic_ns()}"
    done = tmp_path / "exit-code"
    command = (f"cd {REPO} && {sys.executable} -m loki --root {root} watch --refresh 0.1; "
               f"echo $? > {done}")
    tmux = ["tmux", "-L", session]
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "160", "-y", "60", command], check=True)

    def screen() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p", "-t", session], capture_output=True,
                              text=True).stdout

    try:
        wait_until(lambda: "loki watch · consuming" in screen() and "eng-007" in screen(), timeout=60,
                   what="the first frame")
        assert "in progress (1)" in screen() and "queue" in screen()
        assert loki_proc(["signal", "emit", "TESTS_PASSED_auth", "--task", "t1"], root=root).code == 0
        wait_until(lambda: "TESTS_PASSED_auth" in screen() and "completed" in screen(), timeout=60,
                   what="the signal in the view")
        subprocess.run([*tmux, "send-keys", "-t", session, "C-c"], check=True)
        wait_until(done.exists, timeout=60, what="the watcher to exit")
        assert done.read_text().strip() == "0"
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


# -- every wait is bounded (issue 22) ---------------------------------------------------------------------------


BLOCKED_ALARM = """
import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # inherited through exec, as from some launchers
os.execv(sys.executable, [sys.executable, "-m", "loki", *sys.argv[1:]])
"""


def test_watch_once_waiting_for_a_lock_gives_up_at_the_timeout_even_with_the_alarm_signal_blocked(
        root: Path) -> None:
    """A `watch --once` that became the consumer waits for the watch state's lock, held by someone else
    past the lock timeout: it exits 5 naming the lock and its holder, within the timeout. Started with
    SIGALRM blocked (a signal mask is inherited), the lock's timer never fired and the wait lasted as long
    as the holder held the lock: the observed hang of a `watch --once` that printed nothing."""
    from loki.storage.locks import FileLock

    holder = FileLock(str(root / "state" / "watch.json.lock"), timeout=5)
    holder.acquire()
    try:
        proc = subprocess.Popen([sys.executable, "-c", BLOCKED_ALARM, "--root", str(root), "watch", "--once"],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "LOKI_LOCK_TIMEOUT": "1"})
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise AssertionError("watch --once still waited for the lock 30s into a 1s lock timeout") from None
    finally:
        holder.release()
    assert proc.returncode == 5, out + err
    assert "timed out after 1s waiting for the lock state/watch.json.lock" in err
    assert f"held by pid {os.getpid()}" in err
    assert len(err.strip().splitlines()) == 1
