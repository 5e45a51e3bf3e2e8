"""Signals and the watcher (issue 6).

* Latency from ``loki signal emit`` returning (a real process each time) to the outcome line
  appearing in ``logs/signals.jsonl``, p50 and p99 over 200 signals, with the native observer
  (inotify) and with the polling fallback (the rescan timer alone, ``watch.rescan_seconds`` 1.0);
  and the same from ``signals.emit()`` returning in this process (the watcher's pipeline alone).
  A thread in this process polls the log every 0.5 ms and notes when each line appears.
* Throughput and resident memory (VmRSS, and the peak VmHWM) of ``loki watch`` after 10,000 signals.
* One frame of the live view with 10,000 tasks: snapshot, the others' activity, the screen composed for
  160x60 and drawn on a console: the first frame (every file parsed, the feed's history read) and a
  steady one (nothing changed: nothing re-read).
* Cold start of ``loki signal emit`` (the fast lane) against ``python -c pass``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from bench.common import (
    BASE_ENV,
    REPO,
    loki_executable,
    median,
    percentile,
    python_floor,
    row,
    runs,
    time_call,
    time_command,
)
from loki.signals import emit as signals
from loki.storage import layout
from loki.storage.store import Store
from loki.storage.tree import init_tree
from loki.tasks.record import make_task

NOW = "2026-01-25T10:00:00Z"


def _fresh() -> str:
    root = os.path.join(tempfile.mkdtemp(prefix="loki-bench-signals-"), ".loki")
    init_tree(root)
    return root


class _LogWatcher(threading.Thread):
    """Notes the perf_counter instant each outcome line (keyed by the signal's ``n``) appears."""

    def __init__(self, root: str) -> None:
        super().__init__(daemon=True)
        self.path = os.path.join(root, "logs", "signals.jsonl")
        self.seen: dict[int, float] = {}
        self.count = 0
        self.done = threading.Event()

    def run(self) -> None:
        offset, pending = 0, b""
        while not self.done.is_set():
            try:
                with open(self.path, "rb") as f:
                    f.seek(offset)
                    data = f.read()
            except FileNotFoundError:
                data = b""
            if data:
                now = time.perf_counter()
                offset += len(data)
                pending += data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    record = json.loads(line)
                    self.count += 1
                    n = (record.get("signal") or {}).get("n")
                    if isinstance(n, int):
                        self.seen.setdefault(n, now)
            else:
                time.sleep(0.0005)


def _start_watcher(root: str, observer: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([*loki_executable(), "--root", root, "watch", "--no-tui", "--observer", observer],
                            env=BASE_ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO)
    assert proc.stdout is not None
    first = proc.stdout.readline().decode()
    if "started: consuming" not in first:
        raise RuntimeError(f"watcher did not start: {first!r}")
    threading.Thread(target=lambda: proc.stdout.read() if proc.stdout else None, daemon=True).start()
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(timeout=60)


def _latency(observer: str, count: int, *, cli: bool) -> tuple[list[float], int]:
    """Milliseconds from each emit returning to its outcome line, and how many landed before it returned.

    ``cli``: emit with a real ``loki signal emit`` process each time (the watcher often logs the
    outcome before that process has finished exiting: a latency of 0); otherwise ``signals.emit``
    in this process, which isolates the watcher's own pipeline.
    """
    root = _fresh()
    watcher = _start_watcher(root, observer)
    log = _LogWatcher(root)
    log.start()
    loki = loki_executable()
    store = Store(root, validate_all=False)
    returned: dict[int, float] = {}
    try:
        for n in range(count):
            if cli:
                subprocess.run([*loki, "--root", root, "signal", "emit", "DOCS_NEEDED", f"n:={n}"], env=BASE_ENV,
                               check=True, stdout=subprocess.DEVNULL)
            else:
                signals.emit(store, "DOCS_NEEDED", {"n": n})
            returned[n] = time.perf_counter()
            if not cli:
                time.sleep(0.02)  # one at a time, as agents emit them, not a burst
        deadline = time.monotonic() + 60
        while len(log.seen) < count and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        log.done.set()
        _stop(watcher)
    raw = [(log.seen[n] - returned[n]) * 1000 for n in range(count) if n in log.seen]
    return [max(0.0, value) for value in raw], sum(1 for value in raw if value < 0)


def _rss_kib(pid: int) -> dict[str, int]:
    values = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0])
    return values


def _memory(count: int) -> tuple[dict[str, int], float, dict[str, int]]:
    root = _fresh()
    watcher = _start_watcher(root, "native")
    log = _LogWatcher(root)
    log.start()
    store = Store(root, validate_all=False)
    try:
        idle = _rss_kib(watcher.pid)
        started = time.perf_counter()
        for n in range(count):
            signals.emit(store, ("DOCS_NEEDED", "FEATURE_READY_auth", "CUSTOM_EVENT")[n % 3], {"n": n})
        deadline = time.monotonic() + 600
        while log.count < count and time.monotonic() < deadline:
            time.sleep(0.01)
        elapsed = time.perf_counter() - started
        after = _rss_kib(watcher.pid)
    finally:
        log.done.set()
        _stop(watcher)
    return idle, elapsed, after


