"""Leases on one clock, and driver errors as loki errors (issue 22).

Two "machines" are two directories with their own HOME sharing one database URL; each process's
clock is injected with LOKI_NOW (a machine's clock set hours off), and the database's own time is
moved with the ``loki.now`` session setting (tests/pgserver.py ``at_database_time``), never by
sleeping. Driver errors are provoked for real: ``pg_terminate_backend`` of a command's connection
while it waits, and an immediate restart of a throwaway server under an open connection.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from loki.clock import ManualClock, format_ts
from loki.errors import Conflict
from loki.queue.queue import Queue
from loki.storage.postgres.connect import DatabaseUnavailable
from loki.storage.postgres.store import PgStore
from tests import pgserver
from tests.helpers import loki_proc
from tests.storage.postgres.test_postgres_machines import machine

psycopg: Any = pgserver.driver()
REPO = Path(__file__).resolve().parents[3]


def database_now(url: str) -> datetime:
    with psycopg.connect(url) as conn:
        when: datetime = conn.execute("SELECT clock_timestamp()").fetchone()[0]
    return when.astimezone(timezone.utc).replace(microsecond=0)


def shifted(when: datetime, hours: float) -> str:
    return format_ts(when + timedelta(hours=hours))


# -- leases on the database's clock: the library ----------------------------------------------------


@pytest.fixture
def url() -> str:
    return pgserver.worker_schema_url()  # migrated and emptied: as a fresh schema, without migrating one per test


@pytest.fixture
def opened() -> Iterator[list[PgStore]]:
    stores: list[PgStore] = []
    yield stores
    for store in stores:
        store.close()


def test_a_machine_clock_ahead_or_behind_does_not_decide_leases(url: str, opened: list[PgStore]) -> None:
    database = ManualClock("2026-01-25T10:00:00Z")  # the database's time, moved by hand
    ahead = Queue(PgStore.open(url, clock=ManualClock("2026-01-25T12:00:00Z"), lease_clock=database))
    behind = Queue(PgStore.open(url, clock=ManualClock("2026-01-25T08:00:00Z"), lease_clock=database))
    opened += [ahead.store, behind.store]  # type: ignore[list-item]
    for name in ("t1", "t2", "t3"):
        behind.add(name, task_id=name)
    mine = behind.claim("slow-clock", lease_seconds=300)
    assert mine["lease_until"] == "2026-01-25T10:05:00Z"  # the database's now + the lease
    # The machine two hours ahead neither requeues it nor strands its own lease two hours late...
    theirs = ahead.claim("fast-clock", lease_seconds=300)
    assert theirs["id"] == "t2" and theirs["lease_until"] == "2026-01-25T10:05:00Z"
    database.advance(240)
    behind.heartbeat(mine["id"], "slow-clock", token=mine["claim_token"])
    database.advance(120)  # 10:06: fast-clock's lease ended on the database's clock, slow-clock's was renewed
    assert ahead.requeue_stale() == {"requeued": ["t2"], "dead_lettered": []}
    done = behind.complete(mine["id"], "slow-clock", token=mine["claim_token"])
    assert done["status"] == "completed" and not any(a["error_type"] == "timeout" for a in done["attempts"])


def test_a_complete_repeated_after_a_lost_acknowledgement_is_a_no_op(url: str, opened: list[PgStore]) -> None:
    queue = Queue(PgStore.open(url, clock=ManualClock(), lease_clock=ManualClock()))
    opened.append(queue.store)  # type: ignore[arg-type]
    queue.add("t", task_id="t1")
    claim = queue.claim("a")
    first = queue.complete("t1", "a", token=claim["claim_token"], result={"ok": 1})
    again = queue.complete("t1", "a", token=claim["claim_token"], result={"ok": 2})
    assert again == first and again["result"] == {"ok": 1}
    assert [e["event"] for e in again["history"]].count("completed") == 1
    with pytest.raises(Conflict, match="is completed, not in progress"):
        queue.complete("t1", "a", token="another-claim")
    with pytest.raises(Conflict, match="is completed, not in progress"):
        queue.complete("t1", "b", token=claim["claim_token"])


# -- leases on the database's clock: two machines through the CLI -----------------------------------


@pytest.mark.slow
def test_a_machine_two_hours_ahead_does_not_requeue_live_renewed_leases(tmp_path: Path) -> None:
    url = pgserver.fresh_schema_url(migrate=False)
    (one, env_one), (two, env_two) = machine(tmp_path, "one", url), machine(tmp_path, "two", url)
    assert loki_proc(["queue", "add", "build", "--id", "t1"], root=one, env=env_one).code == 0
    claimed = loki_proc(["queue", "claim", "--agent", "a", "--lease", "300", "--json"], root=one, env=env_one)
    assert claimed.code == 0, claimed.stderr
    token = claimed.json()["task"]["claim_token"]
    beat = loki_proc(["queue", "heartbeat", "t1", "--agent", "a", "--token", token], root=one, env=env_one)
    assert beat.code == 0, beat.stderr
    fast = {**env_two, "LOKI_NOW": shifted(database_now(url), 2)}
    for args in (["queue", "ready", "--json"], ["queue", "claim", "--agent", "b"],
                 ["queue", "requeue-stale", "--json"]):
        result = loki_proc(args, root=two, env=fast)
        assert result.code in (0, 3), result.stderr
        assert "t1" not in result.stdout, result.stdout
    done = loki_proc(["queue", "complete", "t1", "--agent", "a", "--token", token, "--json"], root=one, env=env_one)
    assert done.code == 0, done.stderr
    assert not any(a["error_type"] == "timeout" for a in done.json()["task"]["attempts"])


@pytest.mark.slow
def test_a_machine_two_hours_behind_does_not_lose_its_leases(tmp_path: Path) -> None:
    url = pgserver.fresh_schema_url(migrate=False)
    (one, env_one), (two, env_two) = machine(tmp_path, "one", url), machine(tmp_path, "two", url)
    for name in ("t1", "t2"):
        assert loki_proc(["queue", "add", name, "--id", name], root=one, env=env_one).code == 0
    slow = {**env_two, "LOKI_NOW": shifted(database_now(url), -2)}
    claimed = loki_proc(["queue", "claim", "--agent", "b", "--json"], root=two, env=slow)
    assert claimed.code == 0, claimed.stderr
    task = claimed.json()["task"]
    assert task["id"] == "t1"
    # Another machine, on the right time, finds the lease live: it gets t2, and t1 is not requeued.
    other = loki_proc(["queue", "claim", "--agent", "a", "--json"], root=one, env=env_one)
    assert other.code == 0 and other.json()["task"]["id"] == "t2", other.stdout + other.stderr
    done = loki_proc(["queue", "complete", "t1", "--agent", "b", "--token", task["claim_token"]], root=two, env=slow)
    assert done.code == 0, done.stderr
    # Its answer lost (a dropped connection), the agent completes again with the same token: a no-op, exit 0.
    again = loki_proc(["queue", "complete", "t1", "--agent", "b", "--token", task["claim_token"], "--json"],
                      root=two, env=slow)
    assert again.code == 0 and again.json()["task"]["status"] == "completed", again.stderr


@pytest.mark.slow
def test_a_dead_machines_tasks_are_recovered_on_the_databases_clock(tmp_path: Path) -> None:
    url = pgserver.fresh_schema_url(migrate=False)
    (one, env_one), (two, env_two) = machine(tmp_path, "one", url), machine(tmp_path, "two", url)
    assert loki_proc(["queue", "add", "build", "--id", "t1"], root=one, env=env_one).code == 0
    # A machine's agent claims t1 and dies without a word: no heartbeat, no release.
    claimed = loki_proc(["queue", "claim", "--agent", "gone", "--lease", "60"], root=one, env=env_one)
    assert claimed.code == 0, claimed.stderr
    start = database_now(url)
    # The other machine's clock is two hours behind: by its own clock the lease runs for hours yet ...
    slow = {**env_two, "LOKI_NOW": shifted(start, -2)}
    early = loki_proc(["queue", "requeue-stale", "--json"], root=two, env=slow)
    assert early.code == 0 and early.json()["requeued"] == [], early.stdout + early.stderr
    # ... but it is the database's clock that says the lease ended: a minute and a half later, it is requeued.
    later = {**slow, "LOKI_DATABASE_URL": pgserver.at_database_time(url, format_ts(start + timedelta(seconds=90)))}
    recovered = loki_proc(["queue", "requeue-stale", "--json"], root=two, env=later)
    assert recovered.code == 0 and recovered.json()["requeued"] == ["t1"], recovered.stdout + recovered.stderr


# -- every driver error is a loki error with an exit code --------------------------------------------


def _waiting_backend(url: str, application: str = "loki") -> int | None:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock' "
                           "AND pid <> pg_backend_pid()", (application,)).fetchone()
    return int(row[0]) if row else None


@pytest.mark.slow
def test_a_connection_terminated_mid_command_is_exit_5_never_an_internal_error(tmp_path: Path) -> None:
    url = pgserver.fresh_schema_url(migrate=False)
    root, env = machine(tmp_path, "one", url)
    assert loki_proc(["queue", "add", "x", "--id", "t1"], root=root, env=env).code == 0
    holder = subprocess.Popen([sys.executable, "-m", "tests.procs.pg_holder", url, "unit", "t1"], cwd=REPO,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().startswith("holding")
    waiting = subprocess.Popen([sys.executable, "-m", "loki", "--root", str(root), "queue", "add", "y", "--id", "t2"],
                               cwd=REPO, env={**os.environ, **env, "LOKI_LOCK_TIMEOUT": "60"},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pid = None
        for _ in range(2000):  # until the command waits for the queue's lock
            pid = _waiting_backend(url)
            if pid is not None:
                break
        assert pid is not None
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        out, err = waiting.communicate(timeout=120)
    finally:
        holder.communicate("\n", timeout=120)
    assert waiting.returncode == 5, (out, err)
    assert "internal error" not in err and "lost the connection" in err and "nothing of it was applied" in err, err
    listed = loki_proc(["queue", "list", "--json"], root=root, env=env)
    assert "t2" not in listed.stdout  # the interrupted add was rolled back: running it again is safe
    assert loki_proc(["queue", "add", "y", "--id", "t2"], root=root, env=env).code == 0


@pytest.fixture
def cluster() -> Iterator[pgserver.Cluster]:
    own = pgserver.start_cluster()
    yield own
    own.remove()


def restart_immediately(cluster: pgserver.Cluster, url: str) -> None:
    """Every backend dies at once ("consuming input failed", "server closed the connection"), then the
    server is back. The test cluster runs with synchronous_commit=off: a checkpoint first keeps what was
    committed, so only what this test checks is at stake."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    cluster.stop("immediate")
    cluster.start()


