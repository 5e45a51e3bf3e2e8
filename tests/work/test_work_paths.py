"""Two ``loki work`` agents and tasks that declare paths (docs/leases.md): overlapping paths never run at the
same time, disjoint ones do. The first agent's command starts the second agent while its own task runs
(tests/procs/paths_agent.py), so what ran inside what is in the log, without any timing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loki.queue.queue import Queue
from loki.storage.store import Store
from tests.helpers import tree_problems

pytestmark = pytest.mark.slow  # real `loki work` processes, one inside the other's run

REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "tests" / "procs" / "paths_agent.py"


def work(root: Path, log: Path, agent: str, other: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "loki", "--root", str(root), "work", "--agent", agent,
                           "--max-tasks", "1", "--", sys.executable, str(AGENT), str(root), str(log), other],
                          cwd=REPO, capture_output=True, timeout=300)


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines()


def test_disjoint_paths_run_at_the_same_time(root: Path, tmp_path: Path) -> None:
    queue = Queue(Store(root))
    queue.add("auth", task_id="auth", priority="high", paths=["src/auth/**"])
    queue.add("billing", task_id="billing", paths=["src/billing/**"])
    log = tmp_path / "log"
    done = work(root, log, "alice", "bob")
    assert done.returncode == 0, done.stderr.decode()
    got = lines(log)
    assert got[0] == "start auth alice" and got[1] == "start billing bob" and got[2] == "end billing"
    assert got[3].startswith("inner 0 ") and got[4] == "end auth"
    assert {queue.show(t)["state"] for t in ("auth", "billing")} == {"completed"}
    assert tree_problems(root) == []


def test_overlapping_paths_never_run_at_the_same_time(root: Path, tmp_path: Path) -> None:
    queue = Queue(Store(root))
    queue.add("auth", task_id="auth", priority="high", paths=["src/auth/**"])
    queue.add("login", task_id="login", paths=["src/auth/login.py"])
    log = tmp_path / "log"
    done = work(root, log, "alice", "bob")
    assert done.returncode == 0, done.stderr.decode()
    got = lines(log)
    assert got[0] == "start auth alice" and got[2] == "end auth"
    # bob found nothing it could take while alice's task ran: exit 3, naming the lease
    assert got[1].startswith("inner 3 ")
    assert "held by alice for task auth" in got[1]
    assert queue.show("login")["state"] == "pending"
    # once alice's task completed, its paths are free: bob takes login
    again = work(root, log, "bob", "-")
    assert again.returncode == 0, again.stderr.decode()
    assert lines(log)[3:] == ["start login bob", "end login"]
    assert queue.show("login")["state"] == "completed"
    assert tree_problems(root) == []
