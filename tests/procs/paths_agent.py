"""The command a ``loki work`` agent runs in tests/work/test_work_paths.py.

usage: python paths_agent.py ROOT LOG OTHER_AGENT
Logs "start <task>" (LOKI_TASK_ID), then, unless OTHER_AGENT is "-", runs a second agent, ``loki work --agent
OTHER_AGENT --max-tasks 1`` with this same command, *while this task runs*, and logs "inner <exit code>";
then logs "end <task>". Whether the second agent's task ran inside the first one's run is then in the log,
with no timing involved.
"""

from __future__ import annotations

import os
import subprocess
import sys


def log(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def main() -> None:
    root, path, other = sys.argv[1], sys.argv[2], sys.argv[3]
    task = os.environ["LOKI_TASK_ID"]
    log(path, f"start {task} {os.environ['LOKI_AGENT']}")
    if other != "-":
        inner = subprocess.run([sys.executable, "-m", "loki", "--root", root, "work", "--agent", other,
                                "--max-tasks", "1", "--", sys.executable, __file__, root, path, "-"],
                               capture_output=True, timeout=120)
        log(path, f"inner {inner.returncode} " + inner.stderr.decode().strip().replace("\n", " | "))
    log(path, f"end {task}")


if __name__ == "__main__":
    main()
