"""``loki work`` on PostgreSQL under a restart (issue 22): a task whose command exited 0 is completed once the
server is back, never released to be done again; and through the library, the bounded retry of recording a
finished result.

The process tests own a throwaway cluster (tests/pgserver.py) that they stop and start for real, and run a real
``loki work`` process; the command blocks on a FIFO until the test has cut the server, so nothing sleeps.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loki.errors import LockTimeout
from loki.queue.queue import Queue
from loki.work.loop import Worker, WorkOptions
from tests import pgserver
from tests.helpers import loki_proc

REPO = Path(__file__).resolve().parents[3]

SCRIPT = """
echo "$LOKI_TASK_ID" >> "$1/ran"
if [ "$LOKI_TASK_ID" = t1 ]; then
  : > "$1/started"
  read line < "$1/go"
fi
"""
"""t1's command says it started, then waits for the test (the FIFO ``go``) before it exits 0."""


@pytest.fixture
def cluster() -> Iterator[pgserver.Cluster]:
    own = pgserver.start_cluster()
    yield own
    own.remove()


def team_tree(base: Path, url: str) -> Path:
    base.mkdir(parents=True)
    joined = loki_proc(["init", "--path", str(base), "--database", url])
    assert joined.code == 0, joined.stderr
    root = base / ".loki"
    for task_id in ("t1", "t2"):
        assert loki_proc(["queue", "add", f"job {task_id}", "--id", task_id], root=root).code == 0
    return root


