"""What the team spent, through the command line: ``loki work`` records it, ``loki usage``, ``queue show``,
``queue history``, ``loki agents`` and ``loki status`` report it (docs/spend.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers import cli

PY = sys.executable


def claude_result(usd: float, cache_read: int) -> dict[str, object]:
    return {"type": "result", "total_cost_usd": usd,
            "usage": {"input_tokens": 10, "output_tokens": 100, "cache_read_input_tokens": cache_read,
                      "cache_creation_input_tokens": 5},
            "modelUsage": {"claude-sonnet-4-5": {"costUSD": usd}}}


def run_agent(root: Path, agent: str, doc: object, *types: str, code: int = 0) -> None:
    command = ["printf", "%s\n", json.dumps(doc)]  # the agent's report on stdout, without an interpreter's start
    options = [arg for type_ in types for arg in ("--type", type_)]
    result = cli(["work", "--agent", agent, *options, "--", *command], root=root)
    assert result.code == code, result.stderr


@pytest.fixture
def spent(root: Path) -> Path:
    for task_id, type_, labels in (("t1", "feature", "auth,api"), ("t2", "docs", ""), ("t3", "feature", "api")):
        add = ["queue", "add", f"task {task_id}", "--id", task_id, "--type", type_]
        labelled = [arg for label in labels.split(",") if label for arg in ("--label", label)]
        assert cli([*add, *labelled], root=root).code == 0
    run_agent(root, "eng-1", claude_result(0.5, 1000), "feature")
    run_agent(root, "eng-2", claude_result(0.25, 2000), "docs")
    return root


def test_usage_totals_and_groups(spent: Path) -> None:
    total = cli(["usage", "--json"], root=spent).json()["total"]
    assert total == {"input_tokens": 30, "output_tokens": 300, "cache_read_tokens": 4000, "cache_creation_tokens": 15,
                     "tokens": 4345, "usd": 1.25, "unpriced": 0, "attempts": 3}
    by_agent = cli(["usage", "--by", "agent", "--json"], root=spent).json()["rows"]
    assert [(r["agent"], r["usd"], r["attempts"]) for r in by_agent] == [("eng-1", 1.0, 2), ("eng-2", 0.25, 1)]
    by_label = cli(["usage", "--by", "label", "--json"], root=spent).json()["rows"]
    assert {r["label"]: r["usd"] for r in by_label} == {"api": 1.0, "auth": 0.5, "(no label)": 0.25}
    by_type = cli(["usage", "--by", "type", "--format", "jsonl"], root=spent)
    assert [json.loads(line)["type"] for line in by_type.stdout.splitlines()] == ["feature", "docs"]
    by_model = cli(["usage", "--by", "model", "--json"], root=spent).json()["rows"]
    assert [r["model"] for r in by_model] == ["claude-sonnet-4-5"]
    by_day = cli(["usage", "--by", "day"], root=spent)
    assert by_day.code == 0 and "$1.2500 in 3 attempts: 4,345 tokens" in by_day.stderr + by_day.stdout
    assert cli(["usage", "--since", "1d", "--json"], root=spent).json()["total"]["attempts"] == 3
    assert cli(["usage", "--since", "2999-01-01", "--json"], root=spent).json()["total"]["attempts"] == 0


@pytest.mark.parametrize(("args", "message"), [
    (["--by", "colour"], "invalid --by 'colour': one of agent, type, label, day, model"),
    (["--since", "yesterday"], "invalid --since 'yesterday'"),
    (["--since", "2026-13-45"], "invalid --since '2026-13-45'"),
])
def test_bad_options_are_exit_2_with_one_line(spent: Path, args: list[str], message: str) -> None:
    result = cli(["usage", *args], root=spent)
    assert result.code == 2 and message in result.stderr and result.stdout == ""


def test_show_history_agents_and_status_report_the_spend(spent: Path) -> None:
    shown = cli(["queue", "show", "t1"], root=spent)
    assert "spent in all: $0.5000 in 1 attempt: 1,115 tokens (10 in, 100 out, 1,000 cache read, 5 cache write)" \
        in shown.stdout
    assert cli(["queue", "show", "t1", "--json"], root=spent).json()["spent"]["usd"] == 0.5
    history = cli(["queue", "history", "t2"], root=spent)
    assert "spent: $0.2500 in 1 attempt" in history.stdout
    rows = cli(["agents", "--json"], root=spent).json()["agents"]
    assert {r["agent"]: r["spent_today"]["usd"] for r in rows} == {"eng-1": 1.0, "eng-2": 0.25}
    status = cli(["status", "--json"], root=spent).json()
    assert status["spend"]["today"]["usd"] == 1.25 and status["spend"]["total"]["attempts"] == 3
    assert "spend: $1.2500 today (UTC), $1.2500 in all" in cli(["status"], root=spent).stdout


def test_a_lying_agent_is_named_in_one_line_and_nothing_is_stored(root: Path) -> None:
    assert cli(["queue", "add", "t", "--id", "t1"], root=root).code == 0
    result = cli(["work", "--agent", "a", "--", PY, "-c",
                  f"print({json.dumps(json.dumps(claude_result(0.5, 1) | {'total_cost_usd': -3}))})"], root=root)
    assert result.code == 0
    said = [line for line in result.stderr.splitlines() if "usage of t1" in line]
    assert said == ["loki work: usage of t1 not recorded from stdout's Claude Code result: total_cost_usd must be a "
                    "number of dollars from 0 to 1,000,000 (got -3)"]
    assert "usage" not in cli(["queue", "show", "t1", "--json"], root=root).json()["task"]
    assert cli(["validate"], root=root).code == 0


def test_a_bad_price_table_in_the_config_stops_loki_work_before_any_claim(root: Path) -> None:
    assert cli(["queue", "add", "t", "--id", "t1"], root=root).code == 0
    config = root / "config" / "loki.json"
    doc = json.loads(config.read_text()) if config.exists() else {}
    config.write_text(json.dumps({**doc, "spend": {"prices": {"m": {"input": -1}}}}))
    result = cli(["work", "--agent", "a", "--", "true"], root=root)
    assert result.code == 1
    assert result.stderr.splitlines()[0] == ("error: config/loki.json at /spend/prices/m/input: -1 is less than the "
                                             "minimum of 0")
    assert cli(["queue", "show", "t1", "--json"], root=root).json()["state"] == "pending"


def test_budget_commands(root: Path) -> None:
    assert cli(["budget", "set", "daily", "--usd", "50", "--per", "day"], root=root).stdout == \
        "budget daily: $50.00 per day for team\n"
    assert cli(["budget", "set", "docs", "--tokens", "5M", "--per", "hour", "--scope", "type:docs"],
               root=root).code == 0
    rows = cli(["budget", "list", "--json"], root=root).json()["budgets"]
    assert [(r["name"], r["usd"], r["tokens"], r["scope"], r["exhausted"]) for r in rows] == [
        ("daily", 50.0, None, "team", False), ("docs", None, 5_000_000, "type:docs", False)]
    assert cli(["budget", "list", "-q"], root=root).stdout == "daily\ndocs\n"
    shown = cli(["budget", "show", "daily"], root=root)
    assert shown.stdout.startswith("daily (team): $0.0000 of $50.00 this day (since ")
    assert cli(["budget", "remove", "docs"], root=root).stdout == "budget docs removed\n"
    missing = cli(["budget", "show", "docs"], root=root)
    assert missing.code == 1 and "no budget 'docs'" in missing.stderr
    assert cli(["validate"], root=root).code == 0


def test_a_spent_budget_makes_queue_claim_exit_75_with_the_refill_time(root: Path) -> None:
    assert cli(["queue", "add", "a", "--id", "t1"], root=root).code == 0
    assert cli(["queue", "add", "b", "--id", "t2"], root=root).code == 0
    assert cli(["budget", "set", "team", "--usd", "0.5", "--per", "week"], root=root).code == 0
    run_agent(root, "eng-1", claude_result(0.5, 0), code=75)  # the first task spends it all: the loop stops
    refused = cli(["queue", "claim", "--agent", "eng-2", "--json"], root=root)
    assert refused.code == 75
    error = json.loads(refused.stdout or refused.stderr)
    assert error["error"] == "budget_exceeded" and error["budget"] == "team" and error["refill_at"].endswith("Z")
    assert cli(["queue", "show", "t2", "--json"], root=root).json()["state"] == "pending"


def test_claim_reuse_while_holding_a_task_of_another_type_meets_a_spent_budget(root: Path) -> None:
    for task_id, type_ in (("t1", "docs"), ("t2", "feature"), ("t3", "feature")):
        assert cli(["queue", "add", task_id, "--id", task_id, "--type", type_], root=root).code == 0
    assert cli(["queue", "claim", "--agent", "eng-2", "--type", "docs"], root=root).code == 0  # holds t1
    assert cli(["budget", "set", "team", "--usd", "0.5", "--per", "week"], root=root).code == 0
    run_agent(root, "eng-1", claude_result(0.5, 0), "feature", code=75)  # t2 spends it all
    refused = cli(["queue", "claim", "--agent", "eng-2", "--type", "feature", "--reuse"], root=root)
    assert refused.code == 75 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert cli(["queue", "show", "t3", "--json"], root=root).json()["state"] == "pending"
    given_back = cli(["queue", "claim", "--agent", "eng-2", "--type", "docs", "--reuse", "--json"], root=root)
    assert given_back.code == 0 and given_back.json()["task"]["id"] == "t1", given_back.stdout


def test_a_spent_budget_s_escalation_through_the_command_line_the_briefing_and_the_board(root: Path) -> None:
    from loki.hooks.handlers import briefing
    from loki.serve.board import live_region, snapshot
    from loki.storage.opening import open_store

    assert cli(["queue", "add", "a", "--id", "t1"], root=root).code == 0
    assert cli(["queue", "add", "b", "--id", "t2"], root=root).code == 0
    assert cli(["budget", "set", "team", "--usd", "0.5", "--per", "week"], root=root).code == 0
    run_agent(root, "eng-1", claude_result(0.5, 0), code=75)
    [row] = cli(["escalations", "list", "--open", "--json"], root=root).json()["escalations"]
    assert (row["budget"], row["task_id"], row["trigger"]) == ("team", "budget-team", "budget_exceeded")
    shown = cli(["escalations", "show", "budget-team"], root=root)
    assert shown.stdout.startswith(f"{row['id']}: open; tasks: none\n"), shown.stdout
    assert "budget team (team) spent: $0.5000 of $0.50 this week" in shown.stdout
    assert f"escalation: {row['id']}" in cli(["budget", "show", "team"], root=root).stdout
    store = open_store(str(root))
    context = briefing(store, {})["hookSpecificOutput"]["additionalContext"]  # type: ignore[index]
    assert f"escalations/{row['file']}: budget team (team) spent this week" in context
    board = snapshot(store, {})
    assert [e["id"] for e in board["escalations"]] == [row["id"]]
    assert f'data-escalation="{row["id"]}"' in live_region(board, "token")
    cancelled = cli(["approve", row["id"], "--decision", "cancel"], root=root)
    assert cancelled.code == 1 and "is a spent budget (team), not a task" in cancelled.stderr
    acknowledged = cli(["approve", row["id"], "--decision", "approve", "--approver", "ana"], root=root)
    assert acknowledged.stdout == (f"escalation {row['id']}: acknowledged and resolved (a budget: no task was "
                                   "parked; `loki budget set` raises it)\n"), acknowledged.stderr
    assert cli(["escalations", "list", "--open", "--json"], root=root).json()["escalations"] == []
    assert cli(["queue", "claim", "--agent", "eng-2"], root=root).code == 75  # still spent
    assert cli(["budget", "set", "team", "--usd", "5", "--per", "week"], root=root).stdout == \
        "budget team: $5.00 per week for team\n"  # the escalation was already resolved: nothing more said
    assert cli(["validate"], root=root).code == 0
