"""Choosing PostgreSQL: `loki init --database`, `loki db upgrade`, and what a bad URL or database gets.

Every refusal is one line naming the database (never its password) and the cause, exit 1, with
nothing written: no tables on the server, no `.loki/` on this machine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests import pgserver
from tests.helpers import cli, loki_proc

psycopg: Any = pgserver.driver()

FAST_RETRY = {"LOKI_DB_RETRY_SECONDS": "0.2"}


@pytest.fixture
def empty_url() -> str:
    """A new, empty schema (no loki tables yet)."""
    return pgserver.fresh_schema_url(migrate=False)


def loki_tables(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
                            "ORDER BY 1").fetchall()
    return [r[0] for r in rows]


def init(tmp_path: Path, url: str, *extra: str, env: dict[str, str] | None = None) -> Any:
    return cli(["init", "--path", str(tmp_path), "--database", url, *extra], env={**FAST_RETRY, **(env or {})})


def test_init_creates_the_schema_and_names_the_database_in_config(tmp_path: Path, empty_url: str) -> None:
    result = init(tmp_path, empty_url, "--json")
    assert result.code == 0, result.stderr
    report = result.json()
    assert report["created"] is True and report["backend"] == "postgresql"
    assert report["migrations"][0] == "001_meta"
    assert "loki_meta" in loki_tables(empty_url)
    config = json.loads((tmp_path / ".loki" / "config" / "loki.json").read_text())
    assert config["storage"] == {"backend": "postgresql", "database": empty_url}
    status = cli(["status", "--json"], root=tmp_path / ".loki")
    assert status.code == 0, status.stderr
    assert status.json()["backend"] == "postgresql"
    assert status.json()["queue"]["pending"] == 0


def test_a_second_machine_joins_and_sees_the_same_tasks(tmp_path: Path, empty_url: str) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    assert init(one, empty_url).code == 0
    joined = init(two, empty_url)
    assert joined.code == 0, joined.stderr
    assert "joined" in joined.stdout
    added = cli(["queue", "add", "shared work", "--json"], root=one / ".loki")
    assert added.code == 0, added.stderr
    listed = cli(["queue", "list", "--json"], root=two / ".loki")
    assert [t["title"] for t in listed.json()["tasks"]] == ["shared work"]


def test_init_again_changes_nothing(tmp_path: Path, empty_url: str) -> None:
    assert init(tmp_path, empty_url).code == 0
    config = (tmp_path / ".loki" / "config" / "loki.json").read_bytes()
    again = init(tmp_path, empty_url, "--json")
    assert again.code == 0 and again.json()["created"] is False and again.json()["config_written"] is False
    assert (tmp_path / ".loki" / "config" / "loki.json").read_bytes() == config


def test_the_password_is_never_saved(tmp_path: Path) -> None:
    cluster = private_cluster()
    url = cluster.url().replace("postgres@", f"{pgserver.PASSWORD_ROLE}:{pgserver.PASSWORD}@")
    result = init(tmp_path, url)
    assert result.code == 0, result.stderr
    assert "password in the URL was not saved" in result.stdout
    for path in (tmp_path / ".loki").rglob("*"):
        if path.is_file():
            assert pgserver.PASSWORD.encode() not in path.read_bytes(), path
    # without the password, the tree cannot be opened; libpq's PGPASSWORD supplies it
    refused = cli(["status"], root=tmp_path / ".loki", env=FAST_RETRY)
    assert refused.code == 1 and "no password supplied" in refused.stderr
    assert pgserver.PASSWORD not in refused.stderr
    ok = cli(["status", "--json"], root=tmp_path / ".loki", env={"PGPASSWORD": pgserver.PASSWORD})
    assert ok.code == 0, ok.stderr


_cluster: list[pgserver.Cluster] = []


def private_cluster() -> pgserver.Cluster:
    """A cluster of this module's own (the password role is set up by tests/pgserver.py)."""
    if not _cluster:
        _cluster.append(pgserver.start_cluster())
    return _cluster[0]


# -- bad input: one line, exit 1, nothing written ------------------------------------------------------


def refused(tmp_path: Path, url: str, env: dict[str, str] | None = None) -> str:
    result = init(tmp_path, url, env=env)
    assert result.code == 1, (result.stdout, result.stderr)
    assert not (tmp_path / ".loki").exists(), "nothing is written on this machine"
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1, message
    return message


