"""Real processes, real SIGKILL: the store's promises under crashes and contention."""

from __future__ import annotations

import itertools
import os
import random
import signal
from pathlib import Path
from typing import Any

import pytest

from loki.storage import layout
from loki.storage.store import Store
from tests import forkstart
from tests.helpers import put_tasks, task, tree_problems

pytestmark = pytest.mark.slow  # real processes and real SIGKILL: ~10 s (make test-fast skips it)

REPO = Path(__file__).resolve().parents[3]
TASK_FILES = [layout.queue_file(s) for s in layout.QUEUE_STATES]


def _spawn(module: str, *args: str, env: dict[str, str] | None = None) -> Any:
    """``python -m module args``: a real process, forked from a warm interpreter (tests/forkstart.py; the random
    SIGKILL test starts 75 of them)."""
    return forkstart.spawn_module(module, list(args), cwd=REPO, env={**os.environ, **(env or {})})


def _ids_everywhere(root: Path) -> list[str]:
    store = Store(root)
    ids: list[str] = []
    for rel in TASK_FILES:
        ids.extend(t["id"] for t in store.read(rel)["tasks"])
    return ids


def _seed_tasks(root: Path, count: int) -> set[str]:
    store = Store(root)
    put_tasks(store, "pending", [task(f"t{i:03d}") for i in range(count)])
    return {f"t{i:03d}" for i in range(count)}


def test_two_processes_are_never_inside_the_same_lock(tmp_path: Path, root: Path) -> None:
    counter = tmp_path / "counter"
    counter.write_text("0")
    workers, rounds = 6, 150
    outs = [tmp_path / f"intervals-{n}" for n in range(workers)]
    procs = [
        _spawn("tests.procs.lock_worker", str(root / "queue" / ".lock"), str(counter), str(rounds), str(out))
        for out in outs
    ]
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    intervals = sorted(
        tuple(int(x) for x in line.split()) for out in outs for line in out.read_text().splitlines()
    )
    assert len(intervals) == workers * rounds
    overlaps = [(a, b) for a, b in itertools.pairwise(intervals) if b[0] < a[1]]
    assert overlaps == []
    assert int(counter.read_text()) == workers * rounds  # no lost update


@pytest.mark.parametrize("point", ["journal-written", "between-files", "files-replaced"])
def test_crash_at_each_commit_phase_is_finished_by_the_next_command(root: Path, point: str) -> None:
    expected = _seed_tasks(root, 20)
    proc = _spawn("tests.procs.txn_worker", str(root), "7", env={"LOKI_CRASHPOINT": point})
    proc.wait(timeout=60)
    assert proc.returncode == 137  # died at the crash point, like kill -9
    assert os.path.exists(root / "queue" / ".journal.json")
    # The next transaction (any command) finishes the interrupted change first.
    with Store(root).transaction(layout.QUEUE_LOCK) as txn:
        assert txn.recovered
    assert not os.path.exists(root / "queue" / ".journal.json")
    ids = _ids_everywhere(root)
    assert sorted(ids) == sorted(expected)
    assert tree_problems(root) == []


def test_random_sigkill_during_multi_file_transactions_never_loses_or_duplicates(root: Path) -> None:
    expected = _seed_tasks(root, 40)
    rng = random.Random(20261122)
    rounds = int(os.environ.get("LOKI_CRASH_ROUNDS", "25"))
    kills = 0
    for round_number in range(rounds):
        procs = [_spawn("tests.procs.txn_worker", str(root), str(round_number * 10 + n)) for n in range(3)]
        # Let one worker commit a random number of transactions, then kill them all mid-flight.
        victim = procs[rng.randrange(len(procs))]
        assert victim.stdout is not None
        for _ in range(rng.randint(1, 25)):
            if not victim.stdout.readline():
                break
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        for proc in procs:
            proc.wait(timeout=30)
        Store(root).recover(layout.QUEUE_LOCK)
        ids = _ids_everywhere(root)
        assert sorted(ids) == sorted(expected), f"round {round_number}: lost or duplicated tasks"
        assert tree_problems(root) == [], f"round {round_number}"
    assert kills == rounds * 3
