"""The operator's commands (issue 16): shell completion's cold start, and ``loki agents`` with 50 agents.

* A Tab runs ``loki __complete ...`` once, and a Tab must feel instant: its cold start is measured
  against ``python -c pass`` in the same run (target: at most 4x), for a command name (the committed
  table alone: loki/cli/completiontable.py) and for task ids (the store opened, the queue read), in a
  tree of 1,000 pending tasks. ``loki completion bash`` (printed once, at shell start) is there for scale:
  it goes through typer.
* ``loki agents`` derives every agent from the queue files (loki/queue/agents.py): 50 agents, each
  holding a task, with 1,000 pending, 500 completed today and 200 failed attempts; cold, through typer.

Run with bytecode caching allowed, as on an installed system (bench/common.py).
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from bench.common import loki_executable, median, python_floor, row, runs, time_command
from loki.clock import ManualClock
from loki.storage.store import Store
from loki.storage.tree import init_tree
from loki.tasks.record import make_attempt, make_task

NOW = "2026-01-25T10:00:00Z"
ENV = {"PYTHONDONTWRITEBYTECODE": "", "LOKI_NOW": NOW}
AGENTS = 50


def _seed(root: str) -> None:
    """50 agents at work: each holds a task (a few silent), 1,000 pending, 500 completed today (with
    ``completed_by``), 200 failed attempts spread over the pending tasks."""
    store = Store(root, clock=ManualClock(NOW), validate_all=False)
    pending = [make_task(task_id=f"p{n:04d}", title=f"pending task {n}", now=NOW) for n in range(1000)]
    for n, task in enumerate(pending[:200]):
        task["attempts"].append(make_attempt(task, now=NOW, agent_id=f"eng-{n % AGENTS:03d}", approach="first",
                                             error_type="test_failure", error_message="AssertionError"))
    held = []
    for n in range(AGENTS):
        task = make_task(task_id=f"w{n:03d}", title=f"work of eng-{n:03d}", now=NOW, status="in-progress")
        stamp = "2026-01-25T08:00:00Z" if n % 10 == 0 else NOW  # every tenth agent is silent
        task.update(claimed_by=f"eng-{n:03d}", claimed_at=stamp, updated_at=stamp, claim_token="t" * 16,
                    lease_until="2026-01-25T11:00:00Z" if n % 10 else "2026-01-25T09:00:00Z")
        held.append(task)
    done = []
    for n in range(500):
        task = make_task(task_id=f"c{n:04d}", title=f"done task {n}", now=NOW, status="completed")
        task["completed_at"] = NOW
        done.append(task)
    with store.tasks().transaction() as unit:
        for state, tasks in (("pending", pending), ("in-progress", held), ("completed", done)):
            for task in tasks:
                unit.put(state, task)


def run() -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, ".loki")
        init_tree(root)
        _seed(root)
        loki = loki_executable()
        cold = runs(30)
        floor = python_floor(cold)
        words = median(time_command([*loki, "__complete", "bash", "--line", "loki queue cl"], repeat=cold,
                                    env={**ENV, "LOKI_ROOT": root}, check=True))
        rows.append(row("cold: Tab after `loki queue cl` (commands, options)", words, floor_name="python -c pass",
                        floor_ms=floor, target_ratio=4))
        ids = median(time_command([*loki, "__complete", "bash", "--line", "loki queue show p00"], repeat=cold,
                                  env={**ENV, "LOKI_ROOT": root}, check=True))
        rows.append(row("cold: Tab after `loki queue show p00` (task ids, 1,550 tasks)", ids,
                        floor_name="python -c pass", floor_ms=floor, target_ratio=4))
        agents = median(time_command([*loki, "__complete", "bash", "--line", "loki queue claim --agent e"],
                                     repeat=cold, env={**ENV, "LOKI_ROOT": root}, check=True))
        rows.append(row("cold: Tab after `--agent e` (50 agents from the queue)", agents,
                        floor_name="python -c pass", floor_ms=floor, target_ratio=4))
        script = median(time_command([*loki, "completion", "bash"], repeat=runs(10), env=ENV, check=True))
        rows.append(row("cold: loki completion bash (typer; once per shell)", script, floor_name="python -c pass",
                        floor_ms=floor, note="for scale: a Tab through typer would cost this"))
        roster = median(time_command([*loki, "--root", root, "agents", "--json"], repeat=runs(15), env=ENV,
                                     check=True))
        rows.append(row(f"cold: loki agents --json ({AGENTS} agents, 1,550 tasks)", roster,
                        floor_name="python -c pass", floor_ms=floor))
    return rows


if __name__ == "__main__":
    for r in run():
        print(json.dumps(r))
