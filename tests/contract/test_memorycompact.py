"""``loki errors compact`` as a library (loki/memory/compact.py): bounded, merged, nothing learned lost.

Every test runs on each backend (tests/conftest.py: backend), except the one that needs a second
process's store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loki.clock import ManualClock
from loki.memory.memory import ErrorMemory
from loki.storage import layout
from loki.storage.store import Store
from loki.strikes.strikes import Strikes
from tests.contract.test_memory import capture_case, log_lines, resolve
from tests.helpers import tree_problems

LOG = layout.MEMORY_LOG


@pytest.fixture
def store(backend_store: Store) -> Store:
    return backend_store


def problems(store: Store, root: Path) -> list[str]:
    """What `loki validate` finds in a file tree (the other stores validate every write themselves)."""
    return tree_problems(root) if isinstance(store, Store) else []


@pytest.fixture
def memory(store: Store) -> ErrorMemory:
    with ErrorMemory(store) as opened:
        yield opened


def fail(memory: ErrorMemory, command: str, message: str) -> dict[str, Any]:
    return memory.capture("Bash", {"command": command}, f"Exit code 1\n{message}", branch="main")


def test_duplicates_merge_into_their_latest_occurrence(memory: ErrorMemory, root: Path, clock: ManualClock) -> None:
    first = capture_case(memory, "bash_command_not_found", session="s1")
    clock.advance(60)
    capture_case(memory, "py_zero_division")
    clock.advance(60)
    last = capture_case(memory, "bash_command_not_found", session="s2")
    before = memory.search("terraformx")
    report = memory.compact()
    assert (report["lines_before"], report["lines_after"], report["merged"]) == (3, 2, 1)
    assert (report["errors"], report["patterns"], report["dropped_patterns"]) == (3, 2, 0)
    merged = [r for r in log_lines(memory.store) if r["content_hash"] == first["content_hash"]]
    assert len(merged) == 1 and merged[0]["id"] == last["id"] and merged[0]["session_id"] == "s2"
    assert (merged[0]["occurrences"], merged[0]["first_seen"]) == (2, first["timestamp"])
    after = memory.search("terraformx")
    assert after == before and after[0]["occurrences"] == 2 and after[0]["first_seen"] == first["timestamp"]
    assert problems(memory.store, root) == []


def test_compacting_twice_changes_nothing(memory: ErrorMemory) -> None:
    for _ in range(3):
        capture_case(memory, "bash_command_not_found")
    memory.compact()
    once = memory.store.read_text(LOG)
    report = memory.compact()
    assert memory.store.read_text(LOG) == once and report["merged"] == 0 and memory.stats()["errors"] == 3


def test_resolutions_follow_their_errors_into_the_merge(memory: ErrorMemory, root: Path) -> None:
    errors = [capture_case(memory, "pytest_fail_quiet") for _ in range(3)]
    resolve(memory, errors[:2], "pytest -x tests/test_calc.py", calls_between=1)
    resolve(memory, errors[:2], "pytest -x tests/test_calc.py", calls_between=4)  # the same fix, less sure
    report = memory.compact()
    assert (report["resolutions"], report["resolutions_merged"]) == (1, 1)
    lines = log_lines(memory.store)
    assert [r["kind"] for r in lines] == ["error", "resolution"]  # errors first: the index meets them first
    assert lines[1]["resolves"] == [errors[2]["id"]] and lines[1]["calls_between"] == 1
    (hit,) = memory.search("test_calc", with_resolution=True)
    assert hit["resolution"]["resolution"] == "pytest -x tests/test_calc.py" and hit["occurrences"] == 3


def test_the_bound_drops_the_oldest_unresolved_patterns_first(memory: ErrorMemory, root: Path,
                                                             clock: ManualClock) -> None:
    resolved = fail(memory, "make build", "make: *** No rule to make target 'build'. Stop.")
    for n in range(5):
        clock.advance(60)
        fail(memory, f"python job{n}.py", f"ValueError: bad input {n}x")
    resolve(memory, [resolved], "make all")
    report = memory.compact(max_records=4)
    assert (report["dropped_patterns"], report["lines_after"], report["over_bound"]) == (3, 4, False)
    kept = [r.get("command") for r in log_lines(memory.store) if r["kind"] == "error"]
    assert kept == ["make build", "python job3.py", "python job4.py"]  # the oldest, resolved, stays
    assert memory.search("make", with_resolution=True)[0]["resolution"]["resolution"] == "make all"


def test_resolved_patterns_are_never_dropped(memory: ErrorMemory, root: Path) -> None:
    for n in range(3):
        error = fail(memory, f"make t{n}", f"make: *** No rule to make target 't{n}'")
        resolve(memory, [error], f"make all{n}")
    report = memory.compact(max_records=2)
    assert report["dropped_patterns"] == 0 and report["over_bound"] is True
    assert memory.stats()["resolutions"] == 3


def test_errors_an_open_streak_holds_are_kept_and_still_resolvable(memory: ErrorMemory, store: Store,
                                                                   root: Path) -> None:
    strikes = Strikes(store, branch="main")
    held = [fail(memory, "cargo build", "cargo: command not found") for _ in range(2)]
    for record in held:
        strikes.record_failure("Bash", {"command": "cargo build"}, "cargo: command not found",
                               memory_id=record["id"], call_number=1)
    for n in range(3):
        fail(memory, f"python job{n}.py", f"ValueError: bad {n}x")
    report = memory.compact(max_records=2)
    assert report["aliases_kept"] == 1
    (cargo,) = [r for r in log_lines(memory.store) if r.get("command") == "cargo build"]
    assert cargo["id"] == held[1]["id"] and cargo["aliases"] == [held[0]["id"]]
    ended: list[dict[str, Any]] = []
    strikes.record_success("Bash", {"command": "cargo build --offline"}, call_number=3, on_resolved=ended.extend)
    (record,) = memory.record_resolutions(ended, "Bash", {"command": "cargo build --offline"}, branch="main")
    assert record["resolves"] == [held[0]["id"], held[1]["id"]]
    (hit,) = memory.search("cargo", with_resolution=True)
    assert hit["resolutions"] == 1 and hit["occurrences"] == 2


def test_unreadable_lines_are_set_aside_not_lost(memory: ErrorMemory, root: Path) -> None:
    capture_case(memory, "py_zero_division")
    # Lines another tool (or an agent's `echo >>`) appended: not records.
    foreign = '{"kind": "error", "id": "e1", "timestamp": "2026-01-25T10:00:00Z", "tool": "Bash"}'
    memory.store.append_text(LOG, ['{"kind": "err', foreign])
    capture_case(memory, "bash_command_not_found")
    report = memory.compact()
    assert report["corrupt_lines"] == [2, 3]
    assert report["corrupt_file"].rsplit("/", 1)[1] == "errors.jsonl.corrupt.2026-01-25T100000Z"
    aside = memory.store.read_text(report["corrupt_file"])
    assert aside.splitlines() == ['{"kind": "err', '{"kind": "error", "id": "e1", "timestamp": '
                                  '"2026-01-25T10:00:00Z", "tool": "Bash"}']
    assert [r["kind"] for r in log_lines(memory.store)] == ["error", "error"]
    memory.search("division")
    assert memory.warnings == [] and problems(memory.store, root) == []


def test_compaction_rebuilds_the_index_and_the_hints(memory: ErrorMemory) -> None:
    error = fail(memory, "cargo build", "cargo: command not found")
    resolve(memory, [error], "~/.cargo/bin/cargo build")
    hints = memory.store.list(layout.MEMORY_HINTS_DIR)
    memory.store.write_text(f"{layout.MEMORY_HINTS_DIR}/0000000000000000.json", "{}")  # a stray hint goes
    report = memory.compact()
    assert report["index"]["hints"] == 1 and memory.store.list(layout.MEMORY_HINTS_DIR) == hints
    assert report["index"]["rebuilt"] == "asked for (loki errors reindex)"


def test_an_empty_memory_compacts_to_nothing(memory: ErrorMemory) -> None:
    report = memory.compact()
    assert (report["lines_before"], report["lines_after"], report["corrupt_file"]) == (0, 0, None)
    assert (memory.store.read_text(LOG) or "") == ""


@pytest.mark.files("a second store that waits for the first needs a second process's (the memory store is one); "
                   "PostgreSQL: tests/storage/postgres/test_postgres_state.py")
def test_appends_wait_for_compaction(memory: ErrorMemory, store: Store, root: Path) -> None:
    """Compaction holds the log's lock from its first read to the rename: an append cannot slip in between."""
    from loki.errors import LockTimeout

    capture_case(memory, "py_zero_division")
    impatient = Store(root, lock_timeout=0.05)
    with store.transaction(LOG), pytest.raises(LockTimeout):
        ErrorMemory(impatient).capture("Bash", {"command": "x"}, "Exit code 1\nboom", branch="main")
    assert len(log_lines(memory.store)) == 1
    assert json.loads((root / LOG).read_text())["error_class"] == "python_exception"
