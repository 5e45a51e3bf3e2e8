"""Faults on PostgreSQL, for real: clients killed with SIGKILL mid-transaction, a server restarted
under a running team, a server that dies (a network drop, as a client sees it).

Each test that stops or kills a server owns a throwaway cluster (tests/pgserver.py), never the
shared one. After every fault: each task is in exactly one state, none lost, none done twice, and
`loki validate` passes.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import pgserver
from tests.helpers import loki_proc

psycopg: Any = pgserver.driver()

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def cluster() -> Iterator[pgserver.Cluster]:
    own = pgserver.start_cluster()
    yield own
    own.remove()


def tree_on(base: Path, url: str, env: dict[str, str] | None = None) -> Path:
    base.mkdir(parents=True, exist_ok=True)
    joined = loki_proc(["init", "--path", str(base), "--database", url], env=env)
    assert joined.code == 0, joined.stderr
    return base / ".loki"


def add_tasks(root: Path, count: int) -> set[str]:
    from loki.queue.queue import Queue
    from loki.storage.opening import open_store

    added = Queue(open_store(str(root), validate_all=False)).add_many([{"title": f"job {n}"} for n in range(count)])
    return {entry["task"]["id"] if "task" in entry else entry["id"] for entry in added}


def worker(root: Path, agent: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.procs.claim_worker", str(root), agent], cwd=REPO,
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def where_every_task_is(url: str) -> dict[str, str]:
    """task id -> state, read straight from the rows (each id at most once: it is the primary key)."""
    from loki.queue.queue import Queue
    from loki.storage.postgres.store import PgStore

    view = Queue(PgStore.open(url, validate_all=False)).tasks.view(
        ["pending", "in-progress", "blocked", "completed", "failed", "cancelled", "dead-letter", "abandoned"])
    found: dict[str, str] = {}
    for state, records in view.items():
        for record in records:
            task_id = record.get("task_id", record.get("id"))
            assert task_id not in found, f"{task_id} is in {found.get(task_id)} and {state}"
            found[task_id] = state
    return found


def finish_everything(root: Path, url: str) -> list[str]:
    """A last agent, an hour after every lease, then an hour later again while anything is left: it
    requeues what the killed held (each requeue backs off, so one pass is not enough) and does the rest."""
    done: list[str] = []
    for hour in range(1, 11):
        later = f"2031-01-01T{hour:02d}:00:00Z"
        final = subprocess.run([sys.executable, "-m", "tests.procs.claim_worker", str(root), "finisher"], cwd=REPO,
                               env={**os.environ, "LOKI_NOW": later,
                                    # leases end by the database's clock (docs/postgres.md): move it too
                                    "LOKI_DATABASE_URL": pgserver.at_database_time(url, later)},
                               capture_output=True,
                               text=True, timeout=600)
        assert final.returncode == 0, final.stderr
        done += [line.split()[1] for line in final.stdout.splitlines() if line.startswith("claimed ")]
        if set(where_every_task_is(url).values()) <= {"completed", "dead-letter"}:
            break
    return done


@pytest.mark.slow
def test_clients_killed_mid_transaction_lose_nothing(tmp_path: Path, cluster: pgserver.Cluster) -> None:
    url = pgserver.fresh_schema_url(cluster.url())
    root = tree_on(tmp_path / "team", url)
    ids = add_tasks(root, 400)
    rng = random.Random(20261123)
    done: list[str] = []
    for round_number in range(100):
        victims = [worker(root, f"r{round_number}-{n}") for n in range(2)]
        target = rng.choice(victims)
        # Let the victim get going (a completion or two), then kill it wherever it is: inside a claim,
        # a complete, or between them. Its line is read first, so the kill lands in a later unit.
        for _ in range(rng.randint(1, 3)):
            line = target.stdout.readline() if target.stdout else ""
            if line.startswith("claimed "):
                done.append(line.split()[1])
            if not line:
                break
        target.send_signal(signal.SIGKILL)
        for proc in victims:
            if proc is not target:
                proc.send_signal(signal.SIGKILL)
            out, _ = proc.communicate(timeout=60)
            done += [line.split()[1] for line in out.splitlines() if line.startswith("claimed ")]
    done += finish_everything(root, url)
    states = where_every_task_is(url)
    assert set(states) == ids, "no task lost, none invented"
    assert len(done) == len(set(done)), "no task completed twice"
    assert set(states.values()) <= {"completed", "dead-letter"}
    assert {t for t, s in states.items() if s == "completed"} >= set(done)
    # as of the finisher's time: what it completed in 2031 would be stamped in the database clock's future
    validated = loki_proc(["validate"], root=root,
                          env={"LOKI_DATABASE_URL": pgserver.at_database_time(url, "2031-01-02T00:00:00Z")})
    assert validated.code == 0, validated.stdout + validated.stderr


@pytest.mark.slow
def test_a_server_restart_under_a_running_team(tmp_path: Path, cluster: pgserver.Cluster) -> None:
    url = pgserver.fresh_schema_url(cluster.url())
    root = tree_on(tmp_path / "team", url)
    ids = add_tasks(root, 600)
    env = {"LOKI_DB_RETRY_SECONDS": "60"}
    procs = [worker(root, f"w{n}", env) for n in range(4)]
    done: list[str] = []
    for proc in procs:  # everyone is working
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith("claimed "), proc.stderr.read() if proc.stderr else line
        done.append(line.split()[1])
    cluster.stop("fast")  # every connection is cut
    cluster.start()
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        done += [line.split()[1] for line in out.splitlines() if line.startswith("claimed ")]
    done += finish_everything(root, url)
    states = where_every_task_is(url)
    assert set(states) == ids
    assert len(done) == len(set(done)), "nothing applied twice"
    assert set(states.values()) == {"completed"}


def test_a_dead_server_is_a_clear_error_not_a_hang(tmp_path: Path, cluster: pgserver.Cluster) -> None:
    url = pgserver.fresh_schema_url(cluster.url())
    root = tree_on(tmp_path / "team", url)
    from loki.queue.queue import Queue
    from loki.storage.opening import open_store
    from loki.storage.postgres.connect import DatabaseUnavailable

    queue = Queue(open_store(str(root)))
    queue.add("before the drop")  # the connection is open now
    cluster.kill()
    os.environ["LOKI_DB_RETRY_SECONDS"] = "1"
    try:
        with pytest.raises(DatabaseUnavailable, match=r"lost the connection to .* could not reconnect within 1s"):
            queue.add("after the drop")
    finally:
        del os.environ["LOKI_DB_RETRY_SECONDS"]
    fresh = loki_proc(["queue", "list"], root=root, env={"LOKI_DB_RETRY_SECONDS": "1"}, timeout=60)
    assert fresh.code == 1
    said = fresh.stderr.strip().splitlines()  # that it retries, at once; then why it gave up
    assert len(said) == 2 and "retrying for up to 1s" in said[0] and "cannot connect to" in said[1], said
