"""Cold start of ``loki queue claim --json`` on a PostgreSQL tree (1,000 pending): another checkout against this
one, interleaved run by run so the machine's noise hits both alike (issue 24, the named queries).

    git worktree add /tmp/loki-old <commit>
    LOKI_TEST_DATABASE_URL=... .venv/bin/python -m bench.pg_cold_before_after /tmp/loki-old [runs]

Each side runs ``python -m loki`` from its own checkout (the current directory comes first on ``sys.path``),
against one tree on one server; each run claims one task. Not a ``bench_*`` module: ``bench/run.py`` skips it.
"""

from __future__ import annotations

import os
import statistics
import sys

from bench.bench_pg_team import _add, _tree
from bench.common import REPO, python_floor, time_command
from bench.pg_server import schema_url


def main(old: str, runs: int) -> None:
    root = _tree(schema_url())
    _add(root, 1000)
    argv = [sys.executable, "-m", "loki", "--root", root, "queue", "claim", "--agent", "bench", "--json"]
    sides = {"before": old, "after": str(REPO)}
    samples: dict[str, list[float]] = {name: [] for name in sides}
    for cwd in sides.values():
        time_command(argv, repeat=1, warmup=2, cwd=cwd, check=True)  # compiles the old side's bytecode
    for _ in range(runs):
        for name, cwd in sides.items():
            samples[name] += time_command(argv, repeat=1, warmup=0, cwd=cwd, check=True)
    floor = python_floor(runs)
    print(f"{runs} runs each, load average {os.getloadavg()[0]:.1f}; python -c pass {floor:.1f} ms")
    for name, cwd in sides.items():
        value = statistics.median(samples[name])
        print(f"{name:6} {cwd}: median {value:.1f} ms ({value / floor:.2f}x the floor)")
    print(f"after/before: {statistics.median(samples['after']) / statistics.median(samples['before']):.3f}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 21)