def start_work(root: Path, scratch: Path) -> subprocess.Popen[str]:
    os.mkfifo(scratch / "go")
    return subprocess.Popen([sys.executable, "-m", "loki", "--root", str(root), "work", "--agent", "eng-001", "--",
                             "sh", "-c", SCRIPT, "sh", str(scratch)], cwd=REPO, text=True,
                            env={**os.environ, "LOKI_DB_RETRY_SECONDS": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for_line(proc: subprocess.Popen[str], needle: str, seen: list[str]) -> None:
    assert proc.stderr is not None
    while True:
        line = proc.stderr.readline()
        if not line:
            proc.wait(timeout=60)
            pytest.fail(f"loki work ended (exit {proc.returncode}) before saying {needle!r}:\n{''.join(seen)}")
        seen.append(line)
        if needle in line:
            return


def states(root: Path) -> dict[str, Any]:
    return {task_id: loki_proc(["queue", "show", task_id, "--json"], root=root).json()
            for task_id in ("t1", "t2")}


@pytest.mark.slow
def test_a_finished_task_is_completed_after_a_server_restart_and_the_loop_goes_on(
        tmp_path: Path, cluster: pgserver.Cluster) -> None:
    root = team_tree(tmp_path / "team", pgserver.fresh_schema_url(cluster.url()))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    proc = start_work(root, scratch)
    seen: list[str] = []
    try:
        wait_for_line(proc, "claimed t1", seen)
        while not (scratch / "started").exists():  # the command is running: the FIFO holds it
            assert proc.poll() is None, "".join(seen)
        cluster.stop("fast")  # every connection is cut, and nothing answers
        with open(scratch / "go", "w") as go:
            go.write("done\n")  # the command exits 0 while the server is down
        wait_for_line(proc, "could not record t1 yet", seen)
        cluster.start()
        _, rest = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = "".join(seen) + rest
    assert proc.returncode == 0, output
    assert "keeping its result" in output and "completed t1" in output and "released" not in output
    assert "2 tasks claimed (2 completed); exit 0" in output
    assert (scratch / "ran").read_text().split() == ["t1", "t2"]  # each command ran once
    shown = states(root)
    assert {task_id: doc["state"] for task_id, doc in shown.items()} == {"t1": "completed", "t2": "completed"}
    assert shown["t1"]["task"]["result"]["exit_code"] == 0 and shown["t1"]["task"]["attempts"] == []
    assert loki_proc(["validate"], root=root).code == 0


@pytest.mark.slow
def test_a_terminated_backend_during_the_run_does_not_lose_the_result(tmp_path: Path,
                                                                      cluster: pgserver.Cluster) -> None:
    """pg_terminate_backend of every loki connection while the command runs: the next statement reconnects."""
    psycopg: Any = pgserver.driver()
    url = pgserver.fresh_schema_url(cluster.url())
    root = team_tree(tmp_path / "team", url)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    proc = start_work(root, scratch)
    seen: list[str] = []
    try:
        wait_for_line(proc, "claimed t1", seen)
        while not (scratch / "started").exists():
            assert proc.poll() is None, "".join(seen)
        with psycopg.connect(cluster.url(), autocommit=True) as admin:
            cut = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                "WHERE application_name LIKE 'loki%' AND pid <> pg_backend_pid()").fetchone()
        assert cut is not None and cut[0] >= 1
        with open(scratch / "go", "w") as go:
            go.write("done\n")
        _, rest = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = "".join(seen) + rest
    assert proc.returncode == 0, output
    assert "2 tasks claimed (2 completed); exit 0" in output
    assert (scratch / "ran").read_text().split() == ["t1", "t2"]
    assert {task_id: doc["state"] for task_id, doc in states(root).items()} == {"t1": "completed", "t2": "completed"}


# -- the library: the bounded retry of recording -----------------------------------------------------------


class Unreachable:
    """A store whose task transactions fail with a transient (exit 5) error while the file ``cut`` exists:
    the database unreachable, as the store reports it once its own reconnection window is spent. The
    agent's command creates the file, so the store goes away exactly between the run and its recording."""

    def __init__(self, store: Any, cut: Path, *, after_commit: bool = False) -> None:
        self._store = store
        self.cut = cut
        self.after_commit = after_commit
        """The first transaction while cut commits, and then its answer is lost (the file is removed)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def tasks(self) -> Any:
        tasks = self._store.tasks()
        cut = self.cut

        class Gate:
            def __getattr__(self, name: str) -> Any:
                return getattr(tasks, name)

            def transaction(self, *args: Any, **kwargs: Any) -> Any:
                if not cut.exists():
                    return tasks.transaction(*args, **kwargs)
                if not outer.after_commit:
                    raise LockTimeout("lost the connection to the database and could not reconnect within 1s")
                return LostAnswer(tasks.transaction(*args, **kwargs))

        class LostAnswer:
            def __init__(self, inner: Any) -> None:
                self.inner = inner

            def __enter__(self) -> Any:
                return self.inner.__enter__()

            def __exit__(self, *exc: Any) -> Any:
                done = self.inner.__exit__(*exc)
                if exc[0] is None:  # committed; the answer never arrives
                    cut.unlink()
                    raise LockTimeout("lost the connection to the database and could not reconnect within 1s")
                return done

        outer = self
        return Gate()


def test_a_finished_result_is_kept_and_completed_once_the_store_answers_again(tmp_path: Path, store: Any) -> None:
    Queue(store).add("t", task_id="t1")
    Queue(store).add("u", task_id="t2")
    cut = tmp_path / "cut"
    waits: list[float] = []
    notes: list[str] = []

    def wait(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 3:
            cut.unlink()  # the server is back

    command = ["sh", "-c", '[ "$LOKI_TASK_ID" = t1 ] && : > "$1"; exit 0', "sh", str(cut)]
    summary = Worker(Unreachable(store, cut), WorkOptions(agent="a", command=command), sleep=wait,
                     stdout=bytearray().extend, stderr=bytearray().extend, notify=notes.append).run_unguarded()
    assert (summary.exit_code, [r.outcome for r in summary.runs]) == (0, ["completed", "completed"]), notes
    assert waits == [1.0, 2.0, 4.0]
    assert sum("could not record t1 yet" in note and "keeping its result" in note for note in notes) == 3
    assert not any("released" in note for note in notes)
    assert Queue(store).show("t1")["state"] == "completed"


def test_a_failure_is_recorded_once_the_store_answers_again(tmp_path: Path, store: Any) -> None:
    Queue(store).add("t", task_id="t1")
    cut = tmp_path / "cut"
    waits: list[float] = []

    def wait(seconds: float) -> None:
        waits.append(seconds)
        cut.unlink()

    summary = Worker(Unreachable(store, cut), WorkOptions(agent="a", command=["sh", "-c", ': > "$1"; exit 3', "sh",
                                                                              str(cut)], max_tasks=1),
                     sleep=wait, stdout=bytearray().extend, stderr=bytearray().extend).run_unguarded()
    assert (summary.exit_code, summary.runs[0].outcome, waits) == (1, "failed", [1.0])
    assert len(Queue(store).show("t1")["task"]["attempts"]) == 1


def test_a_result_that_cannot_be_recorded_in_time_is_not_released(tmp_path: Path, store: Any) -> None:
    Queue(store).add("t", task_id="t1")
    cut = tmp_path / "cut"
    waits: list[float] = []
    notes: list[str] = []
    summary = Worker(Unreachable(store, cut), WorkOptions(agent="a", command=["sh", "-c", ': > "$1"', "sh", str(cut)],
                                                          record_retry_seconds=30),
                     sleep=waits.append, stdout=bytearray().extend, stderr=bytearray().extend,
                     notify=notes.append).run_unguarded()
    assert summary.exit_code == 5 and summary.stopped == "error"
    assert summary.runs[0].outcome == "unrecorded"
    assert "t1 finished (exit 0) but could not be recorded" in summary.reason
    assert sum(waits) <= 30 and len(waits) >= 3
    assert not any("released" in note for note in notes)
    cut.unlink()
    shown = Queue(store).show("t1")
    assert shown["state"] == "in-progress" and shown["task"]["claimed_by"] == "a"  # not released: its lease lapses


@pytest.mark.parametrize("exit_code, outcome, state", [(0, "completed", "completed"), (3, "failed", "pending")])
def test_a_recording_that_landed_but_whose_answer_was_lost_is_recognised(tmp_path: Path, store: Any, exit_code: int,
                                                                         outcome: str, state: str) -> None:
    Queue(store).add("t", task_id="t1")
    cut = tmp_path / "cut"
    waits: list[float] = []
    command = ["sh", "-c", f': > "$1"; exit {exit_code}', "sh", str(cut)]
    summary = Worker(Unreachable(store, cut, after_commit=True), WorkOptions(agent="a", command=command, max_tasks=1),
                     sleep=waits.append, stdout=bytearray().extend, stderr=bytearray().extend).run_unguarded()
    assert (summary.runs[0].outcome, summary.runs[0].state, waits) == (outcome, state, [1.0])
    assert summary.exit_code == (0 if exit_code == 0 else 1)
    shown = Queue(store).show("t1")
    assert shown["state"] == state and len(shown["task"]["attempts"]) == (0 if exit_code == 0 else 1)


def test_a_stop_request_ends_the_retries_and_leaves_the_task_held(tmp_path: Path, store: Any) -> None:
    import signal

    Queue(store).add("t", task_id="t1")
    cut = tmp_path / "cut"
    workers: list[Worker] = []

    def wait(seconds: float) -> None:
        workers[0].request_stop(signal.SIGTERM)  # Ctrl-C while it waits to try again

    workers.append(Worker(Unreachable(store, cut), WorkOptions(agent="a", command=["sh", "-c", ': > "$1"', "sh",
                                                                                   str(cut)]),
                          sleep=wait, stdout=bytearray().extend, stderr=bytearray().extend))
    summary = workers[0].run_unguarded()
    assert (summary.exit_code, summary.runs[0].outcome) == (5, "unrecorded")
    cut.unlink()
    assert Queue(store).show("t1")["state"] == "in-progress"  # not released: done work is not handed out again
