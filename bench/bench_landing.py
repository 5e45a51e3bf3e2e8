"""Landing (issue 26, docs/verify.md "Landing"): what the watcher's tick pays for tasks waiting to land, measured
in the same run against the tick with none.

* The floor: one ``git for-each-ref`` (what a quiet tick asks git).
* The watcher's tick (:class:`loki.watch.ticks.Tick`) with no task landing; with 50 landing tasks whose refs did
  not change since the last tick (the quiet tick: one git process); and a full resolution of the 50 (one
  ``merge-base`` per task, nothing moves: what a tick pays after a push or a fetch).

Run in a temporary git repository holding the tree; the 50 tasks wait on commits of an unmerged branch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Any

from bench.common import median, row, runs, time_call
from loki.queue.landing import Git, Landing
from loki.queue.queue import Queue
from loki.storage.store import Store
from loki.storage.tree import init_tree
from loki.watch.ticks import Tick

LANDING = 50
ENV = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
       "GIT_COMMITTER_EMAIL": "b@b"}


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True, env=ENV).stdout


def _tree(count: int) -> tuple[str, Store]:
    repo = tempfile.mkdtemp(prefix="loki-bench-landing-")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "one")
    _git(repo, "checkout", "-q", "-b", "feat")
    root = os.path.join(repo, ".loki")
    init_tree(root)
    store = Store(root, validate_all=False)
    queue = Queue(store)
    for n in range(count):
        queue.add(f"Implement feature {n}", task_id=f"t{n:03d}", land="main")
        claimed = queue.claim("bench", task_id=f"t{n:03d}")
        _git(repo, "commit", "-q", "--allow-empty", "-m", f"work {n}")
        queue.complete(f"t{n:03d}", "bench", token=claimed["claim_token"],
                       head=_git(repo, "rev-parse", "HEAD").strip(), work_branch="feat")
    return repo, store


def run() -> list[dict[str, Any]]:
    repeat = runs(30)
    empty_repo, empty = _tree(0)
    repo, store = _tree(LANDING)
    refs = median(time_call(lambda: Git(repo).fingerprint(), repeat=repeat))
    idle_tick, quiet_tick, resolution = [], [], []
    none, busy = Tick(empty), Tick(store)
    busy.run()  # the first tick resolves; the next ones are quiet
    for _ in range(repeat):  # interleaved: the machine's load changes all alike
        idle_tick.extend(time_call(none.run, repeat=1, warmup=0))
        quiet_tick.extend(time_call(busy.run, repeat=1, warmup=0))
        resolution.extend(time_call(lambda: Landing(store).resolve(), repeat=1, warmup=0))
    assert len(store.tasks().tasks_in("landing")) == LANDING and empty_repo
    idle, quiet = median(idle_tick), median(quiet_tick)
    return [
        row("landing: git for-each-ref (a quiet tick's git)", refs),
        row("landing: watcher tick, no task landing", idle),
        row(f"landing: watcher tick, {LANDING} landing, refs unchanged", quiet, floor_name="no task landing",
            floor_ms=idle, note=f"one git for-each-ref: {quiet - idle:.1f} ms more than a tick with none"),
        row(f"landing: a resolution of {LANDING} waiting tasks", median(resolution), floor_name="quiet tick",
            floor_ms=quiet, note=f"{LANDING} git merge-base and one for-each-ref; what a tick pays after refs moved"),
    ]


if __name__ == "__main__":
    for result in run():
        print(result)
    sys.exit(0)
