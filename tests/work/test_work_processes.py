"""``loki work`` as real processes: a team sharing a queue, SIGINT/SIGTERM, ``kill -9``, a short real lease.

Completions are counted by the agent's own side effects (tests/torture/agent.py logs ``start`` and ``done``
per run and notices two live runs of one task). Time is moved with LOKI_NOW where a lease must lapse;
one test uses a real 2-second lease with a command that runs 4 seconds, and asserts on what happened
(the renewals, nobody else got the task), not on how long anything took.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from loki.queue.queue import Queue
from loki.storage.store import Store
from tests.helpers import cli, process_gone, tree_problems

pytestmark = pytest.mark.slow  # real agent processes, signals and SIGKILL: ~20 s (make test-fast skips it)

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]
AGENT = [PY, "-I", "-S", str(REPO / "tests" / "torture" / "agent.py")]


def spawn_work(root: Path, agent: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    # Its scratch directories under the test's own tmp: a killed `loki work` cannot remove its own.
    scratch = root.parent / "scratch"
    scratch.mkdir(exist_ok=True)
    return subprocess.Popen([PY, "-m", "loki", "--root", str(root), "work", "--agent", agent, *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "TMPDIR": str(scratch), **(env or {})})



def side_effects(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def test_a_team_of_three_runs_every_task_exactly_once(root: Path, tmp_path: Path) -> None:
    queue = Queue(Store(root))
    queue.add_many([{"title": f"task {n}", "id": f"t{n:02d}"} for n in range(24)])
    log, locks = tmp_path / "side.log", tmp_path / "locks"
    locks.mkdir()
    team = [spawn_work(root, f"eng-{n}", "--json", "--", *AGENT, str(log), str(locks)) for n in range(3)]
    summaries = []
    for proc in team:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
        summaries.append(json.loads(err))
    events = side_effects(log)
    assert [e for e in events if e[0] == "overlap"] == []
    done = Counter(e[1] for e in events if e[0] == "done")
    assert set(done) == {f"t{n:02d}" for n in range(24)} and set(done.values()) == {1}
    assert sum(s["completed"] for s in summaries) == 24
    store = Store(root)
    for n in range(24):
        task = Queue(store).show(f"t{n:02d}")["task"]
        assert Queue(store).show(task["id"])["state"] == "completed"
        tokens = [e[2] for e in events if e[0] == "done" and e[1] == task["id"]]
        assert task["result"]["data"] == {"run": tokens[0]}
    assert tree_problems(root) == []


def _started_child(proc: subprocess.Popen[bytes]) -> int:
    """The pid the command printed first (it is running, under the guard, under `loki work`)."""
    assert proc.stdout is not None
    return int(proc.stdout.readline())


LONG_COMMAND = ["sh", "-c", f"{PY} -c 'import os, time; print(os.getpid(), flush=True); time.sleep(600)'; "
                            "echo the shell went on"]


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_the_command_and_releases_the_task(root: Path, signum: int, code: int) -> None:
    cli(["queue", "add", "a long task", "--id", "t1"], root=root)
    cli(["queue", "add", "the next one", "--id", "t2"], root=root)
    proc = spawn_work(root, "eng-001", "--", *LONG_COMMAND)
    grandchild = _started_child(proc)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err.decode()
    assert process_gone(grandchild)
    assert b"the shell went on" not in out  # the whole process group was stopped, not only its leader
    assert "released t1 (back to pending, untouched)" in err.decode()
    assert f"stopped by {signal.Signals(signum).name}; 1 task claimed (1 released); exit {code}" in err.decode()
    shown = cli(["queue", "show", "t1", "--json"], root=root).json()
    assert shown["state"] == "pending" and shown["task"]["attempts"] == []
    assert cli(["queue", "show", "t2", "--json"], root=root).json()["state"] == "pending"  # nothing more claimed


def test_kill_9_takes_the_command_down_and_the_lapsed_lease_requeues_the_task(root: Path, tmp_path: Path) -> None:
    cli(["queue", "add", "a long task", "--id", "t1"], root=root)
    at = {"LOKI_NOW": "2030-01-01T00:00:00Z"}
    proc = spawn_work(root, "eng-001", "--", *LONG_COMMAND, env=at)
    grandchild = _started_child(proc)
    proc.kill()
    proc.communicate(timeout=60)
    assert process_gone(grandchild)  # the guard saw its loki work die and killed the command's group
    left = [p.name for p in (root.parent / "scratch").iterdir()]  # the killed loki work's scratch directory
    assert len(left) == 1 and left[0].startswith("loki-work-t1-")
    held = cli(["queue", "show", "t1", "--json"], root=root).json()
    assert held["state"] == "in-progress" and held["task"]["lease_until"] == "2030-01-01T01:00:00Z"
    # Nothing renews the lease any more: an hour later it has lapsed, and the task is requeued.
    later = {"LOKI_NOW": "2030-01-01T01:00:01Z"}
    requeued = subprocess.run([PY, "-m", "loki", "--root", str(root), "queue", "requeue-stale", "--json"], cwd=REPO,
                              capture_output=True, text=True, env={**os.environ, **later})
    assert json.loads(requeued.stdout)["requeued"] == ["t1"]
    log, locks = tmp_path / "side.log", tmp_path / "locks"
    locks.mkdir()
    retry = spawn_work(root, "eng-002", "--", *AGENT, str(log), str(locks), env={"LOKI_NOW": "2030-01-01T01:01:00Z"})
    _, err = retry.communicate(timeout=60)
    assert retry.returncode == 0, err.decode()
    task = cli(["queue", "show", "t1", "--json"], root=root).json()["task"]
    assert [a["error_type"] for a in task["attempts"]] == ["timeout"]
    assert "lease expired at 2030-01-01T01:00:00Z while held by eng-001" in task["attempts"][0]["error_message"]
    assert [e[0] for e in side_effects(log)] == ["start", "done"]
    assert tree_problems(root) == []


THIEF = """
import sys, time
from loki.errors import NothingToDo
from loki.queue.queue import Queue
queue = Queue.open()
end = time.monotonic() + 4
tries = 0
while time.monotonic() < end:   # the command runs twice as long as its lease
    tries += 1
    try:
        queue.claim("thief", lease_seconds=600)
    except NothingToDo:
        time.sleep(0.1)
        continue
    print("stolen", flush=True)
    sys.exit(9)
