"""Declared checks on the command line (docs/verify.md): `queue add/edit --verify`, what `status`, `agents`
and `queue ready --explain` print about a failing check, `queue complete`'s refusal and its override."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import cli

CHECK = "sh -c 'echo FAILED test_a.py::test_b >&2; exit 1'"


def test_a_failing_check_is_shown_by_status_agents_and_explain(root: Path) -> None:
    assert cli(["queue", "add", "Fix it", "--id", "t1", "--verify", CHECK], root=root).code == 0
    worked = cli(["work", "--agent", "eng-1", "--max-tasks", "1", "--", "true"], root=root)
    assert worked.code == 1, worked.stderr
    assert f"failed t1: check {CHECK!r} failed: exit 1 (test_failure): FAILED test_a.py::test_b" in worked.stderr
    status = cli(["status"], root=root)
    assert f"checks failing: 1 task: t1 {CHECK!r} (pending)" in status.stdout
    assert cli(["status", "--json"], root=root).json()["checks_failing"][0]["check"] == CHECK
    explained = cli(["queue", "ready", "--explain"], root=root)
    assert f"after its check {CHECK!r} failed: exit 1 (test_failure)" in explained.stdout
    later = {"LOKI_NOW": "2099-01-01T00:00:00Z"}
    assert cli(["queue", "claim", "--agent", "eng-2", "--id", "t1"], root=root, env=later).code == 0
    agents = cli(["agents"], root=root, env=later)
    assert f"eng-2 holds t1, whose check {CHECK!r} failed at attempt 1 (exit 1, test_failure)" in agents.stderr


def test_edit_verify_and_no_verify(root: Path) -> None:
    cli(["queue", "add", "x", "--id", "t1"], root=root)
    edited = cli(["queue", "edit", "t1", "--verify", "make test", "--verify", "make lint"], root=root)
    assert edited.code == 0 and "verify:" in edited.stdout
    assert cli(["queue", "show", "t1", "--json"], root=root).json()["task"]["verify"] == ["make test", "make lint"]
    assert cli(["queue", "edit", "t1", "--no-verify"], root=root).code == 0
    assert cli(["queue", "show", "t1", "--json"], root=root).json()["task"]["verify"] == []
    both = cli(["queue", "edit", "t1", "--verify", "x", "--no-verify"], root=root)
    assert both.code == 2 and "either --verify or --no-verify" in both.stderr
    empty = cli(["queue", "edit", "t1", "--verify", ""], root=root)
    assert empty.code == 2 and "--verify: a check is empty" in empty.stderr
    assert cli(["queue", "show", "t1", "--json"], root=root).json()["task"]["verify"] == []  # unchanged
