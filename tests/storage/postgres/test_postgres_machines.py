"""A team across machines: processes that share nothing but the database URL.

Each "machine" is a working directory with its own HOME and its own `.loki/` (joined to the team
with `loki init --database URL`); nothing else is shared. Real processes, a real server.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests import forkstart, pgserver
from tests.helpers import loki_proc

pgserver.driver()

REPO = Path(__file__).resolve().parents[3]


def machine(base: Path, name: str, url: str) -> tuple[Path, dict[str, str]]:
    """A directory and environment of their own, joined to the team's database."""
    home, work = base / name / "home", base / name / "work"
    home.mkdir(parents=True), work.mkdir(parents=True)
    env = {"HOME": str(home), "LOKI_DB_RETRY_SECONDS": "30"}
    joined = loki_proc(["init", "--path", str(work), "--database", url], env=env)
    assert joined.code == 0, joined.stderr
    return work / ".loki", env


def spawn_workers(roots: list[tuple[Path, dict[str, str]]], per_machine: int) -> list[Any]:
    """Claim workers: real processes forked from a warm interpreter (tests/forkstart.py)."""
    procs = []
    for index, (root, env) in enumerate(roots):
        for n in range(per_machine):
            procs.append(forkstart.spawn_module("tests.procs.claim_worker", [str(root), f"m{index}-w{n}"], cwd=REPO,
                                                env={**os.environ, **env}))
    return procs


@pytest.mark.slow
def test_eight_processes_on_two_machines_complete_2000_tasks_each_once(tmp_path: Path) -> None:
    url = pgserver.fresh_schema_url(migrate=False)
    one, two = machine(tmp_path, "one", url), machine(tmp_path, "two", url)
    from loki.queue.queue import Queue
    from loki.storage.opening import open_store

    queue = Queue(open_store(str(one[0]), validate_all=False))
    added = queue.add_many([{"title": f"job {n}"} for n in range(2000)])
    ids = {entry["task"]["id"] if "task" in entry else entry["id"] for entry in added}
    assert len(ids) == 2000
    procs = spawn_workers([one, two], per_machine=4)
    done: list[str] = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        done += [line.split()[1] for line in out.splitlines() if line.startswith("claimed ")]
    assert len(done) == len(set(done)) == 2000, "each task completed exactly once"
    assert set(done) == ids
    status = loki_proc(["status", "--json"], root=two[0], env=two[1])
    assert status.code == 0, status.stderr
    report = status.json()
    assert report["backend"] == "postgresql"
    assert report["queue"]["pending"] == report["queue"]["in-progress"] == 0
    validated = loki_proc(["validate"], root=one[0], env=one[1])
    assert validated.code == 0, validated.stdout + validated.stderr


@pytest.mark.slow  # real processes one after another: over 1 s (issue 24's --durations)
def test_a_breaker_tripped_on_one_machine_refuses_on_the_other(tmp_path: Path) -> None:
    url = pgserver.fresh_schema_url(migrate=False)
    (one, env_one), (two, env_two) = machine(tmp_path, "one", url), machine(tmp_path, "two", url)
    assert loki_proc(["breaker", "check", "api/claude"], root=two, env=env_two).code == 0
    tripped = loki_proc(["breaker", "trip", "api/claude", "--for", "300"], root=one, env=env_one)
    assert tripped.code == 0, tripped.stderr
    refused = loki_proc(["breaker", "check", "api/claude"], root=two, env=env_two)
    assert refused.code == 75, refused.stdout + refused.stderr


@pytest.mark.slow  # real processes one after another: over 1 s (issue 24's --durations)
def test_a_task_added_on_one_machine_is_claimed_on_the_other(tmp_path: Path) -> None:
    url = pgserver.fresh_schema_url(migrate=False)
    (one, env_one), (two, env_two) = machine(tmp_path, "one", url), machine(tmp_path, "two", url)
    added = loki_proc(["queue", "add", "cross-machine", "--json"], root=one, env=env_one)
    assert added.code == 0, added.stderr
    claimed = loki_proc(["queue", "claim", "--agent", "far-away", "--json"], root=two, env=env_two)
    assert claimed.code == 0, claimed.stderr
    assert claimed.json()["task"]["title"] == "cross-machine"
    again = loki_proc(["queue", "claim", "--agent", "near", "--json"], root=one, env=env_one)
    assert again.code == 3
