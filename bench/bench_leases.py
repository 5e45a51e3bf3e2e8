"""Path-lease benchmarks (issue 25): the PreToolUse hook cold, before an Edit (and, at 1,000 leases, before a
Codex CLI ``apply_patch``), with 0 / 1,000 / 10,000 live leases in ``state/path-leases.json``, against
``python -c pass`` measured in the same run (target: at most 3x with 1,000). The edited file is free (every
lease is read and its pattern's literal prefix compared: the common case), and once held by another agent
(the deny). The leases are written as one document (``area<N>/**`` by ``agent-<N>``), as ``loki lease
acquire`` would leave them, an hour from LOKI_NOW.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from bench.common import loki_executable, median, python_floor, row, runs, time_command
from bench.hookbench import payload, project

NOW = "2026-01-25T10:00:00Z"


def _leases(top: str, count: int) -> None:
    leases = [{"lease_id": f"L{n + 1}", "agent": f"agent-{n}", "patterns": [f"area{n}/**"], "exclusive": True,
               "task": None, "reason": None, "key": None, "ttl": 3600, "acquired_at": NOW, "renewed_at": NOW,
               "expires_at": "2026-01-25T11:00:00Z"} for n in range(count)]
    doc = {"version": 1, "next_id": count + 1, "leases": leases, "history": []}
    with open(os.path.join(top, ".loki", "state", "path-leases.json"), "w") as f:
        json.dump(doc, f)


def _codex_patch(loki: list[str], top: str, cold: int, env: dict[str, str], floor: float) -> list[dict[str, Any]]:
    """Codex CLI's ``apply_patch`` (the payload Codex 0.169.0 sends): a patch of two files, free, then one of them
    held by another agent (the deny); the patch's file lines are read before any lease is compared."""
    rows = []
    for label, name in (("free files", "src/auth/login.py"), ("a leased file: deny", "area500/x.py")):
        patch = ("*** Begin Patch\n*** Update File: README.md\n@@\n-a\n+b\n"
                 f"*** Update File: {name}\n@@\n-a\n+b\n*** End Patch\n")
        stdin = payload("PreToolUse", top, tool_name="apply_patch", tool_use_id="call_1", turn_id="t1",
                        model="gpt-5.5", tool_input={"command": patch})
        value = median(time_command([*loki, "hook", "--agent", "codex", "pre-tool-use"], repeat=cold, stdin=stdin,
                                    cwd=top, check=True, env=env))
        rows.append(row(f"cold: loki hook --agent codex pre-tool-use, apply_patch of {label} (1,000 leases)", value,
                        floor_name="python -c pass", floor_ms=floor, target_ratio=3 if label == "free files" else None))
    return rows


def run() -> list[dict[str, Any]]:
    loki = loki_executable()
    cold = runs(30)
    env = {"LOKI_NOW": NOW}  # the leases are live at this instant
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        floor = python_floor(cold)
        for count in (0, 1000, 10000):
            top = project(tmp, f"leases{count}")
            _leases(top, count)
            edit = payload("PreToolUse", top, tool_name="Edit", tool_use_id="toolu_1",
                           tool_input={"file_path": os.path.join(top, "src", "auth", "login.py"),
                                       "old_string": "a", "new_string": "b"})
            value = median(time_command([*loki, "hook", "pre-tool-use"], repeat=cold, stdin=edit, cwd=top, check=True,
                                         env=env))
            rows.append(row(f"cold: loki hook pre-tool-use, Edit of a free file ({count:,} live leases)", value,
                            floor_name="python -c pass", floor_ms=floor, target_ratio=3))
            if count:
                held = payload("PreToolUse", top, tool_name="Edit", tool_use_id="toolu_2",
                               tool_input={"file_path": os.path.join(top, f"area{count // 2}", "x.py"),
                                           "old_string": "a", "new_string": "b"})
                value = median(time_command([*loki, "hook", "pre-tool-use"], repeat=cold, stdin=held, cwd=top,
                                            check=True, env=env))
                rows.append(row(f"cold: loki hook pre-tool-use, Edit of a leased file: deny ({count:,} leases)",
                                value, floor_name="python -c pass", floor_ms=floor))
            if count == 1000:
                rows.extend(_codex_patch(loki, top, cold, env, floor))
    return rows
