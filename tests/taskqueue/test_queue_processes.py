"""The queue under real concurrency and real SIGKILL."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from loki.queue.queue import Queue
from loki.storage import layout
from loki.storage.store import Store
from tests import forkstart
from tests.helpers import loki_proc, tree_problems

pytestmark = pytest.mark.slow  # eight claiming processes and SIGKILL: ~8 s (make test-fast skips it)

REPO = Path(__file__).resolve().parents[2]
TASK_FILES = [layout.queue_file(s) for s in layout.QUEUE_STATES]


def _spawn_worker(root: Path, agent: str, *extra: str) -> Any:
    """A claim worker: a real process forked from a warm interpreter (tests/forkstart.py; the SIGKILL test starts
    48, and a cold start was most of a short-lived worker's CPU)."""
    return forkstart.spawn_module("tests.procs.claim_worker", [str(root), agent, *extra], cwd=REPO, text=False)


def _add_tasks(root: Path, count: int) -> set[str]:
    queue = Queue(Store(root, validate_all=False))
    queue.add_many([{"title": f"task {n}", "id": f"t{n:04d}",
                     "priority": ("high", "medium", "low")[n % 3]} for n in range(count)])
    return {f"t{n:04d}" for n in range(count)}


def _where_is_everything(root: Path) -> Counter[str]:
    store = Store(root)
    seen: Counter[str] = Counter()
    for rel in TASK_FILES:
        seen.update(t["id"] for t in store.read(rel)["tasks"])
    seen.update(e["task_id"] for e in store.read(layout.DEADLETTER)["tasks"])
    return seen


def test_eight_processes_claim_500_tasks_each_exactly_once(root: Path) -> None:
    expected = _add_tasks(root, 500)
    workers = [_spawn_worker(root, f"agent-{n}") for n in range(8)]
    claims: list[tuple[str, str, str]] = []
    for n, proc in enumerate(workers):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
        claims.extend((f"agent-{n}", *line.split()[1:]) for line in out.decode().splitlines())
    claimed_ids = Counter(task_id for _, task_id, _ in claims)
    assert set(claimed_ids) == expected                      # none lost
    assert max(claimed_ids.values()) == 1                    # none claimed twice
    assert len({token for _, _, token in claims}) == 500
    completed = Store(root).read(layout.queue_file("completed"))["tasks"]
    assert sorted(t["id"] for t in completed) == sorted(expected)
    assert all(t["result"]["by"] == agent for t in completed for agent, tid, _ in claims if tid == t["id"])
    assert sum(1 for n in range(8) if any(agent == f"agent-{n}" for agent, _, _ in claims)) > 1
    assert tree_problems(root) == []


def test_claims_through_the_cli_from_parallel_processes(root: Path) -> None:
    expected = _add_tasks(root, 12)
    procs = [subprocess.Popen([sys.executable, "-m", "loki", "--root", str(root), "queue", "claim",
                               "--agent", f"cli-{n}", "--json"], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for n in range(12)]
    import json

    got = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
        got.append(json.loads(out)["task"]["id"])
    assert sorted(got) == sorted(expected)
    result = loki_proc(["queue", "claim", "--agent", "late"], root=root)
    assert result.code == 3 and "pending queue is empty" in result.stderr


def test_sigkill_during_claims_never_loses_or_duplicates_a_task(root: Path) -> None:
    expected = _add_tasks(root, 120)
    rng = random.Random(42)
    rounds = int(os.environ.get("LOKI_CRASH_ROUNDS", "12"))
    for round_number in range(rounds):
        workers = [_spawn_worker(root, f"r{round_number}-{n}") for n in range(4)]
        victim = workers[rng.randrange(len(workers))]
        assert victim.stdout is not None
        for _ in range(rng.randint(0, 6)):
            if not victim.stdout.readline():
                break
        for proc in workers:
            proc.send_signal(signal.SIGKILL)
        for proc in workers:
            proc.wait(timeout=30)
        Store(root).recover(layout.QUEUE_LOCK)
        seen = _where_is_everything(root)
        assert set(seen) == expected, f"round {round_number}: lost {expected - set(seen)}"
        assert max(seen.values()) == 1, f"round {round_number}: duplicated"
        assert tree_problems(root) == []
    # Tasks orphaned in in-progress by the kills come back once their leases expire (time moved, not waited).
    result = loki_proc(["queue", "requeue-stale", "--json"], root=root, env={"LOKI_NOW": "2099-01-01T00:00:00Z"})
    assert result.code == 0, result.stderr
    final = subprocess.run([sys.executable, "-m", "tests.procs.claim_worker", str(root), "finisher"], cwd=REPO,
                           capture_output=True, env={**os.environ, "LOKI_NOW": "2099-01-01T01:00:00Z"}, timeout=300)
    assert final.returncode == 0, final.stderr.decode()
    completed = Store(root).read(layout.queue_file("completed"))["tasks"]
    assert sorted(t["id"] for t in completed) == sorted(expected)
    assert tree_problems(root) == []
