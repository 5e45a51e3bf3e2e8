"""Benchmark: error scan of a 10 KB and a 1 MB tool output (issue 7, "Measure").

Run standalone (``python bench/bench_errorscan.py``) for one JSON line per benchmark, or import and call
``run()``. The outputs are built from the real tool outputs in ``tests/corpus`` (errors and clean runs mixed),
ending in a failing pytest run, and scanned with exit code 1: the full path of matching, file-reference
and stack-trace extraction. Targets: 2 ms and 20 ms.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from loki.text.errorscan import scan  # noqa: E402

CORPUS = ROOT / "tests" / "corpus"
TAIL_CASE = "pytest_fail_quiet"
SIZES = (("errorscan 10KB", 10 * 1024, 2.0, 2000), ("errorscan 1MB", 1024 * 1024, 20.0, 200))


def build_output(size: int) -> str:
    """``size`` characters of realistic output: corpus outputs back to back, a pytest failure at the end."""
    outputs = [json.loads(path.read_text(encoding="utf-8"))["output"] for path in sorted(CORPUS.glob("*.json"))]
    tail = json.loads((CORPUS / f"{TAIL_CASE}.json").read_text(encoding="utf-8"))["output"]
    body = "\n".join(outputs)
    repeated = body * (size // len(body) + 1)
    return repeated[: size - len(tail)] + tail


def measure(text: str, reps: int) -> float:
    scan(text, 1)  # compile the regexes this output needs before timing
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        scan(text, 1)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def run() -> list[dict[str, object]]:
    """One row per size: the keys asked for (name, median_ms, target_ms) plus those bench/run.py prints."""
    rows: list[dict[str, object]] = []
    quick = bool(os.environ.get("LOKI_BENCH_QUICK"))
    for name, size, target_ms, reps in SIZES:
        text = build_output(size)
        result = scan(text, 1)
        # The mix holds every corpus shape (a test-runner timeout ranks before the pytest failure at the end);
        # what matters is that the full path ran: a match, references and a stack.
        if not (result.is_error and result.file_refs and result.stack_trace):
            raise RuntimeError(f"benchmark output scanned wrongly: {result}")
        reps = max(20, reps // 10) if quick else reps
        median_ms = round(measure(text, reps), 3)
        rows.append({
            "name": name,
            "median_ms": median_ms,
            "target_ms": target_ms,
            "target": f"<= {target_ms:g} ms",
            "ok": median_ms <= target_ms,
            "floor": None,
            "floor_ms": None,
            "ratio": None,
            "note": f"{len(text):,} chars, median of {reps} in-process scans with exit code 1",
        })
    return rows


if __name__ == "__main__":
    for row in run():
        print(json.dumps(row))
