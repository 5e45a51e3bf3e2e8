"""Signals across two processes on PostgreSQL (issue 15): emit -> applied, woken by LISTEN/NOTIFY.

This process emits one signal at a time through the library (one persistent connection, as an agent's
loop would hold); ``loki watch --no-tui --json`` runs as a separate process on another ``.loki/`` tree
that names the same database, and prints each outcome as a JSON line. The latency of a signal is from
just before ``signals.emit()`` is called here to the moment its outcome line is read from the
watcher's output (``time.perf_counter`` in this process for both ends): the commit, the notification,
the watcher's wake-up, claim, rule, outcome log and delete. The watcher's rescan is a minute away, so
only the notification wakes it. p50 and p99 over 200 signals (40 with ``LOKI_BENCH_QUICK``).

The floor is what the path cannot do without: two durable commits (the emit, and the outcome line;
the claim and the delete commit without waiting for the disk), each measured in the same run on the
same server as the median of one-row commits made between the signals (under the same load).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import tempfile
import threading
import time
from typing import Any

from bench.common import BASE_ENV, loki_executable, median, percentile, row, runs
from bench.pgserver import point_tree, schema_url, team
from loki.storage.tree import init_tree


def _reader(proc: subprocess.Popen[bytes], lines: queue.Queue[tuple[float, dict[str, Any]]]) -> None:
    assert proc.stdout is not None
    for raw in proc.stdout:
        seen = time.perf_counter()
        try:
            lines.put((seen, json.loads(raw)))
        except ValueError:
            continue


def _until(lines: queue.Queue[tuple[float, dict[str, Any]]], match: Any, timeout: float = 30) -> float:
    deadline = time.monotonic() + timeout
    while True:
        seen, event = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        if match(event):
            return seen


def _commit_ms(store: Any, n: int) -> float:
    """One durable commit of one small row on this server, in milliseconds."""
    started = time.perf_counter()
    with store.db.transaction() as conn:
        conn.execute("INSERT INTO loki_meta (key, value) VALUES ('bench', %s) "
                     "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value", (str(n),))
    return (time.perf_counter() - started) * 1000


def run() -> list[dict[str, Any]]:
    url, where = schema_url()
    if url is None:
        return [row("pg: signal emit -> applied, two processes (skipped)", 0.0, note=where)]
    from loki.signals import emit as signals
    from loki.storage.postgres.store import PgStore

    team(url, {"version": 1, "watch": {"rescan_seconds": 60, "tick_seconds": 3600}})
    base = tempfile.mkdtemp(prefix="loki-bench-pgsignals-")
    watcher_root = os.path.join(base, "runner", ".loki")
    init_tree(watcher_root)
    point_tree(watcher_root, url)
    proc = subprocess.Popen([*loki_executable(), "--root", watcher_root, "watch", "--no-tui", "--json"],
                            env=BASE_ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    lines: queue.Queue[tuple[float, dict[str, Any]]] = queue.Queue()
    threading.Thread(target=_reader, args=(proc, lines), daemon=True).start()
    store = PgStore.open(url)  # the emitting agent: another connection, as another machine's would be
    samples, commits = [], []
    try:
        _until(lines, lambda e: e.get("event") == "started" and e.get("consuming") is True)
        for n in range(5 + runs(200, 40)):
            commit = _commit_ms(store, n)  # the floor, measured between the signals: under the same load
            started = time.perf_counter()
            signals.emit(store, "DOCS_NEEDED", {"n": n})
            seen = _until(lines, lambda e, n=n: e.get("event") == "signal" and (e.get("signal") or {}).get("n") == n)
            if n >= 5:  # the first few warm the watcher's statements up
                samples.append((seen - started) * 1000)
                commits.append(commit)
    finally:
        store.close()
        proc.terminate()
        proc.wait(timeout=60)
    note = f"{len(samples)} signals, one at a time, on {where}; library emit here, `loki watch` in another process"
    floor, floor_name = 2 * median(commits), "2 durable commits"
    return [
        row("pg: signal emit -> applied, two processes (NOTIFY) p50", percentile(samples, 50), target_ms=20,
            floor_name=floor_name, floor_ms=floor, note=note),
        row("pg: signal emit -> applied, two processes (NOTIFY) p99", percentile(samples, 99), target_ms=100,
            floor_name=floor_name, floor_ms=floor),
    ]


if __name__ == "__main__":
    for r in run():
        print(json.dumps(r))
