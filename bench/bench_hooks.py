"""Hook benchmarks (issues 7, 15, 17): ``loki hook <event>`` cold, as Claude Code (Gemini CLI, Codex CLI) runs it.

``pre-tool-use`` runs before every tool call of every agent: cold with no strikes, the target is at
most 3x ``python -c pass`` measured in the same run; with strikes on the branch (the file read, the
key hashed) it is reported. ``post-tool-use-failure`` records a strike through the store (lock,
validate, atomic write): target at most 10x. ``post-tool-use`` (every successful call) and
``session-start`` are reported. Each command gets a real Claude Code payload on stdin and runs in a
checkout of ``main`` with ``.loki/`` at its top, found from the payload's ``cwd``. The error scan
of 10 KB and 1 MB outputs is measured in bench/bench_errorscan.py.

The same rows again (``pg:``) on checkouts whose state is in PostgreSQL (bench/pgserver.py says which
server): the budgets are the same; PreToolUse reads the local copies the connecting hooks keep.
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






def _record_strikes(strikes: Strikes) -> None:
    for index in range(20):  # a branch with some history: 20 failing calls, one at the stop tier
        strikes.record_failure("Bash", _bash(f"make target{index}"), "make: *** No rule to make target")
    for _ in range(3):
        strikes.record_failure("Bash", _bash("cargo build"), FAILURE_ERROR)


def _rows(label: str, loki: list[str], clean: str, busy: str, floor: float, cold: int, note: str = "") -> list[Any]:
    """The hooks' cold starts on two checkouts: ``clean`` (no strikes) and ``busy`` (21 strikes, one stopped)."""
    rows = []
    pre = payload("PreToolUse", clean, tool_name="Bash", tool_input=_bash("cargo build"), tool_use_id="toolu_1")
    value = median(time_command([*loki, "hook", "pre-tool-use"], repeat=cold, stdin=pre, cwd=clean, check=True))
    rows.append(row(f"{label}cold: loki hook pre-tool-use (no strikes)", value, floor_name="python -c pass",
                    floor_ms=floor, target_ratio=3, note=note))

    other = payload("PreToolUse", busy, tool_name="Bash", tool_input=_bash("cargo test"), tool_use_id="toolu_2")
    value = median(time_command([*loki, "hook", "pre-tool-use"], repeat=cold, stdin=other, cwd=busy, check=True))
    rows.append(row(f"{label}cold: loki hook pre-tool-use (21 strikes, this call clean)", value,
                    floor_name="python -c pass", floor_ms=floor, note="reads the branch file, hashes the call"))

    denied = payload("PreToolUse", busy, tool_name="Bash", tool_input=_bash("cargo build"), tool_use_id="toolu_3")
    value = median(time_command([*loki, "hook", "pre-tool-use"], repeat=cold, stdin=denied, cwd=busy, check=True))
    rows.append(row(f"{label}cold: loki hook pre-tool-use (this call stopped: deny)", value,
                    floor_name="python -c pass", floor_ms=floor))

    value = median(time_failures(loki, clean, runs(20)))
    rows.append(row(f"{label}cold: loki hook post-tool-use-failure (records a strike)", value,
                    floor_name="python -c pass", floor_ms=floor, target_ratio=10,
                    note="errorscan + store: lock, validate, atomic write" if not label else
                    "errorscan + the driver + connect + the strike's unit + the local copy"))

    ok = payload("PostToolUse", busy, tool_name="Bash", tool_input=_bash("npm test"), tool_use_id="toolu_4",
                 tool_response={"stdout": "Tests: 12 passed, 12 total\n", "stderr": "", "interrupted": False,
                                "isImage": False})
    value = median(time_command([*loki, "hook", "post-tool-use"], repeat=cold, stdin=ok, cwd=busy, check=True))
    rows.append(row(f"{label}cold: loki hook post-tool-use (a success, nothing to clear)", value,
                    floor_name="python -c pass", floor_ms=floor, note="every successful call: scan + lookup"))

    start = payload("SessionStart", busy, source="startup")
    value = median(time_command([*loki, "hook", "session-start"], repeat=runs(10), stdin=start, cwd=busy,
                                check=True))
    rows.append(row(f"{label}cold: loki hook session-start (briefing)", value, floor_name="python -c pass",
                    floor_ms=floor, note="dead-letter review (skipped after the first), escalations, strikes"
                    + ("; refreshes the local copies" if label else "")))
    return rows


def _postgres_rows(tmp: str, loki: list[str], floor: float, cold: int) -> list[dict[str, Any]]:
    """The same hooks on checkouts whose state is in PostgreSQL: the PreToolUse hook reads this machine's
    copies under .loki/cache/ (no driver, no connection); the others connect (docs/postgres.md)."""
    from bench.pgserver import point_tree, schema_url, team
    from loki.storage.postgres.store import PgStore

    urls = [schema_url() for _ in range(2)]
    if urls[0][0] is None or urls[1][0] is None:
        return [row("pg: cold: loki hook ... (skipped)", 0.0, note=urls[0][1] if urls[0][0] is None else urls[1][1])]
    checkouts = []
    for name, (url, _) in zip(("pg-clean", "pg-busy"), urls, strict=True):
        assert url is not None
        top = project(tmp, name)
        point_tree(os.path.join(top, ".loki"), url)
        team(url, {"version": 1})
        checkouts.append(top)
    clean, busy = checkouts
    store = PgStore.open(str(urls[1][0]), root=os.path.join(busy, ".loki"), validate_all=False)
    _record_strikes(Strikes(store, branch="main"))  # writes the busy checkout's local copies too
    store.close()
    start = payload("SessionStart", clean, source="startup")
    time_command([*loki, "hook", "session-start"], repeat=1, stdin=start, cwd=clean, check=True, warmup=0)
    rows = _rows("pg: ", loki, clean, busy, floor, cold, note=f"on {urls[0][1]}")
    import sys

    driver = median(time_command([sys.executable, "-c", "import psycopg"], repeat=cold))
    rows.append(row("pg: cold: python -c 'import psycopg' (what a connecting hook pays first)", driver,
                    floor_name="python -c pass", floor_ms=floor,
                    note="the PreToolUse hook and a success with nothing to clear never import it"))
    return rows


def run() -> list[dict[str, Any]]:
    loki = loki_executable()
    cold = runs(30)
    with tempfile.TemporaryDirectory() as tmp:
        clean = project(tmp, "clean")
        busy = project(tmp, "busy")
        _record_strikes(Strikes(Store(os.path.join(busy, ".loki"), validate_all=False), branch="main"))
        floor = python_floor(cold)
        rows = _rows("", loki, clean, busy, floor, cold)
        rows += _postgres_rows(tmp, loki, floor, cold)

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

    return rows


if __name__ == "__main__":
    for r in run():
        print(json.dumps(r))
