"""Rows edited with psql (issue 22, "Bad rows and bad bytes"): a database tree checks every row it reads.

A `doc` that is not an object or lacks fields, a `doc.id` that is not its row's id, duplicate keys, a
`priority_rank` that disagrees with `doc.priority`, a non-UTF-8 log line, a dead-letter metadata value of
`[]`: `loki validate` reports each (as it reports the same line in a file), and no command crashes or
trusts the row: each refuses with one line naming the row and what is wrong (exit 1), and nothing changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loki.errors import StateFileError
from tests import pgserver
from tests.helpers import cli

psycopg: Any = pgserver.driver()


@pytest.fixture
def db_tree(tmp_path: Path) -> tuple[Path, str]:
    """A database tree holding one pending task t1 (medium) and one completed task done1."""
    url = pgserver.fresh_schema_url(migrate=False)
    assert cli(["init", "--path", str(tmp_path), "--database", url]).code == 0
    tree = tmp_path / ".loki"
    assert cli(["queue", "add", "a task", "--id", "t1"], root=tree).code == 0
    assert cli(["queue", "add", "another", "--id", "done1"], root=tree).code == 0
    assert cli(["queue", "claim", "--agent", "a0", "--id", "done1"], root=tree).code == 0
    assert cli(["queue", "complete", "done1", "--agent", "a0"], root=tree).code == 0
    return tree, url


def psql(url: str, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description is not None else []


def rows(url: str) -> list[tuple[str, str, str]]:
    return psql(url, "SELECT id, state, doc::text FROM loki_tasks ORDER BY id")


EDITS = {
    "doc-not-an-object": ("UPDATE loki_tasks SET doc = '[]' WHERE id = 't1'", "row 't1'", "not an object"),
    "doc-a-string": ("UPDATE loki_tasks SET doc = '\"t1\"' WHERE id = 't1'", "row 't1'", "not an object"),
    "doc-lacks-fields": ("UPDATE loki_tasks SET doc = (doc::jsonb - 'title' - 'attempts')::json WHERE id = 't1'",
                         "row 't1'", "'title' is a required property"),
    "doc-id-not-the-rows": ("UPDATE loki_tasks SET doc = jsonb_set(doc::jsonb, '{id}', '\"other\"')::json "
                            "WHERE id = 't1'", "row 't1' at /id", "'other', not the row's id 't1'"),
    "duplicate-keys": ("UPDATE loki_tasks SET doc = ('{\"title\": \"again\", ' || substr(doc::text, 2))::json "
                       "WHERE id = 't1'", "row 't1'", "duplicate key 'title'"),
    "priority-rank-disagrees": ("UPDATE loki_tasks SET priority_rank = 0 WHERE id = 't1'", "row 't1' at /priority",
                                "priority_rank 0"),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_validate_reports_a_row_edited_with_psql(db_tree: tuple[Path, str], edit: str) -> None:
    tree, url = db_tree
    sql, where, reason = EDITS[edit]
    psql(url, sql)
    for command in (["validate"], ["doctor"]):
        result = cli(command, root=tree)
        text = result.stdout + result.stderr
        assert result.code == 1, (command, text)
        assert where in text and reason in text, (command, text)
        assert "internal error" not in text


@pytest.mark.slow  # seven commands a case
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_no_command_trusts_a_row_edited_with_psql(db_tree: tuple[Path, str], edit: str) -> None:
    tree, url = db_tree
    sql, where, reason = EDITS[edit]
    psql(url, sql)
    before = rows(url)
    for command in (["queue", "list"], ["queue", "show", "t1"], ["queue", "claim", "--agent", "a1"],
                    ["queue", "claim", "--agent", "a1", "--id", "t1"], ["status"], ["migrate", "--to", "files"]):
        result = cli(command, root=tree)
        assert result.code == 1, (command, result.stdout, result.stderr)
        lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert len(lines) == 1, (command, result.stderr)
        assert where in lines[0] and reason in lines[0], (command, result.stderr)
        assert "internal error" not in result.stderr and "Traceback" not in result.stderr
        assert "doctor --repair" not in result.stderr  # a database has nothing it would set aside
        assert rows(url) == before, command  # nothing written: above all, no second row for the claim
    assert not (tree / "queue" / "pending.json").exists() or cli(["validate"], root=tree).code == 1


def test_a_claim_never_writes_a_second_row_for_a_mismatched_id(db_tree: tuple[Path, str]) -> None:
    tree, url = db_tree
    psql(url, "UPDATE loki_tasks SET doc = jsonb_set(doc::jsonb, '{id}', '\"t2\"')::json WHERE id = 't1'")
    result = cli(["queue", "claim", "--agent", "a1"], root=tree)
    assert result.code == 1
    assert psql(url, "SELECT id, state FROM loki_tasks ORDER BY id") == [("done1", "completed"), ("t1", "pending")]


def test_the_library_refuses_the_row_by_name(db_tree: tuple[Path, str]) -> None:
    from loki.queue.queue import Queue
    from loki.storage.postgres.store import PgStore

    tree, url = db_tree
    psql(url, "UPDATE loki_tasks SET doc = '[]' WHERE id = 't1'")
    store = PgStore.open(url, root=str(tree))
    try:
        with pytest.raises(StateFileError) as caught:
            Queue(store).list_tasks()
        assert "row 't1'" in caught.value.path
        assert "psql" in caught.value.details["hint"]
        with pytest.raises(StateFileError, match="row 't1'"):
            store.tasks().view(["pending"])
    finally:
        store.close()


def test_a_dead_letter_metadata_of_an_empty_array(db_tree: tuple[Path, str]) -> None:
    tree, url = db_tree
    psql(url, "UPDATE loki_queue_meta SET value = '[]' WHERE key = 'dead-letter'")
    checked = cli(["validate"], root=tree)
    assert checked.code == 1
    assert "dead-letter metadata" in checked.stdout + checked.stderr
    before = psql(url, "SELECT value::text FROM loki_queue_meta")
    for command in (["deadletter", "list"], ["deadletter", "review"], ["migrate", "--to", "files"]):
        result = cli(command, root=tree)
        assert result.code == 1, (command, result.stdout, result.stderr)
        assert "dead-letter metadata" in result.stderr and "internal error" not in result.stderr, command
    assert psql(url, "SELECT value::text FROM loki_queue_meta") == before


def test_a_non_utf8_log_line_is_reported_as_on_files(db_tree: tuple[Path, str]) -> None:
    from loki.storage.postgres.store import PgStore

    tree, url = db_tree
    store = PgStore.open(url, root=str(tree))
    try:
        store.append_lines("logs/events.jsonl", [{"event": "x", "at": "2026-01-25T10:00:00Z"}])
    finally:
        store.close()
    psql(url, "UPDATE loki_log_lines SET data = '\\xff'::bytea || data WHERE log = 'logs/events.jsonl'")
    checked = cli(["validate"], root=tree)
    text = checked.stdout + checked.stderr
    assert checked.code == 1, text
    assert "logs/events.jsonl at line 1" in text and "not valid UTF-8" in text


def test_validate_reports_a_column_that_disagrees_with_its_record(db_tree: tuple[Path, str]) -> None:
    tree, url = db_tree
    psql(url, "UPDATE loki_tasks SET available_at = '2030-01-01T00:00:00Z', dependencies = '{ghost}' "
              "WHERE id = 't1'")
    checked = cli(["validate", "--json"], root=tree)
    assert checked.code == 1
    found = {(p["file"], p["message"].split(" column")[0]) for p in checked.json()["problems"]}
    assert ("the task store's pending row 't1'", "the row's available_at") in found
    assert ("the task store's pending row 't1'", "the row's dependencies") in found


def test_a_hostile_row_id_is_shown_escaped(db_tree: tuple[Path, str]) -> None:
    tree, url = db_tree
    psql(url, "UPDATE loki_tasks SET id = E'evil\\x1b[2J\\u202e' WHERE id = 't1'")
    for command in (["queue", "list"], ["validate"]):
        result = cli(command, root=tree)
        assert result.code == 1, command
        assert "\x1b" not in result.stderr and "\u202e" not in result.stderr
        assert "evil\\x1b[2J\\u202e" in result.stderr, (command, result.stderr)


def test_a_state_document_edited_with_psql_is_refused_by_name(db_tree: tuple[Path, str]) -> None:
    tree, url = db_tree
    assert cli(["breaker", "failure", "api/x", "--error", "boom"], root=tree).code == 0
    psql(url, "UPDATE loki_documents SET data = convert_to('{\"api/x\": []}', 'UTF8') "
              "WHERE name = 'state/circuit-breakers.json'")
    before = psql(url, "SELECT data FROM loki_documents ORDER BY name")
    for command in (["breaker", "status"], ["breaker", "check", "api/x"], ["breaker", "failure", "api/x",
                                                                             "--error", "again"]):
        result = cli(command, root=tree)
        assert result.code == 1, (command, result.stdout, result.stderr)
        assert "state/circuit-breakers.json at /api~1x" in result.stderr, (command, result.stderr)
        assert "internal error" not in result.stderr, command
    assert psql(url, "SELECT data FROM loki_documents ORDER BY name") == before
    checked = cli(["validate"], root=tree)
    assert checked.code == 1 and "state/circuit-breakers.json at /api~1x" in checked.stderr
