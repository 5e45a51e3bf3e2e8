"""Declared checks (docs/verify.md) through the library, on every storage backend: ``loki work`` runs a
task's checks after its command exits 0, completes it only when all pass, and keeps the evidence; a failed
check is an ordinary failed attempt; ``Queue.complete`` refuses a task with checks without evidence.

Checks and commands are real processes (``sh``, ``python -c``) in a real git repository (the evidence's
commit). Time is injected: the loop's waits move the ManualClock past each backoff.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loki.clock import ManualClock
from loki.errors import InvalidArgument
from loki.queue.queue import Queue
from loki.tasks.verify import Unverified, check_command, check_commands, checks_for
from loki.work.checks import TIMEOUT_EXIT
from loki.work.loop import Summary, Worker, WorkOptions
from tests.helpers import process_gone, state_snapshot

PY = sys.executable
SECRET = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The agent's working directory: a git repository with one commit, made the current directory."""
    work = tmp_path / "repo"
    work.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "init", "-q", str(work)], check=True, env=env)
    subprocess.run(["git", "-C", str(work), "commit", "-q", "--allow-empty", "-m", "one"], check=True, env=env)
    monkeypatch.chdir(work)
    return work


def head(repo: Path) -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


class FakeSleep:
    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock

    def __call__(self, seconds: float) -> None:
        self.clock.advance(seconds)


def work(store: Any, command: list[str], notes: list[str] | None = None, *,
         timer: Callable[[], float] = time.monotonic, **options: Any) -> Summary:
    options.setdefault("agent", "eng-001")
    seen: list[str] = [] if notes is None else notes
    worker = Worker(store, WorkOptions(command=command, **options), sleep=FakeSleep(store.clock),
                    stdout=lambda data: None, stderr=lambda data: None, notify=seen.append, timer=timer)
    return worker.run_unguarded()


FAILING_TEST = "sh -c 'echo collected 3 items; echo FAILED tests/test_login.py::test_rate_limit >&2; exit 1'"


def test_a_task_whose_checks_pass_completes_with_their_evidence(backend_store: Any, repo: Path) -> None:
    queue = Queue(backend_store)
    queue.add("Fix login", task_id="t1", verify=["true", f"sh -c 'echo ran on $LOKI_TASK_ID; echo {SECRET}'"])
    summary = work(backend_store, ["true"])
    assert (summary.exit_code, summary.count("completed")) == (0, 1)
    shown = queue.show("t1")
    assert shown["state"] == "completed"
    verification = shown["task"]["result"]["verification"]
    assert verification["commit"] == head(repo)
    first, second = verification["checks"]
    assert (first["command"], first["exit_code"], first["output_tail"], first["commit"]) == ("true", 0, "",
                                                                                            head(repo))
    assert second["exit_code"] == 0 and second["output_tail"].startswith("ran on t1")  # the task's environment
    assert SECRET not in second["output_tail"]  # redacted before it is stored
    assert isinstance(second["duration_seconds"], float)
    completed = next(e for e in queue.history("t1")["events"] if e["event"] == "completed")
    assert completed["detail"].startswith(f"2 checks passed on {head(repo)[:12]}: 'true' (exit 0")
    assert [(c["command"], c["exit_code"]) for c in summary.runs[0].checks] == [("true", 0), (second["command"], 0)]


def test_a_check_that_fails_is_a_failed_attempt_and_dead_letters_with_its_output(backend_store: Any,
                                                                                 repo: Path) -> None:
    """The agent exits 0 without doing the work: the task never completes; after max_attempts it is in
    the dead-letter queue with the check's output as its last error."""
    queue = Queue(backend_store)
    queue.add("Fix the rate limit", task_id="t1", verify=["true", FAILING_TEST], max_attempts=3)
    notes: list[str] = []
    summary = work(backend_store, ["true"], notes, until_empty=True)
    assert summary.count("completed") == 0 and summary.count("failed") == 3 and summary.exit_code == 1
    run = summary.runs[0]
    assert run.error_type == "test_failure" and run.error_class == "test_failure"
    assert run.error == (f"check 2 of 2 {FAILING_TEST!r} failed: exit 1 (test_failure): "
                         "FAILED tests/test_login.py::test_rate_limit")
    assert [item["exit_code"] for item in run.checks] == [0, 1]
    shown = queue.show("t1")
    assert shown["state"] == "dead-letter"
    last = shown["task"]["last_error"]
    assert last.startswith(f"check 2 of 2 {FAILING_TEST!r} failed") and "collected 3 items" in last
    attempts = shown["task"]["attempts"]
    assert [a["error_type"] for a in attempts] == ["test_failure"] * 3
    assert any("failed t1: check 2 of 2" in note for note in notes)


