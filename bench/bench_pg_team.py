"""PostgreSQL benchmarks (issue 15), each against a baseline measured in the same run.

* Aggregate claim+complete throughput of 8 processes with persistent connections over 10,000 tasks
  (0 duplicates checked), side by side with procrastinate's fetch+finish of 10,000 jobs by 8 worker
  processes (its own API, the same server; skipped with a note when procrastinate is not installed:
  ``pip install -e '.[bench]'``). Both include their processes' start.
* Cold start of ``loki queue claim --json`` on a tree on PostgreSQL against ``python -c pass``
  (target <= 12x; the file tree's is in bench_queue).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench.common import BASE_ENV, REPO, loki_executable, median, python_floor, row, runs, time_command
from bench.pg_server import describe, schema_url

WORKERS = 8
TASKS = 10_000


def _tree(url: str) -> str:
    project = tempfile.mkdtemp(prefix="loki-bench-pg-")
    subprocess.run([*loki_executable(), "init", "--path", project, "--database", url], check=True,
                   capture_output=True, env=BASE_ENV)
    return os.path.join(project, ".loki")


def _add(root: str, count: int) -> None:
    from loki.queue.queue import Queue
    from loki.storage.opening import open_store

    queue = Queue(open_store(root, validate_all=False))
    for start in range(0, count, 1000):
        queue.add_many([{"title": f"job {n}", "description": "Add the endpoint, its tests and its docs."}
                        for n in range(start, min(count, start + 1000))])


def _loki_throughput() -> tuple[float, str]:
    url = schema_url()
    root = _tree(url)
    _add(root, TASKS)
    started = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "tests.procs.claim_worker", root, f"w{n}"], cwd=REPO,
                              env=BASE_ENV, stdout=subprocess.PIPE, text=True) for n in range(WORKERS)]
    outputs = [proc.communicate()[0] for proc in procs]
    elapsed = time.perf_counter() - started
    done = [line.split()[1] for out in outputs for line in out.splitlines() if line.startswith("claimed ")]
    duplicates = len(done) - len(set(done))
    if len(set(done)) != TASKS or duplicates:
        raise RuntimeError(f"loki: {len(set(done))} of {TASKS} done, {duplicates} duplicates")
    return elapsed, url


def _procrastinate_throughput() -> float:
    conninfo = schema_url(migrate=False)
    subprocess.run([sys.executable, "-m", "bench.procrastinate_worker", "setup", conninfo, str(TASKS)], cwd=REPO,
                   env=BASE_ENV, check=True, stderr=subprocess.DEVNULL)
    started = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "bench.procrastinate_worker", "work", conninfo, f"w{n}"],
                              cwd=REPO, env=BASE_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for n in range(WORKERS)]
    for proc in procs:
        proc.wait()
    elapsed = time.perf_counter() - started
    import psycopg

    with psycopg.connect(conninfo) as conn:
        row_ = conn.execute("SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) "
                            "FROM procrastinate_jobs").fetchone()
    if row_ is None or row_[0] != TASKS:
        raise RuntimeError(f"procrastinate: {row_} jobs succeeded of {TASKS}")
    return elapsed


def run() -> list[dict[str, Any]]:
    rows = []
    loki_seconds, url = _loki_throughput()
    per_task_ms = loki_seconds * 1000 / TASKS
    if importlib.util.find_spec("procrastinate") is None:
        rows.append(row(f"pg: {WORKERS} procs claim+complete {TASKS:,} tasks (per task)", per_task_ms,
                        note=f"{TASKS / loki_seconds:,.0f} tasks/s in {loki_seconds:.1f}s on {describe(url)}, "
                             "0 duplicates; procrastinate not installed (pip install -e '.[bench]'): no comparison"))
    else:
        theirs = _procrastinate_throughput()
        rows.append(row(f"pg: {WORKERS} procs claim+complete {TASKS:,} tasks (per task)", per_task_ms,
                        floor_name="procrastinate fetch+finish", floor_ms=theirs * 1000 / TASKS, target_ratio=1.0,
                        note=f"loki {TASKS / loki_seconds:,.0f} tasks/s ({loki_seconds:.1f}s), procrastinate "
                             f"{TASKS / theirs:,.0f} jobs/s ({theirs:.1f}s), same server: {describe(url)}; "
                             "0 duplicates; both include their 8 processes' start"))
    repeat = runs(15)
    floor = python_floor(repeat)
    root = _tree(schema_url())
    _add(root, 1000)
    cold = median(time_command([*loki_executable(), "--root", root, "queue", "claim", "--agent", "bench", "--json"],
                               repeat=repeat, check=True))
    rows.append(row("pg: cold `loki queue claim --json` (1,000 pending)", cold, floor_name="python -c pass",
                    floor_ms=floor, target_ratio=12.0, note="includes importing psycopg and connecting"))
    return rows
