"""A claim of a task with paths vs without (issue 25), in process, on the files and on PostgreSQL: 1,000
pending tasks, and for the paths case 1,000 live path leases of other agents. Every pending task declares one
pattern of its own (``area<N>/**``), no lease overlaps it (``lease<N>/**``): the claim reads the leases and
the in-progress tasks' paths, and checks the chosen task's paths against them (on PostgreSQL it then takes
the queue lock a task with paths needs, and rewrites this machine's copy of the holders for the hook). The
"without" row of each backend is the same queue without paths or leases, measured in the same run: its
median is that backend's floor.

PostgreSQL: ``LOKI_BENCH_DATABASE_URL``, else ``LOKI_TEST_DATABASE_URL``, else a throwaway cluster
(bench/pg_server.py); left out, saying why, when none can be had.
"""

from __future__ import annotations

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
PENDING = 1000
LEASES = 1000


def _tasks(paths: bool) -> list[dict[str, Any]]:
    tasks = []
    for i in range(PENDING):
        task = make_task(task_id=f"t{i:05d}", title=f"Implement feature {i}", now=NOW)
        if paths:
            task["paths"] = [f"area{i}/**"]
        tasks.append(task)
    return tasks


def _leases_doc() -> dict[str, Any]:
    leases = [{"lease_id": f"L{n + 1}", "agent": f"agent-{n}", "patterns": [f"lease{n}/**"], "exclusive": True,
               "task": None, "reason": None, "key": None, "ttl": 3600, "acquired_at": NOW, "renewed_at": NOW,
               "expires_at": "2026-01-25T11:00:00Z"} for n in range(LEASES)]
    return {"version": 1, "next_id": LEASES + 1, "leases": leases, "history": []}


def _fill(store: Any, paths: bool) -> Queue:
    with store.transaction(layout.QUEUE_LOCK) as txn:
        txn.write(layout.queue_file("pending"), {"version": 1, "tasks": _tasks(paths)})
    if paths:
        with store.transaction(layout.lock_for(layout.LEASES)) as txn:
            txn.write(layout.LEASES, _leases_doc())
    return Queue(store)


def _files(tmp: str, name: str, paths: bool) -> Queue:
    root = os.path.join(tmp, name, ".loki")
    init_tree(root)
    return _fill(Store(root, validate_all=False, clock=ManualClock(NOW)), paths)


def _postgres(tmp: str, name: str, paths: bool) -> Queue:
    from bench.pg_server import schema_url
    from loki.storage.postgres.store import PgStore

    root = os.path.join(tmp, name, ".loki")
    os.makedirs(root)
    clock = ManualClock(NOW)  # the leases are live at this instant, by the machine's and the lease clock
    store = PgStore.open(schema_url(), root=root, clock=clock, lease_clock=clock)
    queue = Queue(store)
    for start in range(0, PENDING, 500):  # through the store's own insert: the tasks are rows
        queue.add_many([{"title": f"Implement feature {i}",
                         **({"paths": [f"area{i}/**"]} if paths else {})} for i in range(start, start + 500)])
    if paths:
        with store.transaction(layout.lock_for(layout.LEASES)) as txn:
            txn.write(layout.LEASES, _leases_doc())
    return queue


def _pair(make: Any, tmp: str, backend: str, repeat: int) -> list[dict[str, Any]]:
    plain = make(tmp, f"{backend}-plain", False)
    leased = make(tmp, f"{backend}-leased", True)
    floor = median(time_call(lambda: plain.claim("bench"), repeat=repeat))
    value = median(time_call(lambda: leased.claim("bench"), repeat=repeat))
    rows = [row(f"claim without paths ({PENDING:,} pending, {backend})", floor),
            row(f"claim with paths ({PENDING:,} pending, {LEASES:,} live leases, {backend})", value,
                floor_name="claim without paths", floor_ms=floor)]
    if backend == "PostgreSQL":
        # Where the difference goes: a claim that takes the queue lock without paths (``--priority`` does,
        # as a claim of a task with paths must) reads and checks every pending row, as the one with paths does.
        locked = make(tmp, f"{backend}-locked", False)
        value = median(time_call(lambda: locked.claim("bench", priorities=["medium"]), repeat=repeat))
        rows.append(row(f"claim without paths under the queue lock ({PENDING:,} pending, {backend})", value,
                        floor_name="claim without paths", floor_ms=floor))
    return rows


def run() -> list[dict[str, Any]]:
    repeat = runs(30, 5)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rows += _pair(_files, tmp, "files", repeat)
        try:
            from bench.pg_server import describe, schema_url

            where = describe(schema_url())
        except BaseException as exc:  # no driver, or no server could be started (pytest's skip)
            rows.append(row("claim with paths, PostgreSQL", 0.0, note=f"left out: {' '.join(str(exc).split())[:200]}"))
            return rows
        pg = _pair(_postgres, tmp, "PostgreSQL", repeat)
        for item in pg:
            item["note"] = where
        rows += pg
    return rows
