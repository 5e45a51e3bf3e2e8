"""``where`` and ``local_root``: the two meanings ``root`` had (issue 24, review §5.2 defect 3).

``where`` is what a person is shown (a directory, ``:memory:``, a database without its password);
``local_root`` is this machine's ``.loki/`` directory, or None when there is none (memory; a database
opened by URL alone). ``loki work`` hands the command ``LOKI_ROOT`` from ``local_root``, so nested
``loki`` commands find the same tree on every backend that has one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from loki.clock import ManualClock
from loki.queue.queue import Queue
from loki.storage import layout
from loki.work import placeholders
from loki.work.loop import Worker, WorkOptions, environment
from tests.conftest import postgres_store
from tests.helpers import loki_proc

# The command records the LOKI_ROOT it got, and what a nested `loki queue show` of its own task says.
RECORD = ("import json, os, subprocess, sys\n"
          "shown = subprocess.run([sys.executable, '-m', 'loki', 'queue', 'show', os.environ['LOKI_TASK_ID'],"
          " '--json'], capture_output=True, text=True, cwd='/')\n"
          "state = json.loads(shown.stdout)['state'] if shown.returncode == 0 else shown.stderr.strip()\n"
          "with open(os.environ['LOKI_RESULT_FILE'], 'w') as out:\n"
          "    json.dump({'root': os.environ.get('LOKI_ROOT'), 'state': state}, out)\n")


def test_where_and_local_root_on_every_backend(backend: str, backend_store: Any, root: Path) -> None:
    where, local = backend_store.where, backend_store.local_root
    if backend == "file":
        assert where == local == str(root)
    elif backend == "memory":
        assert (where, local) == (":memory:", None)
    else:
        assert local == str(root)
        assert where.startswith("postgresql://") and "(schema " in where and str(root) not in where


def test_environment_names_the_tree_only_when_there_is_one(tmp_path: Path) -> None:
    values = placeholders.values({"id": "t1", "title": "x", "type": None, "priority": "medium", "labels": [],
                                  "payload": {}, "description": "", "attempts": [], "claim_token": "k"},
                                 agent="a", task_file=str(tmp_path / "t.json"), result_file=str(tmp_path / "r.json"))
    assert environment(values, str(tmp_path / ".loki"))["LOKI_ROOT"] == str(tmp_path / ".loki")
    assert "LOKI_ROOT" not in environment(values, None)


@pytest.fixture(params=["file", "postgres"])
def tree_store(request: pytest.FixtureRequest, root: Path, clock: ManualClock) -> Any:
    """The store of the tree at ``root``; on PostgreSQL the tree's config names the test's database, so a
    nested ``loki`` command that finds ``root`` opens the same state."""
    from loki.storage.store import Store

    if request.param == "file":
        return Store(root, clock=clock)
    store = postgres_store(root, clock)
    request.addfinalizer(store.close)
    (root / layout.CONFIG).write_text(json.dumps(
        {"version": 1, "storage": {"backend": "postgresql", "database": store.db.url}}))
    return store


@pytest.mark.slow  # the command starts a nested loki process
def test_loki_work_exports_loki_root_on_every_backend_with_a_tree(tree_store: Any, root: Path) -> None:
    queue = Queue(tree_store)
    queue.add("record the root", task_id="t1")
    summary = Worker(tree_store, WorkOptions(command=[sys.executable, "-c", RECORD], agent="a", max_tasks=1),
                     stdout=lambda _: None, stderr=lambda _: None, notify=lambda _: None).run_unguarded()
    assert summary.exit_code == 0, summary.reason
    result = queue.show("t1")["task"]["result"]["data"]
    assert result == {"root": str(root), "state": "in-progress"}  # the nested command saw its own claim


@pytest.mark.slow  # real processes
def test_loki_work_from_the_command_line_exports_loki_root(tree_store: Any, root: Path) -> None:
    Queue(tree_store).add("record the root", task_id="t1")
    done = loki_proc(["work", "--agent", "a", "--max-tasks", "1", "--", sys.executable, "-c", RECORD], root=root)
    assert done.code == 0, done.stderr
    assert Queue(tree_store).show("t1")["task"]["result"]["data"] == {"root": str(root), "state": "in-progress"}
