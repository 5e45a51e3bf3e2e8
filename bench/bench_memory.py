"""Error memory benchmarks (issue 8), with a 100,000-record memory.

* building the index from the log (``loki errors reindex``): reported;
* search, warm and in-process, over a mix of queries from rare (``E0308``) to everywhere
  (``error``): p50 target at most 20 ms; p95 reported;
* the lazy catch-up: the first search after 100 new records;
* ``loki hook pre-tool-use`` cold, for a Bash command with a hint and for one without: target at
  most 4x ``python -c pass`` (the hook reads one hint file, whatever the memory's size);
* ``loki hook post-tool-use-failure`` cold (captures one record, records a strike): target 10x;
* the alternative the hook does not use: a cold process that imports ``sqlite3`` and looks the
  prefix up in the index (what reading "only what is indexed" would cost), for comparison.

The memory is made of the real failing outputs of tests/corpus/ (run through the capture code),
varied into 20,000 distinct patterns and repeated with a heavy-tailed frequency, as a team's
memory is: a few errors very often, most once or twice.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    BASE_ENV,
    QUICK,
    loki_executable,
    median,
    percentile,
    python_floor,
    row,
    runs,
    time_call,
    time_command,
)
from bench.hookbench import FAILURE_ERROR, payload, project, time_failures
from loki.memory.memory import ErrorMemory, error_record, new_id
from loki.memory.record import content_hash
from loki.storage import layout
from loki.storage.store import Store
from loki.text.errorscan import scan

RECORDS = 20_000 if QUICK else 100_000
DISTINCT = 20_000
CORPUS = Path(__file__).resolve().parent.parent / "tests" / "corpus"
QUERIES = ["ModuleNotFoundError requests", "cargo command not found", "mismatched types", "assert", "error",
           "No such file or directory", "TypeError undefined", "connection refused", "permission denied",
           "test_calc.py", "Traceback", "npm ERR missing script", "segmentation fault", "E0308", "KeyError pear",
           "address already in use", "rustc", "cannot find module", "exit code 2", "tsc"]
LIMITS = {"output": 1000, "error_message": 300}


def _corpus_records() -> list[dict[str, Any]]:
    """One captured record per failing corpus output, through the hooks' own capture code."""
    records = []
    for path in sorted(CORPUS.glob("*.json")):
        case = json.loads(path.read_text())
        if not case.get("expected_error"):
            continue
        result = scan(case["output"], case["exit_code"], command=case["command"])
        records.append(error_record(
            tool="Bash", tool_input={"command": case["command"]}, error=f"Exit code {case['exit_code']}\n"
            + case["output"], result=result, exit_code=case["exit_code"], branch="main", cwd="/home/dev/shop",
            session_id="s0", strike_key=None, now="2026-01-01T00:00:00Z"))
    return records


