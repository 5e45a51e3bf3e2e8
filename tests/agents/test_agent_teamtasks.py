"""Claude Code's own task list with the real Claude Code 2.1.330 (docs/verify.md, "Agents that complete by
themselves"): ``loki hooks install`` installs the ``TaskCompleted`` hook, and a ``TaskUpdate`` that marks a
Claude task completed first runs the declared checks of the loki task it names (``loki:ID``); a failing check
refuses the completion, the model is told which check failed and how, and the task stays as it was; once the
check passes the completion goes through. The Stop hook reminds the user of a held task's failing check and
the session still ends at once (it never blocks).

Claude Code offers its task tools (TaskCreate, TaskUpdate, TaskGet, ...) for the models it lists, or with
``CLAUDE_CODE_ENABLE_TODO_TOOLS=1`` (the scripted model is not one it lists; read from the CLI's bundled code),
and the test turns its tool search off (``ENABLE_TOOL_SEARCH=false``), which would otherwise defer them."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from loki.clock import ManualClock
from loki.queue.queue import Queue
from loki.storage.store import Store
from tests.agents.claude import claude_session, make_project
from tests.agents.modelserver import bash, text, tool
from tests.helpers import tree_problems

pytestmark = [pytest.mark.slow, pytest.mark.agent]

CHECK = ("#!/bin/sh\ngrep -q fixed calc.txt && { echo '1 passed'; exit 0; }\n"
         "echo 'FAILED test_calc.py::test_add' >&2\nexit 1\n")
TASK_TOOLS = {"CLAUDE_CODE_ENABLE_TODO_TOOLS": "1", "ENABLE_TOOL_SEARCH": "false"}


def calc_project(tmp_path: Path) -> Path:
    project = make_project(tmp_path / "calc")
    (project / "check.sh").write_text(CHECK)
    (project / "calc.txt").write_text("broken\n")
    return project


def test_a_teammate_cannot_complete_a_task_whose_loki_checks_fail(claude_code: Path, tmp_path: Path) -> None:
    project = calc_project(tmp_path)
    installed = json.loads((project / ".claude" / "settings.json").read_text())["hooks"]
    assert installed["TaskCompleted"] == [{"hooks": [{"type": "command", "command": "loki hook task-completed"}]}]
    Queue(Store(project / ".loki")).add("Fix add()", task_id="t1", verify=["sh check.sh"])
    complete = tool("TaskUpdate", {"taskId": "1", "status": "completed"})
    get = tool("TaskGet", {"taskId": "1"})
    turns = [tool("TaskCreate", {"subject": "Fix add() [loki:t1]", "description": "make test_add pass"}),
             complete, get,  # "finished" without fixing anything: refused, still pending
             bash("echo fixed > calc.txt", description="Fix add()"),
             complete, get, text("Done.")]
    run, model = claude_session(claude_code, project, turns, home=tmp_path / "home", env=TASK_TOOLS)
    assert model.turns_used == len(turns)
    refused = model.tool_results(2)[0]["content"]
    assert refused.startswith("TaskCompleted hook feedback:\nloki: not completed: Fix add() [loki:t1] is loki task "
                              "t1 (Fix add()), whose declared checks must pass first, and one failed. check 'sh "
                              "check.sh' failed: exit 1 (test_failure): "), refused
    assert "FAILED test_calc.py::test_add" in refused
    assert "Status: pending" in model.tool_results(3)[0]["content"]  # the completion did not happen
    assert "Updated task #1 status" in model.tool_results(5)[0]["content"]
    assert "Status: completed" in model.tool_results(6)[0]["content"]
    runs = [(hook["exit_code"], hook["outcome"]) for hook in run.hook_runs("TaskCompleted")]
    assert runs == [(0, "success"), (0, "success")]  # loki refuses with its answer, never with exit 2
    assert tree_problems(project / ".loki") == []


def test_an_agents_own_steps_complete_freely_and_its_held_task_by_id_is_gated(claude_code: Path,
                                                                              tmp_path: Path) -> None:
    """As under ``loki work``: the session knows its task by ``LOKI_TASK_ID``; its to-do steps are not gated,
    the Claude task that names the held task's id is."""
    project = calc_project(tmp_path)
    queue = Queue(Store(project / ".loki"))
    queue.add("Fix add()", task_id="t1", verify=["sh check.sh"])
    queue.claim("claude-1", task_id="t1")
    turns = [tool("TaskCreate", {"subject": "Read the failing test", "description": "test_add"}),
             tool("TaskCreate", {"subject": "Finish task t1", "description": "all of it"}),
             tool("TaskUpdate", {"taskId": "1", "status": "completed"}),  # a step: not the loki task
             tool("TaskUpdate", {"taskId": "2", "status": "completed"}),  # the loki task: its check fails
             text("Done.")]
    run, model = claude_session(claude_code, project, turns, home=tmp_path / "home",
                                env={**TASK_TOOLS, "LOKI_TASK_ID": "t1", "LOKI_AGENT": "claude-1"})
    assert "Updated task #1 status" in model.tool_results(3)[0]["content"]
    refused = model.tool_results(4)[0]["content"]
    assert refused.startswith("TaskCompleted hook feedback:\nloki: not completed: Finish task t1 is loki task t1 "
                              "(Fix add())"), refused
    assert [json.loads(hook["stdout"] or "null") is None for hook in run.hook_runs("TaskCompleted")] == [True, False]


def test_the_stop_hook_reminds_of_a_held_tasks_failing_check_without_blocking(claude_code: Path,
                                                                              tmp_path: Path) -> None:
    project = calc_project(tmp_path)
    clock = ManualClock(datetime.now(timezone.utc) - timedelta(hours=1))  # the hook runs on the real clock
    queue = Queue(Store(project / ".loki", clock=clock))
    queue.add("Fix add()", task_id="t1", verify=["sh check.sh"])
    claim = queue.claim("alice", task_id="t1")
    queue.fail("t1", "alice", token=claim["claim_token"], error_type="test_failure",
               error="check 'sh check.sh' failed: exit 1 (test_failure): FAILED test_calc.py::test_add")
    clock.advance(3600)  # past the retry's backoff: the task is claimed again, now, for an hour
    queue.claim("alice", task_id="t1", lease_seconds=3600)
    run, model = claude_session(claude_code, project, [text("Done.")], home=tmp_path / "home",
                                env={"LOKI_AGENT": "alice"})
    assert model.turns_used == 1  # the session ended at once: nothing kept it going
    [stop] = run.hook_runs("Stop")
    said = json.loads(stop["stdout"])
    assert said == {"systemMessage": "loki: this agent holds 1 task whose declared checks failed at the last "
                                     "attempt: t1 (Fix add()): check 'sh check.sh' failed: exit 1 (test_failure): "
                                     "FAILED test_calc.py::test_add. The task completes only when its checks pass "
                                     "(`loki queue show ID` has the output)."}
    assert stop["exit_code"] == 0
