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

from tests import forkstart, pgserver
from tests.helpers import loki_proc

psycopg: Any = pgserver.driver()

REPO = Path(__file__).resolve().parents[3]


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


def worker(root: Path, agent: str, env: dict[str, str] | None = None) -> Any:
    """A claim worker, a real process forked from a warm interpreter (tests/forkstart.py): the killed-clients test
    starts 200, and a cold start (interpreter, loki's queue, psycopg) was most of each one's CPU."""
    return forkstart.spawn_module("tests.procs.claim_worker", [str(root), agent], cwd=REPO,
                                  env={**os.environ, **(env or {})})


def where_every_task_is(url: str) -> dict[str, str]:
    """task id -> state, read straight from the rows (each id at most once: it is the primary key)."""
    from loki.queue.queue import Queue
    from loki.storage.postgres.store import PgStore

    view = Queue(PgStore.open(url, validate_all=False)).tasks.view(
        ["pending", "in-progress", "landing", "blocked", "completed", "failed", "cancelled", "dead-letter",
         "abandoned"])
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


# -- `loki watch` rides out a cut connection, a server restart, a failover (issue 22) --------------------------


class Watching:
    """``loki watch --no-tui`` on a tree, its output in a file (a pipe would fill up and block it)."""

    def __init__(self, root: Path, directory: Path) -> None:
        self.out = directory / f"watch-{os.getpid()}-{len(list(directory.glob('watch-*')))}.out"
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "loki", "--root", str(root), "watch", "--no-tui"],
                                         cwd=REPO, stdout=out, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_for(self, condition: Any, what: str, timeout: float = 120) -> None:
        import time

        deadline = time.monotonic() + timeout
        while not condition(self.output()):
            assert self.proc.poll() is None, f"the watcher exited ({self.proc.returncode}) while waiting for " \
                                             f"{what}:\n{self.output()[-3000:]}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{self.output()[-3000:]}"
            time.sleep(0.02)

    def applied(self, count: int, what: str) -> None:
        self.wait_for(lambda out: out.count("DOCS_NEEDED logged") >= count, what)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


def emit_docs_needed(root: Path, n: int) -> None:
    emitted = loki_proc(["signal", "emit", "DOCS_NEEDED", f"n:={n}"], root=root, env={"LOKI_DB_RETRY_SECONDS": "60"},
                        timeout=120)
    assert emitted.code == 0, emitted.stderr


def cut_every_loki_connection(url: str) -> int:
    """pg_terminate_backend of every loki connection (the watcher's: its store, its lock, its listener)."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                            "AND application_name LIKE 'loki%'").fetchall()
    return len(rows)


@pytest.mark.slow
def test_a_watcher_rides_out_cut_connections_and_keeps_consuming(tmp_path: Path, cluster: pgserver.Cluster) -> None:
    url = pgserver.fresh_schema_url(cluster.url())
    root = tree_on(tmp_path / "team", url)
    watching = Watching(root, tmp_path)
    try:
        watching.wait_for(lambda out: "started: consuming" in out, "the watcher to consume")
        emit_docs_needed(root, 0)
        watching.applied(1, "the first signal")
        for cut in range(1, 4):  # the 3 of 3 cuts
            assert cut_every_loki_connection(cluster.url()) >= 2  # its store's connection and its lock's
            emit_docs_needed(root, cut)
            watching.applied(cut + 1, f"the signal after cut {cut}")
        assert watching.stop() == 0, watching.output()
    finally:
        if watching.proc.poll() is None:
            watching.proc.kill()
    out = watching.output()
    assert "lost the consumer lock" in out or "the watcher carries on" in out  # the feed says what happened
    assert out.count("started: consuming") >= 2  # it took the lock again
    assert "Traceback" not in out and out.rstrip().endswith("stopped: watcher stopped")
    assert applied_docs_needed(url) == [0, 1, 2, 3]  # each once


def applied_docs_needed(url: str) -> list[int]:
    from loki.signals import outcomes
    from loki.storage.postgres.store import PgStore

    store = PgStore.open(url, validate_all=False)
    try:
        return sorted(r["signal"]["n"] for r in outcomes.tail(store) if r["type"] == "DOCS_NEEDED")
    finally:
        store.close()


@pytest.mark.slow
def test_a_watcher_rides_out_server_restarts_and_resumes_consuming(tmp_path: Path,
                                                                   cluster: pgserver.Cluster) -> None:
    url = pgserver.fresh_schema_url(cluster.url())
    root = tree_on(tmp_path / "team", url)
    watching = Watching(root, tmp_path)
    try:
        watching.wait_for(lambda out: "started: consuming" in out, "the watcher to consume")
        emit_docs_needed(root, 0)
        watching.applied(1, "the first signal")
        for restart, mode in enumerate(("fast", "immediate"), start=1):  # a clean restart, then a crash-restart
            cluster.stop(mode)
            cluster.start()
            emit_docs_needed(root, restart)
            watching.applied(restart + 1, f"the signal after restart {restart}")
        assert watching.stop() == 0, watching.output()
    finally:
        if watching.proc.poll() is None:
            watching.proc.kill()
    out = watching.output()
    assert "the watcher carries on" in out or "lost the consumer lock" in out
    assert "Traceback" not in out
    assert applied_docs_needed(url) == [0, 1, 2], out


# -- two consumers at once: the repro (issue 22) ---------------------------------------------------------


class Watcher2(Watching):
    def consuming_since(self) -> int:
        return self.output().count("started: consuming")


def waiting_signals(url: str) -> tuple[int, int]:
    """(waiting, claimed) signals, straight from the rows."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FILTER (WHERE dir = 'signals'), "
                           "count(*) FILTER (WHERE dir = 'signals/.processing') FROM loki_items").fetchone()
    return int(row[0]), int(row[1])


