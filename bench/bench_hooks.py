"""Hook benchmarks (issue 7, 17): ``loki hook <event>`` cold, as Claude Code (Gemini CLI, Codex CLI) runs it.

``pre-tool-use`` runs before every tool call of every agent: cold with no strikes, the target is at
most 3x ``python -c pass`` measured in the same run; with strikes on the branch (the file read, the
key hashed) it is reported. ``post-tool-use-failure`` records a strike through the store (lock,
validate, atomic write): target at most 10x. ``post-tool-use`` (every successful call) and
``session-start`` are reported. Each command gets a real Claude Code payload on stdin and runs in a
checkout of ``main`` with ``.loki/`` at its top, found from the payload's ``cwd``. The error scan
of 10 KB and 1 MB outputs is measured in bench/bench_errorscan.py.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from bench.common import loki_executable, median, python_floor, row, runs, time_command
from bench.hookbench import FAILURE_ERROR, payload, project, time_failures
from loki.storage.store import Store
from loki.strikes.strikes import Strikes


def _bash(command: str) -> dict[str, str]:
    return {"command": command, "description": "Run it"}






def run() -> list[dict[str, Any]]:
    rows = []
    loki = loki_executable()
    cold = runs(30)
    with tempfile.TemporaryDirectory() as tmp:
        clean = project(tmp, "clean")
        busy = project(tmp, "busy")
        strikes = Strikes(Store(os.path.join(busy, ".loki"), validate_all=False), branch="main")
        for index in range(20):  # a branch with some history: 20 failing calls, one at the stop tier
            strikes.record_failure("Bash", _bash(f"make target{index}"), "make: *** No rule to make target")
        for _ in range(3):
            strikes.record_failure("Bash", _bash("cargo build"), FAILURE_ERROR)
        floor = python_floor(cold)

        pre = payload("PreToolUse", clean, tool_name="Bash", tool_input=_bash("cargo build"), tool_use_id="toolu_1")
        value = median(time_command([*loki, "hook", "pre-tool-use"], repeat=cold, stdin=pre, cwd=clean, check=True))
        rows.append(row("cold: loki hook pre-tool-use (no strikes)", value, floor_name="python -c pass",
                        floor_ms=floor, target_ratio=3))

        other = payload("PreToolUse", busy, tool_name="Bash", tool_input=_bash("cargo test"), tool_use_id="toolu_2")
        value = median(time_command([*loki, "hook", "pre-tool-use"], repeat=cold, stdin=other, cwd=busy, check=True))
        rows.append(row("cold: loki hook pre-tool-use (21 strikes, this call clean)", value,
                        floor_name="python -c pass", floor_ms=floor, note="reads the branch file, hashes the call"))

        denied = payload("PreToolUse", busy, tool_name="Bash", tool_input=_bash("cargo build"), tool_use_id="toolu_3")
        value = median(time_command([*loki, "hook", "pre-tool-use"], repeat=cold, stdin=denied, cwd=busy, check=True))
        rows.append(row("cold: loki hook pre-tool-use (this call stopped: deny)", value,
                        floor_name="python -c pass", floor_ms=floor))

        value = median(time_failures(loki, clean, runs(20)))
        rows.append(row("cold: loki hook post-tool-use-failure (records a strike)", value,
                        floor_name="python -c pass", floor_ms=floor, target_ratio=10,
                        note="errorscan + store: lock, validate, atomic write"))

        ok = payload("PostToolUse", busy, tool_name="Bash", tool_input=_bash("npm test"), tool_use_id="toolu_4",
                      tool_response={"stdout": "Tests: 12 passed, 12 total\n", "stderr": "", "interrupted": False,
                                     "isImage": False})
        value = median(time_command([*loki, "hook", "post-tool-use"], repeat=cold, stdin=ok, cwd=busy, check=True))
        rows.append(row("cold: loki hook post-tool-use (a success, nothing to clear)", value,
                        floor_name="python -c pass", floor_ms=floor, note="every successful call: scan + lookup"))

        # The other agents' adapters, on the same trees (docs/agents.md): Gemini's BeforeTool is its PreToolUse.
        gemini = {"tool_name": "run_shell_command", "timestamp": "2026-01-25T10:00:00.000Z"}
        for label, tree, command in (("no strikes", clean, "cargo build"), ("this call stopped: deny", busy,
                                                                              "cargo build")):
            before = payload("BeforeTool", tree, tool_input=_bash(command), **gemini)
            value = median(time_command([*loki, "hook", "--agent", "gemini", "before-tool"], repeat=cold, stdin=before,
                                        cwd=tree, check=True))
            rows.append(row(f"cold: loki hook --agent gemini before-tool ({label})", value,
                            floor_name="python -c pass", floor_ms=floor, target_ratio=3))
        codex_ok = payload("PostToolUse", busy, tool_name="Bash", tool_input={"command": "npm test"},
                           tool_use_id="call_4", tool_response="Tests: 12 passed, 12 total\n")
        value = median(time_command([*loki, "hook", "--agent", "codex", "post-tool-use"], repeat=cold,
                                    stdin=codex_ok, cwd=busy, check=True))
        rows.append(row("cold: loki hook --agent codex post-tool-use (a success)", value, floor_name="python -c pass",
                        floor_ms=floor, note="the output decides: errorscan without an exit code, then as Claude's"))

        start = payload("SessionStart", busy, source="startup")
        value = median(time_command([*loki, "hook", "session-start"], repeat=runs(10), stdin=start, cwd=busy,
                                    check=True))
        rows.append(row("cold: loki hook session-start (briefing)", value, floor_name="python -c pass",
                        floor_ms=floor, note="dead-letter review (skipped after the first), escalations, strikes"))
    return rows


if __name__ == "__main__":
    for r in run():
        print(json.dumps(r))
