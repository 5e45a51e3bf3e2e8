"""Landing (docs/verify.md, "Landing") under real processes: ``loki queue land-check`` and the watcher
(``loki watch --once``) killed with SIGKILL while they resolve, then started again.

A ``git`` placed first on the killed process's PATH stops at its first ``merge-base`` and tells the test its
pid through a FIFO (the test's read blocks until it is written): the kill lands in the middle of a
resolution, and nothing here sleeps. The random kills of the crash harness (tests/torture, ``land_check``
among the workers' operations and the watcher's tick) cover the rest.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from loki.queue.queue import Queue
from loki.storage import layout
from loki.storage.store import Store
from tests.helpers import cli, process_gone, tree_problems

pytestmark = pytest.mark.slow  # real processes, SIGKILL

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env=ENV).stdout.strip()


def landing_tree(root: Path, count: int) -> list[str]:
    """``count`` tasks in landing, each on a commit of main (so each lands at the next resolution)."""
    repo = root.parent
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=ENV)
    queue = Queue(Store(root))
    ids = []
    for n in range(count):
        task_id = f"t{n}"
        queue.add(f"task {n}", task_id=task_id, land="main")
        claimed = queue.claim("eng-1", task_id=task_id)
        git(repo, "commit", "-q", "--allow-empty", "-m", f"work {n}")
        queue.complete(task_id, "eng-1", token=claimed["claim_token"], head=git(repo, "rev-parse", "HEAD"),
                       work_branch="main")
        ids.append(task_id)
    return ids


def stopping_git(where: Path, fifo: Path) -> Path:
    """A directory with a ``git`` that stops at ``merge-base``: it writes its pid to ``fifo`` and waits."""
    where.mkdir()
    real = shutil.which("git")
    script = where / "git"
    script.write_text(f'#!/bin/sh\nif [ "$1" = "merge-base" ]; then echo $$ > {str(fifo)!r}; exec sleep 600; fi\n'
                      f'exec {real!r} "$@"\n')
    script.chmod(0o755)
    os.mkfifo(fifo)
    return where


def states(root: Path) -> dict[str, list[str]]:
    store = Store(root)
    found: dict[str, list[str]] = {}
    for state in layout.QUEUE_STATES:
        for task in store.read(layout.queue_file(state))["tasks"]:
            found.setdefault(task["id"], []).append(state)
    return found


@pytest.mark.parametrize("command", [["queue", "land-check"], ["watch", "--once"]], ids=["land-check", "watcher"])
def test_killed_while_resolving_nothing_is_lost_and_nothing_completes_twice(root: Path, tmp_path: Path,
                                                                          command: list[str]) -> None:
    ids = landing_tree(root, 5)
    fifo = tmp_path / "git.fifo"
    bin_dir = stopping_git(tmp_path / "bin", fifo)
    proc = subprocess.Popen([PY, "-m", "loki", "--root", str(root), *command], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                                 "PYTHONPATH": str(REPO)})
    with open(fifo) as told:  # blocks until the resolution asks git whether the first commit is on main
        git_pid = int(told.read().strip())
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    os.kill(git_pid, signal.SIGKILL)
    assert process_gone(git_pid, within=10.0)
    assert tree_problems(root) == []
    assert states(root) == {task_id: ["landing"] for task_id in ids}  # git is asked before the lock: nothing moved
    # Started again (the next tick of a restarted watcher, or land-check), every task lands, once.
    again = cli(command, root=root)
    assert again.code == 0, again.stderr
    assert states(root) == {task_id: ["completed"] for task_id in ids}
    assert cli(command, root=root).code == 0
    queue = Queue(Store(root))
    for task_id in ids:
        events = [e["event"] for e in queue.history(task_id)["events"]]
        assert events.count("landed") == 1 and events.count("completed") == 1
    assert tree_problems(root) == []