print("tries", tries, flush=True)
"""


def test_a_lease_shorter_than_the_command_is_renewed_and_never_lapses(root: Path) -> None:
    cli(["queue", "add", "longer than its lease", "--id", "t1"], root=root)
    proc = spawn_work(root, "eng-001", "--lease", "2", "--json", "--", PY, "-c", THIEF,
                      env={"PYTHONPATH": str(REPO)})
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (out, err)
    assert out.decode().startswith("tries ")  # another agent claimed again and again: nothing to take
    summary = json.loads(err)
    assert summary["completed"] == 1 and summary["tasks"][0]["heartbeats"] >= 3
    task = cli(["queue", "show", "t1", "--json"], root=root).json()["task"]
    assert task["attempts"] == [] and task["result"]["heartbeats"] == summary["tasks"][0]["heartbeats"]


def test_until_empty_agents_wait_for_a_backoff_and_finish_the_queue(root: Path, tmp_path: Path) -> None:
    """A failed attempt backs off; --until-empty waits it out (LOKI_NOW cannot move, so the config makes the
    backoff 1 s of real time: the loop's own wait, not the test's)."""
    (root / "config" / "loki.json").write_text(json.dumps({"queue": {"backoff_initial": 1, "backoff_max": 1}}))
    cli(["queue", "add", "fails once", "--id", "t1"], root=root)
    marker = tmp_path / "failed-once"
    script = f"[ -e {marker} ] || {{ touch {marker}; echo 'AssertionError: flaky' >&2; exit 1; }}"
    proc = spawn_work(root, "eng-001", "--until-empty", "--json", "--", "sh", "-c", script)
    _, err = proc.communicate(timeout=120)
    summary = json.loads(err.decode().splitlines()[-1])  # the command's stderr comes first
    assert (proc.returncode, summary["stopped"]) == (0, "empty")
    assert [t["outcome"] for t in summary["tasks"]] == ["failed", "completed"]
