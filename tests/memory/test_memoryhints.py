"""The PreToolUse hint (loki/memory/hints.py) and the call counter behind its confidence (loki/strikes/callcount.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from loki.clock import ManualClock
from loki.memory import hints as memoryhints
from loki.memory.memory import ErrorMemory
from loki.storage import layout
from loki.storage.store import Store
from loki.strikes import callcount
from tests.contract.test_memory import resolve
from tests.helpers import tree_problems

CARGO = {"command": "cargo build --release"}


@pytest.fixture
def memory(store: Store) -> ErrorMemory:
    with ErrorMemory(store) as opened:
        yield opened


def cargo_fixed(memory: ErrorMemory, fix: str = "~/.cargo/bin/cargo build", calls_between: int = 1,
                same_input: bool = False) -> dict[str, Any]:
    error = memory.capture("Bash", {"command": "cargo build"}, "Exit code 127\n/bin/bash: line 1: cargo: command "
                           "not found", branch="main")
    return resolve(memory, [error], fix, calls_between=calls_between, same_input=same_input)


def test_a_resolution_becomes_the_hint_of_its_prefix(memory: ErrorMemory, root: Path) -> None:
    cargo_fixed(memory)
    text = memoryhints.hint_for(str(root), "Bash", CARGO)
    assert text == ('loki memory: last time `cargo build` failed here with "/bin/bash: line 1: cargo: command not '
                    'found"; it was fixed by `~/.cargo/bin/cargo build` (1 call later, confidence 0.79).')
    assert memoryhints.hint_for(str(root), "Bash", {"command": "cargo test"}) is None  # another prefix
    assert memoryhints.hint_for(str(root), "Read", {"file_path": "cargo"}) is None  # only before Bash
    assert tree_problems(root) == []  # the hint file validates against memory-hint.json


def test_no_hint_when_nothing_was_ever_resolved(root: Path) -> None:
    assert memoryhints.any_hints(str(root)) is False
    assert memoryhints.hint_for(str(root), "Bash", CARGO) is None


def test_no_hint_for_the_fix_itself(memory: ErrorMemory, root: Path) -> None:
    cargo_fixed(memory, fix="cargo build --offline")
    assert memoryhints.hint_for(str(root), "Bash", {"command": "cargo  build --offline"}) is None
    assert memoryhints.hint_for(str(root), "Bash", {"command": "cargo build"}) is not None


def test_no_hint_when_the_same_call_simply_succeeded_again(memory: ErrorMemory, root: Path) -> None:
    cargo_fixed(memory, fix="cargo build", same_input=True)
    assert memoryhints.any_hints(str(root)) is False  # "fixed by running it again" helps nobody


def test_no_hint_below_the_minimum_confidence(memory: ErrorMemory, root: Path) -> None:
    cargo_fixed(memory, calls_between=6)  # confidence 0.25 < 0.3
    assert memoryhints.hint_for(str(root), "Bash", CARGO) is None
    (root / layout.CONFIG).write_text(json.dumps({"version": 1, "memory": {"hint_min_confidence": 0.2}}))
    assert "confidence 0.25" in str(memoryhints.hint_for(str(root), "Bash", CARGO))


def test_the_more_confident_resolution_keeps_the_hint(memory: ErrorMemory, root: Path, clock: ManualClock) -> None:
    cargo_fixed(memory, fix="rustup default stable && cargo build", calls_between=0)
    clock.advance(60)
    cargo_fixed(memory, fix="cargo build --offline", calls_between=3)  # later but less sure: ignored
    assert "rustup default stable" in str(memoryhints.hint_for(str(root), "Bash", CARGO))
    clock.advance(60)
    cargo_fixed(memory, fix="~/.cargo/bin/cargo build", calls_between=0)  # as sure and newer: replaces
    assert "~/.cargo/bin/cargo build" in str(memoryhints.hint_for(str(root), "Bash", CARGO))


@pytest.mark.parametrize("limit", [300, 120, 60, 20])
def test_a_hint_never_exceeds_inject_max_chars(memory: ErrorMemory, root: Path, limit: int) -> None:
    error = memory.capture("Bash", {"command": "cargo build"}, "Exit code 1\nerror: " + "very long " * 100,
                           branch="main")
    resolve(memory, [error], "cargo build --features " + "x," * 200)
    (root / layout.CONFIG).write_text(json.dumps({"version": 1, "memory": {"inject_max_chars": limit}}))
    text = memoryhints.hint_for(str(root), "Bash", CARGO)
    assert text is not None and len(text) <= limit and "loki memory" in text


@pytest.mark.parametrize("content", [b"{not json", b'{"tool": "Bash"}', b"[]", b""])
def test_a_broken_hint_is_no_hint(memory: ErrorMemory, root: Path, content: bytes) -> None:
    cargo_fixed(memory)
    (name,) = os.listdir(root / layout.MEMORY_HINTS_DIR)
    (root / layout.MEMORY_HINTS_DIR / name).write_bytes(content)
    assert memoryhints.hint_for(str(root), "Bash", CARGO) is None
    cargo_fixed(memory)  # the next resolution replaces it
    assert memoryhints.hint_for(str(root), "Bash", CARGO) is not None


def test_reindex_rebuilds_the_hints_from_the_log(memory: ErrorMemory, root: Path) -> None:
    cargo_fixed(memory)
    hints = root / layout.MEMORY_HINTS_DIR
    (name,) = os.listdir(hints)
    before = (hints / name).read_bytes()
    (hints / name).unlink()
    (hints / "ffffffffffffffff.json").write_text("{}")
    assert memory.reindex()["hints"] == 1
    assert os.listdir(hints) == [name] and (hints / name).read_bytes() == before


def test_the_call_counter_counts(root: Path) -> None:
    assert callcount.current(str(root), "main") == 0
    assert [callcount.tick(str(root), "main") for _ in range(3)] == [1, 2, 3]
    assert callcount.current(str(root), "main") == 3 and callcount.current(str(root), "other") == 0
    assert (root / callcount.counter_file("main")).read_bytes() == b"..."
    assert tree_problems(root) == []


def test_a_counter_that_cannot_be_written_counts_nothing(root: Path, tmp_path: Path) -> None:
    os.symlink(tmp_path / "elsewhere", root / callcount.counter_file("main"))
    assert callcount.tick(str(root), "main") is None
    assert not (tmp_path / "elsewhere").exists()
