"""``loki.open_store`` is the one public way to open a tree (issue 24, review §5.2 defect 2).

``Store`` is the file store: on a tree whose config names a database it would read and write this
machine's files while the team's state is elsewhere, so ``Store.open`` refuses such a tree, naming
the opener that works on every backend.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import loki
from loki.clock import ManualClock
from loki.errors import InvalidInput
from loki.queue.queue import Queue
from loki.storage import layout
from loki.storage.store import Store
from tests.conftest import postgres_store
from tests.helpers import cli, snapshot_bytes

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def database_tree(root: Path, clock: ManualClock, request: pytest.FixtureRequest) -> Path:
    """``root`` keeps its state in a PostgreSQL schema of its own, which holds one task."""
    store = postgres_store(root, clock)
    request.addfinalizer(store.close)
    (root / layout.CONFIG).write_text(json.dumps(
        {"version": 1, "storage": {"backend": "postgresql", "database": store.db.url}}))
    Queue(store).add("on the team's database", task_id="t1")
    return root


def test_open_store_opens_the_files_of_a_file_tree(root: Path) -> None:
    Queue(Store(root)).add("in the files", task_id="f1")
    store = loki.open_store(root)
    assert isinstance(store, Store) and store.backend == "files"
    assert [t["id"] for t in Queue(store).tasks.view(["pending"])["pending"]] == ["f1"]


def test_open_store_opens_the_database_a_tree_names(database_tree: Path) -> None:
    store = loki.open_store(database_tree)
    try:
        assert store.backend == "postgresql"
        assert [t["id"] for t in Queue(store).tasks.view(["pending"])["pending"]] == ["t1"]
    finally:
        store.close()  # type: ignore[attr-defined]
    listed = cli(["queue", "list", "--json"], root=database_tree).json()  # the CLI opens it the same way
    assert [t["id"] for t in listed["tasks"]] == ["t1"]


def test_store_open_refuses_a_database_tree_naming_open_store(database_tree: Path) -> None:
    before = snapshot_bytes(database_tree)
    with pytest.raises(InvalidInput) as refused:
        Store.open(database_tree)
    message = refused.value.message
    assert "loki.open_store" in message and str(database_tree) in message and "postgresql" in message
    assert refused.value.exit_code == 1
    assert "\n" not in message
    assert snapshot_bytes(database_tree) == before  # nothing was written


def test_store_open_still_opens_a_file_tree(root: Path) -> None:
    assert Store.open(root).backend == "files"


def test_open_store_is_exported_lazily() -> None:
    """``import loki`` stays cheap: naming the opener imports nothing until it is used."""
    code = ("import sys, loki; before = sorted(m for m in sys.modules if m.startswith('loki'));"
            "loki.open_store; after = 'loki.storage.opening' in sys.modules; print(before, after)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.strip() == "['loki'] True"
    assert "open_store" in loki.__all__


def test_every_documentation_example_opens_with_open_store() -> None:
    """No example in the docs opens a tree with the file store's constructor (it ignores the backend)."""
    documents = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    modules = sorted((REPO / "loki").rglob("*.py"))
    offenders = [f"{path.relative_to(REPO)}:{n}" for path in [*documents, *modules]
                 for n, line in enumerate(path.read_text().splitlines(), start=1)
                 if re.search(r"\bStore\.open\(", line) and not re.search(r"\bPgStore\.open\(", line)
                 and "def open" not in line and "refuse" not in line]
    assert offenders == []
    examples = "\n".join(p.read_text() for p in documents)
    assert examples.count("open_store(") >= 4
