"""The real Claude Code through `loki work` with a declared check (docs/verify.md): a model that "finishes"
without fixing the test gets the task back, the check's failure in its next attempt's context.

`loki work` runs the pinned Claude Code (tests/agents/claude.py) on a task added with `--verify 'sh
check.sh'` (a stand-in test suite: it fails until calc.txt says the bug is fixed). The scripted model
(tests/agents/modelserver.py) reads the task file (`$LOKI_TASK_FILE`) and says "Done." without touching
anything: Claude Code exits 0, the check fails, and the task is a failed attempt (test_failure) backing
off. `loki work --until-empty` waits the backoff out and runs Claude Code again; this time the task file
the model reads carries the first attempt's failure, the check's command and output, and the model fixes
the file. The check passes and the task completes with its evidence.
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

CHECK = """#!/bin/sh
grep -q fixed calc.txt && { echo "1 passed"; exit 0; }
echo "FAILED test_calc.py::test_add - assert add(2, 2) == 4, got 5" >&2
exit 1
"""


def test_a_model_that_finishes_without_fixing_the_test_gets_the_task_back_with_the_failure(
        claude_code: Path, tmp_path: Path) -> None:
    project = make_project(tmp_path / "calc")
    (project / "check.sh").write_text(CHECK)
    (project / "calc.txt").write_text("broken\n")
    config = project / ".loki" / "config" / "loki.json"
    settings = json.loads(config.read_text()) if config.exists() else {"version": 1}
    settings.setdefault("queue", {})["backoff_initial"] = 1  # the retry waits 1 s, not 5
    config.write_text(json.dumps(settings))
    loki = os.path.join(os.path.dirname(sys.executable), "loki")
    subprocess.run([loki, "queue", "add", "Fix add()", "--id", "t1", "--verify", "sh check.sh"], cwd=project,
                   check=True, capture_output=True)
    read_task = bash('cat "$LOKI_TASK_FILE"', description="Read the task")
    first = [read_task, text("Done.")]  # claims success, fixes nothing
    second = [read_task, bash("echo fixed > calc.txt", description="Fix add()"), text("Done.")]
    home = tmp_path / "home"
    home.mkdir()
    with ModelServer(first + second) as model:
        env = {"PATH": os.pathsep.join(tool_dirs()), "HOME": str(home), "LANG": "C.UTF-8", "SHELL": "/bin/bash",
               "ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": DUMMY_KEY, **QUIET_ENV,
               **{k: v for k, v in os.environ.items() if k.startswith("LOKI_") and k != "LOKI_AGENTS_CACHE"}}
        done = subprocess.run(
            [loki, "work", "--agent", "claude-1", "--until-empty", "--json", "--", str(claude_code), "-p",
             "Do task {id}: {title} (attempt {attempt}). The task and its past attempts are in {task_file}.",
             "--output-format", "json", "--allowedTools", "Bash"],
            cwd=project, env=env, capture_output=True, timeout=600)
    summary = json.loads(done.stderr.decode().splitlines()[-1])
    assert done.returncode == 0, summary
    assert [(run["outcome"], run["error_type"]) for run in summary["tasks"]] == [
        ("failed", "test_failure"), ("completed", None)]
    assert summary["tasks"][0]["error"] == ("check 'sh check.sh' failed: exit 1 (test_failure): FAILED "
                                            "test_calc.py::test_add - assert add(2, 2) == 4, got 5")
    assert model.turns_used == len(first) + len(second) and model.overrun == 0
    # The first session's task file had no past attempt; the second's carried the check's failure.
    first_read = model.new_input(1)
    assert "attempt 1" in model.received(0) and "FAILED test_calc.py" not in first_read
    second_read = model.new_input(len(first) + 1)
    assert "attempt 2" in model.received(len(first))
    assert "check 'sh check.sh' failed: exit 1 (test_failure)" in second_read
    assert "FAILED test_calc.py::test_add" in second_read
    shown = json.loads(subprocess.run([loki, "queue", "show", "t1", "--json"], cwd=project, check=True,
                                      capture_output=True, text=True).stdout)
    assert shown["state"] == "completed"
    evidence = shown["task"]["result"]["verification"]["checks"]
    assert [(c["command"], c["exit_code"], c["output_tail"]) for c in evidence] == [("sh check.sh", 0, "1 passed")]
    assert tree_problems(project / ".loki") == []
