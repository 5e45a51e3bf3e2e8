"""PostgreSQL task store benchmarks (issue 15).

* In-process claim+complete p50 at 1,000 / 10,000 / 100,000 pending on PostgreSQL, each as a ratio
  to PostgreSQL's own cost at 1,000 in the same run (target: within 2x at 100,000: a claim reads the
  front of an index, a completion touches one row), and the same on the files (whose cost grows with
  the queue: a claim reads and rewrites pending.json).

The server: ``LOKI_BENCH_DATABASE_URL`` when set (each run makes a schema of its own there and drops
it), else the tests' throwaway cluster (tests/pgserver.py: fsync off, so not comparable with files
that fsync; the row's note says which). Without a server the PostgreSQL rows say why they are missing.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from bench.common import median, row, runs, time_call
from loki.queue.queue import Queue
from loki.tasks.record import make_task

SIZES = (1_000, 10_000, 100_000)
URL_ENV = "LOKI_BENCH_DATABASE_URL"


def _tasks(count: int) -> list[dict[str, Any]]:
    return [make_task(task_id=f"t{i:06d}", title=f"Implement feature {i}", now="2026-01-25T10:00:00Z",
                      description="Add the endpoint, its tests and its docs. " * 3, labels=["api"],
                      priority=("high", "medium", "low")[i % 3]) for i in range(count)]


def _server() -> tuple[str, str]:
    """A base URL and what it is, for the note."""
    url = os.environ.get(URL_ENV)
    if url:
        return url, f"server from {URL_ENV}"
    from tests.pgserver import server_url

    return server_url(), "throwaway cluster (tests/pgserver.py, fsync off)"


def _pg_queue(base: str, count: int, schemas: list[str]) -> Queue:
    from loki.storage.postgres.store import PgStore
    from tests.pgserver import fresh_schema_url

    url = fresh_schema_url(base)
    schemas.append(url)
    store = PgStore.open(url, validate_all=False)
    started = time.perf_counter()
    with store.tasks().transaction() as unit:  # one unit, pipelined inserts, then ANALYZE (the store's rule)
        for task in _tasks(count):
            unit.put("pending", task)
    print(f"  postgres: {count:,} pending loaded in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    return Queue(store)


def _file_queue(count: int) -> Queue:
    import tempfile

    from loki.storage import layout
    from loki.storage.store import Store
    from loki.storage.tree import init_tree

    root = os.path.join(tempfile.mkdtemp(prefix="loki-bench-"), ".loki")
    init_tree(root)
    store = Store(root, validate_all=False)
    with store.transaction(layout.QUEUE_LOCK) as txn:
        txn.write(layout.queue_file("pending"), {"version": 1, "tasks": _tasks(count)})
    return Queue(store)


def _claim_complete(queue: Queue) -> None:
    task = queue.claim("bench")
    queue.complete(task["id"], "bench", token=task["claim_token"])


def _drop(urls: list[str]) -> None:
    import psycopg

    for url in urls:
        with psycopg.connect(url, autocommit=True) as conn:
            schema = conn.execute("SELECT current_schema()").fetchone()
            if schema and schema[0]:
                conn.execute(f'DROP SCHEMA "{schema[0]}" CASCADE')


def claim_plan(queue: Queue, now: str = "2026-01-25T10:00:00Z") -> list[str]:
    """``EXPLAIN ANALYZE`` of the claim as the store runs it: the named query ``claim`` itself (its text is
    sql/queries.sql's, not a copy), with the parameters of a plain claim. It changes nothing: the row lock
    it takes ends with its transaction."""
    from loki.clock import parse_ts
    from loki.storage.postgres.queries import query

    store: Any = queue.store
    params = {"typed": False, "types": [], "skip": [], "now": parse_ts(now), "not_after": parse_ts(now)}
    with store.db.transaction() as conn:
        plan = [str(r[0]) for r in conn.execute("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) " + query("claim"),
                                                params).fetchall()]
    return plan


def execution_ms(plan: list[str]) -> float:
    """The server's execution time of the statement, from the last lines of ``EXPLAIN ANALYZE``."""
    for line in reversed(plan):
        if line.strip().startswith("Execution Time:"):
            return float(line.split(":", 1)[1].split()[0])
    raise ValueError(f"no execution time in the plan: {plan}")


def _plan_row(queue: Queue, size: int) -> dict[str, Any]:
    """The claim's execution time on the server at ``size`` pending, and whether it reads the claim index."""
    plan = claim_plan(queue)
    uses_index = any("loki_tasks_ready" in line for line in plan)
    nodes = [line.strip().removeprefix("->").strip().split(" (actual")[0] for line in plan[:3]]
    summary = " / ".join(nodes)  # the top of the plan: Limit / LockRows / the scan
    return row(f"postgres: EXPLAIN ANALYZE claim, {size:,} pending (server)", execution_ms(plan),
               note=f"{'reads the index loki_tasks_ready' if uses_index else 'DOES NOT read loki_tasks_ready'}: "
                    f"{summary}")


def _measure(queues: dict[int, Queue], repeat: dict[int, int]) -> dict[int, list[float]]:
    """Samples per size, taken in three interleaved rounds so the machine's noise hits every size alike."""
    samples: dict[int, list[float]] = {size: [] for size in queues}
    for _ in range(3):
        for size, queue in queues.items():
            samples[size] += time_call(lambda q=queue: _claim_complete(q), repeat=max(1, repeat[size] // 3))
    return samples


def _rows(backend: str, samples: dict[int, list[float]], target: float | None, note: str) -> list[dict[str, Any]]:
    base = median(samples[SIZES[0]])
    found = []
    for size in SIZES:
        p50 = median(samples[size])
        name = f"{backend}: claim+complete p50, {size:,} pending (in-process)"
        if size == SIZES[0]:
            found.append(row(name, p50, note=note))
        else:
            found.append(row(name, p50, floor_name=f"{backend} at {SIZES[0]:,} pending", floor_ms=base,
                             target_ratio=target if size == SIZES[-1] else None))
    return found


def run() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    try:
        base, where = _server()
    except BaseException as exc:  # tests.pgserver skips (a pytest outcome) when no server can be started
        rows.append(row("postgres: claim+complete p50 (not measured)", 0.0, note=f"no PostgreSQL server: {exc}"))
    else:
        schemas: list[str] = []
        try:
            pg = {size: _pg_queue(base, size, schemas) for size in SIZES}
            samples = _measure(pg, {size: runs(60) for size in SIZES})
            rows += _rows("postgres", samples, 2, f"{where}; floor: the same at {SIZES[0]:,} pending")
            rows.append(_plan_row(pg[SIZES[-1]], SIZES[-1]))
        finally:
            _drop(schemas)
    files = {size: _file_queue(size) for size in SIZES}
    samples = _measure(files, {1_000: runs(30), 10_000: runs(12), 100_000: runs(6, 3)})
    rows += _rows("files", samples, None, "grows with the queue: each claim and completion rewrites pending.json")
    return rows


if __name__ == "__main__":
    import json

    for r in run():
        print(json.dumps(r))