def test_a_check_that_hangs_is_killed_with_its_process_group_at_its_timeout(backend_store: Any, repo: Path) -> None:
    queue = Queue(backend_store)
    pidfile = repo / "child.pid"
    hang = f"sh -c 'sleep 300 & echo $! > {pidfile}; echo waiting; wait'"
    queue.add("Hangs", task_id="t1", verify=[hang], max_attempts=2)

    def past_the_timeout_once_hanging() -> float:
        # The checks' timer stands still until the check's child is running (its pid written whole), then
        # jumps past the timeout: the kill comes after the hang began, however loaded the machine, without
        # the test waiting out a real second.
        return 3600.0 if pidfile.exists() and pidfile.read_text().endswith("\n") else 0.0

    summary = work(backend_store, ["true"], max_tasks=1, check_timeout_seconds=0.05,
                   timer=past_the_timeout_once_hanging)
    run = summary.runs[0]
    assert run.outcome == "failed" and run.error_type == "timeout" and run.error_class == "timeout"
    assert run.checks[0]["exit_code"] == TIMEOUT_EXIT and run.checks[0]["timed_out"] is True
    assert process_gone(int(pidfile.read_text()), within=10)  # the check's child too: the whole group
    assert "killed (its whole process group)" in queue.show("t1")["task"]["last_error"]


def test_checks_come_from_the_type_default_unless_the_task_has_its_own(make_store: Any, repo: Path) -> None:
    store = make_store({"verify": {"types": {"backend": ["sh -c 'exit 3'"]}, "timeout_seconds": 30}})
    queue = Queue(store)
    queue.add("Default", task_id="t1", type="backend")
    queue.add("Own", task_id="t2", type="backend", verify=["true"])
    queue.add("None", task_id="t3", type="backend", verify=[])
    queue.add("Other type", task_id="t4", type="docs")
    assert checks_for(queue.show("t1")["task"], store.config) == ["sh -c 'exit 3'"]
    summary = work(store, ["true"], max_tasks=4)
    outcomes = {run.task_id: run.outcome for run in summary.runs}
    assert outcomes == {"t1": "failed", "t2": "completed", "t3": "completed", "t4": "completed"}
    assert queue.show("t1")["task"]["last_error"].startswith("check \"sh -c 'exit 3'\" failed: exit 3")
    assert "verification" not in queue.show("t3")["task"]["result"]


def test_a_command_that_fails_runs_no_check(backend_store: Any, repo: Path) -> None:
    marker = repo / "checked"
    Queue(backend_store).add("x", task_id="t1", verify=[f"touch {marker}"])
    summary = work(backend_store, ["false"], max_tasks=1)
    assert summary.runs[0].outcome == "failed" and summary.runs[0].checks == []
    assert not marker.exists()


def test_complete_refuses_a_task_with_checks_without_passing_evidence(backend_store: Any, repo: Path) -> None:
    queue = Queue(backend_store)
    queue.add("x", task_id="t1", verify=["make test", "ruff check src"])
    queue.claim("a")
    before = state_snapshot(backend_store)
    with pytest.raises(Unverified) as refused:
        queue.complete("t1", "a")
    assert refused.value.exit_code == 1 and "'make test', 'ruff check src'" in refused.value.message
    now = head(repo)
    passing = [{"command": "make test", "exit_code": 0, "commit": now},
               {"command": "ruff check src", "exit_code": 0, "commit": now}]
    for evidence, why in (
            ([passing[0]], "no result for the check(s) 'ruff check src'"),
            ([passing[0], {**passing[1], "exit_code": 1}], "the check 'ruff check src' failed (exit 1)"),
            ([passing[0], {**passing[1], "commit": "0" * 40}], "ran on 000000000000, not on HEAD")):
        with pytest.raises(Unverified, match=re.escape(why)):
            queue.complete("t1", "a", evidence=evidence, head=now)
    assert state_snapshot(backend_store) == before  # nothing written by a refusal
    task = queue.complete("t1", "a", evidence=passing, head=now)
    assert task["result"]["verification"]["checks"][1] == passing[1]


def test_a_forced_completion_is_kept_in_the_history(backend_store: Any, repo: Path) -> None:
    queue = Queue(backend_store)
    queue.add("x", task_id="t1", verify=["make test"])
    queue.claim("a")
    task = queue.complete("t1", "a", forced_by="alice")
    assert task["result"] == {"verification": {"forced_by": "alice", "checks_not_run": ["make test"]}}
    event = queue.history("t1")["events"][-1]
    assert event["event"] == "completed" and "forced by alice" in event["detail"] and "'make test'" in event["detail"]


