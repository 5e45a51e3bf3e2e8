"""``loki queue ...`` through the CLI: exit codes, output, and the state afterwards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loki.storage import layout
from loki.storage.store import Store
from tests.helpers import cli, loki_proc, snapshot_bytes, tree_problems

T0 = {"LOKI_NOW": "2026-01-25T10:00:00Z"}


def at(ts: str) -> dict[str, str]:
    return {"LOKI_NOW": ts}


def test_add_then_claim_then_complete(root: Path) -> None:
    added = cli(["queue", "add", "Write login", "-p", "high", "--id", "t1", "--label", "api", "--payload",
                 '{"spec": "openapi.yaml"}', "--json"], root=root, env=T0)
    assert added.code == 0, added.stderr
    assert added.json()["created"] is True and added.json()["task"]["labels"] == ["api"]
    claimed = cli(["queue", "claim", "--agent", "a1", "--json"], root=root, env=T0)
    assert claimed.code == 0
    task = claimed.json()["task"]
    assert task["id"] == "t1" and task["payload"] == {"spec": "openapi.yaml"}
    done = cli(["queue", "complete", "t1", "--agent", "a1", "--token", task["claim_token"], "--result",
                '{"commit": "abc"}'], root=root, env=T0)
    assert done.code == 0 and done.stdout.startswith("completed t1")
    shown = cli(["queue", "show", "t1", "--json"], root=root).json()
    assert shown["state"] == "completed" and shown["task"]["result"] == {"commit": "abc"}
    assert tree_problems(root) == []


def test_nothing_ready_is_exit_3_with_a_one_line_reason(root: Path) -> None:
    result = cli(["queue", "claim", "--agent", "a"], root=root)
    assert result.code == 3
    assert result.stderr == "nothing to claim: the pending queue is empty\n"
    as_json = cli(["queue", "claim", "--agent", "a", "--json"], root=root)
    assert as_json.code == 3 and json.loads(as_json.stderr)["error"] == "nothing_to_do"


def test_dependency_wait_reason(root: Path) -> None:
    cli(["queue", "add", "base", "--id", "base"], root=root)
    cli(["queue", "add", "top", "--id", "top", "--depends-on", "base"], root=root)
    cli(["queue", "claim", "--agent", "a"], root=root)
    result = cli(["queue", "claim", "--agent", "b"], root=root)
    assert result.code == 3 and "1 waiting on dependencies" in result.stderr


def test_not_the_holder_is_exit_4_and_changes_nothing(root: Path) -> None:
    cli(["queue", "add", "x", "--id", "t1"], root=root, env=T0)
    cli(["queue", "claim", "--agent", "owner"], root=root, env=T0)
    before = snapshot_bytes(root)
    for args in (["complete", "t1", "--agent", "other"], ["fail", "t1", "--agent", "other", "--error", "e"],
                 ["release", "t1", "--agent", "other"], ["heartbeat", "t1", "--agent", "other"],
                 ["complete", "t1", "--agent", "owner", "--token", "wrong"]):
        result = cli(["queue", *args], root=root, env=T0)
        assert result.code == 4, args
        assert "nothing changed" in result.stderr
    assert snapshot_bytes(root) == before


def test_expired_lease_then_old_holder_complete_is_exit_4(root: Path) -> None:
    cli(["queue", "add", "x", "--id", "t1"], root=root, env=T0)
    token = cli(["queue", "claim", "--agent", "slow", "--lease", "60", "--json"], root=root, env=T0).json()["task"][
        "claim_token"]
    stale = cli(["queue", "requeue-stale", "--json"], root=root, env=at("2026-01-25T10:01:01Z"))
    assert stale.json() == {"requeued": ["t1"], "dead_lettered": []}
    late = cli(["queue", "complete", "t1", "--agent", "slow", "--token", token], root=root,
               env=at("2026-01-25T10:01:02Z"))
    assert late.code == 4 and "lease lost" in late.stderr


def test_fail_reports_retry_time_then_dead_letter(root: Path) -> None:
    cli(["queue", "add", "flaky", "--id", "t1", "--max-attempts", "2"], root=root, env=T0)
    cli(["queue", "claim", "--agent", "a"], root=root, env=T0)
    first = cli(["queue", "fail", "t1", "--agent", "a", "--error", "AssertionError", "--error-type", "test_failure",
                 "--approach", "first try"], root=root, env=T0)
    assert first.code == 0
    assert first.stdout.strip() == "t1: attempt 1 of 2 failed; retry after 2026-01-25T10:00:05Z"
    cli(["queue", "claim", "--agent", "a"], root=root, env=at("2026-01-25T10:00:05Z"))
    second = cli(["queue", "fail", "t1", "--agent", "a", "--error", "AssertionError", "--json"], root=root,
                 env=at("2026-01-25T10:00:06Z"))
    assert second.json()["state"] == "dead-letter"
    assert cli(["queue", "show", "t1", "--json"], root=root).json()["state"] == "dead-letter"


def test_fail_with_a_bad_error_type_is_refused(root: Path) -> None:
    cli(["queue", "add", "x", "--id", "t1"], root=root)
    cli(["queue", "claim", "--agent", "a"], root=root)
    before = snapshot_bytes(root)
    result = cli(["queue", "fail", "t1", "--agent", "a", "--error", "e", "--error-type", "flaky"], root=root)
    assert result.code == 2 and "--error-type must be one of" in result.stderr  # a usage error
    assert snapshot_bytes(root) == before


def test_bad_input_messages_and_nothing_written(root: Path) -> None:
    before = snapshot_bytes(root)
    # 2: the value breaks the option's own rules; 1: only the state can say it is wrong.
    cases = [
        (["queue", "add", "x", "--priority", "urgent"], 2, "priority must be one of high, medium, low"),
        (["queue", "add", "x", "--depends-on", "ghost"], 1, "depends on 'ghost', which does not exist"),
        (["queue", "add", "x", "--id", "../../etc/passwd"], 2, "invalid task id"),
        (["queue", "add", "x", "--payload", "[1, 2]"], 2, "--payload: expected a JSON object"),
        (["queue", "add", "x", "--payload", '{"a": NaN}'], 2, "--payload: NaN is not valid JSON"),
        (["queue", "add", ""], 2, "title must be a non-empty string"),
        (["queue", "add", "  "], 2, "title must be a non-empty string"),
        (["queue", "show", "a/b"], 2, "invalid task id"),
        (["queue", "claim", "--agent", "a", "--lease", "0"], 2, "--lease must be a positive number"),
        (["queue", "list", "--state", "done"], 2, "unknown state 'done'"),
        (["queue", "list", "--limit", "-1"], 2, "--limit must be 0 or more"),
    ]
    for args, code, message in cases:
        result = cli(args, root=root)
        assert result.code == code, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
    assert snapshot_bytes(root) == before


def test_idempotency_key_through_the_cli(root: Path) -> None:
    first = cli(["queue", "add", "x", "--idempotency-key", "k", "--json"], root=root).json()
    second = cli(["queue", "add", "y", "--idempotency-key", "k"], root=root)
    assert second.code == 0 and "nothing added" in second.stdout and first["task"]["id"] in second.stdout
    assert cli(["queue", "list", "--json"], root=root).json()["total"] == 1


def test_add_from_file_json_jsonl_and_loki_mode(tmp_path: Path, root: Path) -> None:
    batch = tmp_path / "batch.json"
    batch.write_text(json.dumps({"tasks": [{"title": "a", "id": "a"}, {"title": "b", "id": "b",
                                                                       "dependencies": ["a"]}]}))
    result = cli(["queue", "add", "--from-file", str(batch), "--json"], root=root)
    assert result.code == 0, result.stderr
    assert result.json()["added"] == 2
    lines = tmp_path / "batch.jsonl"
    lines.write_text('{"title": "c", "id": "c"}\n\n{"title": "d", "id": "d", "priority": "high"}\n')
    assert cli(["queue", "add", "--from-file", str(lines)], root=root).stdout.startswith("added 2 tasks")
    loki_mode = tmp_path / "pending.json"
    loki_mode.write_text(json.dumps([{"id": "task-001", "type": "eng-backend", "priority": 10,
                                      "payload": {"action": "build"}, "createdAt": "2026-01-20T10:00:00Z",
                                      "claimedBy": None, "claimedAt": None, "timeout": 3600, "retries": 0,
                                      "maxRetries": 3}]))
    assert cli(["queue", "add", "--from-file", str(loki_mode)], root=root).code == 0
    assert cli(["queue", "list", "--json"], root=root).json()["total"] == 5
    assert tree_problems(root) == []


def test_add_from_file_with_a_bad_item_adds_nothing(tmp_path: Path, root: Path) -> None:
    batch = tmp_path / "batch.json"
    batch.write_text(json.dumps([{"title": "ok"}, {"title": "bad", "priority": "p0"}]))
    before = snapshot_bytes(root)
    result = cli(["queue", "add", "--from-file", str(batch)], root=root)
    assert result.code == 1
    assert f"{batch} at /1: priority must be one of" in result.stderr
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"title": "ok"}\n{"title": \n')
    result = cli(["queue", "add", "--from-file", str(broken)], root=root)
    assert result.code == 1 and "line 2" in result.stderr
    assert snapshot_bytes(root) == before


def test_list_shows_the_total_and_respects_the_limit(root: Path) -> None:
    for n in range(7):
        cli(["queue", "add", f"task {n}"], root=root)
    result = cli(["queue", "list", "--limit", "3"], root=root)
    # piped: the rows on stdout, the closing count on stderr (so `| cut -f1` reads ids only)
    assert result.code == 0 and result.stderr == "3 of 7 pending tasks (use --limit to see more)\n"
    assert len(result.stdout.splitlines()) == 3
    on_a_terminal = cli(["queue", "list", "--limit", "3"], root=root, env={"LOKI_FORCE_TTY": "100"})
    assert on_a_terminal.stdout.splitlines()[-1] == "3 of 7 pending tasks (use --limit to see more)"
    as_json = cli(["queue", "list", "--limit", "3", "--json"], root=root).json()
    assert as_json["total"] == 7 and as_json["shown"] == 3 and len(as_json["tasks"]) == 3


def test_show_prints_attempts_and_notes(root: Path) -> None:
    cli(["queue", "add", "x", "--id", "t1", "-d", "the description"], root=root, env=T0)
    cli(["queue", "claim", "--agent", "a"], root=root, env=T0)
    cli(["queue", "fail", "t1", "--agent", "a", "--error", "boom", "--approach", "plan A"], root=root, env=T0)
    result = cli(["queue", "show", "t1"], root=root)
    assert result.code == 0
    assert "t1: x" in result.stdout and "the description" in result.stdout
    assert "plan A" in result.stdout and "boom" in result.stdout


def test_cancel_warns_about_dependents_and_cascades(root: Path) -> None:
    cli(["queue", "add", "base", "--id", "base"], root=root)
    cli(["queue", "add", "top", "--id", "top", "--depends-on", "base"], root=root)
    result = cli(["queue", "cancel", "base", "--reason", "not needed"], root=root)
    assert result.code == 0 and "top" in result.stdout and "--cascade" in result.stdout
    cli(["queue", "retry", "base"], root=root)
    cascade = cli(["queue", "cancel", "base", "--cascade", "--json"], root=root).json()
    assert cascade["cancelled"] == ["base", "top"]


def test_release_and_retry(root: Path) -> None:
    cli(["queue", "add", "x", "--id", "t1"], root=root)
    cli(["queue", "claim", "--agent", "a"], root=root)
    assert cli(["queue", "release", "t1", "--agent", "a"], root=root).code == 0
    assert Store(root).read(layout.queue_file("pending"))["tasks"][0]["id"] == "t1"
    cli(["queue", "claim", "--agent", "a"], root=root)
    cli(["queue", "fail", "t1", "--agent", "a", "--error", "e", "--final"], root=root)
    retried = cli(["queue", "retry", "t1", "--json"], root=root)
    assert retried.code == 0 and retried.json()["from"] == "failed"


def test_corrupt_queue_file_fails_every_queue_command_and_is_left_alone(root: Path) -> None:
    Path(root, "queue", "in-progress.json").write_text('{"version": 1, "tasks": [{"id": "x"}]}')
    before = snapshot_bytes(root)
    for args in (["add", "x"], ["claim", "--agent", "a"], ["list", "--state", "all"], ["requeue-stale"],
                 ["show", "x"]):
        result = cli(["queue", *args], root=root)
        assert result.code == 1, args
        assert "queue/in-progress.json at /tasks/0" in result.stderr, (args, result.stderr)
    assert snapshot_bytes(root) == before


def test_claim_fast_lane_prints_exactly_what_the_typer_command_prints(tmp_path: Path) -> None:
    outputs = {}
    for lane, runner in (("fast", loki_proc), ("typer", cli)):
        root = tmp_path / lane / ".loki"
        assert cli(["init", "--path", str(root.parent)]).code == 0
        cli(["queue", "add", "Write login", "--id", "t1", "-p", "high", "--type", "eng"], root=root, env=T0)
        cli(["queue", "add", "Docs", "--id", "t2", "--type", "docs"], root=root, env=T0)
        results = [
            runner(["queue", "claim", "--agent", "a1", "--type", "eng", "--lease", "120"], root=root, env=T0),
            runner(["queue", "claim", "--agent=a2", "--json"], root=root, env=T0),
            runner(["queue", "claim", "-a", "a3"], root=root, env=T0),
            runner(["queue", "claim", "--agent", "a3", "--json"], root=root, env=T0),
            runner(["queue", "claim", "--agent", "a4", "--lease", "-1"], root=root, env=T0),
        ]
        outputs[lane] = [(r.code, r.stdout.replace(str(root), "ROOT"), r.stderr) for r in results]
    # Tokens are random: compare everything else.
    for fast, typer_out in zip(outputs["fast"], outputs["typer"], strict=True):
        assert fast[0] == typer_out[0] and fast[2] == typer_out[2]
        assert _without_tokens(fast[1]) == _without_tokens(typer_out[1])
    assert [code for code, _, _ in outputs["fast"]] == [0, 0, 3, 3, 2]


def test_claim_with_a_short_option_and_equals_means_what_click_says(root: Path) -> None:
    # click reads ``-a=bob`` as the agent '=bob'; claim (fast lane) and complete (typer) must agree.
    cli(["queue", "add", "Write login", "--id", "t1"], root=root)
    claimed = loki_proc(["queue", "claim", "-a=bob", "--json"], root=root)
    assert claimed.code == 0, claimed.stderr
    assert claimed.json()["task"]["claimed_by"] == "=bob"
    assert cli(["queue", "complete", "t1", "-a=bob"], root=root).code == 0


def _without_tokens(text: str) -> str:
    import re

    return re.sub(r'[0-9a-f]{16}', "TOKEN", text)


def test_a_broken_file_error_says_how_to_get_out(root: Path) -> None:
    Path(root, "queue", "pending.json").write_text('{"version": 1, "tasks": [{"id": "x"}]}')
    result = cli(["queue", "list"], root=root)
    assert result.code == 1 and "loki doctor --repair" in result.stderr


def test_schema_errors_name_every_problem_at_once(root: Path) -> None:
    result = cli(["signal", "emit", "DRIFT_DETECTED", "--task", "t1"], root=root)
    assert result.code == 2  # fields the type's schema refuses: the command line alone shows the mistake
    assert "'severity' is a required property" in result.stderr
    assert "'detected_drift' is a required property" in result.stderr


def test_ids_in_listings_are_never_cut(root: Path) -> None:
    cli(["queue", "add", "a title long enough to need wrapping in a narrow table " * 3, "--id",
         "task-with-a-long-id-0123456789"], root=root)
    result = cli(["queue", "list"], root=root, env={"LOKI_FORCE_TTY": "60"})  # a terminal 60 columns wide
    assert "task-with-a-long-id-0123456789" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 60


@pytest.mark.parametrize("how", ["cancel", "abandon"])
def test_a_dependency_on_a_cancelled_or_abandoned_task_is_refused_at_add(root: Path, how: str) -> None:
    assert cli(["queue", "add", "base", "--id", "base", "--max-attempts", "1"], root=root).code == 0
    if how == "cancel":
        assert cli(["queue", "cancel", "base"], root=root).code == 0
        state = "cancelled"
    else:
        cli(["queue", "claim", "--agent", "a"], root=root)
        cli(["queue", "fail", "base", "--agent", "a", "--error", "boom"], root=root)
        assert cli(["deadletter", "abandon", "base", "--reason", "dropped"], root=root).code == 0
        state = "abandoned"
    before = snapshot_bytes(root)
    result = cli(["queue", "add", "top", "--id", "top", "--depends-on", "base"], root=root)
    assert result.code == 1
    assert f"task 'top' depends on 'base', which is {state}: it would never be ready" in result.stderr
    assert snapshot_bytes(root) == before


def test_fail_depends_on_a_cancelled_task_is_refused(root: Path) -> None:
    cli(["queue", "add", "base", "--id", "base"], root=root)
    cli(["queue", "cancel", "base"], root=root)
    cli(["queue", "add", "top", "--id", "top"], root=root)
    cli(["queue", "claim", "--agent", "a"], root=root)
    before = snapshot_bytes(root)
    result = cli(["queue", "fail", "top", "--agent", "a", "--error", "needs base", "--depends-on", "base"], root=root)
    assert result.code == 1 and "depends on 'base', which is cancelled" in result.stderr
    assert snapshot_bytes(root) == before


def test_a_dependency_cancelled_later_is_reported_by_claim_validate_and_doctor(root: Path) -> None:
    cli(["queue", "add", "base", "--id", "base"], root=root)
    cli(["queue", "add", "top", "--id", "top", "--depends-on", "base"], root=root)
    cli(["queue", "add", "later", "--id", "later", "--depends-on", "top"], root=root)
    assert cli(["queue", "cancel", "base"], root=root).code == 0
    claim = cli(["queue", "claim", "--agent", "a"], root=root)
    assert claim.code == 3
    assert claim.stderr == ("nothing ready among 2 pending: 2 can never be ready (top depends on 'base', which is "
                            "cancelled; later depends on 'top', which waits on 'base' (cancelled))\n")
    validate = cli(["validate"], root=root)
    assert validate.code == 1
    assert ("queue/pending.json at /tasks/0/dependencies/0: task 'top' can never be ready: it depends on 'base', "
            "which is cancelled (retry 'base' or cancel 'top')") in validate.stderr
    assert "task 'later' can never be ready: it depends on 'top', which waits on 'base' (cancelled)" in validate.stderr
    assert validate.stderr.splitlines()[-1].startswith("2 problems in ")
    doctor = cli(["doctor", "--json"], root=root)
    assert doctor.code == 1 and doctor.json()["healthy"] is False
    assert cli(["queue", "retry", "base"], root=root).code == 0  # the way out
    assert cli(["validate"], root=root).code == 0


def test_claim_names_a_task_stuck_through_a_blocked_one(root: Path) -> None:
    # later -> top (blocked, waiting for a human) -> base (cancelled): validate says later can never
    # be ready, and so does claim's reason (not "waiting on dependencies").
    cli(["queue", "add", "base", "--id", "base"], root=root)
    cli(["queue", "add", "top", "--id", "top", "--depends-on", "base"], root=root)
    cli(["queue", "add", "later", "--id", "later", "--depends-on", "top"], root=root)
    assert cli(["escalate", "top", "--trigger", "needs a decision"], root=root).code == 0
    assert cli(["queue", "cancel", "base"], root=root).code == 0
    claim = cli(["queue", "claim", "--agent", "a"], root=root)
    assert claim.code == 3
    assert claim.stderr == ("nothing ready among 1 pending: 1 can never be ready (later depends on 'top', which "
                            "waits on 'base' (cancelled))\n")
    assert "task 'later' can never be ready" in cli(["validate"], root=root).stderr


def test_add_depending_on_a_stuck_task_says_which_task_to_retry(root: Path) -> None:
    cli(["queue", "add", "base", "--id", "base"], root=root)
    cli(["queue", "add", "top", "--id", "top", "--depends-on", "base"], root=root)
    assert cli(["queue", "cancel", "base"], root=root).code == 0
    result = cli(["queue", "add", "new", "--id", "new", "--depends-on", "top"], root=root)
    assert result.code == 1
    # 'top' is pending: retrying it does nothing; 'base' (cancelled) is the one to retry.
    assert "retry 'base' first (`loki queue retry`)" in result.stderr, result.stderr


def test_counts_are_worded_with_proper_plurals(root: Path) -> None:
    for n in range(3):
        cli(["queue", "add", f"t{n}", "--id", f"t{n}", "--max-attempts", "1"], root=root)
    listed = cli(["queue", "list", "--state", "all", "--limit", "2"], root=root)
    assert listed.stderr.splitlines()[-1] == "2 of 3 tasks (use --limit to see more)"
    assert cli(["queue", "list"], root=root).stderr.splitlines()[-1] == "3 of 3 pending tasks"
    cli(["queue", "claim", "--agent", "a"], root=root)
    cli(["queue", "fail", "t0", "--agent", "a", "--error", "boom"], root=root)
    assert "dead-letter: 1 entry, last reviewed never" in cli(["status"], root=root).stdout
