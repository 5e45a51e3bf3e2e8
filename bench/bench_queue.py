"""Queue benchmarks (issue 3).

* In-process claim+complete at 100, 1,000 and 10,000 pending tasks, against a raw
  floor on the same files: a hand-written flock + json read + move + write + fsync +
  replace of the two files a claim touches, then of the two a completion touches.
* Aggregate claim+complete throughput of 4 and 8 processes over 1,000 tasks (and a
  check that no task was claimed twice).
* Cold start of ``loki queue claim --json`` against ``python -c pass``.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench.common import REPO, loki_executable, median, python_floor, row, runs, time_call, time_command
from loki.queue.queue import Queue
from loki.storage import layout
from loki.storage.store import Store
from loki.storage.tree import init_tree
from loki.tasks.record import make_task


def _fresh(count: int) -> tuple[str, Queue]:
    tmp = tempfile.mkdtemp(prefix="loki-bench-")
    root = os.path.join(tmp, ".loki")
    init_tree(root)
    store = Store(root, validate_all=False)
    tasks = [make_task(task_id=f"t{i:05d}", title=f"Implement feature {i}", now="2026-01-25T10:00:00Z",
                       description="Add the endpoint, its tests and its docs. " * 3, labels=["api"],
                       priority=("high", "medium", "low")[i % 3]) for i in range(count)]
    with store.transaction(layout.QUEUE_LOCK) as txn:
        txn.write(layout.queue_file("pending"), {"version": 1, "tasks": tasks})
    return root, Queue(store)


def _write(path: str, doc: Any) -> None:
    tmp = path + ".floor.tmp"
    with open(tmp, "wb") as f:
        f.write(json.dumps(doc, separators=(",", ":")).encode())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _move(root: str, source: str, target: str, pick: int | None) -> None:
    """Raw floor of one transaction: lock, read two files, move one task, write both, fsync dir."""
    queue_dir = os.path.join(root, "queue")
    with open(os.path.join(queue_dir, ".lock"), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        src_path, dst_path = (os.path.join(queue_dir, f"{s}.json") for s in (source, target))
        with open(src_path, "rb") as f:
            src = json.loads(f.read())
        with open(dst_path, "rb") as f:
            dst = json.loads(f.read())
        task = src["tasks"].pop(0 if pick is None else pick)
        task["status"] = target
        dst["tasks"].append(task)
        _write(src_path, src)
        _write(dst_path, dst)
        dirfd = os.open(queue_dir, os.O_RDONLY)
        os.fsync(dirfd)
        os.close(dirfd)
        fcntl.flock(lock, fcntl.LOCK_UN)


def _in_process(count: int) -> dict[str, Any]:
    _, queue = _fresh(count)
    floor_root, _ = _fresh(count)
    repeat = runs(30 if count < 10_000 else 12)

    def loki_op() -> None:
        task = queue.claim("bench")
        queue.complete(task["id"], "bench", token=task["claim_token"])

    def floor_op() -> None:
        _move(floor_root, "pending", "in-progress", None)
        _move(floor_root, "in-progress", "completed", -1)

    loki_samples: list[float] = []
    floor_samples: list[float] = []
    for _ in range(3):  # interleaved, so noise hits both alike
        floor_samples += time_call(floor_op, repeat=repeat // 3)
        loki_samples += time_call(loki_op, repeat=repeat // 3)
    return row(f"queue: claim+complete, {count:,} pending (in-process)", median(loki_samples),
               floor_name="raw flock+read+write+fsync+replace x2", floor_ms=median(floor_samples), target_ratio=3)


def _throughput(processes: int, tasks: int = 1000) -> dict[str, Any]:
    root, _ = _fresh(tasks)
    started = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "tests.procs.claim_worker", root, f"w{n}"], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for n in range(processes)]
    claimed: list[str] = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(err.decode())
        claimed += [line.split()[1] for line in out.decode().splitlines()]
    elapsed = time.perf_counter() - started
    duplicates = len(claimed) - len(set(claimed))
    ops = len(claimed) / elapsed
    return row(f"queue: {processes} processes claim+complete 1,000 tasks", elapsed * 1000 / len(claimed),
               note=f"{ops:.0f} claim+complete/s aggregate, {len(claimed)} done, {duplicates} duplicates "
                    "(median column = wall time per task, process start-up included)")


def run() -> list[dict[str, Any]]:
    rows = [_in_process(n) for n in (100, 1000, 10_000)]
    rows += [_throughput(4), _throughput(8)]
    cold = runs(20)
    floor = python_floor(cold)
    root, _ = _fresh(1000)
    loki = loki_executable()
    samples = []
    for _ in range(cold):  # every run must find a task: release it again, outside the timing
        samples += time_command([*loki, "--root", root, "queue", "claim", "--agent", "cold", "--json"],
                                repeat=1, warmup=0, check=True)
        Queue(Store(root)).requeue_stale()
        store = Store(root)
        with store.transaction(layout.QUEUE_LOCK) as txn:
            ip = txn.read(layout.queue_file("in-progress"))
            pending = txn.read(layout.queue_file("pending"))
            for task in ip["tasks"]:
                task.update(status="pending", claimed_by=None, claimed_at=None, lease_until=None, claim_token=None)
                pending["tasks"].insert(0, task)
            ip["tasks"] = []
            txn.write(layout.queue_file("in-progress"), ip)
            txn.write(layout.queue_file("pending"), pending)
    rows.append(row("cold: loki queue claim --json (1,000 pending)", median(samples), floor_name="python -c pass",
                    floor_ms=floor, target_ratio=12))
    return rows


if __name__ == "__main__":
    for r in run():
        print(json.dumps(r))