def _variants(base: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    out = []
    for index in range(count):
        record = dict(base[index % len(base)])
        word = f"mod{index // len(base)}"
        for field in ("command", "prefix", "error_message", "output"):
            text = record[field].replace("calc", word).replace("user", f"user_{word}")
            if field == "error_message":
                text += f" ({word})"
            record[field] = text[: LIMITS.get(field, len(text))]
        record["content_hash"] = content_hash(record["tool"], record["prefix"], record["error_message"])
        out.append(record)
    return out


def fill_memory(store: Store, records: int, seed: int = 8) -> None:
    """Append ``records`` error lines (and 300 resolutions of 'cargo build ...' and others) to the log."""
    rnd = random.Random(seed)
    variants = _variants(_corpus_records(), DISTINCT)
    batch: list[dict[str, Any]] = []
    for index in range(records):
        pick = min(int(rnd.paretovariate(1.1)) - 1, DISTINCT - 1) if rnd.random() < 0.6 else rnd.randrange(DISTINCT)
        record = dict(variants[pick], id=new_id("error"), session_id=f"s{index // 200}",
                      timestamp=f"2026-01-{1 + index * 28 // records:02d}T{index // 3600 % 24:02d}:"
                                f"{index // 60 % 60:02d}:{index % 60:02d}Z")
        batch.append(record)
        if len(batch) == 5000:
            store.append_lines(layout.MEMORY_LOG, batch)
            batch = []
    store.append_lines(layout.MEMORY_LOG, batch)


def resolve_some(store: Store, count: int = 300) -> None:
    """Resolutions (and their hints) for ``count`` prefixes, among them ``cargo build``."""
    memory = ErrorMemory(store)
    for index in range(count):
        command = "cargo build" if index == 0 else f"make target{index}"
        error = memory.capture("Bash", {"command": command}, FAILURE_ERROR, branch="main", cwd="/home/dev/shop")
        entry = {"call": f"Bash `{command}`", "last_error": error["error_message"], "error_class": "missing_command"}
        memory.record_resolutions([{"key": f"Bash:{index:016x}", "entry": entry, "memory_ids": [error["id"]],
                                    "calls_between": 1, "same_input": False}],
                                  "Bash", {"command": f"~/.cargo/bin/{command}"}, branch="main")








SQLITE_LOOKUP = """
import sqlite3, sys
db = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
db.execute("SELECT p.command, r.resolution FROM patterns p JOIN resolutions r ON r.pattern = p.id "
           "WHERE p.tool = ? AND p.prefix = ? ORDER BY r.confidence DESC LIMIT 1", ("Bash", "cargo build")).fetchall()
"""


def run() -> list[dict[str, Any]]:
    rows = []
    loki = loki_executable()
    cold = runs(30)
    label = f"{RECORDS:,}"
    with tempfile.TemporaryDirectory() as tmp:
        top = project(tmp)
        store = Store(os.path.join(top, ".loki"), validate_all=False)
        fill_memory(store, RECORDS)
        resolve_some(store)
        log_mb = os.path.getsize(store.path(layout.MEMORY_LOG)) / 1e6

        memory = ErrorMemory(store)
        started = time.perf_counter()
        built = memory.reindex()
        build_ms = (time.perf_counter() - started) * 1000
        stats = memory.stats()
        db_mb = os.path.getsize(store.path(layout.MEMORY_INDEX)) / 1e6
        rows.append(row(f"index build: {label} records (loki errors reindex)", build_ms,
                        note=f"{stats['patterns']:,} patterns; log {log_mb:.0f} MB, index {db_mb:.0f} MB; "
                             f"{built['hints']} hints; {built['skipped']} lines skipped"))

        samples: list[float] = []
        for query in QUERIES:
            samples += time_call(lambda q=query: memory.search(q), repeat=runs(10, 3))
        rows.append(row(f"search over {label} records: p50 (warm, in-process)", median(samples), target_ms=20,
                        note=f"p95 {percentile(samples, 95):.1f} ms, max {max(samples):.1f} ms over "
                             f"{len(QUERIES)} queries from rare to everywhere; limit 10"))

        fill_memory(store, 100, seed=99)
        started = time.perf_counter()
        memory.search("cargo command not found")
        rows.append(row("search after 100 new records (lazy catch-up)", (time.perf_counter() - started) * 1000,
                        note="the index reads only what the log gained"))
        memory.close()
        # Building 100,000 records leaves ~100 MB of dirty pages; flush them so the cold runs below
        # measure the hooks (whose appends fsync), not the kernel writing back this setup.
        os.sync()

        floor = python_floor(cold)
        hinted = payload("PreToolUse", top, tool_name="Bash", tool_input={"command": "cargo build --release"})
        done = subprocess.run([*loki, "hook", "pre-tool-use"], input=hinted, env=BASE_ENV, cwd=top,
                              capture_output=True, check=True)
        if b"it was fixed by" not in done.stdout:
            raise RuntimeError(f"pre-tool-use gave no hint: {done.stdout[:300]!r} {done.stderr[:300]!r}")
        value = median(time_command([*loki, "hook", "pre-tool-use"], repeat=cold, stdin=hinted, cwd=top, check=True))
        rows.append(row(f"cold: loki hook pre-tool-use, {label} records (a hint)", value,
                        floor_name="python -c pass", floor_ms=floor, target_ratio=4,
                        note="prefix -> one hint file; the index is not opened"))
        plain = payload("PreToolUse", top, tool_name="Bash", tool_input={"command": "npm test"})
        value = median(time_command([*loki, "hook", "pre-tool-use"], repeat=cold, stdin=plain, cwd=top, check=True))
        rows.append(row(f"cold: loki hook pre-tool-use, {label} records (no hint)", value,
                        floor_name="python -c pass", floor_ms=floor, target_ratio=4))

        value = median(time_failures(loki, top, runs(20)))
        rows.append(row(f"cold: loki hook post-tool-use-failure, {label} records", value,
                        floor_name="python -c pass", floor_ms=floor, target_ratio=10,
                        note="capture (one appended line) + strike; no index work"))

        lookup = [sys.executable, "-c", SQLITE_LOOKUP, store.path(layout.MEMORY_INDEX)]
        value = median(time_command(lookup, repeat=cold, check=True))
        rows.append(row("alternative (not used): cold sqlite3 lookup of the prefix", value,
                        floor_name="python -c pass", floor_ms=floor,
                        note="a bare python process doing only this; the hook would add it to its own cost and "
                             "would only see what a search had indexed"))
    return rows


if __name__ == "__main__":
    for r in run():
        print(json.dumps(r))
