"""Timing helpers shared by the benchmarks.

Machines here are shared and noisy, so every number is a median over many runs and
is reported next to a floor measured in the same run (``python -c pass`` for cold
starts, a hand-written lock/read/write/fsync/replace for storage) as a ratio.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
QUICK = bool(os.environ.get("LOKI_BENCH_QUICK"))


def _bytecode_env() -> dict[str, str]:
    """Measure what users run: an installed package with its bytecode cached.

    Some shells here export PYTHONDONTWRITEBYTECODE=1, which would make every cold
    start recompile loki from source (~15 ms more); compile once and let it be used.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "loki")], env=env, check=True)
    return env


BASE_ENV = _bytecode_env()


def runs(normal: int, quick: int | None = None) -> int:
    return (quick if quick is not None else max(3, normal // 5)) if QUICK else normal


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def percentile(values: Sequence[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def loki_executable() -> list[str]:
    """The installed console script beside this interpreter, else ``python -m loki``."""
    script = Path(sys.executable).parent / "loki"
    return [str(script)] if script.exists() else [sys.executable, "-m", "loki"]


def time_command(
    argv: list[str], *, repeat: int, env: dict[str, str] | None = None, stdin: bytes | None = None,
    cwd: str | os.PathLike[str] | None = None, warmup: int = 2, check: bool = False,
) -> list[float]:
    """Wall-clock milliseconds of a whole process, ``repeat`` times after ``warmup`` runs."""
    full_env = {**BASE_ENV, **(env or {})}
    samples = []
    for index in range(warmup + repeat):
        started = time.perf_counter()
        done = subprocess.run(argv, input=stdin, env=full_env, cwd=cwd, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
        elapsed = (time.perf_counter() - started) * 1000
        if check and done.returncode != 0:
            raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr.decode()[:500]}")
        if index >= warmup:
            samples.append(elapsed)
    return samples


def python_floor(repeat: int) -> float:
    """Median cold start of ``python -c pass`` with this interpreter: the floor for CLI benchmarks."""
    return median(time_command([sys.executable, "-c", "pass"], repeat=repeat))


def time_call(fn: Callable[[], Any], *, repeat: int, warmup: int = 1) -> list[float]:
    """Milliseconds of an in-process call, ``repeat`` times."""
    samples = []
    for index in range(warmup + repeat):
        started = time.perf_counter()
        fn()
        elapsed = (time.perf_counter() - started) * 1000
        if index >= warmup:
            samples.append(elapsed)
    return samples


def row(
    name: str,
    value_ms: float,
    *,
    floor_name: str | None = None,
    floor_ms: float | None = None,
    target_ratio: float | None = None,
    target_ms: float | None = None,
    note: str = "",
) -> dict[str, Any]:
    """One line of the benchmark table."""
    ratio = value_ms / floor_ms if floor_ms else None
    if target_ratio is not None and ratio is not None:
        target, ok = f"<= {target_ratio:g}x", ratio <= target_ratio
    elif target_ms is not None:
        target, ok = f"<= {target_ms:g} ms", value_ms <= target_ms
    else:
        target, ok = "", None
    return {
        "name": name,
        "median_ms": round(value_ms, 3),
        "floor": floor_name,
        "floor_ms": round(floor_ms, 3) if floor_ms else None,
        "ratio": round(ratio, 2) if ratio is not None else None,
        "target": target,
        "ok": ok,
        "note": note,
    }
