"""Cold starts of the hot paths, this checkout against another commit, in the same run (issue 24: the moves
must not make a hot path slower).

Usage::

    git worktree add /tmp/base <commit>
    python bench/coldstart_compare.py /tmp/base 15

Each command runs alternately from both checkouts (``PYTHONPATH`` picks the package) on one tree; medians in ms,
their ratio, and how many modules each imports (a number that does not depend on the machine's load).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
PY = sys.executable
COUNT = ("import sys, os, atexit\n"
         "atexit.register(lambda: os.write(2, ('MODULES %d\\n' % len(sys.modules)).encode()))\n"
         "sys.argv = ['loki'] + sys.argv[1:]\n"
         "from loki.entry import main\n"
         "main()\n")


def main() -> None:
    trees = {"base": sys.argv[1], "this": str(HERE)}
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    project = tempfile.mkdtemp()
    subprocess.run([PY, "-m", "loki", "init", "--path", project], check=True, capture_output=True, cwd=project)
    payload = json.dumps({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Bash",
                          "tool_input": {"command": "ls"}, "cwd": project})
    commands: dict[str, tuple[list[str], str | None]] = {
        "breaker check": (["breaker", "check", "x"], None),
        "signal emit": (["signal", "emit", "DOCS_NEEDED", "note=m"], None),
        "hook pre-tool-use": (["hook", "pre-tool-use"], payload),
        "queue list --json": (["queue", "list", "--json"], None),
    }
    times: dict[tuple[str, str], list[float]] = {(c, t): [] for c in commands for t in trees}
    modules: dict[tuple[str, str], str] = {}
    for index in range(rounds):
        for name, (args, stdin) in commands.items():
            order = list(trees.items()) if index % 2 else list(reversed(trees.items()))
            for tree, source in order:
                env = {**os.environ, "PYTHONPATH": source, "LOKI_ROOT": project}
                start = time.perf_counter()
                subprocess.run([PY, "-m", "loki", *args], input=stdin, text=True, capture_output=True, env=env,
                               cwd=project)
                times[(name, tree)].append(time.perf_counter() - start)
                if index == 0:
                    done = subprocess.run([PY, "-c", COUNT, *args], input=stdin, text=True, capture_output=True,
                                          env=env, cwd=project)
                    modules[(name, tree)] = done.stderr.rsplit("MODULES ", 1)[-1].strip()
    print(f"load average {os.getloadavg()[0]:.2f}, {rounds} rounds")
    for name in commands:
        base, this = (statistics.median(times[(name, t)]) * 1000 for t in trees)
        print(f"{name:20s} base {base:7.1f} ms ({modules[(name, 'base')]} modules)   "
              f"this {this:7.1f} ms ({modules[(name, 'this')]} modules)   ratio {this / base:.2f}")


if __name__ == "__main__":
    main()
