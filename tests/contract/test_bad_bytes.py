"""Bad bytes from outside (issue 22, "Bad rows and bad bytes"): a NUL in a tool's output, JSON nested too deep
for anything recursive to write back, a read-only signals/ directory, and what read-only and full-disk
errors tell a person to do. Each on every backend the code runs on, through the library and the CLI."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from loki.errors import InvalidArgument, LokiError, StateFileError
from loki.memory.memory import ErrorMemory
from loki.queue.queue import Queue, parse_json_option
from loki.storage import jsonio, layout
from loki.storage.store import Store
from tests.helpers import cli

NUL_OUTPUT = "Exit code 1\nsegfault reading \x00\x00\x7fELF in libfoo.so\nError: widget frobnication failed"


@pytest.fixture
def store(backend_store: Any) -> Any:
    return backend_store


def _problems(store: Any) -> list[str]:
    """`loki validate`'s problems on a file tree or a database (the memory store has no validate)."""
    if isinstance(store, Store):
        from loki.storage.tree import validate_tree

        found = validate_tree(store)
    else:
        from loki.storage.postgres import admin

        found = admin.validate(store)
    return [f"{p.file} {p.pointer}: {p.message}" for p in found]


# -- a NUL byte in a tool's output ------------------------------------------------------------------------


def test_a_nul_in_a_tools_output_is_stored_without_it_and_memory_keeps_working(store: Any) -> None:
    memory = ErrorMemory(store)
    record = memory.capture("Bash", {"command": "./run\x00me"}, NUL_OUTPUT, branch="main")
    assert "\x00" not in json.dumps(record, ensure_ascii=False)
    assert "\ufffd" in record["output"] and "\ufffd" in record["command"]
    found = memory.search("frobnication")
    assert [hit["content_hash"] for hit in found] == [record["content_hash"]]
    assert memory.stats()["patterns"] == 1
    assert memory.reindex()["hints"] is not None
    assert memory.compact()["index"] is not None
    assert [hit["content_hash"] for hit in memory.search("widget")] == [record["content_hash"]]


def test_a_nul_stored_by_an_older_loki_is_read_past_and_reported(store: Any) -> None:
    memory = ErrorMemory(store)
    record = memory.capture("Bash", {"command": "make"}, "Exit code 2\nError: widget frobnication failed",
                            branch="main")
    # What loki wrote before NULs were dropped at the write (or what an agent appended by hand).
    store.append_lines(layout.MEMORY_LOG, [{**record, "id": "error-older", "output": "bin\x00ary"}])
    memory.close()
    memory = ErrorMemory(store)
    assert [hit["content_hash"] for hit in memory.search("frobnication")] == [record["content_hash"]]
    assert memory.stats()["patterns"] == 1
    memory.reindex()
    memory.compact()
    if store.backend != "memory":
        # Compaction kept the newest occurrence's fields, so the NUL may be gone: report it on a fresh log.
        store.append_lines(layout.MEMORY_LOG, [{**record, "id": "error-oldest", "output": "bin\x00ary"}])
        problems = _problems(store)
        assert any("memory/errors.jsonl" in p and "/output" in p and "NUL" in p for p in problems), problems


@pytest.mark.files("drives the CLI on a file tree")
@pytest.mark.slow  # a real loki process
def test_cli_a_nul_in_a_hook_payload_then_search_and_validate(root: Path, project: Path) -> None:
    payload = {"hook_event_name": "PostToolUseFailure", "tool_name": "Bash", "tool_input": {"command": "make"},
               "error": NUL_OUTPUT, "cwd": str(project), "session_id": "s1"}
    done = subprocess.run([*_loki(root), "hook", "post-tool-use-failure"], input=json.dumps(payload).encode(),
                          capture_output=True, cwd=project)
    assert done.returncode == 0, done.stderr
    assert b"\\u0000" not in (root / "memory" / "errors.jsonl").read_bytes()
    found = cli(["errors", "search", "frobnication", "--json"], root=root)
    assert found.code == 0, found.stderr
    assert len(found.json()["results"]) == 1
    assert cli(["validate"], root=root).code == 0
    with (root / "memory" / "errors.jsonl").open("a") as log:  # an older loki's line
        line = json.loads((root / "memory" / "errors.jsonl").read_text().splitlines()[0])
        log.write(json.dumps({**line, "id": "error-older", "output": "a\x00b"}) + "\n")
    checked = cli(["validate"], root=root)
    assert checked.code == 1
    assert "memory/errors.jsonl at line 2/output" in checked.stdout + checked.stderr
    assert "NUL" in checked.stdout + checked.stderr


def _loki(root: Path) -> list[str]:
    import sys

    return [sys.executable, "-m", "loki", "--root", str(root)]


# -- JSON from outside nested too deep ---------------------------------------------------------------------

DEEP = "[" * 970 + "]" * 970


def test_a_payload_nested_970_deep_is_refused_at_parse(store: Any) -> None:
    with pytest.raises(InvalidArgument, match="--payload: nesting is too deep"):
        parse_json_option('{"a": ' + DEEP + "}", "--payload", want_object=True)
    # Up to the bound, it is stored and read back (the file nests it a few levels deeper).
    allowed = "[" * (jsonio.INPUT_DEPTH - 1) + "]" * (jsonio.INPUT_DEPTH - 1)
    payload = parse_json_option('{"a": ' + allowed + "}", "--payload", want_object=True)
    queue = Queue(store)
    added = queue.add("deep but allowed", payload=payload)
    assert queue.show(added["id"])["task"]["payload"] == payload


