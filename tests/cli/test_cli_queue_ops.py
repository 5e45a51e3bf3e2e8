"""The operator's queue commands through the CLI: ``edit``, ``close``, ``defer``, ``ready``, ``history``,
``claim --id/--reuse/--label/--priority`` (fast lane and typer alike), ``list --agent``, ``show``, ``cancel --force``:
exit codes, output, stable JSON keys, and the state afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import cli, loki_proc, snapshot_bytes, tree_problems

T0 = {"LOKI_NOW": "2026-01-25T10:00:00Z", "USER": "olivia"}
REPO = Path(__file__).resolve().parents[2]


def at(ts: str) -> dict[str, str]:
    return {**T0, "LOKI_NOW": ts}


def add(root: Path, task_id: str, *extra: str) -> None:
    result = cli(["queue", "add", task_id, "--id", task_id, *extra], root=root, env=T0)
    assert result.code == 0, result.stderr


def test_edit_through_the_cli(root: Path) -> None:
    add(root, "base")
    add(root, "t1", "-p", "low")
    edited = cli(["queue", "edit", "t1", "--title", "Renamed", "-p", "HIGH", "--add-label", "api",
                  "--add-dependency", "base", "--max-attempts", "3"], root=root, env=T0)
    assert edited.code == 0, edited.stderr
    assert edited.stdout == ("edited t1 (pending): title: t1 -> Renamed; priority: low -> high; dependencies: none "
                             "-> base; labels: none -> api; max_attempts: 5 -> 3\n")
    same = cli(["queue", "edit", "t1", "-p", "high", "--json"], root=root, env=T0)
    assert same.code == 0 and same.json()["changed"] == {} and set(same.json()) == {"task", "state", "changed"}
    cycle = cli(["queue", "edit", "base", "--add-dependency", "t1"], root=root, env=T0)
    assert cycle.code == 1 and cycle.stderr == ("error: --add-dependency would make a dependency cycle "
                                                "base -> t1 -> base\n")
    nothing = cli(["queue", "edit", "t1", "--json"], root=root, env=T0)
    assert nothing.code == 2 and json.loads(nothing.stderr)["error"] == "usage"
    history = cli(["queue", "history", "t1", "--json"], root=root).json()
    assert history["events"][-1]["by"] == "olivia"  # --by defaults to $USER
    assert tree_problems(root) == []


def test_edit_or_close_a_held_task_is_exit_4_without_force(root: Path) -> None:
    add(root, "t1")
    token = cli(["queue", "claim", "-a", "a1", "--json"], root=root, env=T0).json()["task"]["claim_token"]
    before = snapshot_bytes(root)
    for args in (["queue", "edit", "t1", "--title", "x"], ["queue", "close", "t1", "--reason", "done"],
                 ["queue", "defer", "t1", "--until", "1h"], ["queue", "cancel", "t1"]):
        refused = cli(args, root=root, env=T0)
        assert refused.code == 4, args
        assert "t1 is held by 'a1' (lease until 2026-01-25T11:00:00Z)" in refused.stderr
        assert "--force; nothing changed" in refused.stderr
    assert snapshot_bytes(root) == before
    assert cli(["queue", "edit", "t1", "--title", "x", "-a", "a1"], root=root, env=T0).code == 0  # its holder
    assert cli(["queue", "edit", "t1", "--title", "y", "--force"], root=root, env=T0).code == 0
    held = cli(["queue", "show", "t1", "--json"], root=root).json()["task"]
    assert held["claim_token"] == token and held["claimed_by"] == "a1"
    closed = cli(["queue", "close", "t1", "--reason", "done by hand", "--force", "--json"], root=root, env=T0)
    assert closed.code == 0 and set(closed.json()) == {"task", "from", "state", "dependents", "resolved"}
    late = cli(["queue", "complete", "t1", "--agent", "a1", "--token", token], root=root, env=T0)
    assert late.code == 4 and "t1 is completed, not in progress" in late.stderr


def test_close_and_cancel_through_the_cli(root: Path) -> None:
    add(root, "base")
    add(root, "top", "--depends-on", "base")
    add(root, "done")
    assert cli(["queue", "close", "done", "--reason", "fixed in 4f2a9c1"], root=root, env=T0).stdout == (
        "closed done as done: pending -> completed\n")
    wont = cli(["queue", "close", "base", "--wont-do", "--reason", "superseded"], root=root, env=T0)
    assert wont.code == 0 and wont.stdout.splitlines() == [
        "closed base as won't do: pending -> cancelled",
        "warning: these tasks depend on base and can no longer become ready: top (cancel them with "
        "`loki queue cancel base --cascade`)"]
    again = cli(["queue", "close", "done", "--reason", "x"], root=root, env=T0)
    assert again.code == 4 and "done is already completed" in again.stderr
    missing = cli(["queue", "close", "top"], root=root, env=T0)
    assert missing.code == 2 and "--reason" in missing.stderr
    shown = cli(["queue", "show", "done"], root=root, env=T0)
    assert "completed_by\tolivia" in shown.stdout  # a pipe: tab-separated rows


def test_defer_through_the_cli(root: Path) -> None:
    add(root, "t1")
    deferred = cli(["queue", "defer", "t1", "--until", "2h", "--reason", "after the freeze"], root=root, env=T0)
    assert deferred.stdout == "t1 deferred until 2026-01-25T12:00:00Z\n"
    claim = cli(["queue", "claim", "-a", "a1"], root=root, env=T0)
    assert claim.code == 3 and claim.stderr == ("nothing ready among 1 pending: 1 deferred until "
                                                "2026-01-25T12:00:00Z\n")
    shown = cli(["queue", "show", "t1"], root=root, env=T0).stdout
    assert "until 2026-01-25T12:00:00Z by olivia: after the freeze" in shown
    bad = cli(["queue", "defer", "t1", "--until", "soonish"], root=root, env=T0)
    assert bad.code == 2 and "--until 'soonish': not a time" in bad.stderr
    lifted = cli(["queue", "defer", "t1", "--until", "now", "--json"], root=root, env=T0)
    assert lifted.json()["deferred_until"] is None
    assert set(lifted.json()) == {"task", "state", "deferred_until", "released", "changed"}
    assert cli(["queue", "claim", "-a", "a1"], root=root, env=T0).code == 0


def test_ready_through_the_cli(root: Path) -> None:
    add(root, "base", "-p", "low")
    add(root, "top", "-p", "high", "--depends-on", "base")
    add(root, "docs", "--label", "doc")
    plain = cli(["queue", "ready"], root=root, env=T0)
    assert plain.code == 0
    assert plain.stdout.splitlines()[-2:] == ["2 ready, 1 not ready, of 3 pending tasks",
                                              "`loki queue ready --explain` says why each of the others is not ready"]
    explained = cli(["queue", "ready", "--explain"], root=root, env=T0).stdout
    assert "waits on 'base' (pending)" in explained and "--explain" not in explained.splitlines()[-1]
    as_json = cli(["queue", "ready", "--json"], root=root, env=T0).json()
    assert set(as_json) == {"now", "pending", "matching", "ready", "not_ready", "expired_leases"}
    assert [t["id"] for t in as_json["ready"]] == ["docs", "base"]
    assert as_json["not_ready"][0]["reasons"] == [{"reason": "dependency", "dependency": "base", "state": "pending",
                                                   "text": "waits on 'base' (pending)"}]
    only = cli(["queue", "ready", "--label", "doc", "--json"], root=root, env=T0).json()
    assert [t["id"] for t in only["ready"]] == ["docs"] and only["matching"] == 1
    bad = cli(["queue", "ready", "-p", "urgent"], root=root, env=T0)
    assert bad.code == 2 and "--priority must be one of high, medium, low" in bad.stderr


def test_history_through_the_cli(root: Path) -> None:
    add(root, "t1")
    cli(["queue", "claim", "-a", "a1", "--lease", "600"], root=root, env=T0)
    cli(["queue", "heartbeat", "t1", "-a", "a1"], root=root, env=at("2026-01-25T10:05:00Z"))
    cli(["queue", "fail", "t1", "-a", "a1", "--error", "boom", "--error-type", "timeout"], root=root,
        env=at("2026-01-25T10:06:00Z"))
    shown = cli(["queue", "history", "t1"], root=root, env=T0)
    assert shown.code == 0
    lines = shown.stdout.splitlines()
    assert lines[0] == "t1: t1 (pending)"
    body = "\n".join(lines)
    for expected in ("added", "claimed", "1 heartbeat until 2026-01-25T10:05:00Z, longest silence 300s",
                     "attempt 1; until 2026-01-25T10:06:05Z; timeout: boom"):
        assert expected in body
    as_json = cli(["queue", "history", "t1", "--json"], root=root).json()
    assert set(as_json) == {"task_id", "title", "state", "archived", "recorded", "events", "spent"}
    assert [e["event"] for e in as_json["events"]] == ["added", "claimed", "heartbeat", "failed"]
    unknown = cli(["queue", "history", "nope"], root=root)
    assert unknown.code == 1 and unknown.stderr == "error: no task 'nope'\n"


def test_list_by_agent_and_the_ready_column(root: Path) -> None:
    add(root, "t1")
    add(root, "t2", "--depends-on", "t1")
    cli(["queue", "claim", "-a", "a1"], root=root, env=T0)
    mine = cli(["queue", "list", "-s", "all", "--agent", "a1", "--json"], root=root, env=T0).json()
    assert [t["id"] for t in mine["tasks"]] == ["t1"]
    pending = cli(["queue", "list"], root=root, env=T0).stdout
    assert "waits on t1 (in-progress)" in pending


@pytest.mark.slow  # real processes one after another: over 1 s (issue 24's --durations)
def test_claim_options_print_the_same_in_the_fast_lane_and_through_typer(tmp_path: Path) -> None:
    outputs = {}
    for lane, runner in (("fast", loki_proc), ("typer", cli)):
        root = tmp_path / lane / ".loki"
        assert cli(["init", "--path", str(root.parent)]).code == 0
        add(root, "t1", "-p", "high", "--label", "api")
        add(root, "t2", "--label", "api", "--label", "db")
        add(root, "t3", "-p", "low", "--depends-on", "t1")
        results = [
            runner(["queue", "claim", "-a", "a1", "--label", "api", "-l", "db"], root=root, env=T0),
            runner(["queue", "claim", "-a", "a1", "--reuse", "--json"], root=root, env=T0),
            runner(["queue", "claim", "-a", "a2", "--id", "t3"], root=root, env=T0),
            runner(["queue", "claim", "-a", "a2", "--id", "t2", "--json"], root=root, env=T0),
            runner(["queue", "claim", "-a", "a2", "--priority", "HIGH", "--json"], root=root, env=T0),
            runner(["queue", "claim", "-a", "a2", "--id", "t9", "--json"], root=root, env=T0),
            runner(["queue", "claim", "-a", "a2", "--id", "t1", "--type", "x"], root=root, env=T0),
            runner(["queue", "claim", "-a", "a2", "-p", "urgent"], root=root, env=T0),
        ]
        outputs[lane] = [(r.code, r.stdout, r.stderr) for r in results]
    for fast, slow in zip(outputs["fast"], outputs["typer"], strict=True):
        assert fast[0] == slow[0] and fast[2] == slow[2]
        assert _without_tokens(fast[1]) == _without_tokens(slow[1])
    codes = [code for code, _, _ in outputs["fast"]]
    assert codes == [0, 0, 3, 4, 0, 1, 2, 2]
    first, reused = outputs["fast"][0][1], json.loads(outputs["fast"][1][1])
    assert first.startswith("claimed t2 ") and reused["reused"] is True and reused["task"]["id"] == "t2"
    assert outputs["fast"][2][2] == "t3 is not ready: waits on 't1' (pending)\n"
    assert json.loads(outputs["fast"][4][1])["task"]["id"] == "t1"
    assert json.loads(outputs["fast"][5][2])["error"] == "not_found"


def _without_tokens(text: str) -> str:
    import re

    return re.sub(r"[0-9a-f]{16}", "TOKEN", text)


def test_deadletter_retry_records_who(root: Path) -> None:
    add(root, "t1", "--max-attempts", "1")
    cli(["queue", "claim", "-a", "a1"], root=root, env=T0)
    cli(["queue", "fail", "t1", "-a", "a1", "--error", "boom"], root=root, env=T0)
    assert cli(["deadletter", "retry", "t1", "--by", "rita"], root=root, env=T0).code == 0
    last = cli(["queue", "history", "t1", "--json"], root=root).json()["events"][-1]
    assert (last["event"], last["by"], last["to"]) == ("retried", "rita", "pending")


@pytest.mark.slow  # six real processes
def test_six_processes_claim_one_task_by_id_exactly_one_wins(root: Path) -> None:
    add(root, "t1")
    procs = [subprocess.Popen([sys.executable, "-m", "loki", "--root", str(root), "queue", "claim", "-a", f"a{n}",
                               "--id", "t1", "--json"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for n in range(6)]
    results = [(p.wait(timeout=60), p.stdout.read(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    assert sorted(code for code, _, _ in results) == [0, 4, 4, 4, 4, 4]
    assert all(b"is already claimed by" in err for code, _, err in results if code == 4)
    assert tree_problems(root) == []


@pytest.mark.slow  # six real processes
def test_one_agent_retrying_a_lost_claim_from_six_processes_gets_one_task(root: Path) -> None:
    for n in range(3):
        add(root, f"t{n}")
    procs = [subprocess.Popen([sys.executable, "-m", "loki", "--root", str(root), "queue", "claim", "-a", "a1",
                               "--reuse", "--json"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(6)]
    answers = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()
        answers.append(json.loads(out))
    assert {(a["task"]["id"], a["task"]["claim_token"]) for a in answers} == {
        (answers[0]["task"]["id"], answers[0]["task"]["claim_token"])}
    assert sorted(a["reused"] for a in answers) == [False, True, True, True, True, True]
    pending = cli(["queue", "list", "--json"], root=root).json()
    assert pending["total"] == 2


def test_show_says_why_a_task_is_blocked_and_until_when_and_shows_payload_and_result(root: Path) -> None:
    add(root, "t1", "--payload", '{"spec": "openapi.yaml"}')
    assert cli(["escalate", "t1", "--trigger", "unclear spec"], root=root, env=T0).code == 0
    shown = cli(["queue", "show", "t1"], root=root, env=T0).stdout
    assert "unclear spec; since 2026-01-25T10:00:00Z; a human decides by 2026-01-26T10:00:00Z (then dead-letter)" \
        in shown
    assert '{"spec": "openapi.yaml"}' in shown
    blocked = cli(["queue", "list", "-s", "blocked"], root=root, env=T0).stdout
    assert "unclear spec (until 2026-01-26T10:00:00Z)" in blocked
    add(root, "t2")
    cli(["queue", "claim", "-a", "a9", "--id", "t2"], root=root, env=T0)
    cli(["queue", "complete", "t2", "-a", "a9", "--result", '{"commit": "4f2a9c1"}'], root=root, env=T0)
    done = cli(["queue", "show", "t2", "--json"], root=root).json()
    assert done["completed_by"] == "a9" and done["task"]["result"] == {"commit": "4f2a9c1"}
    assert '{"commit": "4f2a9c1"}' in cli(["queue", "show", "t2"], root=root).stdout
