"""The meter's cost per task (issue 27, docs/spend.md), against the same work without it, in the same run.

* The tee: 1 MB of Claude Code ``stream-json`` output (a session's events, its result last) through
  :meth:`loki.spend.meter.Meter.tee` in 64 KiB chunks, as ``loki work`` pumps it, against the same bytes written
  to the same sink directly (the floor): the scan's share per task.
* The same for 1 MB of plain text (an agent that prints no JSON: the lines are skipped by their first byte).
* In-process ``loki work``, one task: a command that prints Claude Code's result line (the usage parsed, priced
  and stored with the completion) against a command that prints a line of the same length the meter ignores.
* Cold ``loki work --max-tasks 1 -- true`` with an OTLP endpoint (a local receiver answering 200) against the
  same without one: what the metrics cost is paid only where they are configured (docs/metrics.md); the row
  also counts the OpenTelemetry modules a run without an endpoint imports (0).
* Cold ``loki queue claim --json`` on a files tree of 300 pending and 200 completed tasks that spent something,
  with 10 budgets (none spent: the claim is a plain one after the check) against the same tree without budgets.
* The same at a small (200 attempts) and a large (10,000 attempts, in the archive) usage history, the four
  trees timed interleaved in one loop: with the running totals (queue/spend.json) a budgeted claim reads no
  usage history, so its cost over a claim without budgets stays flat as the archive grows. The note gives what
  the check read per claim before the totals (every task's usage: ``loki.spend.report.entries``), timed
  in-process on the same trees.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from bench.bench_work import _refill, _tree
from bench.common import BASE_ENV, loki_executable, median, row, runs, time_call, time_command
from loki.spend.meter import Meter
from loki.storage.store import Store
from loki.work.loop import Worker, WorkOptions

RESULT = {"type": "result", "subtype": "success", "total_cost_usd": 0.0123, "result": "done",
          "usage": {"input_tokens": 12, "output_tokens": 345, "cache_read_input_tokens": 20000,
                    "cache_creation_input_tokens": 1500},
          "modelUsage": {"claude-sonnet-4-5": {"outputTokens": 345, "costUSD": 0.0123}}}
CHUNK = 65536


def _stream_json(size: int) -> bytes:
    event = json.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text": "x" * 400}],
                                                         "usage": {"input_tokens": 5, "output_tokens": 9}}})
    lines = [event] * (size // (len(event) + 1))
    return ("\n".join([*lines, json.dumps(RESULT)]) + "\n").encode()


def _through(data: bytes, metered: bool) -> None:
    sink = bytearray()
    if metered:
        meter = Meter()
        write = meter.tee(sink.extend)
    else:
        write = sink.extend
    for start in range(0, len(data), CHUNK):
        write(data[start:start + CHUNK])
    if metered:
        meter.finish()
        meter.entry()


def run() -> list[dict[str, Any]]:
    repeat = runs(30)
    events = _stream_json(1_000_000)
    text = (b"compiling module 42 of 97 ... ok\n" * (1_000_000 // 33))
    rows = []
    for name, data in (("stream-json", events), ("plain text", text)):
        floor = median(time_call(lambda data=data: _through(data, False), repeat=repeat))
        teed = median(time_call(lambda data=data: _through(data, True), repeat=repeat))
        rows.append(row(f"spend: 1 MB of {name} through the meter's tee", teed, floor_name="written directly",
                        floor_ms=floor, note=f"the scan's share: {teed - floor:.2f} ms per MB"))

    root = _tree(100)
    store = Store(root, validate_all=False)
    serial = [0]
    quiet = {"stdout": lambda data: None, "stderr": lambda data: None}
    line = json.dumps(RESULT)
    commands = {"reported": [sys.executable, "-c", f"print({line!r})"],
                "none": [sys.executable, "-c", f"print({('z' * len(line))!r})"]}

    def one_task(kind: str) -> None:
        summary = Worker(store, WorkOptions(agent="bench", command=commands[kind], max_tasks=1),
                         **quiet).run_unguarded()
        assert summary.exit_code == 0 and (summary.runs[0].usage is not None) == (kind == "reported")

    timings: dict[str, list[float]] = {"reported": [], "none": []}
    one_task("none")  # warm-up
    for _ in range(runs(30)):
        for kind in ("none", "reported"):  # interleaved: the machine's drift falls on both
            _refill(root, serial)
            timings[kind].extend(time_call(lambda kind=kind: one_task(kind), repeat=1, warmup=0))
    plain, metered = median(timings["none"]), median(timings["reported"])
    rows.append(row("spend: loki work, one task whose agent reports usage (in-process)", metered,
                    floor_name="no usage reported", floor_ms=plain,
                    note=f"metering + storing the entry: {metered - plain:+.2f} ms per task (100 pending, "
                         "python -c printing one line)"))
    rows.append(_cold_claims())
    rows.extend(_cold_claims_by_history())
    rows.append(_cold_metrics())
    return rows


def _cold_metrics() -> dict[str, Any]:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Ok(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    root = _tree(300)
    env = {**BASE_ENV, "LOKI_ROOT": root}
    command = [*loki_executable(), "work", "--agent", "bench-otel", "--max-tasks", "1", "--", "true"]
    repeat = runs(10)
    plain = median(time_command(command, repeat=repeat, env=env, check=True))
    url = f"http://127.0.0.1:{server.server_address[1]}"
    exported = median(time_command(command, repeat=repeat, env={**env, "OTEL_EXPORTER_OTLP_ENDPOINT": url},
                                   check=True))
    server.shutdown()
    count = subprocess.run([sys.executable, "-c", "import sys; from loki.storage.store import Store; "
                            "from loki.work.loop import Worker, WorkOptions; "
                            f"Worker(Store({root!r}), WorkOptions(agent='b', command=['true'], max_tasks=1))"
                            ".run_unguarded(); print(sum(m.startswith('opentelemetry') for m in sys.modules))"],
                           capture_output=True, text=True, env={k: v for k, v in env.items()
                                                                if not k.startswith("OTEL_")}, check=True)
    return row("spend: cold `loki work --max-tasks 1` exporting OTLP metrics", exported,
               floor_name="no endpoint", floor_ms=plain,
               note=f"{exported - plain:+.1f} ms per run with an endpoint; without one, opentelemetry modules "
                    f"imported: {count.stdout.strip()}")


def _cold_claims() -> dict[str, Any]:
    from loki.queue.queue import Queue
    from loki.spend.budgets import Budgets

    timings = {}
    for budgets in (0, 10):
        root = _tree(300)
        store = Store(root, validate_all=False)
        queue = Queue(store)
        for n in range(200):
            queue.add(f"done {n}", task_id=f"d{n:04d}", type=("docs", "feature")[n % 2], labels=["api"])
            claimed = queue.claim("bench", task_id=f"d{n:04d}")
            queue.complete(f"d{n:04d}", "bench", token=claimed["claim_token"], usage={
                "input_tokens": 10, "output_tokens": 5, "cache_read_tokens": 1000, "cache_creation_tokens": 0,
                "source": "claude", "usd": 0.01, "usd_source": "agent"})
        scopes = ["team", "type:docs", "type:feature", "label:api", "agent:bench"]
        for n in range(budgets):
            Budgets(store).set(f"b{n}", usd=1000.0, per=("hour", "day", "week")[n % 3], scope=scopes[n % 5])
        env = {**BASE_ENV, "LOKI_ROOT": root}
        timings[budgets] = median(time_command([*loki_executable(), "queue", "claim", "--agent", "bench-cold",
                                                "--json"], repeat=runs(20), env=env, check=True))
    return row("spend: cold `loki queue claim --json` with 10 budgets", timings[10], floor_name="no budgets",
               floor_ms=timings[0], note=f"files, 300 pending + 200 completed with usage: "
                                         f"{timings[10] - timings[0]:+.1f} ms per claim")


def _history_tree(attempts: int, budgets: int) -> str:
    """300 pending tasks and ``attempts`` finished ones with usage, all but 200 of them in the archive (written
    as the archive's lines directly: one real completion, copied); ``budgets`` budgets (none spent)."""
    import os

    from loki.queue.queue import Queue
    from loki.spend.budgets import Budgets
    from loki.storage import jsonio, layout

    root = _tree(300)
    store = Store(root, validate_all=False)
    queue = Queue(store)
    usage = {"input_tokens": 10, "output_tokens": 5, "cache_read_tokens": 1000, "cache_creation_tokens": 0,
             "source": "claude", "usd": 0.01, "usd_source": "agent"}
    for n in range(min(attempts, 200)):
        queue.add(f"done {n}", task_id=f"d{n:05d}", type=("docs", "feature")[n % 2], labels=["api"])
        claimed = queue.claim("bench", task_id=f"d{n:05d}")
        queue.complete(f"d{n:05d}", "bench", token=claimed["claim_token"], usage=usage)
    template = store.read(layout.queue_file("completed"))["tasks"][-1]
    archived = [jsonio.dumps_compact({**template, "id": f"h{n:06d}"}) for n in range(attempts - min(attempts, 200))]
    if archived:
        path = store.path(layout.archive_file("completed", str(template["completed_at"])[:7]))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write("\n".join(archived) + "\n")
    scopes = ["team", "type:docs", "type:feature", "label:api", "agent:bench"]
    for n in range(budgets):
        Budgets(store).set(f"b{n}", usd=10**6, per=("hour", "day", "week")[n % 3], scope=scopes[n % 5])
    return root


def _cold_claims_by_history() -> list[dict[str, Any]]:
    from loki.spend.report import entries

    sizes = (200, 10_000)
    trees = {(size, budgets): _history_tree(size, budgets) for size in sizes for budgets in (0, 10)}
    command = [*loki_executable(), "queue", "claim", "--agent", "bench-cold", "--json"]
    timings: dict[tuple[int, int], list[float]] = {key: [] for key in trees}
    for root in trees.values():  # warm-up: the page cache holds every tree
        time_command(command, repeat=1, warmup=0, env={**BASE_ENV, "LOKI_ROOT": root}, check=True)
    for _ in range(runs(20)):
        for key, root in trees.items():  # interleaved: the machine's drift falls on all four
            timings[key].extend(time_command(command, repeat=1, warmup=0, env={**BASE_ENV, "LOKI_ROOT": root},
                                             check=True))
    rows = []
    warm = {key: _warm_claims(root) for key, root in trees.items()}
    for size in sizes:
        rows.append(row(f"spend: in-process claim, 10 budgets, {size:,} attempts of history", warm[(size, 10)],
                        floor_name="no budgets", floor_ms=warm[(size, 0)],
                        note=f"{warm[(size, 10)] - warm[(size, 0)]:+.2f} ms per claim (budgets.claim, then released)"))
    for size in sizes:
        store = Store(trees[(size, 10)], validate_all=False)
        scanned = median(time_call(lambda store=store: sum(1 for _ in entries(store)), repeat=runs(5)))
        plain, budgeted = median(timings[(size, 0)]), median(timings[(size, 10)])
        rows.append(row(f"spend: cold claim, 10 budgets, {size:,} attempts of history", budgeted,
                        floor_name="no budgets", floor_ms=plain,
                        note=f"{budgeted - plain:+.1f} ms per claim; reading every task's usage (the check before "
                             f"the running totals) takes {scanned:.1f} ms on this tree"))
    return rows


def _warm_claims(root: str) -> float:
    """Median ms of ``budgets.claim`` in one process (each claim released again, untimed): the check's own cost,
    without a process start's noise."""
    import time

    from loki.queue.queue import Queue
    from loki.spend.budgets import claim

    queue = Queue(Store(root, validate_all=False))
    samples = []
    for index in range(runs(60) + 3):
        started = time.perf_counter()
        task = claim(queue, "bench-warm")
        elapsed = (time.perf_counter() - started) * 1000
        queue.release(task["id"], "bench-warm", token=task["claim_token"])
        if index >= 3:
            samples.append(elapsed)
    return median(samples)
