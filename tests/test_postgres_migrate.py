"""`loki migrate` between a file tree and PostgreSQL, through the CLI, both ways, verified.

The populated tree of tests/test_migrate.py (every section holds something) moves to a database and
back; the content read through the interfaces is the same at each step, the files' old state is set
aside (never deleted), and the tree works on each backend in between.
"""

from __future__ import annotations

import json
from pathlib import Path

from loki.storage.migrate import content, digest
from loki.storage.opening import open_store
from loki.storage.store import Store
from loki.storage.tree import init_tree
from tests import pgserver
from tests.helpers import cli
from tests.test_migrate import populate

pgserver.driver()


def test_files_to_postgresql_and_back(tmp_path: Path) -> None:
    root = tmp_path / ".loki"
    init_tree(str(root))
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    populate(root)
    before = digest(content(Store(root)))
    url = pgserver.fresh_schema_url(migrate=False)

    moved = cli(["migrate", "--to", url, "--json"], root=root)
    assert moved.code == 0, moved.stderr
    report = moved.json()
    assert report["backend"] == "postgresql" and report["sections"] == before
    assert Path(report["set_aside"]).is_dir() and (Path(report["set_aside"]) / "queue").is_dir()
    assert not (root / "queue").exists(), "the files' state is set aside, not left to be read by mistake"
    config = json.loads((root / "config" / "loki.json").read_text())
    assert config["storage"] == {"backend": "postgresql", "database": url}
    on_database = open_store(str(root))
    assert on_database.backend == "postgresql"
    assert digest(content(on_database)) == before
    assert cli(["validate"], root=root).code == 0
    again = cli(["migrate", "--to", url], root=root)
    assert again.code == 1 and "already on" in again.stderr

    back = cli(["migrate", "--to", "files", "--json"], root=root)
    assert back.code == 0, back.stderr
    assert back.json()["backend"] == "files"
    assert "storage" not in json.loads((root / "config" / "loki.json").read_text())
    assert digest(content(Store(root))) == before
    assert cli(["validate"], root=root).code == 0
    status = cli(["status", "--json"], root=root).json()
    assert status["backend"] == "files" and status["queue"]["dead-letter"] == 1


def test_a_database_that_holds_state_is_refused(tmp_path: Path) -> None:
    url = pgserver.fresh_schema_url(migrate=False)
    other = tmp_path / "other"
    other.mkdir()
    assert cli(["init", "--path", str(other), "--database", url]).code == 0
    assert cli(["queue", "add", "theirs"], root=other / ".loki").code == 0
    root = tmp_path / "mine" / ".loki"
    init_tree(str(root))
    assert cli(["queue", "add", "mine"], root=root).code == 0
    before = (root / "queue" / "pending.json").read_bytes()
    refused = cli(["migrate", "--to", url], root=root)
    assert refused.code == 1 and "already holds state (1 tasks)" in refused.stderr
    assert (root / "queue" / "pending.json").read_bytes() == before
    assert "storage" not in json.loads((root / "config" / "loki.json").read_text())
