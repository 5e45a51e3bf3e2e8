"""The PostgreSQL store's SQL as named queries (loki/storage/postgres/sql/queries.sql, read by queries.py).

Every entry of the file is used (by the code, the benchmarks, or another entry as a ``{{fragment}}``), every
use names an entry, and the loader refuses a file that names a query twice. The file is read once, on first
use, not when the store is imported.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from loki.clock import ManualClock
from loki.storage.postgres import queries
from loki.storage.postgres.queries import QueryFileError, parse, query
from tests.architecture import codebase

REPO = codebase.REPO


def _uses() -> dict[str, list[str]]:
    """``{name: [where]}`` of every ``query("name")`` / ``queries.query("name")`` in loki/ and bench/; a call
    whose name is not written out as a literal fails the test (it could not be checked)."""
    found: dict[str, list[str]] = {}
    for path in [*codebase.python_files(REPO / "loki"), *codebase.python_files(REPO / "bench")]:
        nodes = codebase.walked(path)  # parsed once a run, shared with tests/architecture/
        imported = _imported(nodes)
        for node in nodes:
            if not (isinstance(node, ast.Call) and _is_query(node.func, imported)):
                continue
            where = f"{path.relative_to(REPO)}:{node.lineno}"
            assert len(node.args) == 1 and not node.keywords, f"{where}: query() takes one name"
            names = _literal_names(node.args[0])
            assert names, f"{where}: the query's name must be written out (a literal, or a literal if/else)"
            for name in names:
                found.setdefault(name, []).append(where)
    return found


def _imported(nodes: Iterable[ast.AST]) -> set[str]:
    """How a module names the loader: ``query`` (imported from it) and/or ``queries`` (the module)."""
    names = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module == "loki.storage.postgres.queries":
            names.update(alias.asname or alias.name for alias in node.names if alias.name == "query")
        elif isinstance(node, ast.ImportFrom) and node.module == "loki.storage.postgres":
            names.update(f"{alias.asname or alias.name}." for alias in node.names if alias.name == "queries")
    return names


def _is_query(func: ast.expr, imported: set[str]) -> bool:
    if isinstance(func, ast.Name):
        return func.id in imported
    return isinstance(func, ast.Attribute) and func.attr == "query" and isinstance(func.value, ast.Name) \
        and f"{func.value.id}." in imported


def _literal_names(arg: ast.expr) -> list[str]:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if isinstance(arg, ast.IfExp):
        both = _literal_names(arg.body), _literal_names(arg.orelse)
        return [*both[0], *both[1]] if all(both) else []
    return []


def _raw_entries() -> dict[str, str]:
    """The file's entries before fragments are spliced in (to see which entry uses which fragment)."""
    entries: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in Path(queries.QUERIES_FILE).read_text(encoding="utf-8").splitlines():
        name = queries._header(line)
        if name is not None:
            current = entries[name] = []
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines) for name, lines in entries.items()}


def test_every_named_query_is_used_and_every_use_names_one() -> None:
    named = queries.load(queries.QUERIES_FILE)
    uses = _uses()
    unknown = {name: where for name, where in uses.items() if name not in named}
    assert not unknown, f"query() names that sql/queries.sql does not define: {unknown}"
    as_fragments = {used for text in _raw_entries().values() for used in queries.fragments(text)}
    unused = sorted(set(named) - set(uses) - as_fragments)
    assert not unused, f"entries of sql/queries.sql nothing uses: {unused}"
    # the check sees the real call sites: the claim is asked by the task store and by the benchmark
    assert {where.split(":")[0] for where in uses["claim"]} == {"loki/storage/postgres/tasks.py",
                                                                 "bench/bench_postgres.py"}


def test_no_sql_text_is_left_in_the_postgres_package() -> None:
    """The statements live in the .sql file: no string of the package's Python code starts one."""
    starts = ("SELECT ", "INSERT ", "UPDATE ", "DELETE ", "WITH ", "LISTEN ", "ANALYZE ", "SET ")
    found = []
    for path in codebase.python_files(REPO / "loki" / "storage" / "postgres"):
        nodes = codebase.walked(path)
        docstrings = {id(node.body[0].value) for node in nodes
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
                      and isinstance(node.body[0], ast.Expr)}
        for node in nodes:
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                    and node.value.lstrip().upper().startswith(starts):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value[:40]!r}")
    assert not found


def test_the_loader_refuses_a_name_given_twice() -> None:
    text = "-- header\n\n-- claim --\n-- the first\nSELECT 1;\n\n-- census --\nSELECT 2\n\n-- claim --\nSELECT 3\n"
    with pytest.raises(QueryFileError) as caught:
        parse(text, "queries.sql")
    assert str(caught.value) == "queries.sql:10: the query name 'claim' is already used at line 3"


