"""A claim of a task with paths vs without (issue 25), in process, on the files: 1,000 pending tasks, and for
the paths case 1,000 live path leases of other agents. Every pending task declares one pattern of its own
(``area<N>/**``), no lease overlaps it (``lease<N>/**``): the claim reads the leases and the in-progress
tasks' paths, and checks the chosen task's paths against them. The "without" row is the same queue without
paths or leases, measured in the same run: its median is the floor.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from bench.common import median, row, runs, time_call
from loki.clock import ManualClock
from loki.queue.queue import Queue
from loki.storage import layout
from loki.storage.store import Store
from loki.storage.tree import init_tree
from loki.tasks.record import make_task

NOW = "2026-01-25T10:00:00Z"


def _queue(tmp: str, name: str, paths: bool) -> Queue:
    root = os.path.join(tmp, name, ".loki")
    init_tree(root)
    store = Store(root, validate_all=False, clock=ManualClock(NOW))
    tasks = []
    for i in range(1000):
        task = make_task(task_id=f"t{i:05d}", title=f"Implement feature {i}", now=NOW)
        if paths:
            task["paths"] = [f"area{i}/**"]
        tasks.append(task)
    with store.transaction(layout.QUEUE_LOCK) as txn:
        txn.write(layout.queue_file("pending"), {"version": 1, "tasks": tasks})
    if paths:
        leases = [{"lease_id": f"L{n + 1}", "agent": f"agent-{n}", "patterns": [f"lease{n}/**"], "exclusive": True,
                   "task": None, "reason": None, "key": None, "ttl": 3600, "acquired_at": NOW, "renewed_at": NOW,
                   "expires_at": "2026-01-25T11:00:00Z"} for n in range(1000)]
        with open(os.path.join(root, layout.LEASES), "w") as f:
            json.dump({"version": 1, "next_id": 1001, "leases": leases, "history": []}, f)
    return Queue(store)


def run() -> list[dict[str, Any]]:
    repeat = runs(30, 5)
    with tempfile.TemporaryDirectory() as tmp:
        plain = _queue(tmp, "plain", paths=False)
        leased = _queue(tmp, "leased", paths=True)
        floor = median(time_call(lambda: plain.claim("bench"), repeat=repeat))
        value = median(time_call(lambda: leased.claim("bench"), repeat=repeat))
    return [row("claim without paths (1,000 pending, files)", floor),
            row("claim with paths (1,000 pending, 1,000 live leases, files)", value,
                floor_name="claim without paths", floor_ms=floor)]
