"""The meter's cost per task (issue 27, docs/spend.md), against the same work without it, in the same run.

* The tee: 1 MB of Claude Code ``stream-json`` output (a session's events, its result last) through
  :meth:`loki.spend.meter.Meter.tee` in 64 KiB chunks, as ``loki work`` pumps it, against the same bytes written
  to the same sink directly (the floor): the scan's share per task.
* The same for 1 MB of plain text (an agent that prints no JSON: the lines are skipped by their first byte).
* In-process ``loki work``, one task: a command that prints Claude Code's result line (the usage parsed, priced
  and stored with the completion) against a command that prints a line of the same length the meter ignores.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from bench.bench_work import _refill, _tree
from bench.common import median, row, runs, time_call
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
    return rows