@pytest.mark.parametrize(("check", "why"), [
    ("", "a check is empty"),
    ("   ", "a check is empty"),
    ("make\x00test", "contains NUL"),
    ("sh -c 'unbalanced", "is not a command line: No closing quotation"),
    ("make\ntest", "contains a control character"),
    ("''", "names no program"),
    (42, "a check must be a command line (a string), got int"),
])
def test_a_check_that_is_not_a_command_is_refused_and_nothing_is_added(backend_store: Any, check: Any,
                                                                       why: str) -> None:
    queue = Queue(backend_store)
    before = state_snapshot(backend_store)
    with pytest.raises(InvalidArgument, match=re.escape(why)) as refused:
        queue.add("x", task_id="t1", verify=[check])
    assert refused.value.exit_code == 2
    assert state_snapshot(backend_store) == before
    queue.add("y", task_id="t2")
    with pytest.raises(InvalidArgument, match=re.escape(why)):
        queue.edit("t2", verify=[check])
    assert "verify" not in queue.show("t2")["task"]


def test_edit_replaces_the_checks_and_keeps_the_change_in_the_history(backend_store: Any) -> None:
    queue = Queue(backend_store)
    queue.add("x", task_id="t1", verify=["make test"])
    result = queue.edit("t1", verify=["make test", "make lint", "make test"])
    assert result["task"]["verify"] == ["make test", "make lint"]  # duplicates dropped, order kept
    assert result["changed"]["verify"] == {"from": ["make test"], "to": ["make test", "make lint"]}
    assert queue.edit("t1", verify=[])["task"]["verify"] == []


def test_check_rules() -> None:
    assert check_command("ruff check 'src dir'") == ["ruff", "check", "src dir"]
    assert check_commands(["a", "b", "a"]) == ["a", "b"]
    with pytest.raises(InvalidArgument, match="21 checks; the limit is 20"):
        check_commands([f"c{i}" for i in range(21)])


def test_tests_passed_records_the_signal_as_the_evidence_of_a_task_with_checks(backend_store: Any) -> None:
    from loki.signals.emit import emit
    from loki.watch.consumer import consume_pending

    queue = Queue(backend_store)
    queue.add("checked", task_id="t1", verify=["make test"])
    queue.add("unchecked", task_id="t2")
    for task_id in ("t1", "t2"):
        queue.claim("eng-1", task_id=task_id)
        emit(backend_store, "TESTS_PASSED_auth", {"summary": "42 passed", "passed": 42, "commit": "abc1234"},
             task_id=task_id, agent="qa-1")
        assert consume_pending(backend_store)["consumed"]
    checked = queue.show("t1")["task"]["result"]
    assert checked["verification"] == {"signal": checked["signal"], "type": "TESTS_PASSED_auth", "by": "qa-1",
                                       "checks_reported": ["make test"], "commit": "abc1234", "summary": "42 passed",
                                       "passed": 42}
    assert "verification" not in queue.show("t2")["task"]["result"]


# -- what the views show -----------------------------------------------------------------------------


def test_status_agents_briefing_explain_and_watch_show_a_failing_check(backend_store: Any, repo: Path) -> None:
    from loki.admin.status import status
    from loki.hooks.handlers import briefing
    from loki.queue.agents import roster
    from loki.watch.dashboard import Dashboard
    from loki.watch.screen import queue_lines

    queue = Queue(backend_store)
    check = "sh -c 'echo FAILED test_a.py::test_b; exit 1'"
    queue.add("Fix it", task_id="t1", verify=[check])
    queue.add("Fine", task_id="t2")
    summary = work(backend_store, ["true"], max_tasks=1)
    assert summary.runs[0].outcome == "failed"
    rows = status(backend_store)["checks_failing"]
    assert [(r["task_id"], r["state"], r["check"], r["exit_code"], r["error_class"], r["attempt"]) for r in rows] == [
        ("t1", "pending", check, 1, "test_failure", 1)]
    waiting = queue.ready()["not_ready"]
    assert [w["id"] for w in waiting] == ["t1"]
    reason = waiting[0]["reasons"][0]
    assert reason["reason"] == "backoff" and reason["check"] == check
    assert f"(after its check {check!r} failed: exit 1 (test_failure))" in reason["text"]
    answer = briefing(backend_store, {})
    assert answer is not None
    said = json.dumps(answer)
    assert "Checks: 1 task failed a declared check at the last attempt: t1" in said
    snap = Dashboard(backend_store).snapshot()
    assert snap["checks_failing"] == 1
    line = "".join(text for text, _tone in queue_lines(snap, 300, rows=1)[0])
    assert "checks failing 1" in line
    backend_store.clock.advance(3600)  # past the backoff: an agent takes it again
    queue.claim("eng-2", task_id="t1")
    row = next(r for r in roster(backend_store)["agents"] if r["agent"] == "eng-2")
    assert row["failing_check"] == {"check": check, "exit_code": 1, "error_class": "test_failure", "attempt": 1}
    queue.edit("t1", verify=["true"], force=True, by="eng-2")
    work(backend_store, ["true"], max_tasks=1, agent="eng-3")  # t2, no checks
    assert status(backend_store)["checks_failing"][0]["state"] == "in-progress"
