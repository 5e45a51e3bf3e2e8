"""Error memory as a library (loki/memory/memory.py, loki/memory/index.py): capture, the index, resolutions."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from loki.clock import ManualClock
from loki.errors import InvalidInput, StateFileError
from loki.memory.memory import ErrorMemory, confidence, error_record
from loki.memory.record import content_hash
from loki.storage import layout
from loki.storage.store import Store
from loki.text.errorscan import scan
from tests.helpers import tree_problems


@pytest.fixture
def store(backend_store: Store) -> Store:
    """Every test here runs on the files and on the memory store (tests/conftest.py: backend)."""
    return backend_store


CORPUS = Path(__file__).resolve().parents[1] / "corpus"
LOG = layout.MEMORY_LOG


def corpus(name: str) -> dict[str, Any]:
    case: dict[str, Any] = json.loads((CORPUS / f"{name}.json").read_text())
    return case


def capture_case(memory: ErrorMemory, name: str, *, branch: str = "main", session: str = "s1") -> dict[str, Any]:
    """Capture one real corpus failure the way the PostToolUseFailure hook does."""
    case = corpus(name)
    result = scan(case["output"], case["exit_code"], command=case["command"])
    return memory.capture("Bash", {"command": case["command"]}, f"Exit code {case['exit_code']}\n{case['output']}",
                          result=result, branch=branch, cwd="/home/dev/shop", session_id=session)


def log_lines(where: Path | Store) -> list[dict[str, Any]]:
    """The error log's records (a tree's directory, or a store of either backend)."""
    store = Store(where) if isinstance(where, Path) else where
    return [json.loads(line) for line in (store.read_text(LOG) or "").splitlines() if line.strip()]


def resolve(memory: ErrorMemory, errors: list[dict[str, Any]], fix: str, calls_between: int = 0,
            same_input: bool = False) -> dict[str, Any]:
    """A resolution as the PostToolUse hook records it when a streak ends."""
    entry = {"call": f"Bash `{errors[-1]['command']}`", "last_error": errors[-1]["error_message"],
             "error_class": errors[-1]["error_class"], "prefix": errors[-1]["prefix"]}
    streak = {"key": "Bash:0123456789abcdef", "entry": entry, "memory_ids": [e["id"] for e in errors],
              "calls_between": calls_between, "same_input": same_input}
    (record,) = memory.record_resolutions([streak], "Bash", {"command": fix}, branch="main", cwd="/home/dev/shop")
    return record


@pytest.fixture
def memory(store: Store) -> ErrorMemory:
    with ErrorMemory(store) as opened:
        yield opened


# -- capture ---------------------------------------------------------------------------------------


@pytest.mark.files("looks at or edits the files themselves")
def test_a_record_has_the_reference_fields_and_more(memory: ErrorMemory, root: Path, clock: ManualClock) -> None:
    record = capture_case(memory, "py_zero_division")
    assert log_lines(memory.store) == [record]
    assert record["kind"] == "error" and record["timestamp"] == "2026-01-25T10:00:00Z"
    # The reference's fields: command, exit code, concise message, first 1000 characters of output,
    # file:line references, stack trace, working directory, session.
    assert record["command"] == corpus("py_zero_division")["command"]
    assert record["exit_code"] == 1
    assert record["error_message"] == "ZeroDivisionError: division by zero"
    assert record["output"] == corpus("py_zero_division")["output"][:1000]
    assert record["stack_trace"].startswith("Traceback (most recent call last):")
    assert record["cwd"] == "/home/dev/shop" and record["session_id"] == "s1"
    # loki's: the class, the branch, the tool, the prefix, a content hash.
    assert (record["error_class"], record["branch"], record["tool"], record["prefix"]) == (
        "python_exception", "main", "Bash", "python -c")
    assert record["content_hash"] == content_hash("Bash", "python -c", record["error_message"])
    assert tree_problems(root) == []


def test_the_output_is_cut_at_1000_characters(memory: ErrorMemory) -> None:
    record = memory.capture("Bash", {"command": "make"}, "Exit code 2\n" + "x" * 5000 + "\nmake: *** [all] Error 2",
                            branch="main")
    assert record["exit_code"] == 2 and len(record["output"]) == 1000
    assert record["error_message"] == "make: *** [all] Error 2"


def test_a_failure_errorscan_cannot_read_still_has_its_first_line(memory: ErrorMemory) -> None:
    record = memory.capture("mcp__db__query", {"sql": "select * from userz"}, "relation \"userz\" does not exist",
                            branch="main")
    assert record["error_class"] == "tool_error" and record["error_message"] == 'relation "userz" does not exist'
    assert record["command"] == '{"sql":"select * from userz"}' and record["prefix"] == ""


@pytest.mark.files("looks at or edits the files themselves")
def test_secrets_are_redacted_before_the_line_is_written(memory: ErrorMemory, root: Path) -> None:
    secret = "ghp_" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp9Oo"
    memory.capture("Bash", {"command": f"git clone https://{secret}@github.com/acme/shop"},
                   f"Exit code 128\nfatal: could not read from https://{secret}@github.com/acme/shop", branch="main")
    data = (root / LOG).read_bytes()
    assert secret.encode() not in data and b"REDACTED" in data


def test_repeats_share_a_content_hash_and_the_log_keeps_every_event(memory: ErrorMemory, root: Path) -> None:
    first = capture_case(memory, "bash_command_not_found")
    second = capture_case(memory, "bash_command_not_found", session="s2")
    assert first["id"] != second["id"] and first["content_hash"] == second["content_hash"]
    assert len(log_lines(memory.store)) == 2
    (hit,) = memory.search("command not found")
    assert hit["occurrences"] == 2 and hit["session_id"] == "s2"  # the latest occurrence is shown
    assert (hit["first_seen"], hit["last_seen"]) == ("2026-01-25T10:00:00Z", "2026-01-25T10:00:00Z")


def test_the_same_error_of_another_kind_of_command_is_another_pattern(memory: ErrorMemory) -> None:
    first = memory.capture("Bash", {"command": "npm test"}, "Exit code 1\nnpm ERR! missing script: test", branch="m")
    other = memory.capture("Bash", {"command": "npm run lint"}, "Exit code 1\nnpm ERR! missing script: test",
                           branch="m")
    flags = memory.capture("Bash", {"command": "npm test --silent"}, "Exit code 1\nnpm ERR! missing script: test",
                           branch="m")
    assert first["content_hash"] != other["content_hash"] and first["content_hash"] == flags["content_hash"]


# -- confidence ------------------------------------------------------------------------------------


def test_confidence_halves_every_half_life_of_calls() -> None:
    assert [confidence(n, 3) for n in (0, 1, 3, 6, 9)] == [1.0, 0.794, 0.5, 0.25, 0.125]
    assert confidence(2, 1) == 0.25 and confidence(-4, 3) == 1.0


# -- search ----------------------------------------------------------------------------------------


def test_search_ranks_by_bm25_and_shows_what_people_need(memory: ErrorMemory) -> None:
    for name in ("py_zero_division", "pytest_fail_verbose", "tsc_errors", "rustc_type_mismatch", "node_type_error"):
        capture_case(memory, name)
    hits = memory.search("mismatched types")
    assert hits[0]["command"] == corpus("rustc_type_mismatch")["command"]
    assert hits[0]["file_references"] == [{"file": "mismatch.rs", "line": 2, "column": 5}]
    assert "**mismatched**" in hits[0]["snippet"] and hits[0]["rank"] == 1 and hits[0]["score"] > 0
    assert set(hits[0]) >= {"command", "error_message", "error_class", "file_references", "stack_trace",
                            "first_seen", "last_seen", "occurrences", "resolution", "branch", "snippet"}
    stemmed = memory.search("failing tests")  # porter: "failing" finds "FAILED", "tests" finds "test"
    assert stemmed and stemmed[0]["error_class"] == "test_failure"


def test_every_word_must_match_unless_none_does(memory: ErrorMemory) -> None:
    capture_case(memory, "py_zero_division")
    capture_case(memory, "bash_command_not_found")
    assert [h["error_class"] for h in memory.search("ZeroDivisionError division")] == ["python_exception"]
    either = memory.search("ZeroDivisionError terraformx")  # no record has both: any word may match
    assert sorted(h["error_class"] for h in either) == ["missing_command", "python_exception"]
    assert memory.search("nothing-like-this") == []


def test_search_filters_and_limits(memory: ErrorMemory) -> None:
    for name in ("pytest_fail_verbose", "pytest_fail_quiet", "unittest_fail", "py_key_error_script"):
        capture_case(memory, name)
    assert len(memory.search("test", limit=2)) == 2
    classes = {h["error_class"] for h in memory.search("test", error_class="test_failure")}
    assert classes == {"test_failure"}
    assert memory.search("test", with_resolution=True) == []
    with pytest.raises(InvalidInput):
        memory.search("  ... ")


def test_a_query_cannot_inject_fts_syntax(memory: ErrorMemory) -> None:
    capture_case(memory, "py_zero_division")
    for query in ("NEAR(a b)", "a OR", "col:x", "ZeroDivisionError^", "-x", 'say "hi'):
        memory.search(query)  # never an FTS5 syntax error: words are quoted
    for query in ('"', "*", ""):
        with pytest.raises(InvalidInput, match="no words"):
            memory.search(query)


# -- the index is a cache ----------------------------------------------------------------------------


@pytest.mark.files("looks at or edits the files themselves")
def test_the_index_catches_up_from_its_offset(memory: ErrorMemory, root: Path) -> None:
    capture_case(memory, "py_zero_division")
    assert memory.sync()["added"] == 1
    assert memory.sync()["added"] == 0  # nothing new: nothing read
    capture_case(memory, "bash_command_not_found")
    report = memory.sync()
    assert report["added"] == 1 and report["rebuilt"] is None
    assert report["offset"] == (root / LOG).stat().st_size


@pytest.mark.files("looks at or edits the files themselves")
def test_a_line_being_written_waits_for_the_next_search(memory: ErrorMemory, root: Path) -> None:
    first = capture_case(memory, "py_zero_division")
    line = json.dumps(dict(first, id="e0000000000000002")).encode() + b"\n"
    with (root / LOG).open("ab") as log:
        log.write(line[:50])  # another process is half-way through its append
    assert memory.sync()["added"] == 1 and memory.warnings == []
    with (root / LOG).open("ab") as log:
        log.write(line[50:])  # ... and finishes it
    assert memory.sync()["added"] == 1 and memory.stats()["errors"] == 2


@pytest.mark.files("looks at or edits the files themselves")
def test_deleting_the_index_loses_nothing(memory: ErrorMemory, root: Path) -> None:
    errors = [capture_case(memory, name) for name in ("pytest_fail_verbose", "pytest_fail_verbose", "tsc_errors")]
    resolve(memory, errors[:2], "pytest -p no:randomly tests/test_calc.py", calls_between=2)
    capture_case(memory, "rustc_borrow_error")
    queries = ["test_calc", "Type number", "borrow", "assert", "tsc", "pytest"]
    before = {q: memory.search(q) for q in queries}
    stats = memory.stats()
    memory.close()
    for suffix in ("", "-wal", "-shm"):
        path = root / (layout.MEMORY_INDEX + suffix)
        if path.exists():
            path.unlink()
    after = {q: memory.search(q) for q in queries}
    assert after == before and memory.stats() == stats
    assert before["test_calc"][0]["resolution"]["resolution"] == "pytest -p no:randomly tests/test_calc.py"


@pytest.mark.files("looks at or edits the files themselves")
def test_a_rewritten_log_makes_the_index_rebuild(memory: ErrorMemory, root: Path) -> None:
    capture_case(memory, "py_zero_division")
    capture_case(memory, "bash_command_not_found")
    memory.sync()
    lines = (root / LOG).read_bytes().splitlines(keepends=True)
    (root / LOG).write_bytes(lines[1] + lines[0])  # same size, other content: an edit, a compaction
    report = memory.sync()
    assert report["rebuilt"] == "the log was rewritten since it was indexed (compacted or edited)"
    assert memory.stats()["errors"] == 2


@pytest.mark.files("looks at or edits the files themselves")
def test_a_truncated_log_makes_the_index_rebuild(memory: ErrorMemory, root: Path) -> None:
    capture_case(memory, "py_zero_division")
    capture_case(memory, "bash_command_not_found")
    memory.sync()
    first = (root / LOG).read_bytes().splitlines(keepends=True)[0]
    (root / LOG).write_bytes(first)
    assert "shorter than" in str(memory.sync()["rebuilt"])
    assert [h["error_class"] for h in memory.search("division")] == ["python_exception"]
    assert memory.search("terraformx") == []


@pytest.mark.files("looks at or edits the files themselves")
@pytest.mark.parametrize("damage", ["garbage", "empty", "dropped-table"])
def test_a_corrupt_index_is_rebuilt(memory: ErrorMemory, root: Path, damage: str) -> None:
    capture_case(memory, "py_zero_division")
    expected = memory.search("division")
    memory.close()
    db = root / layout.MEMORY_INDEX
    if damage == "garbage":
        for suffix in ("-wal", "-shm"):
            Path(str(db) + suffix).unlink(missing_ok=True)
        db.write_bytes(b"this is not a database" * 300)
    elif damage == "empty":
        db.write_bytes(b"")
    else:
        with sqlite3.connect(db) as raw:
            raw.execute("DROP TABLE patterns")
    assert memory.search("division") == expected


@pytest.mark.files("looks at or edits the files themselves")
def test_a_symlinked_index_is_refused(memory: ErrorMemory, root: Path, tmp_path: Path) -> None:
    (root / layout.MEMORY_DIR).mkdir(exist_ok=True)
    os.symlink(tmp_path / "elsewhere.db", root / layout.MEMORY_INDEX)
    with pytest.raises(StateFileError, match="symbolic link"):
        memory.search("x")


@pytest.mark.files("looks at or edits the files themselves")
def test_a_corrupt_line_is_skipped_with_its_line_number(memory: ErrorMemory, root: Path) -> None:
    capture_case(memory, "py_zero_division")
    with (root / LOG).open("a") as log:
        log.write('{"kind": "error", "torn\n')
        log.write('{"kind": "error", "id": "e1", "timestamp": "2026-01-25T10:00:00Z", "tool": "Bash"}\n')
    capture_case(memory, "bash_command_not_found")
    hits = memory.search("division")
    assert [h["error_class"] for h in hits] == ["python_exception"]
    assert memory.warnings[0].startswith("memory/errors.jsonl line 2: invalid JSON")
    assert memory.warnings[1].startswith("memory/errors.jsonl line 3: does not match memory-record.json")
    stats = memory.stats()
    assert (stats["errors"], stats["skipped_lines"], stats["skipped_line_numbers"]) == (2, 2, [2, 3])


# -- resolutions ---------------------------------------------------------------------------------------


@pytest.mark.files("looks at or edits the files themselves")
def test_a_resolution_attaches_to_the_pattern_of_its_errors(memory: ErrorMemory, root: Path) -> None:
    errors = [capture_case(memory, "bash_command_not_found") for _ in range(3)]
    record = resolve(memory, errors, "~/.tfenv/bin/terraformx plan", calls_between=1)
    assert record["resolves"] == [e["id"] for e in errors]
    assert (record["confidence"], record["calls_between"], record["same_input"]) == (0.794, 1, False)
    assert record["command"] == errors[0]["command"] and record["error_message"] == errors[0]["error_message"]
    (hit,) = memory.search("terraformx", with_resolution=True)
    assert hit["resolution"]["resolution"] == "~/.tfenv/bin/terraformx plan"
    assert hit["resolution"]["confidence"] == 0.794 and hit["resolutions"] == 1
    assert memory.search("tfenv")  # the fix is searchable too
    assert tree_problems(root) == []


def test_the_best_resolution_is_shown(memory: ErrorMemory) -> None:
    error = capture_case(memory, "bash_command_not_found")
    resolve(memory, [error], "terraformx-1.5 plan", calls_between=6)
    resolve(memory, [error], "tf plan", calls_between=0)
    resolve(memory, [error], "terraform plan", calls_between=3)
    (hit,) = memory.search("terraformx")
    assert hit["resolution"]["resolution"] == "tf plan" and hit["resolutions"] == 3
    stats = memory.stats()
    assert (stats["resolutions"], stats["resolved_patterns"], stats["resolved_share"]) == (3, 1, 1.0)


@pytest.mark.files("looks at or edits the files themselves")
def test_the_half_life_is_configurable(memory: ErrorMemory, root: Path) -> None:
    (root / layout.CONFIG).write_text(json.dumps({"version": 1, "memory": {"resolution_half_life": 1}}))
    memory.store._config = None
    error = capture_case(memory, "bash_command_not_found")
    assert resolve(memory, [error], "tf plan", calls_between=2)["confidence"] == 0.25


def test_stats(memory: ErrorMemory) -> None:
    for _ in range(3):
        capture_case(memory, "bash_command_not_found")
    errors = [capture_case(memory, "pytest_fail_quiet")]
    capture_case(memory, "rustc_type_mismatch")
    resolve(memory, errors, "pytest -x tests/test_calc.py")
    stats = memory.stats(top=2)
    assert (stats["errors"], stats["patterns"], stats["resolved_patterns"]) == (5, 3, 1)
    assert stats["resolved_share"] == round(1 / 3, 4)
    assert [p["occurrences"] for p in stats["most_frequent"]] == [3, 1]
    assert {c["error_class"]: (c["patterns"], c["occurrences"], c["resolved"]) for c in stats["by_class"]} == {
        "missing_command": (1, 3, 0), "test_failure": (1, 1, 1), "compile_error": (1, 1, 0)}


def test_error_record_builds_without_a_store() -> None:
    record = error_record(tool="Bash", tool_input={"command": "cargo build"}, error="Exit code 127\ncargo: not found",
                          result=None, exit_code=None, branch="main", cwd=None, session_id=None, strike_key="Bash:1",
                          now="2026-01-25T10:00:00Z")
    assert record["exit_code"] == 127 and record["strike_key"] == "Bash:1" and record["session_id"] is None


# -- the tree: validate and doctor --------------------------------------------------------------------


@pytest.mark.files("drives the CLI, which works on a tree of files")
def test_validate_names_a_bad_memory_line_and_doctor_sets_only_that_line_aside(memory: ErrorMemory,
                                                                                root: Path) -> None:
    from tests.helpers import cli

    capture_case(memory, "py_zero_division")
    with (root / LOG).open("a") as log:
        log.write('{"kind": "error", "torn\n')
    capture_case(memory, "bash_command_not_found")
    assert tree_problems(root) == ["memory/errors.jsonl at line 2: invalid JSON: Unterminated string starting at "
                                   "(line 1, column 19)"]
    repaired = cli(["doctor", "--repair", "--json"], root=root).json()
    (moved,) = repaired["moved_aside"]  # one bad line is no reason to move a whole memory away
    assert moved["file"] == LOG and moved["lines"] == [2]
    assert (root / moved["moved_to"]).read_text() == '{"kind": "error", "torn\n'
    assert len(log_lines_raw(root)) == 2 and memory.stats()["errors"] == 2
    assert repaired["problems"] == []


@pytest.mark.files("looks at or edits the files themselves")
def test_validate_checks_the_hint_files(memory: ErrorMemory, root: Path) -> None:
    error = memory.capture("Bash", {"command": "cargo build"}, "Exit code 127\ncargo: command not found",
                           branch="main")
    resolve(memory, [error], "cargo build --offline")
    (name,) = os.listdir(root / layout.MEMORY_HINTS_DIR)
    hint = json.loads((root / layout.MEMORY_HINTS_DIR / name).read_text())
    (root / layout.MEMORY_HINTS_DIR / name).write_text(json.dumps(dict(hint, confidence=7)))
    assert tree_problems(root) == [f"memory/hints/{name} at /confidence: 7 is greater than the maximum of 1"]


def log_lines_raw(root: Path) -> list[str]:
    return (root / LOG).read_text().splitlines()


def test_error_memory_is_exported() -> None:
    import loki

    assert loki.ErrorMemory is ErrorMemory and "ErrorMemory" in loki.__all__


@pytest.mark.files("looks at or edits the files themselves")
@pytest.mark.files("looks at or edits the files themselves")
def test_two_searchers_never_index_a_line_twice(store: Store, root: Path) -> None:
    with ErrorMemory(store) as first, ErrorMemory(Store(root)) as second:
        capture_case(first, "bash_command_not_found")
        assert first.sync()["added"] == 1
        capture_case(first, "bash_command_not_found")
        assert second.sync()["added"] == 1  # the other connection reads only the new line
        assert first.sync()["added"] == 0
        assert first.search("terraformx")[0]["occurrences"] == 2 == second.search("terraformx")[0]["occurrences"]


@pytest.mark.parametrize(("failed", "succeeded", "rerun"), [
    ("pytest tests/test_x.py", "pytest tests/test_x.py -v", True),
    ("pytest -vv tests/test_x.py", "pytest tests/test_x.py --tb=short -s", True),
    ("python -m pytest tests/test_x.py", "python -m pytest tests/test_x.py -q --color=yes", True),
    ("cargo build", "cargo build", True),
    ("cargo build", "cargo build --offline", False),  # changes what runs: a fix
    ("pytest tests/test_x.py", "pytest tests/test_x.py --import-mode=importlib", False),  # a fix
    # pytest again on fewer tests (issue 23): it ran less, it fixed nothing.
    ("pytest tests/test_x.py", "pytest tests/test_x.py -x", True),
    ("pytest tests/test_x.py", "pytest tests/test_x.py -k test_login", True),
    ("pytest tests/test_x.py", "pytest --lf tests/test_x.py", True),
    ("pytest tests/test_x.py", "pytest tests/test_x.py -p no:randomly", True),
    ("python -m pytest tests", "python -m pytest tests/test_x.py::test_a -x --maxfail=1", True),
    ("pytest", "pytest tests/test_x.py -m 'not slow'", True),
    ("pytest tests/test_x.py", "pytest tests/test_x.py --co", True),
    ("pytest tests/test_x.py -x", "pytest tests/test_y.py -x", False),  # another file: not within
    ("pytest tests/test_x.py", "pytest tests/test_y.py -v", False),
    ("grep foo log.txt", "grep -v foo log.txt", False),  # -v inverts grep's match
    ("ln a b", "ln -s a b", False),
    ("echo 'unbalanced", "echo 'unbalanced -v", False),
])
def test_a_rerun_with_output_flags_is_told_from_a_fix(failed: str, succeeded: str, rerun: bool) -> None:
    from loki.memory.memory import is_rerun

    assert is_rerun(failed, succeeded) is rerun
