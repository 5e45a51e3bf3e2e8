"""``loki queue ready --explain`` at 10,000 pending tasks (issue 16).

The queue is a realistic mix: most tasks ready, chains of dependencies (some waiting on work in
progress, one chain of 500 on a cancelled task, so it can never be ready), tasks backing off after
a failure, deferred tasks, and a type whose circuit breaker is OPEN. Two rows:

* in-process ``Queue.ready()`` (what ``--explain`` prints: every reason of every task), against a
  floor measured in the same run: reading and ``json.loads``-ing the same queue files by hand, which
  any answer has to do;
* the whole command, cold, against ``python -c pass`` (for scale).
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from bench.common import loki_executable, median, python_floor, row, runs, time_call, time_command
from loki.breakers.breakers import Breakers
from loki.clock import ManualClock
from loki.queue.queue import Queue
from loki.storage import layout
from loki.storage.store import Store
from loki.storage.tree import init_tree
from loki.tasks.record import make_task

NOW = "2026-01-25T10:00:00Z"
PENDING = 10_000


def _task(n: int, **fields: Any) -> dict[str, Any]:
    task = make_task(task_id=f"t{n:05d}", title=f"Implement feature {n}", now="2026-01-25T09:00:00Z",
                     description="Add the endpoint, its tests and its docs. " * 3, labels=["api"],
                     priority=("high", "medium", "low")[n % 3])
    task["history"] = [{"at": "2026-01-25T09:00:00Z", "event": "added", "to": "pending"}]
    task.update(fields)
    return task


def _tree() -> str:
    root = os.path.join(tempfile.mkdtemp(prefix="loki-bench-ready-"), ".loki")
    init_tree(root)
    pending: list[dict[str, Any]] = []
    for n in range(PENDING):
        kind = n % 10
        if kind == 1 and n > 10:
            pending.append(_task(n, dependencies=[f"t{n - 10:05d}"]))  # waits on a pending task
        elif kind == 2:
            pending.append(_task(n, available_at="2026-01-25T10:02:00Z"))  # backing off
        elif kind == 3:
            pending.append(_task(n, deferred={"until": "2026-01-26T09:00:00Z", "since": NOW, "by": "ops"}))
        elif kind == 4:
            pending.append(_task(n, type="deploy"))  # its breaker is OPEN
        elif kind == 5 and n < 5000:
            pending.append(_task(n, dependencies=["gone" if n == 5 else f"t{n - 10:05d}"]))  # a dead chain
        else:
            pending.append(_task(n))
    gone = make_task(task_id="gone", title="dropped", now="2026-01-25T09:00:00Z", status="cancelled")
    store = Store(root, clock=ManualClock(NOW), validate_all=False)
    with store.transaction(layout.QUEUE_LOCK) as txn:
        txn.write(layout.queue_file("pending"), {"version": 1, "tasks": pending})
        txn.write(layout.queue_file("cancelled"), {"version": 1, "tasks": [gone]})
    Breakers(store).trip("deploy")
    return root


def _raw_read(root: str) -> None:
    """The floor: read and parse every file the answer depends on, by hand."""
    for rel in [layout.queue_file(s) for s in layout.QUEUE_STATES] + [layout.DEADLETTER, layout.ABANDONED,
                                                                       layout.BREAKERS]:
        with open(os.path.join(root, rel), "rb") as f:
            json.loads(f.read())


def run() -> list[dict[str, Any]]:
    root = _tree()
    queue = Queue(Store(root, clock=ManualClock(NOW), validate_all=False))
    report = queue.ready()
    counts = {"ready": len(report["ready"]), "not ready": len(report["not_ready"])}
    reasons: dict[str, int] = {}
    for task in report["not_ready"]:
        for reason in task["reasons"]:
            reasons[reason["reason"]] = reasons.get(reason["reason"], 0) + 1
    repeat = runs(15)
    loki_samples: list[float] = []
    floor_samples: list[float] = []
    for _ in range(3):  # interleaved, so noise hits both alike
        floor_samples += time_call(lambda: _raw_read(root), repeat=max(1, repeat // 3))
        loki_samples += time_call(queue.ready, repeat=max(1, repeat // 3))
    size = os.path.getsize(os.path.join(root, layout.queue_file("pending"))) / 1e6
    rows = [row(f"queue: ready --explain, {PENDING:,} pending (in-process)", median(loki_samples),
                floor_name="raw read + json.loads of the queue files", floor_ms=median(floor_samples),
                note=f"{counts['ready']:,} ready, {counts['not ready']:,} not ready "
                     f"({', '.join(f'{k} {v:,}' for k, v in sorted(reasons.items()))}); pending.json {size:.1f} MB")]
    cold = runs(10)
    floor = python_floor(cold)
    samples = time_command([*loki_executable(), "--root", root, "queue", "ready", "--explain", "--json"],
                           repeat=cold, env={"LOKI_NOW": NOW}, check=True)
    rows.append(row(f"cold: loki queue ready --explain --json ({PENDING:,} pending)", median(samples),
                    floor_name="python -c pass", floor_ms=floor, note="for scale: the whole command, output included"))
    return rows


if __name__ == "__main__":
    for r in run():
        print(json.dumps(r))
