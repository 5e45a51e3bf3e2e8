"""On a tree whose state is in PostgreSQL, messages name what exists on this machine (issue 23).

The strike-3 and deny messages told the agent to read ``.loki/escalations/<id>.md`` and ``signal emit``
answered ``(signals/NAME)``: on a database tree neither is a file anywhere. They now name the command that
shows it (``loki escalations show ID``, ``loki signal show NAME``); a file tree keeps naming its files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loki.hooks import handlers
from loki.strikes.strikes import Strikes
from tests import pgserver
from tests.helpers import NOW, cli

ENV = {"LOKI_NOW": NOW, "LOKI_DB_RETRY_SECONDS": "0.2"}


def _failure(cwd: Path) -> dict[str, Any]:
    return {"session_id": "s1", "hook_event_name": "PostToolUseFailure", "cwd": str(cwd), "tool_name": "Bash",
            "tool_input": {"command": "cargo build"}, "tool_use_id": "t", "error": "bash: cargo: command not found"}


def _strike_three(backend_store: Any) -> tuple[str, str]:
    strikes = Strikes(backend_store, branch="main")
    outcome = None
    for _ in range(3):
        outcome = strikes.record_failure("Bash", {"command": "cargo build"}, "bash: cargo: command not found")
    assert outcome is not None and outcome.guidance is not None and outcome.escalation is not None
    return outcome.guidance, outcome.escalation


def test_strike_three_names_the_escalation_as_this_backend_keeps_it(backend_store: Any, backend: str) -> None:
    guidance, escalation = _strike_three(backend_store)
    stem = escalation.removesuffix(".md")
    if backend == "file":
        assert f".loki/escalations/{escalation}" in guidance
    else:  # no file on this machine: the command that shows it
        assert ".loki/escalations" not in guidance and f"`loki escalations show {stem}`" in guidance


@pytest.fixture
def database_tree(tmp_path: Path) -> Path:
    url = pgserver.fresh_schema_url(migrate=False)
    done = cli(["init", "--path", str(tmp_path), "--database", url], env=ENV)
    assert done.code == 0, done.stderr
    return tmp_path / ".loki"


def test_on_a_database_tree_the_hooks_name_the_command_not_a_file(database_tree: Path) -> None:
    project = database_tree.parent
    answers = [handlers.post_tool_use_failure(_failure(project), str(database_tree)) for _ in range(3)]
    third = json.dumps(answers[-1])
    assert ".loki/escalations" not in third and "loki escalations show " in third
    stem = third.split("loki escalations show ")[1].split("`")[0]
    shown = cli(["escalations", "show", stem, "--json"], root=database_tree, env=ENV)
    assert shown.code == 0, shown.stderr  # the command named works on this machine
    assert shown.json()["open"] and shown.json()["task_id"].startswith("strike-")
    payload = {**_failure(project), "hook_event_name": "PreToolUse"}
    payload.pop("error")
    denied = handlers.pre_tool_use(payload, str(database_tree))
    assert denied is not None
    reason = denied["hookSpecificOutput"]["permissionDecisionReason"]
    assert denied["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert ".loki/escalations" not in reason and f"`loki escalations show {stem}`" in reason
    assert not (database_tree / "escalations" / f"{stem}.md").exists()


def test_on_a_database_tree_signal_emit_names_the_signal_not_a_file(database_tree: Path) -> None:
    done = cli(["signal", "emit", "DOCS_NEEDED", "message=write it"], root=database_tree, env=ENV)
    assert done.code == 0, done.stderr
    assert "signals/" not in done.stdout
    assert done.stdout == "emitted DOCS_NEEDED (in the database: `loki signal show DOCS_NEEDED`)\n"
    assert cli(["signal", "show", "DOCS_NEEDED"], root=database_tree, env=ENV).code == 0
    assert cli(["queue", "add", "x", "--id", "x"], root=database_tree, env=ENV).code == 0
    drift = cli(["signal", "emit", "DRIFT_DETECTED", "detected_drift=off plan", "--task", "x", "--severity", "low"],
                root=database_tree, env=ENV)
    assert drift.code == 0, drift.stderr
    assert "logs/" not in drift.stdout and "in the database" in drift.stdout
    as_json = cli(["signal", "emit", "DOCS_NEEDED", "message=again", "--json"], root=database_tree, env=ENV).json()
    assert as_json["name"] == "DOCS_NEEDED.2" and as_json["path"] is None


@pytest.mark.files
def test_on_a_file_tree_signal_emit_names_its_file(root: Path) -> None:
    done = cli(["signal", "emit", "DOCS_NEEDED", "message=write it"], root=root, env=ENV)
    assert done.stdout == "emitted DOCS_NEEDED (signals/DOCS_NEEDED)\n"
    assert (root / "signals" / "DOCS_NEEDED").is_file()
    as_json = cli(["signal", "emit", "DOCS_NEEDED", "message=again", "--json"], root=root, env=ENV).json()
    assert as_json["path"] == "signals/DOCS_NEEDED.2"


def test_on_a_database_tree_escalate_names_the_command_not_a_file(database_tree: Path, tmp_path: Path) -> None:
    from loki.storage.tree import init_tree

    files = tmp_path / "files" / ".loki"
    init_tree(str(files))
    for tree in (database_tree, files):
        assert cli(["queue", "add", "x", "--id", "t1"], root=tree, env=ENV).code == 0
        done = cli(["escalate", "t1", "--trigger", "security_decision"], root=tree, env=ENV)
        assert done.code == 0, done.stderr
        first = done.stdout.splitlines()[0]
        if tree == files:
            assert first == "escalated t1: escalations/20260125T100000Z-t1.md"
        else:
            assert first == "escalated t1: 20260125T100000Z-t1 (`loki escalations show 20260125T100000Z-t1`)"
