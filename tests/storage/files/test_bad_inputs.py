"""The bad-input corpus: every case in tests/bad_inputs/ through the real CLI, in a real process (forked
from a warm interpreter, tests/forkstart.py: its own exit code, pipes and file-size limit).

Each case sets up a broken tree (or passes a bad argument), runs one command, and checks the
exit code, that stderr names the problem (file, JSON pointer, reason), that no traceback
reaches the user, and that nothing in the tree changed: no file rewritten, truncated or reset,
no temp file left behind.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests import forkstart

HERE = Path(__file__).resolve().parents[2]
REPO = HERE.parent
CASES = sorted((HERE / "bad_inputs").glob("*.json"))
SEED_TASK = {"id": "seed", "title": "a task that must survive", "description": "", "type": "general",
             "priority": "high", "dependencies": [], "labels": [], "status": "pending",
             "created_at": "2026-01-25T09:00:00Z", "available_at": "2026-01-25T09:00:00Z", "claimed_by": None,
             "claimed_at": None, "lease_until": None, "claim_token": None, "attempts": [], "max_attempts": 5,
             "idempotency_key": None, "payload": {}, "result": None, "last_error": None, "completed_at": None,
             "notes": []}


def test_the_corpus_has_at_least_50_cases() -> None:
    assert len(CASES) >= 50


def _snapshot(root: Path) -> dict[str, Any]:
    """Every entry under root: its type, and its bytes for regular files (lock records excluded)."""
    seen: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                # A lock file's content is holder bookkeeping, and taking a lock may create one.
                seen[rel] = "lock" if name.endswith(".lock") else Path(path).read_bytes()
            elif stat.S_ISLNK(st.st_mode):
                seen[rel] = ("link", os.readlink(path))
            else:
                seen[rel] = stat.S_IFMT(st.st_mode)
    return {k: v for k, v in seen.items() if v != "lock"}


def _apply(setup: list[dict[str, Any]], root: Path, outside: Path) -> tuple[bool, int | None]:
    readonly = False
    fsize: int | None = None
    for step in setup:
        if "write" in step:
            target = root / step["write"]
            if "hex" in step:
                data = bytes.fromhex(step["hex"])
            elif "repeat" in step:
                data = (step.get("prefix", "") + step["repeat"] * step["times"] + step.get("suffix", "")).encode()
            else:
                data = step["text"].encode()
            target.write_bytes(data)
        elif "symlink" in step:
            target = root / step["symlink"]
            if target.is_file() and not target.is_symlink():
                shutil.copy(target, outside / "outside.json")  # following the link would "work"
                target.unlink()
            os.symlink(outside / ("outside.json" if step["to"].endswith(".json") else
                                  "outside-dir" if step["to"].endswith("dir") else "outside.lock"), target)
        elif "hardlink" in step:
            # A second name for the file outside the tree: writing in place would change both.
            target = root / step["hardlink"]
            linked = outside / "linked"
            linked.write_bytes(target.read_bytes() if target.is_file() else step.get("text", "").encode())
            if target.exists():
                target.unlink()
            os.link(linked, target)
        elif "remove" in step:
            target = root / step["remove"]
            if target.exists() or target.is_symlink():
                target.unlink()
        elif "remove_dir" in step:
            shutil.rmtree(root / step["remove_dir"])
        elif "mkdir" in step:
            (root / step["mkdir"]).mkdir()
        elif "fifo" in step:
            os.mkfifo(root / step["fifo"])
        elif step.get("readonly"):
            readonly = True
        elif "fsize_limit" in step:
            fsize = step["fsize_limit"]
    return readonly, fsize


def _make_readonly(root: Path, on: bool) -> None:
    """An unwritable tree. root is not stopped by file modes, so an immutable flag does it then."""
    dirs = [root] + [Path(d) / n for d, names, _ in os.walk(root) for n in names]
    if os.geteuid() == 0:
        flag = "+i" if on else "-i"
        done = subprocess.run(["chattr", flag, *map(str, dirs)], capture_output=True)
        assert done.returncode == 0, f"chattr {flag} failed: {done.stderr.decode()}"
    else:
        for directory in dirs:
            directory.chmod(0o555 if on else 0o755)


@pytest.mark.parametrize("case_path", CASES, ids=[p.stem for p in CASES])
def test_bad_input(case_path: Path, tmp_path: Path, root: Path) -> None:
    # root (conftest.py): a fresh tree in tmp_path, the session's template copied, not init_tree's fsyncs
    case = json.loads(case_path.read_text())
    assert {"name", "why", "setup", "args", "exit", "stderr"} <= set(case)
    (root / "queue" / "pending.json").write_text(json.dumps({"version": 1, "tasks": [SEED_TASK]}))
    outside = tmp_path / "elsewhere"
    (outside / "outside-dir").mkdir(parents=True)
    (outside / "outside.json").write_text('{"version": 1, "tasks": []}')
    (outside / "outside.lock").write_text("")
    readonly, fsize = _apply(case["setup"], root, outside)
    before = _snapshot(root)
    outside_before = _snapshot(outside)

    if readonly:
        _make_readonly(root, True)
    try:
        stdin = bytes.fromhex(case["stdin_hex"]) if "stdin_hex" in case else case.get("stdin", "").encode()
        args = [arg.replace("{root}", str(root)) for arg in case["args"]]
        done = forkstart.run(["--root", str(root), *args], cwd=REPO, input=stdin, timeout=60, fsize_limit=fsize,
                             env={**os.environ, "LOKI_NOW": "2026-01-25T10:00:00Z", "LOKI_LOCK_TIMEOUT": "5",
                                  **case.get("env", {})})
    finally:
        if readonly:
            _make_readonly(root, False)
    stderr = done.stderr.decode("utf-8", "replace")
    assert done.returncode == case["exit"], f"{case['name']}: exit {done.returncode}, stderr: {stderr}"
    for needle in case["stderr"]:
        assert needle in stderr, f"{case['name']}: {needle!r} not in stderr: {stderr}"
    for secret in case.get("never_printed", []):  # a secret the input holds: in no output
        assert secret not in stderr + done.stdout.decode("utf-8", "replace"), f"{case['name']}: {secret!r} printed"
    assert "Traceback" not in stderr and "internal error" not in stderr
    assert _snapshot(root) == before, f"{case['name']}: the tree changed"
    assert _snapshot(outside) == outside_before, f"{case['name']}: a file outside .loki/ changed"
