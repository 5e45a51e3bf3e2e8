"""Declared checks (docs/verify.md) under real ``loki work`` processes: ``kill -9`` and SIGTERM while a check
runs, and the command line end to end (``queue add --verify``, ``work --json``, ``queue show``/``history``,
``queue complete --evidence`` / ``--force --by``).

A running check tells the test its pid through a FIFO (the test's read blocks until it is written): nothing
here sleeps. Lease lapses are reached with LOKI_NOW, as in tests/work/test_work_processes.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import cli, process_gone, tree_problems

pytestmark = pytest.mark.slow  # real loki work processes, SIGKILL

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]


def spawn_work(root: Path, agent: str, *args: str, cwd: Path = REPO,
               env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    scratch = root.parent / "scratch"
    scratch.mkdir(exist_ok=True)
    return subprocess.Popen([PY, "-m", "loki", "--root", str(root), "work", "--agent", agent, *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": str(REPO), **(env or {})})


def hanging_check(fifo: Path) -> str:
    """A check that starts a child, tells the test the child's pid, and waits for it (forever)."""
    script = fifo.parent / "hang.py"
    script.write_text(f"import os, time\nopen({str(fifo)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n")
    return f"sh -c '{PY} {script}; echo the check went on'"


def read_pid(fifo: Path) -> int:
    with open(fifo) as reader:  # blocks until the check's child opened it: it is running
        return int(reader.read())


def git_repo(path: Path) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-q", "--allow-empty", "-m", "one"], check=True, env=env)
    return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_kill_9_during_a_check_loses_nothing_and_writes_no_evidence(root: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pid.fifo"
    os.mkfifo(fifo)
    cli(["queue", "add", "checked", "--id", "t1", "--verify", hanging_check(fifo)], root=root)
    at = {"LOKI_NOW": "2030-01-01T00:00:00Z"}
    proc = spawn_work(root, "eng-001", "--", "true", env=at)
    child = read_pid(fifo)
    proc.kill()
    proc.communicate(timeout=60)
    assert process_gone(child)  # the guard saw loki work die and killed the check's whole group
    held = cli(["queue", "show", "t1", "--json"], root=root).json()
    assert held["state"] == "in-progress" and held["task"]["result"] is None  # no evidence, not half of it
    assert [e["event"] for e in held["task"]["history"]] == ["added", "claimed"]
    later = {"LOKI_NOW": "2030-01-01T01:00:01Z"}
    requeued = subprocess.run([PY, "-m", "loki", "--root", str(root), "queue", "requeue-stale", "--json"], cwd=REPO,
                              capture_output=True, text=True, env={**os.environ, **later})
    assert json.loads(requeued.stdout)["requeued"] == ["t1"]
    task = cli(["queue", "show", "t1", "--json"], root=root).json()
    assert task["state"] == "pending" and [a["error_type"] for a in task["task"]["attempts"]] == ["timeout"]
    assert tree_problems(root) == []


def test_sigterm_during_a_check_kills_it_and_releases_the_task_unverified(root: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pid.fifo"
    os.mkfifo(fifo)
    cli(["queue", "add", "checked", "--id", "t1", "--verify", hanging_check(fifo)], root=root)
    proc = spawn_work(root, "eng-001", "--", "true")
    child = read_pid(fifo)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err.decode()
    assert process_gone(child)
    assert "released t1 (back to pending, untouched)" in err.decode()
    shown = cli(["queue", "show", "t1", "--json"], root=root).json()
    assert shown["state"] == "pending" and shown["task"]["attempts"] == [] and shown["task"]["result"] is None


def test_the_command_line_end_to_end(root: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    head = git_repo(repo)
    assert cli(["queue", "add", "good", "--id", "t1", "--verify", "true", "--verify", "echo all 3 passed"],
               root=root).code == 0
    assert cli(["queue", "add", "bad", "--id", "t2", "--verify", "sh -c 'echo FAILED test_x.py::test_y; exit 1'",
                "--max-attempts", "1"], root=root).code == 0
    proc = spawn_work(root, "eng-001", "--json", "--max-tasks", "2", "--", "true", cwd=repo)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err.decode()
    summary = json.loads(err)
    by_id = {task["task_id"]: task for task in summary["tasks"]}
    assert by_id["t1"]["outcome"] == "completed" and [c["command"] for c in by_id["t1"]["checks"]] == [
        "true", "echo all 3 passed"]
    assert by_id["t2"]["outcome"] == "failed" and by_id["t2"]["error_type"] == "test_failure"
    assert by_id["t2"]["state"] == "dead-letter"
    shown = cli(["queue", "show", "t1"], root=root)
    assert "checks" in shown.stdout and "echo all 3 passed\t0\t" in shown.stdout and head[:12] in shown.stdout
    assert "all 3 passed" in shown.stdout  # the output's last line
    history = cli(["queue", "history", "t1"], root=root)
    assert f"2 checks passed on {head[:12]}: 'true' (exit 0" in history.stdout
    dead = cli(["queue", "show", "t2", "--json"], root=root).json()
    assert dead["task"]["last_error"].startswith("check \"sh -c 'echo FAILED test_x.py::test_y; exit 1'\" failed")


def test_complete_with_evidence_or_force_through_the_command_line(root: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    head = git_repo(repo)
    for task_id in ("t1", "t2", "t3"):
        cli(["queue", "add", task_id, "--id", task_id, "--verify", "make test"], root=root)
        cli(["queue", "claim", "--agent", "a", "--id", task_id], root=root)

    def complete(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-m", "loki", "--root", str(root), "queue", "complete", *args], cwd=repo,
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})

    refused = complete("t1", "--agent", "a")
    assert refused.returncode == 1 and "task t1 has checks ('make test')" in refused.stderr
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps({"checks": [{"command": "make test", "exit_code": 0, "commit": "f" * 40}]}))
    other = complete("t1", "--agent", "a", "--evidence", str(stale))
    assert other.returncode == 1 and f"ran on ffffffffffff, not on HEAD {head[:12]}" in other.stderr
    assert cli(["queue", "show", "t1", "--json"], root=root).json()["state"] == "in-progress"
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"checks": [{"command": "make test", "exit_code": 0, "commit": head,
                                            "output_tail": "ok"}]}))
    done = complete("t1", "--agent", "a", "--evidence", str(good))
    assert done.returncode == 0, done.stderr
    kept = cli(["queue", "show", "t1", "--json"], root=root).json()["task"]["result"]["verification"]
    assert kept == {"checks": [{"command": "make test", "exit_code": 0, "output_tail": "ok", "commit": head}],
                    "commit": head}
    forced = complete("t2", "--agent", "a", "--force", "--by", "alice")
    assert forced.returncode == 0, forced.stderr
    assert "forced by alice without its checks' evidence ('make test')" in cli(["queue", "history", "t2"],
                                                                               root=root).stdout
    assert "checks: not run; completed by --force --by alice" in cli(["queue", "show", "t2"], root=root).stdout
