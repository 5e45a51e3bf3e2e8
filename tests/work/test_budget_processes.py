"""Budgets under real ``loki work`` processes (docs/spend.md): eight agents on a budget of $1 stop within the
documented overshoot (without a reserve at most one attempt per agent: 8 x $0.125; with a reserve of one
attempt's cost, none), on files and on two PostgreSQL "machines";
every attempt counted once; one BUDGET_EXCEEDED signal; and the budget refills when its window ends (time
moved with LOKI_NOW)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import loki_proc, tree_problems

pytestmark = pytest.mark.slow  # real processes: ~20 s

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]
AGENTS = 8
TASKS = 40
USD = 0.125
LIMIT = 1.0
DAY = "2030-01-01T10:00:00Z"
NEXT_DAY = "2030-01-02T00:00:01Z"
AGENT = (f"import json; print(json.dumps({{'type': 'result', 'total_cost_usd': {USD!r}, "
         "'usage': {'input_tokens': 10, 'output_tokens': 5}}))")


def team(machines: list[tuple[Path, dict[str, str]]], *extra: str) -> list[dict[str, object]]:
    procs = []
    for index in range(AGENTS):
        root, env = machines[index % len(machines)]
        scratch = root.parent / "scratch"
        scratch.mkdir(exist_ok=True)
        procs.append(subprocess.Popen(
            [PY, "-m", "loki", "--root", str(root), "work", "--agent", f"eng-{index}", "--json", *extra, "--",
             PY, "-c", AGENT], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, **env, "TMPDIR": str(scratch), "LOKI_NOW": DAY}))
    summaries = []
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        summary = json.loads(err.decode().splitlines()[-1])
        assert proc.returncode == 75 and summary["stopped"] == "budget", err.decode()[-2000:]
        summaries.append(summary)
    return summaries


def check(root: Path, env: dict[str, str], summaries: list[dict[str, object]], most: float) -> None:
    claims = sum(int(s["claimed"]) for s in summaries)  # type: ignore[call-overload]
    at = {**env, "LOKI_NOW": DAY}
    usage = json.loads(loki_proc(["usage", "--json"], root=root, env=at).stdout)["total"]
    assert usage["attempts"] == claims  # every attempt counted once
    assert LIMIT <= usage["usd"] == claims * USD <= most
    shown = json.loads(loki_proc(["budget", "show", "team", "--json"], root=root, env=at).stdout)
    assert shown["exhausted"] and shown["spent_usd"] == usage["usd"] and shown["refill_at"] == "2030-01-02T00:00:00Z"
    refused = loki_proc(["queue", "claim", "--agent", "late", "--json"], root=root, env=at)
    assert refused.code == 75 and json.loads(refused.stdout or refused.stderr)["refill_at"] == "2030-01-02T00:00:00Z"
    signals = json.loads(loki_proc(["signal", "list", "--json"], root=root, env=at).stdout)["signals"]
    assert [s["type"] for s in signals].count("BUDGET_EXCEEDED") == 1
    rows = json.loads(loki_proc(["escalations", "list", "--json"], root=root, env=at).stdout)["escalations"]
    assert [(r["budget"], r["window_start"], r["open"]) for r in rows] == [("team", "2030-01-01T00:00:00Z", True)]
    # The window ends: the budget refills and work goes on.
    later = loki_proc(["work", "--agent", "eng-0", "--max-tasks", "1", "--", PY, "-c", AGENT], root=root,
                      env={**env, "LOKI_NOW": NEXT_DAY})
    assert later.code == 0, later.stderr


def budgeted(root: Path, env: dict[str, str]) -> None:
    specs = [{"title": f"task {n}", "id": f"t{n:02d}"} for n in range(TASKS)]
    path = root.parent / "tasks.json"
    path.write_text(json.dumps(specs))
    at = {**env, "LOKI_NOW": DAY}
    assert loki_proc(["queue", "add", "--from-file", str(path)], root=root, env=at).code == 0
    assert loki_proc(["budget", "set", "team", "--usd", str(LIMIT), "--per", "day"], root=root, env=at).code == 0


def test_eight_agents_on_files_stop_within_the_overshoot_of_the_attempts_running(root: Path) -> None:
    budgeted(root, {})
    summaries = team([(root, {})])
    check(root, {}, summaries, most=LIMIT + AGENTS * USD)
    assert tree_problems(root) == []


def test_eight_agents_on_files_with_a_reserve_of_one_attempt_never_overshoot(root: Path) -> None:
    """The check and the claim are one step under the queue's lock: each claim counts a reserve for every
    attempt already running, so with a reserve of one attempt's cost the team ends at the limit exactly."""
    budgeted(root, {})
    summaries = team([(root, {})], "--reserve", str(USD))
    check(root, {}, summaries, most=LIMIT)
    assert tree_problems(root) == []


def test_eight_agents_on_two_postgresql_machines_with_a_reserve_stop_within_the_overshoot(tmp_path: Path) -> None:
    from tests import pgserver

    url = pgserver.fresh_schema_url()
    machines = []
    for name in ("m0", "m1"):
        home, work = tmp_path / name / "home", tmp_path / name / "work"
        home.mkdir(parents=True), work.mkdir(parents=True)
        env = {"HOME": str(home), "LOKI_DB_RETRY_SECONDS": "30"}
        joined = loki_proc(["init", "--path", str(work), "--database", url], env=env)
        assert joined.code == 0, joined.stderr
        machines.append((work / ".loki", env))
    budgeted(*machines[0])
    summaries = team(machines, "--reserve", str(USD))
    # A reserve of one attempt's cost refuses a claim once the running attempts could pass the limit; the check
    # runs in the claim's transaction under the queue's lock, so no two machines claim past it at one instant:
    # the team ends at the limit exactly (docs/spend.md), and the usage is read on the other machine.
    check(*machines[1], summaries, most=LIMIT)
