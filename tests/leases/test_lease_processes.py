"""Eight processes racing for exclusive leases on patterns that all overlap, on the files and on PostgreSQL,
with real SIGKILL of holders: never two holders at once, every file valid, the live leases never conflict."""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path
from typing import Any

import pytest

from loki.clock import ManualClock
from loki.leases.leases import PathLeases
from loki.storage.opening import open_store
from tests import forkstart
from tests.helpers import store_problems

pytestmark = pytest.mark.slow  # eight processes, a few rounds with SIGKILL

REPO = Path(__file__).resolve().parents[2]


def _spawn(root: Path, agent: str, count: int, marker: Path, now: str) -> Any:
    """A lease worker: a real process forked from a warm interpreter (tests/forkstart.py: 32 a race)."""
    return forkstart.spawn_module("tests.procs.lease_worker", [str(root), agent, str(count), str(marker)], cwd=REPO,
                                  env={**os.environ, "LOKI_NOW": now}, text=False)


def _check(root: Path, now: str) -> list[dict[str, object]]:
    store = open_store(str(root), clock=ManualClock(now))  # on PostgreSQL, its URL sets the database's time
    leases = PathLeases(store)
    assert store_problems(store) == []
    assert leases.conflicts() == []
    live = leases.live()
    assert len(live) <= 1  # every pattern overlaps every other: one holder at most
    return live


def _race(root: Path, tmp_path: Path, url: str | None = None) -> None:
    marker = tmp_path / "held"
    rng = random.Random(25)
    rounds = int(os.environ.get("LOKI_CRASH_ROUNDS", "4"))
    total = 0
    for number in range(rounds):
        now = f"2026-01-25T{10 + number:02d}:00:00Z"  # an hour a round: the last round's leases have expired
        if url is not None:  # the database judges leases by its own clock: move it as LOKI_NOW moves the files'
            from tests.pgserver import at_database_time

            (root / "config" / "loki.json").write_text(json.dumps({"version": 1, "storage": {
                "backend": "postgresql", "database": at_database_time(url, now)}}))
        if marker.exists():
            marker.unlink()  # left by a holder killed inside its critical section (its lease died with the hour)
        workers = [_spawn(root, f"r{number}-a{n}", 10, marker, now) for n in range(8)]
        if number % 2 == 1:  # odd rounds: kill -9 every worker once the victim has held a few leases
            victim = workers[rng.randrange(8)]
            assert victim.stdout is not None
            for _ in range(rng.randint(1, 5)):
                if not victim.stdout.readline():
                    break
            for proc in workers:
                proc.send_signal(signal.SIGKILL)
        outputs = [proc.communicate(timeout=300) for proc in workers]
        for proc, (out, err) in zip(workers, outputs, strict=True):
            assert b"VIOLATION" not in out, out
            if number % 2 == 0:
                assert proc.returncode == 0, err.decode()
                total += out.count(b"held ")
        _check(root, now)
    assert total == 10 * 8 * len(range(0, rounds, 2))


def test_eight_processes_never_hold_overlapping_exclusive_leases_on_files(root: Path, tmp_path: Path) -> None:
    _race(root, tmp_path)


def test_eight_processes_never_hold_overlapping_exclusive_leases_on_postgres(root: Path, tmp_path: Path) -> None:
    from tests.pgserver import fresh_schema_url

    _race(root, tmp_path, fresh_schema_url())


# -- claims of tasks whose paths overlap ---------------------------------------------------------------

OVERLAPPING = ["src/**", "src/a.py", "src/*.py", "src/a*", "**/a.py", "src", "*/a.py", "src/a.py/x"]


def _claim_race(root: Path, tmp_path: Path) -> None:
    from loki.queue.queue import Queue

    queue = Queue(open_store(str(root)))
    for n, pattern in enumerate(OVERLAPPING):
        queue.add(f"task {n}", task_id=f"t{n}", paths=[pattern])
    marker = tmp_path / "held"
    procs = [forkstart.spawn_module("tests.procs.path_claim_worker", [str(root), f"agent-{n}", "10", str(marker)],
                                    cwd=REPO, text=False) for n in range(8)]
    outs = [proc.communicate(timeout=300) for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), [err.decode() for _, err in outs]
    assert not any(b"VIOLATION" in out for out, _ in outs), [out for out, _ in outs]
    assert sum(out.count(b"held ") for out, _ in outs) == 80
    assert queue.tasks.view(["in-progress"])["in-progress"] == []


def test_eight_claimers_of_overlapping_tasks_never_hold_two_on_files(root: Path, tmp_path: Path) -> None:
    _claim_race(root, tmp_path)


def test_eight_claimers_of_overlapping_tasks_never_hold_two_on_postgres(root: Path, tmp_path: Path) -> None:
    from tests.pgserver import fresh_schema_url

    (root / "config" / "loki.json").write_text(json.dumps({"version": 1, "storage": {
        "backend": "postgresql", "database": fresh_schema_url()}}))
    _claim_race(root, tmp_path)
