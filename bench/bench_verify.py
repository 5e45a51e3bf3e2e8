"""``loki work`` with one declared check (issue 26, docs/verify.md): the overhead per task of a trivial check,
against running the check alone, measured in the same run.

* The floor: the check alone, ``true``, spawned from Python (as a hand-written wrapper would run it).
* One task in-process through :class:`loki.work.loop.Worker` with the check ``true`` (claim, the command, the
  check under the guard with its output captured, ``git rev-parse HEAD``, complete with the evidence), next to
  the same task without a check: the difference is what declaring a check costs a task.
* Its parts: the check through :class:`loki.work.checks.Checks` alone (guard + capture + HEAD), and reading
  ``HEAD`` (one ``git rev-parse``).

Run in a git repository with one commit (a temporary one), as an agent's checks are.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Any

from bench.common import median, row, runs, time_call
from loki.queue.queue import Queue
from loki.storage import layout
from loki.storage.store import Store
from loki.storage.tree import init_tree
from loki.tasks.record import make_task
from loki.tasks.verify import git_head
from loki.work.checks import Checks
from loki.work.launch import GuardedLauncher
from loki.work.loop import Worker, WorkOptions

COMMAND = ["sh", "-c", "exit 0"]
CHECK = "true"
PENDING = 100


def _repo() -> str:
    path = tempfile.mkdtemp(prefix="loki-bench-verify-")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}
    subprocess.run(["git", "init", "-q", path], check=True, env=env)
    subprocess.run(["git", "-C", path, "commit", "-q", "--allow-empty", "-m", "one"], check=True, env=env)
    return path


def _tree(repo: str) -> str:
    root = os.path.join(repo, ".loki")
    init_tree(root)
    store = Store(root, validate_all=False)
    tasks = [make_task(task_id=f"t{i:05d}", title=f"Implement feature {i}", now="2026-01-25T10:00:00Z")
             for i in range(PENDING)]
    with store.transaction(layout.QUEUE_LOCK) as txn:
        txn.write(layout.queue_file("pending"), {"version": 1, "tasks": tasks})
    return root


def run() -> list[dict[str, Any]]:
    repeat = runs(40)
    repo = _repo()
    cwd = os.getcwd()
    os.chdir(repo)
    try:
        return _measure(repo, repeat)
    finally:
        os.chdir(cwd)


def _measure(repo: str, repeat: int) -> list[dict[str, Any]]:
    def spawn_check() -> None:
        subprocess.run([CHECK], capture_output=True, check=True)

    alone = median(time_call(spawn_check, repeat=repeat * 2))
    head = median(time_call(lambda: git_head(repo), repeat=repeat))
    launcher = GuardedLauncher()

    def checks_only() -> None:
        results = Checks(launcher, timeout=60).run([CHECK])
        assert results[0].passed

    through_checks = median(time_call(checks_only, repeat=repeat))
    launcher.close()

    store = Store(_tree(repo), validate_all=False)
    queue = Queue(store)
    quiet = {"stdout": lambda data: None, "stderr": lambda data: None}
    serial = [0]

    def one_task(verify: list[str] | None) -> None:
        serial[0] += 1
        queue.add(f"Implement feature {serial[0]}", task_id=f"n{serial[0]:06d}", priority="high", verify=verify)
        summary = Worker(store, WorkOptions(agent="bench", command=COMMAND, max_tasks=1), **quiet).run_unguarded()
        assert summary.exit_code == 0 and summary.count("completed") == 1

    one_task(None)  # warm-up
    one_task([CHECK])
    plain: list[float] = []
    checked: list[float] = []
    for _ in range(repeat):  # interleaved: the machine's load changes both alike
        plain.extend(time_call(lambda: one_task(None), repeat=1, warmup=0))
        checked.extend(time_call(lambda: one_task([CHECK]), repeat=1, warmup=0))
    without, with_check = median(plain), median(checked)
    added = with_check - without
    note = (f"{PENDING} pending; command `sh -c 'exit 0'`; check `{CHECK}`: the check adds {added:.1f} ms per task, "
            f"{added - alone:.1f} ms more than running it alone")
    return [
        row("verify: the check alone (true, spawned from Python)", alone),
        row("verify: one task in-process, no check", without),
        row("verify: one task in-process, one check (true)", with_check, floor_name="no check", floor_ms=without,
            note=note),
        row("verify: the check through Checks (guard, capture, HEAD)", through_checks, floor_name="check alone",
            floor_ms=alone, note="the check step alone: the guard's interpreter, the output readers, git rev-parse"),
        row("verify: git rev-parse HEAD (the evidence's commit)", head),
    ]


if __name__ == "__main__":
    for result in run():
        print(result)
    sys.exit(0)
