"""``loki work`` overhead per task (issue 17): claim + the command under its guard + heartbeats + complete,
against running the command alone, measured in the same run.

* The floor: the agent's command alone, ``sh -c 'exit 0'``, started from Python as ``loki work`` starts it.
* In-process: one task through :class:`loki.work.loop.Worker` (claim, scratch files, the guard, the command,
  its result read, complete), on a queue of 100 pending tasks.
* The guard's share: the same command started under the guard (loki/work/guard.py) and nothing else.
* The queue's share: a bare claim + complete in-process; the guard's: an interpreter start (``-I -S``).
* A renewal: one ``Queue.heartbeat`` (what the renewer does every third of the lease while the command runs).
* Cold: ``loki work --max-tasks 1`` as a process per task (a shell loop calling it), next to the same loop
  written by hand (``loki queue claim --json``, the command, ``loki queue complete``: three processes).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Any

from bench.common import BASE_ENV, loki_executable, median, row, runs, time_call, time_command
from loki.queue.queue import Queue
from loki.storage import layout
from loki.storage.store import Store
from loki.storage.tree import init_tree
from loki.tasks.record import make_task
from loki.work.launch import GUARD, GUARD_PYTHON
from loki.work.loop import Worker, WorkOptions

COMMAND = ["sh", "-c", "exit 0"]
PENDING = 100


def _tree(count: int) -> str:
    root = os.path.join(tempfile.mkdtemp(prefix="loki-bench-work-"), ".loki")
    init_tree(root)
    store = Store(root, validate_all=False)
    tasks = [make_task(task_id=f"t{i:05d}", title=f"Implement feature {i}", now="2026-01-25T10:00:00Z",
                       description="Add the endpoint, its tests and its docs. " * 3, labels=["api"])
             for i in range(count)]
    with store.transaction(layout.QUEUE_LOCK) as txn:
        txn.write(layout.queue_file("pending"), {"version": 1, "tasks": tasks})
    return root


def _refill(root: str, serial: list[int]) -> None:
    """Keep the pending queue at PENDING tasks: one new task for the one just done."""
    serial[0] += 1
    Queue(Store(root, validate_all=False)).add(f"Implement feature {serial[0]}", task_id=f"n{serial[0]:06d}")


def _spawn(argv: list[str], **kwargs: Any) -> None:
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, **kwargs)


def run() -> list[dict[str, Any]]:
    repeat = runs(40)
    alone = median(time_call(lambda: _spawn(COMMAND), repeat=repeat * 2))
    watch_r, watch_w = os.pipe()
    guarded = median(time_call(lambda: _spawn([*GUARD_PYTHON, GUARD, str(watch_r), "--", *COMMAND],
                                              pass_fds=(watch_r,)), repeat=repeat))
    os.close(watch_r)
    os.close(watch_w)
    interpreter = median(time_call(lambda: _spawn([*GUARD_PYTHON, "-c", "pass"]), repeat=repeat))

    root = _tree(PENDING)
    store = Store(root, validate_all=False)
    serial = [0]
    quiet = {"stdout": lambda data: None, "stderr": lambda data: None}

    def one_task() -> None:
        summary = Worker(store, WorkOptions(agent="bench", command=COMMAND, max_tasks=1), **quiet).run_unguarded()
        assert summary.exit_code == 0 and summary.count("completed") == 1

    one_task()  # warm-up
    per_task = []
    for _ in range(repeat):
        _refill(root, serial)  # untimed: the queue stays at PENDING tasks
        per_task.extend(time_call(one_task, repeat=1, warmup=0))
    in_process = median(per_task)

    queue = Queue(store)

    def claim_complete() -> None:
        task = queue.claim("bench-bare")
        queue.complete(task["id"], "bench-bare", token=task["claim_token"])

    bare = []
    for _ in range(repeat):
        _refill(root, serial)
        bare.extend(time_call(claim_complete, repeat=1, warmup=0))
    queue_part = median(bare)
    held = queue.claim("bench-heartbeat")
    renewal = median(time_call(lambda: queue.heartbeat(held["id"], "bench-heartbeat", token=held["claim_token"]),
                               repeat=repeat))

    loki = loki_executable()
    env = {**BASE_ENV, "LOKI_ROOT": root}
    cold_repeat = runs(15)
    cold = median(time_command([*loki, "work", "--agent", "bench-cold", "--max-tasks", "1", "--", *COMMAND],
                               repeat=cold_repeat, env=env, check=True))
    script = (f"out=$({' '.join(loki)} queue claim --agent bench-shell --json) || exit 1; "
              "id=$(printf '%s' \"$out\" | "
              "python3 -c 'import json,sys; print(json.load(sys.stdin)[\"task\"][\"id\"])'); "
              f"sh -c 'exit 0' && {' '.join(loki)} queue complete \"$id\" --agent bench-shell")
    by_hand = median(time_command(["sh", "-c", script], repeat=cold_repeat, env=env, check=True))

    note = f"{PENDING} pending; command `sh -c 'exit 0'`; overhead = this - the command alone"
    return [
        row("work: the command alone (sh -c 'exit 0', spawned from Python)", alone),
        row("work: one task in-process (claim, guard, command, complete)", in_process, floor_name="command alone",
            floor_ms=alone, note=f"{note}: {in_process - alone:.1f} ms per task"),
        row("work: claim + complete alone (in-process, no command)", queue_part,
            note="the queue's share: two journaled transactions with fsync"),
        row("work: the command under the guard only", guarded, floor_name="command alone", floor_ms=alone,
            note="python -I -S guard.py: the share of the overhead that keeps kill -9 from orphaning the command"),
        row("work: python -I -S -c pass (the guard's interpreter start)", interpreter),
        row("work: one lease renewal (heartbeat, in-process)", renewal,
            note="every third of the lease while the command runs: 3 per lease, ~0 for a task shorter than it"),
        row("work: cold `loki work --max-tasks 1` per task", cold, floor_name="command alone", floor_ms=alone,
            note="a process per task (interpreter and typer start-up included)"),
        row("work: the same loop by hand (claim --json, command, complete)", by_hand, floor_name="command alone",
            floor_ms=alone, note="three processes and a JSON parse per task, as agents wrote it in shell"),
    ]


if __name__ == "__main__":
    for result in run():
        print(result)
    sys.exit(0)