def _frame(tasks: int) -> tuple[float, float]:
    from rich.console import Console

    from loki.cli.watchview import to_text
    from loki.watch.activity import Activity, history
    from loki.watch.dashboard import Dashboard
    from loki.watch.feed import Feed
    from loki.watch.screen import View, compose

    root = _fresh()
    store = Store(root, validate_all=False)
    pending = [make_task(task_id=f"p{i:05d}", title=f"Implement feature {i}", now=NOW,
                         description="Add the endpoint, its tests and its docs. " * 3) for i in range(tasks - 1000)]
    held = []
    for i in range(1000):
        task = make_task(task_id=f"w{i:04d}", title=f"Feature {i}", now=NOW, status="in-progress")
        task.update(claimed_by=f"eng-{i % 8}", claimed_at=NOW, claim_token="x", lease_until="2026-01-25T11:00:00Z")
        held.append(task)
    with store.transaction(layout.QUEUE_LOCK) as txn:
        txn.write(layout.queue_file("pending"), {"version": 1, "tasks": pending}, changed=[])
        txn.write(layout.queue_file("in-progress"), {"version": 1, "tasks": held}, changed=[])
    for n in range(50):
        signals.emit(store, "DOCS_NEEDED", {"n": n})

    class Frames:
        """What `loki watch` keeps from one frame to the next."""

        def __init__(self) -> None:
            self.activity = Activity(store)
            self.activity.start()
            self.dashboard = Dashboard(store, in_progress_limit=200, escalations_every=1.0,
                                       escalations=self.activity.escalations)
            self.feed = Feed()
            self.feed.extend(history(store), NOW)

        def draw(self) -> None:
            self.feed.extend(self.activity.poll(), NOW)
            lines = compose(self.dashboard.snapshot(consuming=True), self.feed, View(), 160, 60)
            console = Console(record=True, width=160, file=open(os.devnull, "w"))  # noqa: SIM115
            console.print(to_text(lines))
            console.file.close()

    first = median(time_call(lambda: Frames().draw(), repeat=runs(10), warmup=1))
    steady_frames = Frames()
    steady_frames.draw()
    steady = median(time_call(steady_frames.draw, repeat=runs(30), warmup=1))
    return first, steady


def run() -> list[dict[str, Any]]:
    rows = []
    count = runs(200, 40)
    for observer, label in (("native", "native observer"), ("polling", "polling fallback (rescan 1 s)")):
        for cli in (True, False):
            samples, early = _latency(observer, count, cli=cli)
            how = "`loki signal emit` returned" if cli else "signals.emit() returned"
            note = f"{len(samples)} of {count} signals"
            if cli:
                note += f"; {early} logged before the emitting process had exited (counted as 0 ms)"
            rows.append(row(f"signals: {how} -> outcome logged, {label}, p50", percentile(samples, 50),
                            target_ms=50 if observer == "native" else None, note=note))
            rows.append(row(f"signals: {how} -> outcome logged, {label}, p99", percentile(samples, 99)))
    total = runs(10_000, 2000)
    idle, elapsed, after = _memory(total)
    rows.append(row(f"signals: watcher consumes {total:,} signals (per signal)", elapsed * 1000 / total,
                    note=f"{total / elapsed:.0f} signals/s emitted and consumed concurrently (one emitting "
                         "process, the watcher with the native observer)"))
    rows.append(row(f"signals: watcher RSS after {total:,} signals (MiB, not ms)", after["VmRSS"] / 1024,
                    note=f"idle at start {idle['VmRSS'] / 1024:.1f} MiB; peak (VmHWM) {after['VmHWM'] / 1024:.1f} MiB"))
    first, steady = _frame(10_000)
    rows.append(row("watch view: first frame, 10,000 tasks (snapshot + render)", first,
                    note="every queue file parsed, the feed's history read"))
    rows.append(row("watch view: steady frame, 10,000 tasks (nothing changed)", steady, target_ms=100,
                    note="files re-read only when their (inode, size, mtime) changes"))
    cold = runs(30)
    floor = python_floor(cold)
    root = _fresh()
    emit = median(time_command([*loki_executable(), "--root", root, "signal", "emit", "DOCS_NEEDED", "n:=1"],
                               repeat=cold, check=True))
    rows.append(row("cold: loki signal emit (fast lane)", emit, floor_name="python -c pass", floor_ms=floor,
                    target_ratio=8))
    typer_path = median(time_command([*loki_executable(), "--root", root, "signal", "list", "--json"],
                                     repeat=runs(10), check=True))
    rows.append(row("cold: loki signal list --json (typer path)", typer_path, floor_name="python -c pass",
                    floor_ms=floor, note="for scale: what emit would cost without the fast lane"))
    return rows


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    for r in run():
        print(json.dumps(r))