def test_a_url_that_is_not_postgresql(tmp_path: Path) -> None:
    message = refused(tmp_path, "mysql://root@localhost/app")
    assert "is not a PostgreSQL URL" in message and "--database" in message


def test_a_url_without_a_database(tmp_path: Path) -> None:
    assert "names no database" in refused(tmp_path, "postgresql://user@localhost")


def test_a_wrong_password(tmp_path: Path) -> None:
    cluster = private_cluster()
    url = cluster.url().replace("postgres@", f"{pgserver.PASSWORD_ROLE}:wrong-password@")
    message = refused(tmp_path, url)
    assert "password authentication failed" in message
    assert "wrong-password" not in message


def test_an_unreachable_host(tmp_path: Path) -> None:
    result = init(tmp_path, "postgresql://nobody@127.0.0.1:9/loki")
    assert result.code == 1 and not (tmp_path / ".loki").exists(), result
    # A refused connection may be a server restarting: loki says at once that it retries, then gives up.
    retrying, message = result.stderr.strip().splitlines()
    assert retrying.startswith("loki: cannot reach the database postgresql://nobody@127.0.0.1:9/loki")
    assert "retrying for up to 0.2s (LOKI_DB_RETRY_SECONDS)" in retrying
    assert "cannot connect to postgresql://nobody@127.0.0.1:9/loki" in message
    assert "refused" in message.lower()


def test_a_database_that_does_not_exist(tmp_path: Path) -> None:
    # The database's name swapped in the URL's path, with or without a query (LOKI_TEST_DATABASE_URL may have
    # none: a replace that missed once made this test create loki's tables in the real database).
    parts = urlsplit(pgserver.server_url())
    url = urlunsplit(parts._replace(path="/no_such_database"))
    assert url != pgserver.server_url()
    assert 'database "no_such_database" does not exist' in refused(tmp_path, url)


