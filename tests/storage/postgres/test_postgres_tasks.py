"""The task store on PostgreSQL: claims that never wait on each other, units that serialise, rows.

The API-level suites (test_queue.py, test_deadletter.py ...) run on PostgreSQL through the `backend`
fixture; this file holds what only a database has: other processes holding row locks and the queue's
advisory lock at the same instant, synchronised by pipes (no sleeps), and the rows themselves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from loki.clock import ManualClock
from loki.errors import Conflict, LockTimeout, NothingToDo
from loki.queue.queue import Queue
from loki.storage.postgres.store import PgStore
from tests import forkstart
from tests.helpers import cli, loki_proc, store_problems
from tests.pgserver import at_database_time

REPO = Path(__file__).resolve().parents[3]
NOW = "2026-01-25T10:00:00Z"


@pytest.fixture
def url() -> str:
    from tests.pgserver import worker_schema_url

    return worker_schema_url()  # migrated and emptied: as a fresh schema, without migrating one per test


@pytest.fixture
def opened(url: str, clock: ManualClock) -> Iterator[list[PgStore]]:
    stores: list[PgStore] = []
    yield stores
    for store in stores:
        store.close()


@pytest.fixture
def store(url: str, clock: ManualClock, opened: list[PgStore]) -> PgStore:
    opened.append(PgStore.open(url, clock=clock, lease_clock=clock))  # the database's time moves with it
    return opened[-1]


def another(url: str, clock: ManualClock, opened: list[PgStore], **kwargs: object) -> PgStore:
    """A second connection, as a second agent has; it fails instead of hanging if it ever waits a minute."""
    other = PgStore.open(url, clock=clock, lease_clock=clock, **kwargs)  # type: ignore[arg-type]
    opened.append(other)
    other.db.conn.execute("SET statement_timeout = '60s'")
    return other


class Holder:
    """tests/procs/pg_holder.py: another process stopped inside a unit of work until released."""

    def __init__(self, url: str, *args: str, now: str = NOW) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.procs.pg_holder", at_database_time(url, now), *args],
                                     cwd=REPO,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, "LOKI_NOW": now})
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        assert line[:1] == ["holding"], (line, self.proc.stderr.read() if self.proc.stderr else "")
        self.what, self.pid = line[1], int(line[2])

    def finish(self) -> str:
        out, err = self.proc.communicate("\n", timeout=120)
        assert self.proc.returncode == 0, err
        return out.strip().removeprefix("done ")


def add(queue: Queue, *names: str, **kwargs: object) -> None:
    for name in names:
        queue.add(name, task_id=name, **kwargs)  # type: ignore[arg-type]


def row_is_locked(store: PgStore, task_id: str) -> bool:
    import psycopg

    with store.db.transaction() as conn:
        try:
            with conn.transaction():  # a savepoint: the driver's own error, before the unit maps it
                conn.execute("SELECT 1 FROM loki_tasks WHERE id = %s FOR UPDATE NOWAIT", (task_id,))
        except psycopg.errors.LockNotAvailable:
            return True
    return False


# -- claimers never wait on each other --------------------------------------------------------------


def test_a_claim_goes_ahead_while_another_claimer_holds_its_task(url: str, clock: ManualClock,
                                                                 opened: list[PgStore], store: PgStore) -> None:
    queue = Queue(store)
    add(queue, "t1", "t2", "t3")
    holder = Holder(url, "claim")  # stopped inside its claim unit: t1 taken, its row locked, not committed
    assert holder.what == "t1" and row_is_locked(store, "t1")
    second = Queue(another(url, clock, opened))
    assert second.claim("b")["id"] == "t2"  # at once: t1's row is skipped, not waited for
    assert second.claim("c")["id"] == "t3"
    with pytest.raises(NothingToDo, match=r"nothing ready among 1 pending: 1 being claimed or changed by another "
                                          r"process at this instant \(try again\)"):
        second.claim("d")
    assert holder.finish() == "t1"
    assert {t["id"]: t["claimed_by"] for t in store.tasks().tasks_in("in-progress")} == \
        {"t1": "holder", "t2": "b", "t3": "c"}
    with pytest.raises(NothingToDo, match="the pending queue is empty"):
        second.claim("d")


def test_requeueing_expired_leases_does_not_hold_other_claimers_back(url: str, clock: ManualClock,
                                                                     opened: list[PgStore], store: PgStore) -> None:
    queue = Queue(store)
    add(queue, "e1", "e2")
    for _ in range(2):
        queue.claim("gone", lease_seconds=60)
    clock.set("2026-01-25T10:05:00Z")  # both leases have expired
    add(queue, "p1")
    # Stopped inside its claim unit right after requeueing e1 and e2 (their rows locked, not committed).
    holder = Holder(url, "requeue", now="2026-01-25T10:05:00Z")
    assert holder.what == "e1,e2"
    second = Queue(another(url, clock, opened))
    # Its own requeue skips the leases the holder is requeueing (SKIP LOCKED): it claims p1 at once.
    assert second.claim("b")["id"] == "p1"
    assert holder.finish() == "nothing"  # then nothing is ready for the holder: e1, e2 back off, p1 is b's
    timeouts = {t["id"]: [a["error_type"] for a in t["attempts"]] for t in store.tasks().tasks_in("pending")}
    assert timeouts == {"e1": ["timeout"], "e2": ["timeout"]}  # each requeued exactly once


def test_an_ordinary_unit_waits_for_a_claimers_row_and_bounds_the_wait(url: str, clock: ManualClock,
                                                                       opened: list[PgStore], store: PgStore) -> None:
    queue = Queue(store)
    add(queue, "t1", "t2")
    holder = Holder(url, "claim")
    impatient = Queue(another(url, clock, opened, lock_timeout=0.3))
    with pytest.raises(LockTimeout, match="waiting for tasks another process holds") as raised:
        impatient.cancel("t1", reason="changed our minds")  # t1's row is the claimer's until it commits
    assert raised.value.exit_code == 5
    assert queue.show("t1")["state"] == "pending"  # nothing changed
    assert holder.finish() == "t1"
    later = Queue(another(url, clock, opened))
    with pytest.raises(Conflict, match="t1 is held by 'holder'"):  # after the claim: it sees t1 in progress
        later.cancel("t1", reason="changed our minds")
    result = later.cancel("t1", reason="changed our minds", force=True)
    assert result["cancelled"] == ["t1"]
    note = queue.show("t1")["task"]["notes"][-1]["text"]
    assert note == "cancelled: changed our minds (the claim of holder ended: --force)"
    with pytest.raises(Conflict, match="is cancelled"):
        queue.complete("t1", "holder")


def test_claimers_skip_the_rows_an_ordinary_unit_holds(url: str, clock: ManualClock, opened: list[PgStore],
                                                       store: PgStore) -> None:
    queue = Queue(store)
    add(queue, "best", priority="high")
    add(queue, "next")
    holder = Holder(url, "unit", "best")  # an ordinary unit: the queue's lock, and best's row
    second = another(url, clock, opened, lock_timeout=0.3)
    assert Queue(second).claim("b")["id"] == "next"  # the best task is skipped, not waited for
    with pytest.raises(LockTimeout) as raised:  # another ordinary unit waits for the queue's lock, bounded
        Queue(second).add("more", task_id="more")
    assert f"held by PostgreSQL backend pid {holder.pid} (loki" in raised.value.message
    assert raised.value.details["holder"]["pid"] == holder.pid and raised.value.details["lock"] == "queue/.lock"
    assert holder.finish() == "pending"
    assert Queue(second).claim("c")["id"] == "best"
    assert Queue(second).add("more", task_id="more").created is True


def test_claim_by_id_locks_its_row_and_never_takes_a_task_a_claimer_holds(url: str, clock: ManualClock,
                                                                         opened: list[PgStore],
                                                                         store: PgStore) -> None:
    queue = Queue(store)
    add(queue, "t1", "t2")
    holder = Holder(url, "claim")  # t1 taken inside its unit, not committed
    impatient = Queue(another(url, clock, opened, lock_timeout=0.3))
    # claim --id reads its task by id, so it locks that row like any ordinary unit: it waits (bounded) for the
    # claimer instead of reading t1 as still pending and taking it a second time.
    with pytest.raises(LockTimeout, match="waiting for tasks another process holds"):
        impatient.claim("b", task_id="t1")
    assert holder.finish() == "t1"
    with pytest.raises(Conflict, match="already claimed by 'holder'"):
        impatient.claim("b", task_id="t1")
    assert impatient.claim("b", task_id="t2")["id"] == "t2"
    assert impatient.claim("b", reuse=True)["id"] == "t2"  # --reuse: b's live claim, not a new task
    assert {t["id"]: t["claimed_by"] for t in store.tasks().tasks_in("in-progress")} == {"t1": "holder", "t2": "b"}


def test_a_deferral_is_the_rows_deferred_until_which_the_claim_query_honours(store: PgStore,
                                                                            clock: ManualClock) -> None:
    queue = Queue(store)
    add(queue, "later", priority="high")
    add(queue, "now")
    queue.defer("later", until="1d", by="bob")

    def column() -> object:
        return store.rows("SELECT deferred_until FROM loki_tasks WHERE id = 'later'")[0][0]

    assert column() is not None and column().isoformat() == "2026-01-26T10:00:00+00:00"  # type: ignore[attr-defined]
    assert queue.claim("a")["id"] == "now"  # the high-priority task is deferred: the SQL skips it
    with pytest.raises(NothingToDo, match="1 deferred until 2026-01-26T10:00:00Z"):
        queue.claim("a")
    queue.defer("later", until="now", by="bob")
    assert column() is None
    assert queue.claim("a")["id"] == "later"


def test_a_unit_of_two_schemas_never_waits_for_the_other(url: str, clock: ManualClock, opened: list[PgStore],
                                                         store: PgStore) -> None:
    from tests.pgserver import fresh_schema_url

    add(Queue(store), "t1")
    holder = Holder(url, "unit", "t1")
    other_team = another(fresh_schema_url(), clock, opened, lock_timeout=0.3)
    assert Queue(other_team).add("theirs", task_id="t1").created is True  # same lock name, other schema
    holder.finish()


@pytest.mark.slow
def test_eight_processes_claim_400_tasks_each_exactly_once(url: str, store: PgStore) -> None:
    queue = Queue(store)
    expected = {f"t{n:04d}" for n in range(400)}
    queue.add_many([{"title": f"task {n}", "id": f"t{n:04d}", "priority": ("high", "medium", "low")[n % 3]}
                    for n in range(400)])
    workers = [forkstart.spawn_module("tests.procs.pg_claim_worker", [url, f"agent-{n}"], cwd=REPO) for n in range(8)]
    claims: list[tuple[str, str, str]] = []
    for n, proc in enumerate(workers):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        claims.extend((f"agent-{n}", *line.split()[1:]) for line in out.splitlines())
    claimed = Counter(task_id for _, task_id, _ in claims)
    assert set(claimed) == expected and max(claimed.values()) == 1  # none lost, none twice
    assert len({token for _, _, token in claims}) == 400
    by = {t["id"]: t["result"]["by"] for t in store.tasks().tasks_in("completed")}
    assert by == {task_id: agent for agent, task_id, _ in claims}
    assert len({agent for agent, _, _ in claims}) > 1
    assert [n for (n,) in store.rows("SELECT count(*) FROM loki_tasks")] == [400]  # one row per task, always
    assert store_problems(store) == []


# -- rows -------------------------------------------------------------------------------------------------


def test_rotation_archives_rows_in_place(url: str, clock: ManualClock, opened: list[PgStore]) -> None:
    store = PgStore.open(url, clock=clock, config={"version": 1, "queue": {"completed_hot_limit": 10}})
    opened.append(store)
    queue = Queue(store)
    for n in range(11):
        add(queue, f"t{n:02d}")
        queue.claim("a")
        queue.complete(f"t{n:02d}", "a")
        clock.advance(60)
    rows = store.rows("SELECT id, state, archived, archived_month FROM loki_tasks ORDER BY id")
    assert rows == [(f"t{n:02d}", "completed", n < 2, "2026-01" if n < 2 else None) for n in range(11)]
    assert queue.list_tasks("completed")["total"] == 9 and queue.show("t00")["archived"] is True


def test_an_idempotency_key_names_one_row(store: PgStore) -> None:
    queue = Queue(store)
    first = queue.add("one", idempotency_key="deploy-42")
    again = queue.add("two", idempotency_key="deploy-42")
    assert again.created is False and again == first
    assert store.rows("SELECT count(*) FROM loki_tasks WHERE doc->>'idempotency_key' = 'deploy-42'") == [(1,)]
    with pytest.raises(Conflict, match="duplicate"), store.tasks().transaction() as unit:
        unit.put("pending", dict(first, id="twin"))  # the unique index refuses what a careless caller would do
    assert [t["id"] for t in store.tasks().tasks_in("pending")] == [first["id"]]


# -- through the CLI ----------------------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path, url: str) -> Path:
    from loki.storage.tree import init_tree

    root = tmp_path / ".loki"
    init_tree(str(root))
    (root / "config" / "loki.json").write_text(json.dumps({"version": 1, "storage": {
        "backend": "postgresql", "database": url}}))
    return root


def test_the_queue_commands_work_on_a_database_tree(tree: Path, url: str, store: PgStore) -> None:
    env = {"LOKI_NOW": NOW}
    assert cli(["queue", "add", "Write login", "--id", "t1", "--priority", "high"], root=tree, env=env).code == 0
    assert cli(["queue", "add", "Then logout", "--id", "t2", "--depends-on", "t1"], root=tree, env=env).code == 0
    claimed = loki_proc(["queue", "claim", "--agent", "a1", "--json"], root=tree, env=env)
    assert claimed.code == 0, claimed.stderr
    task = claimed.json()["task"]
    assert task["id"] == "t1" and task["claimed_by"] == "a1"
    nothing = loki_proc(["queue", "claim", "--agent", "a2"], root=tree, env=env)
    assert (nothing.code, nothing.stderr) == (3, "nothing ready among 1 pending: 1 waiting on dependencies\n")
    stale = cli(["queue", "complete", "t1", "--agent", "a1", "--token", "0" * 16], root=tree, env=env)
    assert stale.code == 4 and "claim token does not match" in stale.stderr
    done = cli(["queue", "complete", "t1", "--agent", "a1", "--token", task["claim_token"]], root=tree, env=env)
    assert done.code == 0, done.stderr
    assert loki_proc(["queue", "claim", "--agent", "a2", "--json"], root=tree, env=env).json()["task"]["id"] == "t2"
    shown = cli(["queue", "show", "t1", "--json"], root=tree, env=env).json()
    assert shown["state"] == "completed" and shown["task"]["completed_at"] == NOW
    assert store.rows("SELECT id, state FROM loki_tasks ORDER BY id") == [("t1", "completed"), ("t2", "in-progress")]
    assert not (tree / "queue" / "pending.json").read_text().count('"t1"')  # the files are not the state here


def test_a_lock_timeout_through_the_cli_is_exit_5_naming_the_holder(tree: Path, url: str, store: PgStore) -> None:
    add(Queue(store), "t1")
    holder = Holder(url, "unit", "t1")
    result = loki_proc(["queue", "add", "more", "--json"], root=tree, env={"LOKI_NOW": NOW, "LOKI_LOCK_TIMEOUT": "0.2"})
    holder.finish()
    assert result.code == 5
    error = json.loads(result.stderr)
    assert error["error"] == "lock_timeout" and error["holder"]["pid"] == holder.pid
    assert error["message"].startswith("timed out after 0.2s waiting for the lock queue/.lock in postgresql://")
    assert [t["id"] for t in store.tasks().tasks_in("pending")] == ["t1"]  # nothing was added