def test_the_loader_refuses_an_unknown_fragment_an_empty_statement_and_a_fragment_loop() -> None:
    with pytest.raises(QueryFileError, match=r"queries\.sql:1: the query 'a' uses \{\{nothing\}\}, which is not"):
        parse("-- a --\nSELECT {{nothing}}\n", "queries.sql")
    with pytest.raises(QueryFileError, match=r"queries\.sql:1: the query 'a' has no statement"):
        parse("-- a --\n-- only a description\n\n-- b --\nSELECT 1\n", "queries.sql")
    with pytest.raises(QueryFileError, match="includes itself"):
        parse("-- a --\nSELECT {{b}}\n-- b --\n({{a}})\n", "queries.sql")


def test_the_loader_keeps_the_statement_and_drops_the_description() -> None:
    parsed = parse("preamble, not a query\n-- ready --\n-- says what it promises\n-- over two lines\n"
                   "t.state = 'pending'\n\n-- a note on the next section, 100% a comment\n\n"
                   "-- claim --\n-- the best ready task\nSELECT 1 FROM t WHERE {{ready}}\n"
                   "  -- a comment inside the statement stays\n LIMIT 1;\n\n-- ====\n", "x.sql")
    assert parsed == {"ready": "t.state = 'pending'",
                      "claim": "SELECT 1 FROM t WHERE t.state = 'pending'\n  -- a comment inside the statement stays\n"
                               " LIMIT 1"}
    for name, statement in queries.load(queries.QUERIES_FILE).items():
        assert not statement.splitlines()[-1].lstrip().startswith("--"), name


def test_the_claim_and_the_census_share_the_readiness_fragments() -> None:
    """The readiness twin is written once: the claim and the census splice the same text of each condition."""
    claim, census = query("claim"), query("census")
    for fragment in ("deferred", "waiting", "held", "dependencies_done", "of_type", "skipped_type"):
        assert query(fragment) in claim and query(fragment) in census, fragment
    assert "FOR UPDATE OF t SKIP LOCKED" in claim and "{{" not in claim and "--" not in claim


def test_column_lists_twice_written_agree() -> None:
    """Two lists the SQL and the Python side both hold (the row decoders zip them): the same, in order."""
    from loki.memory import patterns
    from loki.storage.postgres import tasks

    assert [c.strip() for c in query("pattern_columns").split(",")] == [f"p.{n}" for n in ("id", *patterns.COLUMNS)]
    for name in ("every_hot_row_unchecked", "every_archived_row_unchecked"):
        selected = query(name).split("SELECT", 1)[1].split("FROM", 1)[0]
        assert [c.strip() for c in selected.split(",")] == ["id", "state", "archived", "doc", *tasks.DERIVED]


def test_the_file_is_read_once_and_not_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    script = ("import loki.storage.postgres.store, loki.storage.postgres.tasks, loki.storage.postgres.items\n"
              "from loki.storage.postgres import queries\n"
              "print(queries._loaded is None)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True)
    assert result.stdout.strip() == "True"

    reads: list[str] = []
    real_load = queries.load

    def counting(path: str) -> dict[str, Any]:
        reads.append(path)
        return real_load(path)

    monkeypatch.setattr(queries, "_loaded", None)
    monkeypatch.setattr(queries, "load", counting)
    assert query("claim") == query("claim") and query("census")
    assert reads == [queries.QUERIES_FILE]


def test_an_unknown_name_is_refused_naming_the_file() -> None:
    with pytest.raises(KeyError, match=r"queries\.sql has no query named 'clam'"):
        query("clam")


def test_the_benchmarks_explain_runs_the_named_claim_and_claims_nothing(root: Path, clock: ManualClock) -> None:
    from bench.bench_postgres import claim_plan, execution_ms
    from loki.queue.queue import Queue
    from tests.conftest import postgres_store

    store = postgres_store(root, clock)
    try:
        queue = Queue(store)
        task = queue.add("the one task")
        plan = claim_plan(queue)
        assert plan[0].startswith("Limit") and any("LockRows" in line for line in plan), plan
        assert execution_ms(plan) > 0
        assert [t["id"] for t in queue.ready()["ready"]] == [task["id"]]  # still pending, unclaimed
        assert queue.claim("a1")["id"] == task["id"]  # the lock EXPLAIN took ended with its transaction
    finally:
        store.close()


@pytest.mark.slow
def test_the_wheel_ships_the_query_file_and_the_migrations(tmp_path: Path) -> None:
    """A wheel built from the checkout (``pip wheel --no-deps .``, as the README says) holds every .sql file
    of the PostgreSQL package, byte for byte: an installed loki reads its queries from there."""
    import zipfile

    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", str(REPO), "-w", str(tmp_path)],
                   check=True, capture_output=True, cwd=tmp_path)
    (wheel,) = tmp_path.glob("loki_state-*.whl")
    package = REPO / "loki" / "storage" / "postgres"
    wanted = {f"loki/storage/postgres/{p.relative_to(package).as_posix()}": p.read_bytes()
              for p in package.rglob("*.sql")}
    assert "loki/storage/postgres/sql/queries.sql" in wanted and len(wanted) >= 4
    with zipfile.ZipFile(wheel) as archive:
        shipped = {name: archive.read(name) for name in archive.namelist() if name.endswith(".sql")}
    assert shipped == wanted
