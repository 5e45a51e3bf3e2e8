"""Run every benchmark in bench/ and print one table.

Each ``bench/bench_*.py`` module exposes ``run() -> list[dict]`` (rows built with
``bench.common.row``). Usage::

    python bench/run.py            # everything
    python bench/run.py store cli  # only modules whose name contains one of these words
    LOKI_BENCH_QUICK=1 python bench/run.py   # fewer repetitions (smoke run)

The table also goes to ``bench/results/latest.json``; BENCHMARKS.md records a run.
"""

from __future__ import annotations

import importlib
import json
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def machine() -> str:
    import os

    cpus = os.cpu_count()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        model = platform.processor()
    return f"{platform.system()} {platform.machine()}, {cpus} CPU ({model}), Python {platform.python_version()}"


def main(argv: list[str]) -> int:
    words = [a for a in argv if not a.startswith("-")]
    modules = sorted(p.stem for p in HERE.glob("bench_*.py"))
    if words:
        modules = [m for m in modules if any(w in m for w in words)]
    rows = []
    started = time.time()
    for name in modules:
        module = importlib.import_module(f"bench.{name}")
        print(f"running {name} ...", file=sys.stderr, flush=True)
        rows.extend(module.run())
    print(f"machine: {machine()}")
    header = f"{'benchmark':<58} {'median':>11} {'floor':>11} {'ratio':>7}  {'target':<10} ok"
    print(header)
    print("-" * len(header))
    for r in rows:
        floor = f"{r['floor_ms']:.2f} ms" if r.get("floor_ms") else "-"
        ratio = f"{r['ratio']:.2f}x" if r.get("ratio") is not None else "-"
        ok = {True: "yes", False: "NO", None: ""}[r.get("ok")]
        print(f"{r['name']:<58} {r['median_ms']:>8.2f} ms {floor:>11} {ratio:>7}  {r.get('target', ''):<10} {ok}")
        if r.get("note"):
            print(f"    {r['note']}")
    print(f"({len(rows)} benchmarks in {time.time() - started:.0f}s; floors: see each row)")
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "latest.json").write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
