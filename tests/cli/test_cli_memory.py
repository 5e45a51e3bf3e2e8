"""``loki errors search|stats|reindex|compact``: error memory from the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from loki.clock import ManualClock
from loki.memory.memory import ErrorMemory
from loki.storage import layout
from loki.storage.store import Store
from tests.contract.test_memory import capture_case, resolve
from tests.helpers import cli


@pytest.fixture
def seeded(store: Store, clock: ManualClock) -> Store:
    with ErrorMemory(store) as memory:
        errors = [capture_case(memory, "pytest_fail_verbose") for _ in range(2)]
        clock.advance(60)
        capture_case(memory, "rustc_type_mismatch")
        capture_case(memory, "bash_command_not_found")
        resolve(memory, errors, "pytest -x tests/test_calc.py", calls_between=1)
    return store


def test_search_for_people(seeded: Store, root: Path) -> None:
    result = cli(["errors", "search", "KeyError pear"], root=root)
    assert result.code == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0] == ("1. Bash `cd pyproj && pytest -v -p no:cacheprovider tests/test_calc.py`  [test_failure] 2x, "
                        "last 2026-01-25T10:00:00Z (first 2026-01-25T10:00:00Z); branch main")
    assert "   at: tests/test_calc.py:6, tests/test_calc.py:15" in lines
    assert "   fixed by `pytest -x tests/test_calc.py` (1 call later, confidence 0.79)" in lines
    assert lines[-1] == "1 result(s) for 'KeyError pear'"
    assert "\x02" not in result.stdout and "**" not in result.stdout  # markers become terminal styles


def test_search_for_agents(seeded: Store, root: Path) -> None:
    result = cli(["errors", "search", "mismatched", "--json"], root=root)
    doc = result.json()
    assert set(doc) == {"query", "results", "warnings", "index_rebuilt"}
    (hit,) = doc["results"]
    assert hit["error_message"] == "error[E0308]: mismatched types" and "**mismatched**" in hit["snippet"]
    assert hit["last_seen"] == "2026-01-25T10:01:00Z" and hit["resolution"] is None


def test_search_options(seeded: Store, root: Path) -> None:
    assert len(cli(["errors", "search", "test", "--limit", "1", "--json"], root=root).json()["results"]) == 1
    only = cli(["errors", "search", "error OR test", "--class", "compile_error", "--json"], root=root).json()
    assert [h["error_class"] for h in only["results"]] == ["compile_error"]
    fixed = cli(["errors", "search", "test", "--with-resolution", "--json"], root=root).json()
    assert [h["resolution"]["resolution"] for h in fixed["results"]] == ["pytest -x tests/test_calc.py"]
    none = cli(["errors", "search", "zzzz"], root=root)
    assert (none.code, none.stdout) == (0, "0 result(s) for 'zzzz'\n")


def test_search_refuses_a_query_without_words(seeded: Store, root: Path) -> None:
    result = cli(["errors", "search", "***"], root=root)
    assert result.code == 2 and "the search query has no words in it" in result.stderr
    assert cli(["errors", "search", "x", "--limit", "0"], root=root).code == 2


def test_search_reports_skipped_lines_and_rebuilds(seeded: Store, root: Path) -> None:
    cli(["errors", "search", "test"], root=root)
    with (root / layout.MEMORY_LOG).open("a") as log:
        log.write("not json\n")
    result = cli(["errors", "search", "test"], root=root)
    assert result.code == 0
    assert result.stderr == "warning: memory/errors.jsonl line 6: invalid JSON: Expecting value (line 1, " \
                            "column 1); skipped\n"
    agents = cli(["errors", "reindex", "--json"], root=root).json()
    assert agents["warnings"] == ["memory/errors.jsonl line 6: invalid JSON: Expecting value (line 1, column 1); "
                                  "skipped"]
    (root / layout.MEMORY_LOG).write_bytes((root / layout.MEMORY_LOG).read_bytes()[:-9])
    rebuilt = cli(["errors", "search", "test"], root=root)
    assert "note: the search index was rebuilt from memory/errors.jsonl: the log is" in rebuilt.stderr


def test_stats(seeded: Store, root: Path) -> None:
    doc = cli(["errors", "stats", "--json"], root=root).json()
    assert (doc["errors"], doc["patterns"], doc["resolutions"], doc["resolved_share"]) == (4, 3, 1, 0.3333)
    assert doc["most_frequent"][0]["occurrences"] == 2
    people = cli(["errors", "stats", "--top", "2"], root=root)
    assert people.code == 0
    assert people.stdout.startswith("error memory: 4 error(s) in 3 pattern(s); 1 resolution(s); "
                                    "1 pattern(s) resolved (33.3%)")
    assert "test_failure" in people.stdout and "most frequent" in people.stdout


def test_stats_of_an_empty_memory(root: Path) -> None:
    doc = cli(["errors", "stats", "--json"], root=root).json()
    assert (doc["errors"], doc["patterns"], doc["resolved_share"], doc["most_frequent"]) == (0, 0, 0.0, [])


def test_reindex(seeded: Store, root: Path) -> None:
    result = cli(["errors", "reindex"], root=root)
    assert result.code == 0
    assert result.stdout.startswith("reindexed memory/errors.jsonl: 5 record(s) (")
    assert "0 unreadable line(s) skipped, 1 prefix hint(s)" in result.stdout
    doc = cli(["errors", "reindex", "--json"], root=root).json()
    assert (doc["added"], doc["hints"], doc["rebuilt"]) == (5, 1, "asked for (loki errors reindex)")


def test_compact(seeded: Store, root: Path) -> None:
    before = (root / layout.MEMORY_LOG).stat().st_size
    result = cli(["errors", "compact"], root=root)
    assert result.code == 0
    assert result.stdout.splitlines()[:3] == [
        f"compacted memory/errors.jsonl: 5 -> 4 line(s), {before} -> {(root / layout.MEMORY_LOG).stat().st_size} bytes",
        "  4 error(s) in 3 pattern(s): 1 duplicate line(s) merged, 0 unresolved pattern(s) dropped (0 error(s)) "
        "to stay within 100000 lines",
        "  1 resolution(s) kept (0 duplicate(s) merged)"]
    bounded = cli(["errors", "compact", "--max-records", "2", "--json"], root=root).json()
    assert (bounded["dropped_patterns"], bounded["lines_after"], bounded["over_bound"]) == (2, 2, False)
    assert cli(["errors", "search", "KeyError", "--with-resolution", "--json"], root=root).json()["results"]


def test_every_memory_command_has_help(root: Path) -> None:
    for command in ("search", "stats", "reindex", "compact"):
        result = cli(["errors", command, "--help"], root=root)
        assert result.code == 0 and "Usage:" in result.stdout
    assert "error memory" in cli(["errors", "--help"], root=root).stdout