@pytest.mark.slow
def test_an_immediate_restart_under_an_open_connection_is_a_loki_error(cluster: pgserver.Cluster) -> None:
    url = pgserver.fresh_schema_url(cluster.url())
    store = PgStore.open(url, validate_all=False)
    queue = Queue(store)
    queue.add("x", task_id="t1")
    restart_immediately(cluster, url)
    # The next unit finds its connection dead at BEGIN (nothing of it has run): it reconnects and goes on.
    queue.add("y", task_id="t2")
    assert [t["id"] for t in queue.tasks.tasks_in("pending")] == ["t1", "t2"]
    # A unit whose connection drops once it has begun is loki's DatabaseUnavailable (exit 5), never the
    # driver's exception; the unit was rolled back, and the next one reconnects.
    with pytest.raises(DatabaseUnavailable, match="nothing of it was applied") as caught, \
            store.tasks().transaction() as unit:
        unit.find("t1")
        restart_immediately(cluster, url)
        unit.find("t2", ("completed",))
    assert caught.value.exit_code == 5
    queue.add("z", task_id="t3")
    assert [t["id"] for t in queue.tasks.tasks_in("pending")] == ["t1", "t2", "t3"]
    restart_immediately(cluster, url)
    assert isinstance(store.lease_clock.now(), datetime)  # a read outside a unit reconnects too
    store.close()


