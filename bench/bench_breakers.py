"""Circuit breaker benchmarks (issue 5).

``loki breaker check NAME`` sits in front of every API call of a shell loop, so its cold start
is measured against ``python -c pass`` in the same run (target: at most 8x), for the common
answers: CLOSED (exit 0) and OPEN before the cooldown ends (exit 75). Both come from a lock-free
read in the fast lane (loki/cli/fast.py). For scale, the same question through the typer app
(``loki breaker status NAME --json``) and an in-process locked record are measured too.

The commands run with bytecode caching allowed (``PYTHONDONTWRITEBYTECODE`` cleared), as on any
installed system: the warm-up runs write the .pyc files the measured runs then use.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from bench.common import loki_executable, median, python_floor, row, runs, time_call, time_command
from loki.breakers.breakers import Breakers
from loki.storage.store import Store
from loki.storage.tree import init_tree

ENV = {"PYTHONDONTWRITEBYTECODE": ""}


def _seed(root: str) -> Breakers:
    """A realistic file: a dozen breakers, written by loki (so readers trust it by digest)."""
    breakers = Breakers(Store(root, validate_all=False))
    for index in range(10):
        breakers.record_success(f"api/service-{index}")
    breakers.record_success("api/claude")
    breakers.trip("api/openai", for_seconds=30 * 86400)
    return breakers


def run() -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, ".loki")
        init_tree(root)
        breakers = _seed(root)
        loki = loki_executable()
        cold = runs(30)
        floor = python_floor(cold)
        closed = median(time_command([*loki, "--root", root, "breaker", "check", "api/claude"], repeat=cold,
                                     env=ENV, check=True))
        rows.append(row("cold: loki breaker check (CLOSED, exit 0)", closed, floor_name="python -c pass",
                        floor_ms=floor, target_ratio=8))
        opened = median(time_command([*loki, "--root", root, "breaker", "check", "api/openai"], repeat=cold,
                                     env=ENV))
        rows.append(row("cold: loki breaker check (OPEN, exit 75)", opened, floor_name="python -c pass",
                        floor_ms=floor, target_ratio=8))
        typer_path = median(time_command([*loki, "--root", root, "breaker", "status", "api/claude", "--json"],
                                         repeat=runs(10), env=ENV, check=True))
        rows.append(row("cold: loki breaker status NAME --json (typer path)", typer_path,
                        floor_name="python -c pass", floor_ms=floor, note="for scale: what check would cost "
                        "without the fast lane"))
        record = median(time_call(lambda: breakers.record_success("api/claude"), repeat=runs(100)))
        rows.append(row("in-process: record_success (lock, read, write, fsync)", record))
        check = median(time_call(lambda: breakers.check("api/claude"), repeat=runs(200)))
        rows.append(row("in-process: check, CLOSED (lock-free read)", check))
    return rows


if __name__ == "__main__":
    for r in run():
        print(json.dumps(r))