def test_a_database_of_another_application(tmp_path: Path, empty_url: str) -> None:
    with psycopg.connect(empty_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE invoices (id int)")
    message = refused(tmp_path, empty_url)
    assert "another application's tables (invoices)" in message
    assert loki_tables(empty_url) == ["invoices"], "no loki table was created"


def test_a_schema_newer_than_this_loki(tmp_path: Path) -> None:
    url = pgserver.fresh_schema_url()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO loki_migrations (version, name) VALUES (999, 'from_the_future')")
    message = refused(tmp_path, url)
    assert "schema version 999, newer than this loki's" in message
    # a tree already on it refuses every command the same way, before writing
    tree = tmp_path / "tree"
    (tree / ".loki" / "config").mkdir(parents=True)
    (tree / ".loki" / "config" / "loki.json").write_text(
        json.dumps({"version": 1, "storage": {"backend": "postgresql", "database": url}}))
    added = cli(["queue", "add", "x"], root=tree / ".loki")
    assert added.code == 1 and "newer than this loki's" in added.stderr


def test_an_older_schema_needs_db_upgrade(tmp_path: Path, empty_url: str) -> None:
    from loki.storage.postgres import migrations

    with psycopg.connect(empty_url, autocommit=True) as conn:  # only the first migration, as an old loki left it
        _, name, sql = migrations.migrations()[0]
        conn.execute(sql.encode())
        conn.execute("INSERT INTO loki_migrations (version, name) VALUES (1, %s)", (name,))
    message = refused(tmp_path, empty_url)
    assert "run `loki db upgrade`" in message
    upgraded = cli(["db", "upgrade", "--database", empty_url, "--json"])
    assert upgraded.code == 0, upgraded.stderr
    assert upgraded.json()["from_version"] == 1
    assert upgraded.json()["schema_version"] == migrations.latest()
    again = cli(["db", "upgrade", "--database", empty_url, "--json"])
    assert again.code == 0 and again.json()["migrations"] == []
    assert init(tmp_path, empty_url).code == 0


def test_db_upgrade_on_a_file_tree_says_so(root: Path) -> None:
    result = cli(["db", "upgrade"], root=root)
    assert result.code == 1 and "keeps its state in files" in result.stderr


def test_init_database_over_a_file_tree_with_tasks_is_refused(tmp_path: Path, empty_url: str) -> None:
    assert cli(["init", "--path", str(tmp_path)]).code == 0
    assert cli(["queue", "add", "local work"], root=tmp_path / ".loki").code == 0
    before = (tmp_path / ".loki" / "config" / "loki.json").read_bytes()
    result = init(tmp_path, empty_url)
    assert result.code == 1 and "loki migrate --to" in result.stderr and "1 pending" in result.stderr
    assert (tmp_path / ".loki" / "config" / "loki.json").read_bytes() == before
    assert loki_tables(empty_url) == []


def test_loki_database_url_chooses_postgresql_at_init(tmp_path: Path, empty_url: str) -> None:
    result = cli(["init", "--path", str(tmp_path), "--json"], env={"LOKI_DATABASE_URL": empty_url})
    assert result.code == 0, result.stderr
    assert result.json()["backend"] == "postgresql"


def test_without_psycopg_the_error_names_the_extra(tmp_path: Path, empty_url: str) -> None:
    assert init(tmp_path, empty_url).code == 0
    blocker = tmp_path / "blocker"
    (blocker / "psycopg").mkdir(parents=True)
    (blocker / "psycopg" / "__init__.py").write_text("raise ImportError('psycopg is not installed here')\n")
    result = loki_proc(["status"], root=tmp_path / ".loki",
                       env={"PYTHONPATH": os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")])})
    assert result.code == 1
    assert "pip install 'loki-state[postgres]'" in result.stderr


def test_status_validate_and_doctor_say_which_backend(tmp_path: Path, empty_url: str) -> None:
    files, database = tmp_path / "files", tmp_path / "db"
    assert cli(["init", "--path", str(files)]).code == 0
    assert init(database, empty_url).code == 0
    for tree, backend in ((files / ".loki", "files"), (database / ".loki", "postgresql")):
        for command in ("status", "validate", "doctor"):
            result = cli([command, "--json"], root=tree)
            assert result.code == 0, (command, result.stderr)
            assert result.json()["backend"] == backend, command
        assert f"({backend}): valid" in cli(["validate"], root=tree).stdout
        assert f"({backend}): healthy" in cli(["doctor"], root=tree).stdout


def test_migration_004_adds_the_landing_state_to_a_schema_with_tasks(tmp_path: Path, empty_url: str) -> None:
    """A database an older loki (schema 3) filled: `db upgrade` lets its tasks move to landing (docs/verify.md),
    keeps them, and the state column still refuses a state loki does not know."""
    from loki.storage.postgres import migrations

    with psycopg.connect(empty_url, autocommit=True) as conn:
        for number, name, sql in migrations.migrations()[:3]:
            conn.execute(sql.encode())
            conn.execute("INSERT INTO loki_migrations (version, name) VALUES (%s, %s)", (number, name))
        with pytest.raises(psycopg.errors.CheckViolation):  # before 004, no row may be landing
            conn.execute("INSERT INTO loki_tasks (id, state, seq, version, priority_rank, doc) "
                         "VALUES ('x', 'landing', 1, 1, 1, '{}')")
    upgraded = cli(["db", "upgrade", "--database", empty_url, "--json"])
    assert upgraded.code == 0, upgraded.stderr
    assert upgraded.json()["migrations"] == ["004_landing"]
    assert init(tmp_path, empty_url).code == 0
    root = tmp_path / ".loki"
    assert cli(["queue", "add", "Fix it", "--id", "t1", "--land", "main"], root=root).code == 0
    assert cli(["queue", "claim", "--agent", "eng-1"], root=root).code == 0
    head = "94a0393f9d14" + "0" * 28
    from loki.queue.queue import Queue
    from loki.storage.opening import open_store

    store = open_store(str(root))
    try:
        task = Queue(store).complete("t1", "eng-1", head=head, work_branch="feat")
        assert task["status"] == "landing"
        assert [t["id"] for t in store.tasks().tasks_in("landing")] == ["t1"]
    finally:
        store.close()
    with psycopg.connect(empty_url, autocommit=True) as conn:
        assert conn.execute("SELECT state FROM loki_tasks WHERE id = 't1'").fetchone() == ("landing",)
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("UPDATE loki_tasks SET state = 'landed' WHERE id = 't1'")