def cut_the_consumer_lock(url: str) -> int:
    """pg_terminate_backend of the `loki lock%` connection: its holder's network dropped."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE application_name LIKE 'loki lock%'").fetchall()
    return len(rows)


@pytest.mark.slow
def test_two_watchers_and_a_cut_lock_apply_a_backlog_of_1500_signals_once(tmp_path: Path,
                                                                          cluster: pgserver.Cluster) -> None:
    """Two machines' `loki watch --no-tui` on one database, 1,500 signals waiting, the consumer's lock
    connection terminated twice while it works through them: each watcher in turn stops before its next
    signal, the other takes over, and every signal's effect is made once (friction counted once per report,
    each knowledge section appended once), nothing is left claimed."""
    from loki.signals import emit as signals
    from loki.storage import layout
    from loki.storage.postgres.store import PgStore

    url = pgserver.fresh_schema_url(cluster.url())
    first_root = tree_on(tmp_path / "laptop", url)
    second_root = tree_on(tmp_path / "runner", url)
    store = PgStore.open(url, validate_all=False)
    try:
        for n in range(1500):
            kind = n % 3
            if kind == 0:
                signals.emit(store, "FRICTION_DETECTED", {"friction_id": f"f{n % 7}", "location": f"a.py:{n % 7}",
                                                          "behavior": "sleeps"})
            elif kind == 1:
                signals.emit(store, "INSTITUTIONAL_KNOWLEDGE_FOUND", {"knowledge": f"fact number {n}."})
            else:
                signals.emit(store, "DOCS_NEEDED", {"n": n})
        first = Watcher2(first_root, tmp_path)
        second = None
        try:
            first.wait_for(lambda out: "started: consuming" in out, "the first consumer")
            second = Watcher2(second_root, tmp_path)
            second.wait_for(lambda out: "display-only" in out, "the second watcher")
            for cut, (goes, takes) in enumerate(((first, second), (second, first)), start=1):
                left = waiting_signals(url)[0]
                goes.wait_for(lambda _, left=left: waiting_signals(url)[0] < left - 200, f"progress before cut {cut}")
                before = takes.consuming_since()
                assert cut_the_consumer_lock(cluster.url()) == 1
                takes.wait_for(lambda _, b=before, t=takes: t.consuming_since() > b, f"the takeover at cut {cut}")
            first.wait_for(lambda _: waiting_signals(url) == (0, 0), "every signal consumed", timeout=600)
            assert first.stop() == 0 and second.stop() == 0
        finally:
            for watching in (first, second):
                if watching is not None and watching.proc.poll() is None:
                    watching.proc.kill()
        frictions = {f["friction_id"]: f["reports"] for f in store.read(layout.FRICTION_MAP)["frictions"]}
        expected = {f"f{k}": sum(1 for n in range(0, 1500, 3) if n % 7 == k) for k in range(7)}
        assert frictions == expected  # each report counted once
        knowledge = store.read_text(layout.KNOWLEDGE) or ""
        twice = [n for n in range(1, 1500, 3) if knowledge.count(f"fact number {n}.") != 1]
        assert twice == [], f"knowledge sections not appended exactly once: {twice[:10]}"
        for watching in (first, second):
            assert "lost the consumer lock" in watching.output() and "Traceback" not in watching.output()
    finally:
        store.close()


@pytest.mark.slow
def test_a_watcher_stopped_while_the_server_is_down_still_stops_cleanly(tmp_path: Path,
                                                                       cluster: pgserver.Cluster) -> None:
    """SIGTERM during an outage: the watcher cannot save its counter, says so, frees its lock and stops."""
    from loki.storage.opening import open_store
    from loki.watch.watcher import Watcher

    url = pgserver.fresh_schema_url(cluster.url())
    root = tree_on(tmp_path / "team", url)
    events: list[dict[str, Any]] = []
    watcher = Watcher(open_store(str(root)), on_event=events.append, observer="polling")
    assert watcher.start()
    cluster.stop("fast")
    os.environ["LOKI_DB_RETRY_SECONDS"] = "0.2"
    try:
        watcher.close()  # a stop request, while consuming
    finally:
        del os.environ["LOKI_DB_RETRY_SECONDS"]
        cluster.start()
    assert events[-1]["event"] == "stopped" and not watcher.consuming and not watcher.lock.held
    assert any(e["event"] == "error" and e["detail"].startswith("saving the watch state: ") for e in events), events


@pytest.mark.slow
def test_server_restarts_in_the_middle_of_a_backlog_lose_nothing_and_apply_nothing_twice(
        tmp_path: Path, cluster: pgserver.Cluster) -> None:
    """A watcher working through 600 signals while the server is restarted three times (fast, immediate,
    fast): it carries on each time, takes its lock back, and every effect is made once."""
    from loki.signals import emit as signals
    from loki.storage import layout
    from loki.storage.postgres.store import PgStore

    url = pgserver.fresh_schema_url(cluster.url())
    root = tree_on(tmp_path / "team", url)
    store = PgStore.open(url, validate_all=False)
    try:
        for n in range(600):
            if n % 3 == 0:
                signals.emit(store, "FRICTION_DETECTED", {"friction_id": f"f{n % 5}", "location": "a.py:1",
                                                          "behavior": "sleeps"})
            elif n % 3 == 1:
                signals.emit(store, "INSTITUTIONAL_KNOWLEDGE_FOUND", {"knowledge": f"fact number {n}."})
            else:
                signals.emit(store, "DOCS_NEEDED", {"n": n})
    finally:
        store.close()
    watching = Watching(root, tmp_path)
    try:
        watching.wait_for(lambda out: "started: consuming" in out, "the watcher to consume")
        for restart, mode in enumerate(("fast", "immediate", "fast"), start=1):
            left = waiting_signals(url)[0]
            watching.wait_for(lambda _, left=left: waiting_signals(url)[0] < left - 60, f"progress {restart}")
            cluster.stop(mode)
            cluster.start()
        watching.wait_for(lambda _: waiting_signals(url) == (0, 0), "every signal consumed", timeout=600)
        assert watching.stop() == 0, watching.output()
    finally:
        if watching.proc.poll() is None:
            watching.proc.kill()
    out = watching.output()
    assert "Traceback" not in out and out.count("started: consuming") >= 2
    store = PgStore.open(url, validate_all=False)
    try:
        frictions = {f["friction_id"]: f["reports"] for f in store.read(layout.FRICTION_MAP)["frictions"]}
        assert frictions == {f"f{k}": sum(1 for n in range(0, 600, 3) if n % 5 == k) for k in range(5)}
        knowledge = store.read_text(layout.KNOWLEDGE) or ""
        assert [n for n in range(1, 600, 3) if knowledge.count(f"fact number {n}.") != 1] == []
    finally:
        store.close()
    validated = loki_proc(["validate"], root=root)
    assert validated.code == 0, validated.stdout + validated.stderr


@pytest.mark.slow
def test_following_other_processes_starts_once_the_server_answers(tmp_path: Path,
                                                                  cluster: pgserver.Cluster) -> None:
    """The live loop starts following what other processes do right after it starts: a server gone at that
    instant is a failed cycle (said in the feed), not the end of the watcher; it follows once it is back."""
    from loki.breakers.breakers import Breakers
    from loki.storage.opening import open_store
    from loki.watch.watcher import Watcher

    url = pgserver.fresh_schema_url(cluster.url())
    root = tree_on(tmp_path / "team", url)
    events: list[dict[str, Any]] = []
    watcher = Watcher(open_store(str(root)), on_event=events.append, observer="polling")
    assert watcher.start()
    cluster.stop("fast")
    os.environ["LOKI_DB_RETRY_SECONDS"] = "0.2"
    try:
        watcher.follow_activity()
    finally:
        del os.environ["LOKI_DB_RETRY_SECONDS"]
        cluster.start()
    assert any(e["event"] == "warning" and "the watcher carries on" in e["detail"] for e in events)
    watcher.step()  # the server is back: the cycle works again, and starts following
    assert watcher.activity is not None and watcher.activity.started
    Breakers(open_store(str(root))).trip("api/claude")
    watcher.step()
    watcher.step()
    assert [e["breaker"] for e in events if e["event"] == "breaker"] == ["api/claude"]
    watcher.close()


@pytest.mark.slow
def test_the_live_views_frame_rides_out_an_outage(tmp_path: Path, cluster: pgserver.Cluster) -> None:
    """The live view draws a frame after every cycle from a snapshot of the database: a frame that meets the
    outage is skipped (the feed says why) and the loop goes on; the next frame is drawn once it is back."""
    from loki.storage.opening import open_store
    from loki.watch.dashboard import Dashboard
    from loki.watch.watcher import Watcher

    url = pgserver.fresh_schema_url(cluster.url())
    root = tree_on(tmp_path / "team", url)
    store = open_store(str(root))
    events: list[dict[str, Any]] = []
    watcher = Watcher(store, on_event=events.append, observer="polling")
    dashboard = Dashboard(store)
    frames: list[dict[str, Any]] = []
    calls = 0

    def draw(w: Watcher) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            cluster.stop("fast")
            os.environ["LOKI_DB_RETRY_SECONDS"] = "0.2"
        elif calls == 2:
            del os.environ["LOKI_DB_RETRY_SECONDS"]
            cluster.start()
        else:
            w.stop()
        frames.append(dashboard.snapshot(consuming=w.consuming))

    try:
        watcher.run(on_cycle=draw)
    finally:
        os.environ.pop("LOKI_DB_RETRY_SECONDS", None)
    assert calls == 3 and len(frames) == 2  # the frame drawn during the outage failed; the loop went on
    assert any(e["event"] == "warning" and "the watcher carries on" in e["detail"] for e in events)
    assert events[-1]["event"] == "stopped"


@pytest.mark.slow
def test_watch_once_that_loses_the_server_mid_pass_fails_with_exit_5(tmp_path: Path,
                                                                     cluster: pgserver.Cluster) -> None:
    """`loki watch --once` is one attempt, for cron: a server gone in the middle of it is exit 5 (cron
    notices; the next run finishes the work), never an exit 0 that says "1 signal handled" and hides it."""
    from loki.signals import emit as signals
    from loki.storage.opening import open_store
    from loki.storage.postgres.connect import DatabaseUnavailable
    from loki.watch.watcher import Watcher

    url = pgserver.fresh_schema_url(cluster.url())
    root = tree_on(tmp_path / "team", url)
    store = open_store(str(root))
    for n in range(3):
        signals.emit(store, "DOCS_NEEDED", {"n": n})

    def server_gone_after_the_first(event: dict[str, Any]) -> None:
        if event["event"] == "signal":
            cluster.stop("fast")
            os.environ["LOKI_DB_RETRY_SECONDS"] = "0.2"

    try:
        with pytest.raises(DatabaseUnavailable):
            Watcher(store, on_event=server_gone_after_the_first, observer="polling").run_once()
    finally:
        os.environ.pop("LOKI_DB_RETRY_SECONDS", None)
        cluster.start()