@pytest.mark.slow
def test_an_immediate_restart_under_a_waiting_command_is_exit_5_never_an_internal_error(
        tmp_path: Path, cluster: pgserver.Cluster) -> None:
    url = pgserver.fresh_schema_url(cluster.url())
    root, env = machine(tmp_path, "one", url)
    assert loki_proc(["queue", "add", "x", "--id", "t1"], root=root, env=env).code == 0
    holder = subprocess.Popen([sys.executable, "-m", "tests.procs.pg_holder", url, "unit", "t1"], cwd=REPO,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().startswith("holding")
    waiting = subprocess.Popen([sys.executable, "-m", "loki", "--root", str(root), "queue", "add", "y", "--id", "t2"],
                               cwd=REPO, env={**os.environ, **env, "LOKI_LOCK_TIMEOUT": "60"},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(2000):  # until the command waits for the queue's lock, inside its unit of work
            if _waiting_backend(url) is not None:
                break
        restart_immediately(cluster, url)
        out, err = waiting.communicate(timeout=120)
    finally:
        holder.kill()
        holder.communicate()
    assert waiting.returncode == 5, (out, err)
    assert "internal error" not in err and "nothing of it was applied" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert loki_proc(["queue", "add", "y", "--id", "t2"], root=root, env=env).code == 0  # safe to run again


def test_an_unreachable_database_says_it_is_retrying_at_once(tmp_path: Path) -> None:
    url = pgserver.fresh_schema_url(migrate=False)
    root, env = machine(tmp_path, "one", url)
    dead = "postgresql://postgres@127.0.0.1:1/postgres"  # nothing listens on port 1: connection refused
    result = loki_proc(["queue", "list"], root=root, env={**env, "LOKI_DATABASE_URL": dead,
                                                          "LOKI_DB_RETRY_SECONDS": "0.3"})
    assert result.code == 1, result.stderr
    lines = result.stderr.splitlines()
    retrying = [line for line in lines if "retrying for up to 0.3s" in line]
    assert len(retrying) == 1, lines  # once, not at every attempt
    assert "cannot reach the database postgresql://postgres@127.0.0.1:1/postgres" in retrying[0]
    assert lines.index(retrying[0]) == 0 and "internal error" not in result.stderr


@pytest.mark.parametrize("error, code, said", [
    (psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly"), 5,
     "lost the connection to the database in the middle of a command"),
    (psycopg.errors.AdminShutdown("terminating connection due to administrator command"), 5, "lost the connection"),
    (psycopg.OperationalError("the connection is lost"), 5, "nothing of it was applied: run it again"),
    (psycopg.InterfaceError("the connection is closed"), 1, "refused the command: the connection is closed"),
    (psycopg.errors.DataError("invalid input syntax for type timestamp with time zone"), 1, "refused the command"),
])
def test_a_driver_error_nothing_mapped_is_still_a_loki_error_with_an_exit_code(
        error: Exception, code: int, said: str, capsys: pytest.CaptureFixture[str]) -> None:
    from loki.cli.output import guarded

    def command() -> int:
        raise error

    assert guarded(command, json_output=False) == code
    err = capsys.readouterr().err
    assert said in err and "internal error" not in err and err.count("\n") == 1, err


@pytest.mark.slow
def test_validate_flags_a_completion_stamped_ahead_of_the_databases_clock(tmp_path: Path) -> None:
    url = pgserver.fresh_schema_url(migrate=False)
    (one, env_one), (two, env_two) = machine(tmp_path, "one", url), machine(tmp_path, "two", url)
    assert loki_proc(["queue", "add", "build", "--id", "t1"], root=one, env=env_one).code == 0
    fast = {**env_two, "LOKI_NOW": shifted(database_now(url), 2)}
    claimed = loki_proc(["queue", "claim", "--agent", "b", "--json"], root=two, env=fast)
    token = claimed.json()["task"]["claim_token"]
    assert loki_proc(["queue", "complete", "t1", "--agent", "b", "--token", token], root=two, env=fast).code == 0
    for env in (env_one, fast):  # judged by the database's clock, whatever the validating machine's says
        result = loki_proc(["validate"], root=one if env is env_one else two, env=env)
        said = result.stdout + result.stderr
        assert result.code == 1 and "tasks[completed]" in said and "completed_at" in said, said
        assert "in the future" in said and "the database's clock" in said, said


def test_the_watchers_tick_recovers_a_dead_holders_lease_on_the_databases_clock(url: str,
                                                                                opened: list[PgStore]) -> None:
    from loki.watch.ticks import Tick

    database = ManualClock("2026-01-25T10:00:00Z")
    team = Queue(PgStore.open(url, clock=ManualClock("2026-01-25T10:00:00Z"), lease_clock=database))
    behind = PgStore.open(url, clock=ManualClock("2026-01-25T08:00:00Z"), lease_clock=database)
    opened += [team.store, behind]  # type: ignore[list-item]
    team.add("t", task_id="t1")
    team.claim("gone", lease_seconds=60)
    database.advance(120)  # the lease ended by the database's clock; the watcher's machine is two hours behind
    moved = Tick(behind).requeue_expired(behind.clock.now())
    assert [event["task_id"] for event in moved] == ["t1"]
