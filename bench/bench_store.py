"""Storage benchmarks (issue 2).

* A single-file transaction on a 1,000-task queue file (lock, read, validate what
  changed, write, fsync, replace) against the raw floor measured in the same run:
  a hand-written flock + json read + write + fsync + replace of the same file.
* Cold start of ``loki --version`` and ``loki status --json`` against ``python -c pass``.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from typing import Any

from bench.common import loki_executable, median, python_floor, row, runs, time_call, time_command
from loki.storage import layout
from loki.storage.store import Store
from loki.storage.tree import init_tree
from loki.tasks.record import make_task

PENDING = layout.queue_file("pending")


def _tasks(count: int) -> list[dict[str, Any]]:
    return [
        make_task(task_id=f"task-{i:05d}", title=f"Implement feature {i}", now="2026-01-25T10:00:00Z",
                  description="Add the endpoint, its tests and its docs. " * 3, labels=["api"],
                  payload={"spec": f"specs/openapi.yaml#/paths/{i}"})
        for i in range(count)
    ]


def _raw_floor_transaction(root: str) -> None:
    """What a careful hand-written tool would do, with no validation and no journal."""
    path = os.path.join(root, "queue", "pending.json")
    with open(os.path.join(root, "queue", ".lock"), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with open(path, "rb") as f:
            doc = json.loads(f.read())
        doc["tasks"][0]["lease_until"] = "2026-01-25T11:00:00Z"
        data = json.dumps(doc, separators=(",", ":")).encode()
        tmp = path + ".floor.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dirfd = os.open(os.path.dirname(path), os.O_RDONLY)
        os.fsync(dirfd)
        os.close(dirfd)
        fcntl.flock(lock, fcntl.LOCK_UN)


def _loki_transaction(store: Store) -> None:
    with store.transaction(layout.QUEUE_LOCK) as txn:
        doc = txn.read(PENDING)
        first = doc["tasks"][0]
        first["lease_until"] = "2026-01-25T11:00:00Z"
        txn.write(PENDING, doc, changed=[first])


def run() -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, ".loki")
        init_tree(root)
        store = Store(root, validate_all=False)
        with store.transaction(layout.QUEUE_LOCK) as txn:
            txn.write(PENDING, {"version": 1, "tasks": _tasks(1000)})
        repeat = runs(60)
        # Interleave the two so machine noise hits both alike.
        loki_samples: list[float] = []
        floor_samples: list[float] = []
        for _ in range(3):
            floor_samples += time_call(lambda: _raw_floor_transaction(root), repeat=repeat // 3)
            loki_samples += time_call(lambda: _loki_transaction(store), repeat=repeat // 3)
        rows.append(row("store: 1-file txn, 1,000-task queue file", median(loki_samples),
                        floor_name="raw flock+read+write+fsync+replace", floor_ms=median(floor_samples),
                        target_ratio=2))

        cold = runs(20)
        floor = python_floor(cold)
        loki = loki_executable()
        version = median(time_command([*loki, "--version"], repeat=cold))
        rows.append(row("cold: loki --version", version, floor_name="python -c pass", floor_ms=floor))
        status = median(time_command([*loki, "--root", root, "status", "--json"], repeat=cold, check=True))
        rows.append(row("cold: loki status --json (1,000 tasks)", status, floor_name="python -c pass",
                        floor_ms=floor, target_ratio=12))
    return rows


if __name__ == "__main__":
    for r in run():
        print(json.dumps(r))
