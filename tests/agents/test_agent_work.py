"""The real Claude Code driven by `loki work`: two agents share a queue of five, one task dead-letters.

Each `loki work` runs the pinned Claude Code (tests/agents/claude.py) once per task, `claude -p "Do task
{id}: {title}"`, against a scripted model of its own (tests/agents/modelserver.py): the model has the agent
run `sh work.sh` (the task's work, which reads the task from the environment `loki work` gave Claude Code
and its Bash tool) and then stop. loki's hooks are installed, so Claude Code also runs them. A task is done
when its work left its file; one task's work fails, and with one attempt allowed it ends in the dead-letter
queue, its attempt carrying the agent's output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agents.claude import DUMMY_KEY, QUIET_ENV, make_project, tool_dirs
from tests.agents.modelserver import ModelServer, bash, text
from tests.helpers import tree_problems

pytestmark = [pytest.mark.slow, pytest.mark.agent]

TASKS = {"t1": "Add pagination to /orders", "t2": "Cache the product list", "t3": "Fix the flaky webhook test",
         "t4": "Document /orders", "t5": "Rename the cart module"}
FAILING = "t3"
WORK = f"""#!/bin/sh
# The task's work, run by Claude Code's Bash tool: the task comes from loki work's environment.
if [ "$LOKI_TASK_ID" = {FAILING} ]; then echo "AssertionError: the webhook still answers 502" >&2; exit 1; fi
mkdir -p done && echo "$LOKI_AGENT" > "done/$LOKI_TASK_ID"
"""
AGENT = ('"$CLAUDE" -p "$1" --output-format json --allowedTools Bash > "$LOKI_RESULT_FILE.claude" || exit 1\n'
         'test -e "done/$LOKI_TASK_ID" || { echo "task $LOKI_TASK_ID: the agent did not finish its work" >&2; '
         'exit 1; }\n')
"""The command `loki work` runs: Claude Code on the task, then a check of what it left (its exit code alone
says the session ended, not that the work was done)."""


def test_two_loki_work_agents_run_claude_code_through_a_queue_of_five(claude_code: Path, tmp_path: Path) -> None:
    project = make_project(tmp_path / "shop")
    (project / "work.sh").write_text(WORK)
    loki = os.path.join(os.path.dirname(sys.executable), "loki")
    for task_id, title in TASKS.items():
        extra = ["--max-attempts", "1"] if task_id == FAILING else []
        subprocess.run([loki, "queue", "add", title, "--id", task_id, *extra], cwd=project, check=True,
                       capture_output=True)
    session = [bash("sh work.sh", description="Do the task's work"), text("Done.")]
    servers = [ModelServer(session * len(TASKS)) for _ in range(2)]  # enough turns for either agent to do all
    agents = []
    with servers[0] as first, servers[1] as second:
        for n, model in enumerate((first, second), start=1):
            env = {"PATH": os.pathsep.join(tool_dirs()), "HOME": str(tmp_path / f"home-{n}"), "LANG": "C.UTF-8",
                   "SHELL": "/bin/bash", "ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": DUMMY_KEY,
                   "CLAUDE": str(claude_code), **QUIET_ENV,
                   **{k: v for k, v in os.environ.items() if k.startswith("LOKI_") and k != "LOKI_AGENTS_CACHE"}}
            (tmp_path / f"home-{n}").mkdir()
            agents.append(subprocess.Popen(
                [loki, "work", "--agent", f"claude-{n}", "--json", "--", "sh", "-c", AGENT, "sh",
                 "Do task {id}: {title}"], cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        outputs = [agent.communicate(timeout=600) for agent in agents]
    summaries = [json.loads(err.decode().splitlines()[-1]) for _, err in outputs]
    for agent, summary in zip(agents, summaries, strict=True):
        assert agent.returncode in (0, 1, 3), summary  # 1: its agent ran the failing task
    assert sum(s["claimed"] for s in summaries) == 5
    assert sum(s["completed"] for s in summaries) == 4 and sum(s["failed"] for s in summaries) == 1

    # Every task reached the model in exactly one session (its two requests), in the prompt loki work
    # expanded from its placeholders.
    prompts = [model.received(n) for model in servers for n in range(len(model.conversation))]
    for task_id, title in TASKS.items():
        requests = [p for p in prompts if f"Do task {task_id}: {title}" in p]
        assert len(requests) == len(session), f"{task_id}: {len(requests)} requests, not one session's"
    assert all(model.overrun == 0 and not model.unexpected() for model in servers)
    assert sum(model.turns_used for model in servers) == 2 * len(TASKS)

    done = {path.name: path.read_text().strip() for path in (project / "done").iterdir()}
    assert sorted(done) == sorted(set(TASKS) - {FAILING})
    for summary in summaries:
        for run in summary["tasks"]:
            if run["outcome"] == "completed":
                assert done[run["task_id"]] == summary["agent"]  # the agent that claimed it did the work

    dead = json.loads(subprocess.run([loki, "deadletter", "show", FAILING, "--json"], cwd=project, check=True,
                                     capture_output=True, text=True).stdout)
    attempt = dead["entry"]["attempts"][-1] if "entry" in dead else dead["attempts"][-1]
    assert attempt["error_message"].startswith("exit 1 (exit_status): task t3: the agent did not finish its work")
    assert attempt["agent_id"] in ("claude-1", "claude-2")
    assert tree_problems(project / ".loki") == []