def test_every_outside_json_reader_bounds_the_depth() -> None:
    from loki.hooks.boundary import HookError, parse_payload
    from loki.queue.queue import parse_batch
    from loki.signals.emit import fields_from

    with pytest.raises(InvalidArgument, match="nesting is too deep"):
        fields_from(None, ["k:=" + DEEP])
    with pytest.raises(InvalidArgument, match="nesting is too deep"):
        fields_from('{"k": ' + DEEP + "}", [])
    with pytest.raises(LokiError, match="nesting is too deep"):
        parse_batch("batch.json", ('[{"title": "x", "payload": {"a": ' + DEEP + "}}]").encode())
    with pytest.raises(HookError, match="nesting is too deep"):
        parse_payload(('{"tool_name": "Bash", "tool_input": ' + DEEP + "}").encode(), "PostToolUse")
    with pytest.raises(jsonio.JsonError, match="nesting is too deep"):
        jsonio.loads_strict("[" * (jsonio.MAX_DEPTH + 1) + "]" * (jsonio.MAX_DEPTH + 1))
    assert jsonio.loads_strict("[" * jsonio.MAX_DEPTH + "]" * jsonio.MAX_DEPTH) is not None


# -- a read-only signals/ directory, and what read-only and full-disk errors advise ---------------------


@contextmanager
def _unwritable(directory: Path) -> Iterator[None]:
    """``directory`` cannot be changed while the block runs (root ignores modes: an immutable flag then)."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(directory)], check=True)
    else:
        directory.chmod(0o555)
    try:
        yield
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(directory)], check=True)
        else:
            directory.chmod(0o755)


def _listing(directory: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(directory)): (p.lstat().st_ino, p.lstat().st_nlink) for p in directory.rglob("*")}


@pytest.mark.files("drives the CLI on a file tree")
@pytest.mark.slow  # a real loki process
def test_watch_once_on_a_read_only_signals_directory_is_a_loki_error(root: Path) -> None:
    assert cli(["signal", "emit", "TESTS_PASSED_unit"], root=root).code == 0
    (root / "signals" / ".processing").mkdir(exist_ok=True)
    before = _listing(root / "signals")
    with _unwritable(root / "signals"):
        done = subprocess.run([*_loki(root), "watch", "--once", "--no-tui"], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    assert "signals/TESTS_PASSED_unit: cannot claim it" in done.stderr
    assert "permission denied" in done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    assert _listing(root / "signals") == before  # nothing half-claimed: no second name in .processing/
    # Writable again, the signal is consumed once.
    assert cli(["watch", "--once", "--no-tui"], root=root).code == 0
    assert not (root / "signals" / "TESTS_PASSED_unit").exists()


@pytest.mark.files("drives the CLI on a file tree")
@pytest.mark.slow  # a real loki process
def test_watch_once_with_a_claimed_twin_in_a_read_only_signals_directory(root: Path) -> None:
    """A crash between the claim's link and unlink left the signal under both names; signals/ is read-only
    now, so the waiting name cannot be dropped: that was `internal error: PermissionError`."""
    assert cli(["signal", "emit", "TESTS_PASSED_unit"], root=root).code == 0
    processing = root / "signals" / ".processing"
    processing.mkdir(exist_ok=True)
    os.link(root / "signals" / "TESTS_PASSED_unit", processing / "TESTS_PASSED_unit.20260125T095900Z-0badc0de")
    before = _listing(root / "signals")
    with _unwritable(root / "signals"):
        done = subprocess.run([*_loki(root), "watch", "--once", "--no-tui"], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    assert "signals/TESTS_PASSED_unit: cannot remove it (it is already claimed): permission denied" in done.stderr
    assert "hint: make .loki/ writable" in done.stderr
    assert "internal error" not in done.stderr and "doctor --repair" not in done.stderr
    assert _listing(root / "signals") == before


def test_a_claim_the_system_refuses_names_the_item_and_leaves_it_waiting(root: Path) -> None:
    store = Store(root)
    store.create_unique("signals", "TESTS_PASSED_unit", b'{"timestamp": "2026-01-25T09:59:00Z"}')
    store.ensure_dir("signals/.processing")
    with _unwritable(root / "signals"), pytest.raises(StateFileError) as caught:
        store.claim_into("signals/TESTS_PASSED_unit", "signals/.processing", "TESTS_PASSED_unit.x")
    assert caught.value.path == "signals/TESTS_PASSED_unit"
    assert "make .loki/ writable" in caught.value.details["hint"]
    assert store.list("signals/.processing") == []
    assert "TESTS_PASSED_unit" in store.list("signals")


@pytest.mark.parametrize(("code", "advice"), [(errno.ENOSPC, "free space there (`df -h .loki`)"),
                                              (errno.EDQUOT, "free space there"),
                                              (errno.EFBIG, "`ulimit -f`"),
                                              (errno.EROFS, "remount it read-write"),
                                              (errno.EACCES, "make .loki/ writable")])
def test_a_write_the_system_refuses_says_what_helps(root: Path, code: int, advice: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import loki.storage.store as storemodule

    def refused(path: str, data: bytes) -> str:  # the temp file every atomic write starts with
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(storemodule, "write_temp", refused)
    before = (root / "queue" / "pending.json").read_bytes()
    with pytest.raises(StateFileError) as caught:
        Queue(Store(root)).add("a task that cannot be written")
    assert advice in caught.value.details["hint"]
    assert "nothing was changed" in caught.value.details["hint"]
    assert (root / "queue" / "pending.json").read_bytes() == before
    result = cli(["queue", "add", "a task that cannot be written"], root=root)
    assert result.code == 1
    assert f"hint: {caught.value.details['hint']}" in result.stderr
    assert "doctor --repair" not in result.stderr
