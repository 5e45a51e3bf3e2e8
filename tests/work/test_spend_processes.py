"""The meter under real ``loki work`` processes (docs/spend.md): a team of eight on files, and on PostgreSQL from
two "machines" (separate trees joined to one database), every claim's usage recorded exactly once, a failed
attempt and its retry counted apart; and a ``loki work`` killed with SIGKILL records nothing for its claim,
however much its agent had printed, while the retry that completes the task records its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import cli, loki_proc, process_gone, tree_problems

pytestmark = pytest.mark.slow  # real processes: ~15 s

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]
TASKS = 24
USD = 0.125  # exact in binary: sums compare equal
# An agent that reports a Claude Code result, and fails the first attempt of every third task.
AGENT = f"""
import json, os, sys
n = int(os.environ["LOKI_TASK_ID"][1:])
attempt = int(os.environ["LOKI_TASK_ATTEMPT"])
print(json.dumps({{"type": "result", "total_cost_usd": {USD}, "usage": {{"input_tokens": n, "output_tokens": 7,
      "cache_read_input_tokens": 1000, "cache_creation_input_tokens": attempt}}}}), flush=True)
sys.exit(1 if n % 3 == 0 and attempt == 1 else 0)
"""


def spawn(root: Path, agent: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    scratch = root.parent / "scratch"
    scratch.mkdir(exist_ok=True)
    return subprocess.Popen([PY, "-m", "loki", "--root", str(root), "work", "--agent", agent, "--until-empty",
                             "--json", "--", PY, "-c", AGENT], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "TMPDIR": str(scratch), **(env or {})})


def run_team(roots: list[tuple[Path, dict[str, str]]], per_root: int) -> list[dict[str, object]]:
    procs = [spawn(root, f"m{i}-eng-{n}", env) for i, (root, env) in enumerate(roots) for n in range(per_root)]
    summaries = []
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        # 1: a task whose failure this agent recorded was completed by another
        assert proc.returncode in (0, 1), err.decode()[-2000:]
        summaries.append(json.loads(err.decode().splitlines()[-1]))
    return summaries


def check_each_claim_counted_once(root: Path, summaries: list[dict[str, object]], env: dict[str, str]) -> None:
    claims = sum(int(s["claimed"]) for s in summaries)  # type: ignore[call-overload]
    assert claims == TASKS + TASKS // 3  # every third task failed once, then completed
    assert sum(int(s["completed"]) for s in summaries) == TASKS  # type: ignore[call-overload]
    for n in range(TASKS):
        shown = loki_proc(["queue", "show", f"t{n:02d}", "--json"], root=root, env=env)
        task = json.loads(shown.stdout)["task"]
        usage = task["usage"]
        tries = 2 if n % 3 == 0 else 1
        assert [(e["attempt"], e["outcome"], e["cache_creation_tokens"]) for e in usage] == (
            [(1, "failed", 1), (2, "completed", 2)] if tries == 2 else [(1, "completed", 1)])
        assert {e["input_tokens"] for e in usage} == {n}
        holders = [e["agent"] for e in usage]
        assert [a["agent_id"] for a in task["attempts"]] == holders[:-1]  # the failure's agent is the entry's
    total = json.loads(loki_proc(["usage", "--json"], root=root, env=env).stdout)["total"]
    assert total["attempts"] == claims and total["usd"] == claims * USD
    assert total["cache_read_tokens"] == claims * 1000
    assert total["input_tokens"] == sum(n * (2 if n % 3 == 0 else 1) for n in range(TASKS))


def add_tasks(root: Path, env: dict[str, str] | None = None) -> None:
    specs = [{"title": f"task {n}", "id": f"t{n:02d}", "max_attempts": 3} for n in range(TASKS)]
    path = root.parent / "tasks.json"
    path.write_text(json.dumps(specs))
    added = loki_proc(["queue", "add", "--from-file", str(path)], root=root, env=env)
    assert added.code == 0, added.stderr


def test_eight_agents_on_files_record_each_claims_usage_once(root: Path) -> None:
    config = root / "config" / "loki.json"
    doc = json.loads(config.read_text()) if config.exists() else {"version": 1}
    doc.setdefault("queue", {}).update({"backoff_initial": 0.01, "backoff_max": 0.01})
    config.write_text(json.dumps(doc))
    add_tasks(root)
    summaries = run_team([(root, {})], 8)
    check_each_claim_counted_once(root, summaries, {})
    assert tree_problems(root) == []


def test_eight_agents_on_two_postgresql_machines_record_each_claims_usage_once(tmp_path: Path) -> None:
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
    first_root, first_env = machines[0]
    config = first_root / "config" / "loki.json"
    doc = json.loads(config.read_text())
    doc.setdefault("queue", {}).update({"backoff_initial": 0.01, "backoff_max": 0.01})
    for root, _ in machines:
        (root / "config" / "loki.json").write_text(json.dumps(doc))
    add_tasks(first_root, first_env)
    summaries = run_team(machines, 4)
    check_each_claim_counted_once(machines[1][0], summaries, machines[1][1])  # read on the other machine


SLOW_AGENT = """
import json, os, time
print(os.getpid(), flush=True)
print(json.dumps({"type": "result", "total_cost_usd": 9.5, "usage": {"input_tokens": 1, "output_tokens": 1}}),
      flush=True)
time.sleep(600)
"""


def test_a_loki_work_killed_with_sigkill_records_nothing_and_the_retry_records_once(root: Path) -> None:
    assert cli(["queue", "add", "a long task", "--id", "t1"], root=root).code == 0
    scratch = root.parent / "scratch"
    scratch.mkdir()
    at = {"LOKI_NOW": "2030-01-01T00:00:00Z", "TMPDIR": str(scratch)}
    proc = subprocess.Popen([PY, "-m", "loki", "--root", str(root), "work", "--agent", "eng-001", "--", PY, "-c",
                             SLOW_AGENT], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **at})
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    assert b"total_cost_usd" in proc.stdout.readline()  # the report passed through before the kill
    proc.kill()
    proc.communicate(timeout=60)
    assert process_gone(child)
    assert "usage" not in cli(["queue", "show", "t1", "--json"], root=root).json()["task"]
    # The first claim after the lease lapsed requeues the task (backing off 5 s); the next one takes it.
    later = {"LOKI_NOW": "2030-01-01T01:01:00Z", "TMPDIR": str(scratch)}
    assert subprocess.run([PY, "-m", "loki", "--root", str(root), "queue", "requeue-stale"], cwd=REPO,
                          capture_output=True, env={**os.environ, **later}).returncode == 0
    later["LOKI_NOW"] = "2030-01-01T01:02:00Z"
    retry = subprocess.run([PY, "-m", "loki", "--root", str(root), "work", "--agent", "eng-002", "--", PY, "-c",
                            AGENT.replace("n % 3 == 0", "False").replace('[1:]', '[1:] or 0')],
                           cwd=REPO, capture_output=True, env={**os.environ, **later}, timeout=60)
    assert retry.returncode == 0, retry.stderr.decode()
    task = cli(["queue", "show", "t1", "--json"], root=root).json()["task"]
    assert [a["error_type"] for a in task["attempts"]] == ["timeout"]  # the killed claim: its lease lapsed
    assert [(e["agent"], e["attempt"], e["outcome"], e["usd"]) for e in task["usage"]] == [
        ("eng-002", 2, "completed", USD)]
    assert tree_problems(root) == []
