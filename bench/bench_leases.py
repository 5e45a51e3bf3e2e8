"""Path-lease benchmarks (issue 25): the PreToolUse hook cold, before an Edit (and, at 1,000 leases, before a
Codex CLI ``apply_patch``), with 0 / 1,000 / 10,000 live leases in ``state/path-leases.json``, against
``python -c pass`` measured in the same rounds (target: at most 3x). The edited file is free (the common case),
and once held by another agent (the deny). The leases are written as one document (``area<N>/**`` by
``agent-<N>``) with the hook's index beside it, as ``loki lease acquire`` would leave them, an hour from
LOKI_NOW. At 10,000 the same free Edit is measured again with the index removed (the hook then reads the whole
document: what the index saves), and on a database tree, whose hook reads this machine's copy of the 10,000
(the database itself unreachable: the hook never connects).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any

from bench.common import loki_executable, median, row, runs, time_command
from bench.hookbench import payload, project
from loki.leases import hotcopy

NOW = "2026-01-25T10:00:00Z"


def _leases(top: str, count: int) -> None:
    leases = [{"lease_id": f"L{n + 1}", "agent": f"agent-{n}", "patterns": [f"area{n}/**"], "exclusive": True,
               "task": None, "reason": None, "key": None, "ttl": 3600, "acquired_at": NOW, "renewed_at": NOW,
               "expires_at": "2026-01-25T11:00:00Z"} for n in range(count)]
    doc = {"version": 1, "next_id": count + 1, "leases": leases, "history": []}
    with open(os.path.join(top, ".loki", "state", "path-leases.json"), "w") as f:
        json.dump(doc, f)
    hotcopy.rebuild_beside(os.path.join(top, ".loki"))


def _database_tree(top: str, count: int) -> None:
    """``top`` as a machine of a team on PostgreSQL: its config names a database (unreachable), its copy of the
    holders is the index under ``.loki/cache/``, written now."""
    root = os.path.join(top, ".loki")
    with open(os.path.join(root, "state", "path-leases.json")) as f:
        leases = json.load(f)["leases"]
    hotcopy.write(os.path.join(root, "cache", *hotcopy.INDEX.split("/")),
                  hotcopy.build(leases, source=None, claims=True, refreshed_at=NOW))
    os.unlink(os.path.join(root, "state", "path-leases.json"))  # the index beside it is gone already
    with open(os.path.join(root, "config", "loki.json"), "w") as f:
        json.dump({"version": 1, "storage": {"backend": "postgresql",
                                             "database": "postgresql://loki@unreachable.invalid:1/team"}}, f)


def _timed_round_robin(cases: list[tuple[str, list[str], bytes | None, str | None]], repeat: int,
                       env: dict[str, str]) -> dict[str, list[float]]:
    """Each case once per round, ``repeat`` rounds (after one warm-up round): on a shared machine whose load
    moves by the second, every case (the floor too) meets the same load, which a run of one case after
    another's does not."""
    samples: dict[str, list[float]] = {name: [] for name, *_ in cases}
    for index in range(repeat + 1):
        for name, argv, stdin, cwd in cases:
            value = time_command(argv, repeat=1, warmup=0, stdin=stdin, cwd=cwd, check=True, env=env)[0]
            if index:
                samples[name].append(value)
    return samples


def _codex_cases(top: str) -> list[tuple[str, str, bytes]]:
    """Codex CLI's ``apply_patch`` (the payload Codex 0.169.0 sends): a patch of two files, free, then one of them
    held by another agent (the deny); the patch's file lines are read before any lease is compared."""
    cases = []
    for label, name in (("free files", "src/auth/login.py"), ("a leased file: deny", "area500/x.py")):
        patch = ("*** Begin Patch\n*** Update File: README.md\n@@\n-a\n+b\n"
                 f"*** Update File: {name}\n@@\n-a\n+b\n*** End Patch\n")
        stdin = payload("PreToolUse", top, tool_name="apply_patch", tool_use_id="call_1", turn_id="t1",
                        model="gpt-5.5", tool_input={"command": patch})
        cases.append((f"codex {label}", f"cold: loki hook --agent codex pre-tool-use, apply_patch of {label} "
                                        "(1,000 leases)", stdin))
    return cases


def run() -> list[dict[str, Any]]:
    loki = loki_executable()
    cold = runs(30)
    env = {"LOKI_NOW": NOW}  # the leases are live at this instant
    hook = [*loki, "hook", "pre-tool-use"]
    cases: list[tuple[str, list[str], bytes | None, str | None]] = [
        ("floor", [sys.executable, "-c", "pass"], None, None)]
    labels = {}
    with tempfile.TemporaryDirectory() as tmp:
        for count in (0, 1000, 10000):
            top = project(tmp, f"leases{count}")
            _leases(top, count)
            edit = payload("PreToolUse", top, tool_name="Edit", tool_use_id="toolu_1",
                           tool_input={"file_path": os.path.join(top, "src", "auth", "login.py"),
                                       "old_string": "a", "new_string": "b"})
            cases.append((f"free{count}", hook, edit, top))
            labels[f"free{count}"] = f"cold: loki hook pre-tool-use, Edit of a free file ({count:,} live leases)"
            if count:
                held = payload("PreToolUse", top, tool_name="Edit", tool_use_id="toolu_2",
                               tool_input={"file_path": os.path.join(top, f"area{count // 2}", "x.py"),
                                           "old_string": "a", "new_string": "b"})
                cases.append((f"deny{count}", hook, held, top))
                labels[f"deny{count}"] = (f"cold: loki hook pre-tool-use, Edit of a leased file: deny "
                                          f"({count:,} leases)")
            if count == 1000:
                for name, label, stdin in _codex_cases(top):
                    cases.append((name, [*loki, "hook", "--agent", "codex", "pre-tool-use"], stdin, top))
                    labels[name] = label
        count = 10000
        bare = project(tmp, "bare")  # the same 10,000 without the index: the hook reads the whole document
        _leases(bare, count)
        os.unlink(os.path.join(bare, ".loki", *hotcopy.INDEX.split("/")))
        cases.append(("bare", hook, payload("PreToolUse", bare, tool_name="Edit", tool_use_id="toolu_1",
                                            tool_input={"file_path": os.path.join(bare, "src", "a.py"),
                                                        "old_string": "a", "new_string": "b"}), bare))
        labels["bare"] = "cold: the same free Edit without the index (10,000 leases: the whole document)"
        team = project(tmp, "team")
        _leases(team, count)
        os.unlink(os.path.join(team, ".loki", *hotcopy.INDEX.split("/")))
        _database_tree(team, count)
        cases.append(("team", hook, payload("PreToolUse", team, tool_name="Edit", tool_use_id="toolu_2",
                                            tool_input={"file_path": os.path.join(team, "area5000", "x.py"),
                                                        "old_string": "a", "new_string": "b"}), team))
        labels["team"] = "cold: database tree, this machine's copy, Edit of a leased file: deny (10,000 leases)"
        samples = _timed_round_robin(cases, cold, env)
    floor = median(samples.pop("floor"))
    return [row(labels[name], median(values), floor_name="python -c pass", floor_ms=floor,
                target_ratio=None if name in ("bare", "codex a leased file: deny") else 3)
            for name, values in samples.items()]
