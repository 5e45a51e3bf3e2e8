"""Claude Code's task list and loki's queue (loki/hooks/teamtasks.py), as the console script runs the hooks:
``TaskCompleted`` runs the mapped loki task's declared checks and refuses the completion when one fails;
``Stop`` reminds the user of the failing checks of the tasks this agent holds, and never blocks. The same
with the real Claude Code: tests/agents/test_agent_teamtasks.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loki.clock import ManualClock
from loki.queue.queue import Queue
from loki.storage.store import Store
from tests.helpers import Result, loki_proc, tree_problems

NOW = "2026-01-25T10:00:00Z"
CHECK = ("#!/bin/sh\ngrep -q fixed calc.txt && { echo '1 passed'; exit 0; }\n"
         "echo 'FAILED test_calc.py::test_add' >&2\nexit 1\n")
QUIET = {"LOKI_AGENT": "", "LOKI_TASK_ID": "", "LOKI_NOW": NOW}


@pytest.fixture
def queue(project: Path, root: Path) -> Queue:
    (project / "check.sh").write_text(CHECK)
    (project / "calc.txt").write_text("broken\n")
    return Queue(Store(root, clock=ManualClock(NOW)))


def task_completed(project: Path, subject: str, env: dict[str, str] | None = None, **extra: Any) -> Result:
    payload = {"session_id": "s1", "hook_event_name": "TaskCompleted", "task_id": "1", "task_subject": subject,
               "task_description": "", "cwd": str(project), **extra}
    return loki_proc(["hook", "task-completed"], root=project / ".loki", env={**QUIET, **(env or {})},
                     input=json.dumps(payload))


def answer(result: Result) -> dict[str, Any] | None:
    assert result.code == 0, result.stderr
    return json.loads(result.stdout) if result.stdout else None


def test_a_failing_check_of_the_task_named_in_the_subject_refuses_the_completion(project: Path, queue: Queue) -> None:
    queue.add("Fix add()", task_id="t1", verify=["sh check.sh"])
    said = answer(task_completed(project, "Fix the adder [loki:t1]"))
    assert said is not None and said["decision"] == "block"
    assert said["reason"].startswith("loki: not completed: Fix the adder [loki:t1] is loki task t1 (Fix add()), "
                                     "whose declared checks must pass first, and one failed. check 'sh check.sh' "
                                     "failed: exit 1 (test_failure): ")
    assert "FAILED test_calc.py::test_add" in said["reason"]
    assert said["reason"].endswith("Fix the cause, then mark the task completed again (the checks run again then).")
    (project / "calc.txt").write_text("fixed\n")
    assert answer(task_completed(project, "Fix the adder [loki:t1]")) is None  # the checks pass: it completes
    assert tree_problems(project / ".loki") == []


def test_the_claude_task_maps_to_the_loki_task_it_names(project: Path, queue: Queue) -> None:
    queue.add("Fix add()", task_id="t1", verify=["sh check.sh"])
    queue.add("Docs", task_id="t2")  # no checks
    assert answer(task_completed(project, "anything")) is None  # names no loki task
    assert answer(task_completed(project, "see loki:t2")) is None  # a task without checks: nothing to run
    assert answer(task_completed(project, "see loki:nope")) is None  # an unknown task: nothing to gate
    # by its id alone only a task this agent holds: t1 is not held yet
    assert answer(task_completed(project, "Finish task t1", {"LOKI_TASK_ID": "t1"})) is None
    queue.claim("alice", task_id="t1")
    assert answer(task_completed(project, "Finish task t1.", {"LOKI_TASK_ID": "t1"}))["decision"] == "block"
    assert answer(task_completed(project, "Finish t1", {"LOKI_AGENT": "alice"}))["decision"] == "block"
    assert answer(task_completed(project, "Finish t1", {"LOKI_AGENT": "bob"})) is None  # not bob's
    assert answer(task_completed(project, "Finish t1")) is None  # an agent without a name holds nothing
    # the agent's own to-do steps are not the loki task: they complete freely
    assert answer(task_completed(project, "Read the failing test", {"LOKI_TASK_ID": "t1"})) is None
    assert answer(task_completed(project, "Fix t10", {"LOKI_AGENT": "alice"})) is None  # t10 is not t1
    # the marker wins over the environment: this Claude task is t2's, which has no checks
    assert answer(task_completed(project, "loki:t2 after t1", {"LOKI_AGENT": "alice"})) is None
    # in the description as well as the subject
    assert answer(task_completed(project, "x", task_description="part of loki:t1"))["decision"] == "block"


def test_a_check_type_default_counts_and_a_timeout_fails(project: Path, queue: Queue) -> None:
    config = project / ".loki" / "config" / "loki.json"

    def settings(timeout_seconds: float) -> str:
        return json.dumps({"version": 1, "verify": {"types": {"bugfix": ["sh check.sh"]},
                                                    "timeout_seconds": timeout_seconds}})

    config.write_text(settings(30))  # room for check.sh to fail on its own on a loaded machine
    queue.add("Fix add()", task_id="t1", type="bugfix")
    queue.add("Slow", task_id="t2", verify=["sleep 30"])
    assert "check 'sh check.sh' failed" in answer(task_completed(project, "loki:t1"))["reason"]
    config.write_text(settings(0.05))  # each hook reads the settings anew; the sleep is not waited out for long
    said = answer(task_completed(project, "loki:t2"))
    assert "check 'sleep 30' failed: exit 124 (timeout)" in said["reason"]


def test_hostile_names_and_output_are_escaped_in_the_reason(project: Path, queue: Queue) -> None:
    (project / "hostile.sh").write_text("#!/bin/sh\nprintf 'FAILED \\033]0;owned\\007 here\\n'\nexit 1\n")
    queue.add("Fix \x1b[31madd\x1b[0m()", task_id="t1", verify=["sh hostile.sh"])
    reason = answer(task_completed(project, "loki:t1 \x1b]0;owned\x07"))["reason"]
    assert "\x1b" not in reason and "\x07" not in reason
    assert "Fix \\x1b[31madd" in reason and "FAILED \\x1b]0;owned\\x07 here" in reason


def stop(project: Path, env: dict[str, str]) -> Result:
    payload = {"session_id": "s1", "hook_event_name": "Stop", "stop_hook_active": False, "cwd": str(project)}
    return loki_proc(["hook", "stop"], root=project / ".loki", env={**QUIET, **env}, input=json.dumps(payload))


def test_the_stop_hook_reminds_the_holder_of_its_failing_checks_and_never_blocks(project: Path, root: Path) -> None:
    clock = ManualClock(NOW)
    queue = Queue(Store(root, clock=clock))
    queue.add("Fix add()", task_id="t1", verify=["sh check.sh"])
    claim = queue.claim("alice", task_id="t1")
    assert answer(stop(project, {"LOKI_AGENT": "alice"})) is None  # no attempt failed yet
    queue.fail("t1", "alice", token=claim["claim_token"], error_type="test_failure",
               error="check 'sh check.sh' failed: exit 1 (test_failure): FAILED test_calc.py::test_add\n\n"
                     "output (first lines):\nFAILED test_calc.py::test_add")
    clock.advance(3600)
    queue.claim("alice", task_id="t1", lease_seconds=600)
    later = {"LOKI_NOW": "2026-01-25T11:05:00Z"}
    said = answer(stop(project, {"LOKI_AGENT": "alice", **later}))
    assert said == {"systemMessage": "loki: this agent holds 1 task whose declared checks failed at the last attempt: "
                                     "t1 (Fix add()): check 'sh check.sh' failed: exit 1 (test_failure): FAILED "
                                     "test_calc.py::test_add. The task completes only when its checks pass (`loki "
                                     "queue show ID` has the output)."}
    assert answer(stop(project, {"LOKI_TASK_ID": "t1", **later})) == said
    assert answer(stop(project, {"LOKI_AGENT": "bob", **later})) is None  # bob holds nothing
    assert answer(stop(project, later)) is None  # an agent without a name holds nothing
    # once the claim's lease ran out, alice no longer holds the task
    assert answer(stop(project, {"LOKI_AGENT": "alice", "LOKI_NOW": "2026-01-25T11:10:00Z"})) is None


@pytest.mark.slow
def test_on_a_postgresql_tree_the_gate_and_the_reminder_read_the_database(project: Path, root: Path) -> None:
    """The hooks open the tree's store: on a database tree they read the team's tasks from PostgreSQL."""
    from loki.storage import layout
    from tests.conftest import postgres_store

    clock = ManualClock(NOW)
    store = postgres_store(root, clock)
    try:
        (root / layout.CONFIG).write_text(json.dumps({"version": 1, "storage": {"backend": "postgresql",
                                                                                "database": str(store.db.url)}}))
        (project / "check.sh").write_text(CHECK)
        (project / "calc.txt").write_text("broken\n")
        queue = Queue(store)
        queue.add("Fix add()", task_id="t1", verify=["sh check.sh"])
        claim = queue.claim("alice", task_id="t1")
        said = answer(task_completed(project, "loki:t1"))
        assert said is not None and "check 'sh check.sh' failed: exit 1 (test_failure)" in said["reason"]
        queue.fail("t1", "alice", token=claim["claim_token"], error_type="test_failure",
                   error="check 'sh check.sh' failed: exit 1 (test_failure): FAILED test_calc.py::test_add")
        clock.advance(3600)
        queue.claim("alice", task_id="t1", lease_seconds=600)
        reminder = answer(stop(project, {"LOKI_AGENT": "alice", "LOKI_NOW": "2026-01-25T11:05:00Z"}))
        assert reminder is not None and "t1 (Fix add()): check 'sh check.sh' failed" in reminder["systemMessage"]
    finally:
        store.close()
