"""``loki hook <event>`` as Claude Code runs it: a real process, a real payload on stdin.

Payloads come from tests/hook_payloads/ (Claude Code's shapes) with ``cwd`` pointed at a temporary
project: a checkout of branch ``main`` with ``.loki/`` at its top, found the way Claude Code's hook
finds it (from the payload's ``cwd``, no ``--root``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loki.storage import layout
from loki.storage.store import Store
from loki.strikes.strikes import Strikes
from tests import forkstart
from tests.helpers import NOW, Result, cli, snapshot_bytes, tree_problems

PAYLOADS = Path(__file__).resolve().parents[1] / "hook_payloads"
CARGO = {"command": "cargo build --release"}


def payload(name: str, cwd: Path, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PAYLOADS / f"{name}.json").read_text())
    data["cwd"] = str(cwd)
    data.update(changes)
    return data


def hook(event: str, data: dict[str, Any] | bytes, *, cwd: Path, root: Path | None = None,
         env: dict[str, str] | None = None) -> Result:
    """``loki hook EVENT`` in a real process (forked warm: tests/forkstart.py), stdin = the payload, in
    directory ``cwd``."""
    args = [*(["--root", str(root)] if root else []), "hook", event]
    stdin = data if isinstance(data, bytes) else json.dumps(data).encode()
    full_env = {**os.environ, "LOKI_NOW": NOW, **(env or {})}
    done = forkstart.run(args, input=stdin, cwd=cwd, env=full_env, timeout=60)
    return Result(done.returncode, done.stdout.decode(), done.stderr.decode())


def context_of(result: Result, event: str) -> str:
    assert result.code == 0, result.stderr
    answer = result.json()
    assert answer["hookSpecificOutput"]["hookEventName"] == event
    return str(answer["hookSpecificOutput"]["additionalContext"])


def fail_cargo(project: Path, **changes: Any) -> Result:
    return hook("post-tool-use-failure", payload("post_tool_use_failure_bash", project, **changes), cwd=project)


def strikes_of(project: Path) -> Strikes:
    return Strikes(Store(project / ".loki"), branch="main")


# -- the three-strike sequence -------------------------------------------------------------------


def test_three_failures_then_the_call_is_denied(project: Path) -> None:
    root = project / ".loki"
    first = fail_cargo(project)
    assert (first.code, first.stdout, first.stderr) == (0, "", "")  # strike 1: recorded, nothing said

    second = context_of(fail_cargo(project), "PostToolUseFailure")
    assert "strike 2 of 3" in second and "MUST use a different approach" in second
    assert "Check the command name" in second and "cargo: command not found" in second
    assert os.listdir(root / "escalations") == []

    third = context_of(fail_cargo(project), "PostToolUseFailure")
    escalations = os.listdir(root / "escalations")
    assert len(escalations) == 1 and escalations[0] in third and "STOP" in third
    assert sorted(os.listdir(root / "signals")) == ["HUMAN_REVIEW_NEEDED"]

    fourth = context_of(fail_cargo(project), "PostToolUseFailure")
    assert "failed 4 times" in fourth
    assert "all 3 times" not in fourth and "Last 3 errors (the same each time)" in fourth
    assert os.listdir(root / "escalations") == escalations  # once per streak, not on every later call
    assert sorted(os.listdir(root / "signals")) == ["HUMAN_REVIEW_NEEDED"]

    denied = hook("pre-tool-use", payload("pre_tool_use_bash", project), cwd=project)
    assert denied.code == 0, denied.stderr
    decision = denied.json()["hookSpecificOutput"]
    assert decision["hookEventName"] == "PreToolUse" and decision["permissionDecision"] == "deny"
    assert "failed 4 times in a row on branch main" in decision["permissionDecisionReason"]
    assert escalations[0] in decision["permissionDecisionReason"]

    other = payload("pre_tool_use_bash", project, tool_input={"command": "rustup default stable"})
    allowed = hook("pre-tool-use", other, cwd=project)
    assert (allowed.code, allowed.stdout, allowed.stderr) == (0, "", "")
    assert tree_problems(root) == []


def test_on_a_database_tree_pre_tool_use_reads_this_machines_copy_and_never_connects(project: Path,
                                                                                   tmp_path: Path) -> None:
    """docs/postgres.md: the copies under .loki/cache/ are what PreToolUse reads; the database (here one that
    cannot be reached) is never connected to, and the driver never imported."""
    root = project / ".loki"
    elsewhere = tmp_path / "elsewhere"  # a tree where the strikes were recorded, as the database holds them
    (elsewhere / ".git").mkdir(parents=True)
    (elsewhere / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    from loki.storage.tree import init_tree

    init_tree(str(elsewhere / ".loki"))
    for _ in range(3):
        assert fail_cargo(elsewhere).code == 0
    copy = root / layout.LOCAL_CACHE_DIR / layout.STRIKES_DIR / "main.json"
    copy.parent.mkdir(parents=True)
    copy.write_bytes((elsewhere / ".loki" / layout.STRIKES_DIR / "main.json").read_bytes())
    (root / layout.CONFIG).write_text(json.dumps(
        {"version": 1, "storage": {"backend": "postgresql", "database": "postgresql://loki@unreachable.invalid:1/team"}}))
    args = [sys.executable, "-X", "importtime", "-m", "loki", "hook", "pre-tool-use"]
    stdin = json.dumps(payload("pre_tool_use_bash", project)).encode()
    done = subprocess.run(args, input=stdin, capture_output=True, cwd=project, timeout=60,
                          env={**os.environ, "LOKI_NOW": NOW})
    assert done.returncode == 0 and json.loads(done.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert b"psycopg" not in done.stderr and b"loki.storage.postgres" not in done.stderr
    (root / layout.LOCAL_CACHE_DIR / layout.STRIKES_DIR / "main.json").unlink()  # no copy: nothing stopped
    allowed = hook("pre-tool-use", payload("pre_tool_use_bash", project), cwd=project)
    assert (allowed.code, allowed.stdout, allowed.stderr) == (0, "", "")


def test_the_warn_tier_reminds_before_the_same_call(project: Path) -> None:
    fail_cargo(project)
    before = hook("pre-tool-use", payload("pre_tool_use_bash", project), cwd=project)
    assert (before.code, before.stdout) == (0, "")  # one failure: no noise
    fail_cargo(project)
    # the failing session got "strike 2 of 3" right after the failure: once is enough for it
    same = hook("pre-tool-use", payload("pre_tool_use_bash", project), cwd=project)
    assert (same.code, same.stdout) == (0, "")
    other = payload("pre_tool_use_bash", project, session_id="another-session")  # never told: reminded
    reminder = context_of(hook("pre-tool-use", other, cwd=project), "PreToolUse")
    assert "strike 2 of 3" in reminder and "permissionDecision" not in reminder


def test_a_stopped_call_whose_variant_passed_stays_stopped_and_says_what_passed(project: Path) -> None:
    for _ in range(3):
        fail_cargo(project)
    fixed = payload("post_tool_use_bash", project, tool_input={"command": "cargo build --release --offline"},
                    tool_response={"stdout": "Finished", "stderr": "", "interrupted": False, "isImage": False})
    assert hook("post-tool-use", fixed, cwd=project).code == 0
    denied = hook("pre-tool-use", payload("pre_tool_use_bash", project), cwd=project).json()["hookSpecificOutput"]
    assert denied["permissionDecision"] == "deny"
    reason = denied["permissionDecisionReason"]
    assert "A similar call passed since (Bash `cargo build --release --offline`" in reason
    assert "`loki errors reset Bash:" in reason and "lifts the stop" in reason
    fail_cargo(project)  # it failed again after that: the variant was not its fix
    again = hook("pre-tool-use", payload("pre_tool_use_bash", project), cwd=project).json()["hookSpecificOutput"]
    assert "A similar call passed since" not in again["permissionDecisionReason"]
    assert tree_problems(project / ".loki") == []


@pytest.mark.parametrize(("decision", "expected"), [("ask", "ask"), ("context", None)])
def test_the_stop_decision_is_configurable(project: Path, decision: str, expected: str | None) -> None:
    (project / ".loki" / layout.CONFIG).write_text(json.dumps({"version": 1, "strikes": {"stop_decision": decision}}))
    for _ in range(3):
        fail_cargo(project)
    answer = hook("pre-tool-use", payload("pre_tool_use_bash", project), cwd=project).json()["hookSpecificOutput"]
    assert answer.get("permissionDecision") == expected
    if expected is None:
        assert "has failed 3 times in a row" in answer["additionalContext"]


def test_a_success_of_the_same_call_resets_it(project: Path) -> None:
    fail_cargo(project)
    fail_cargo(project)
    ok = hook("post-tool-use", payload("post_tool_use_bash", project), cwd=project)
    assert (ok.code, ok.stdout, ok.stderr) == (0, "", "")
    assert strikes_of(project).active() == []
    assert [a["status"] for a in strikes_of(project).state()["attempts"]] == ["resolved", "resolved"]
    again = fail_cargo(project)
    assert (again.code, again.stdout) == (0, "")  # strike 1 again: silent


def test_a_different_input_does_not_share_the_count(project: Path) -> None:
    fail_cargo(project)
    fail_cargo(project)
    other = fail_cargo(project, tool_input={"command": "cargo build --release --offline"})
    assert (other.code, other.stdout) == (0, "")
    counts = sorted(e["strike_count"] for e in strikes_of(project).active())
    assert counts == [1, 2]


def test_two_sessions_on_one_branch_share_the_count(project: Path) -> None:
    fail_cargo(project, session_id="session-a")
    fail_cargo(project, session_id="session-a")
    third = context_of(fail_cargo(project, session_id="session-b"), "PostToolUseFailure")
    assert "failed 3 times in a row" in third
    (entry,) = strikes_of(project).active()
    assert entry["sessions"] == ["session-a", "session-b"]
    denied = hook("pre-tool-use", payload("pre_tool_use_bash", project, session_id="session-c"), cwd=project)
    assert denied.json()["hookSpecificOutput"]["permissionDecision"] == "deny"


@pytest.mark.slow  # six hook processes racing
def test_concurrent_sessions_count_every_failure_and_escalate_once(project: Path) -> None:
    """Six agents fail the same call at the same moment: six strikes, one escalation, one signal."""
    args = [sys.executable, "-m", "loki", "hook", "post-tool-use-failure"]
    env = {**os.environ, "LOKI_NOW": NOW}
    procs = []
    for n in range(6):
        proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=project, env=env)
        procs.append((proc, json.dumps(payload("post_tool_use_failure_bash", project, session_id=f"s{n}")).encode()))
    for proc, data in procs:
        assert proc.stdin is not None
        proc.stdin.write(data)
        proc.stdin.close()
    for proc, _ in procs:
        assert proc.wait(timeout=60) == 0
    (entry,) = strikes_of(project).active()
    assert entry["strike_count"] == 6 and sorted(entry["sessions"]) == [f"s{n}" for n in range(6)]
    assert len(os.listdir(project / ".loki" / "escalations")) == 1
    assert os.listdir(project / ".loki" / "signals") == ["HUMAN_REVIEW_NEEDED"]
    assert tree_problems(project / ".loki") == []


def test_each_branch_has_its_own_state(project: Path) -> None:
    for _ in range(3):
        fail_cargo(project)
    (project / ".git" / "HEAD").write_text("ref: refs/heads/feature/fix-build\n")
    allowed = hook("pre-tool-use", payload("pre_tool_use_bash", project), cwd=project)
    assert (allowed.code, allowed.stdout) == (0, "")
    assert (project / ".loki" / "state" / "errors" / "main.json").exists()


def test_post_tool_use_scans_what_a_pipe_hid_but_not_content(project: Path) -> None:
    piped = payload("post_tool_use_bash_piped_failure", project)
    assert hook("post-tool-use", piped, cwd=project).stdout == ""  # strike 1
    second = context_of(hook("post-tool-use", piped, cwd=project), "PostToolUse")
    assert "strike 2 of 3" in second and "test_failure" in second
    read = hook("post-tool-use", payload("post_tool_use_read", project), cwd=project)
    assert (read.code, read.stdout) == (0, "")
    mcp = payload("post_tool_use_mcp_error", project)
    hook("post-tool-use", mcp, cwd=project)
    keys = {e["tool"]: e["strike_count"] for e in strikes_of(project).active()}
    assert keys == {"Bash": 2, "mcp__postgres__query": 1}


def test_a_failing_non_bash_tool_counts_too(project: Path) -> None:
    read = payload("post_tool_use_failure_read", project)
    hook("post-tool-use-failure", read, cwd=project)
    second = context_of(hook("post-tool-use-failure", read, cwd=project), "PostToolUseFailure")
    assert "Read `/home/dev/shop/src/cart.rs`" in second and "File does not exist" in second


def test_an_interrupt_is_not_a_strike(project: Path) -> None:
    result = fail_cargo(project, is_interrupt=True, error="Exit code 130\n^C")
    assert (result.code, result.stdout) == (0, "")
    assert not (project / ".loki" / "state" / "errors" / "main.json").exists()


# -- bad input never disturbs anything ------------------------------------------------------------

BAD_STDIN = {
    "garbage": (b"this is not json", "not valid JSON"),
    "truncated": (json.dumps(json.loads((PAYLOADS / "post_tool_use_failure_bash.json").read_text())).encode()[:120],
                  "(truncated?)"),
    "empty": (b"", "stdin is empty"),
    "whitespace": (b"  \n", "stdin is empty"),
    "non-utf8": (b'{"tool_name": "Bash", "error": "\xff\xfe caf\xe9"}', "not valid UTF-8"),
    "array": (b"[1, 2]", "not an object"),
    "no tool": (b'{"session_id": "s", "hook_event_name": "PostToolUseFailure"}', "no tool_name"),
    "wrong event": (b'{"hook_event_name": "PreToolUse", "tool_name": "Bash"}', "is a PreToolUse payload"),
    "huge": (b'{"tool_name": "Bash", "error": "' + b"x" * (10 * 1024 * 1024) + b'"}', "over the"),
    # Claude Code's JSON.stringify never writes these: an ambiguous payload is refused, not guessed.
    "duplicate key": (b'{"tool_name": "Bash", "tool_name": "Read", "error": "x"}', "duplicate key 'tool_name'"),
    "NaN": (b'{"tool_name": "Bash", "tool_input": {"timeout": NaN}, "error": "x"}', "NaN is not valid JSON"),
    "Infinity": (b'{"tool_name": "Bash", "tool_input": {"timeout": 1e999}, "error": "x"}', "too large"),
    "huge integer": (b'{"tool_name": "Bash", "tool_input": {"n": 1' + b"0" * 5000 + b'}}', "not valid JSON"),
}


@pytest.mark.parametrize("case", list(BAD_STDIN))
def test_bad_stdin_is_exit_1_with_one_line_and_changes_nothing(project: Path, case: str) -> None:
    fail_cargo(project)  # some state to protect
    before = snapshot_bytes(project)
    data, message = BAD_STDIN[case]
    result = hook("post-tool-use-failure", data, cwd=project)
    assert result.code == 1 and result.stdout == ""
    assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("loki hook post-tool-use-failure: ")
    assert snapshot_bytes(project) == before


def _cut_emoji(data: dict[str, Any]) -> bytes:
    """``data`` as JSON.stringify writes a string cut inside a surrogate pair: ``@`` becomes a lone
    ``\\ud83d`` escape (the first half of an emoji)."""
    return json.dumps(data).replace("@", "\\ud83d").encode()


def test_a_lone_surrogate_is_replaced_and_the_strike_recorded(project: Path) -> None:
    failure = payload("post_tool_use_failure_bash", project, tool_input={"command": "echo @"},
                      error="Exit code 1\nboom @")
    for _ in range(2):
        result = hook("post-tool-use-failure", _cut_emoji(failure), cwd=project)
        assert result.code == 0 and "internal error" not in result.stderr, result.stderr
    assert "strike 2 of 3" in context_of(result, "PostToolUseFailure")
    (streak,) = strikes_of(project).active()
    assert streak["strike_count"] == 2 and "\ufffd" in streak["input_preview"]
    # PreToolUse reads the same call the same way, now that the branch has strikes.
    pre = payload("pre_tool_use_bash", project, tool_input={"command": "echo @"}, session_id="another-session")
    answer = hook("pre-tool-use", _cut_emoji(pre), cwd=project)
    assert answer.code == 0 and "internal error" not in answer.stderr, answer.stderr
    assert "MUST use a different approach" in answer.stdout or "failed 2 times" in answer.stdout, answer.stdout
    assert tree_problems(project / ".loki") == []


@pytest.mark.parametrize("event", ["pre-tool-use", "post-tool-use", "session-start", "stop"])
def test_every_event_refuses_garbage_the_same_way(project: Path, event: str) -> None:
    before = snapshot_bytes(project)
    result = hook(event, b'{"tool_name": "Bash", ', cwd=project)
    assert result.code == 1 and "not valid JSON" in result.stderr and result.stdout == ""
    assert snapshot_bytes(project) == before


def test_no_loki_directory_means_silence(tmp_path: Path) -> None:
    for data in (payload("post_tool_use_failure_bash", tmp_path), b"garbage"):
        result = hook("post-tool-use-failure", data, cwd=tmp_path)
        assert (result.code, result.stdout, result.stderr) == (0, "", "")
    assert list(tmp_path.iterdir()) == []


def test_unknown_events_and_missing_roots_are_errors_not_blocks(project: Path, tmp_path: Path) -> None:
    unknown = hook("user-prompt-submit", payload("stop", project), cwd=project)
    assert unknown.code == 1 and "unknown hook event" in unknown.stderr
    missing = hook("stop", payload("stop", project), cwd=project, root=tmp_path / "nowhere")
    assert missing.code == 1 and "does not exist" in missing.stderr


def test_a_lock_timeout_is_exit_1_never_a_block_and_writes_nothing(project: Path) -> None:
    from loki.storage.locks import FileLock

    fail_cargo(project)
    lock = FileLock(str(project / ".loki" / "state" / "errors" / "main.json.lock"), 5, "state/errors/main.json.lock")
    before = snapshot_bytes(project)
    lock.acquire()
    try:
        result = hook("post-tool-use-failure", payload("post_tool_use_failure_bash", project), cwd=project,
                      env={"LOKI_LOCK_TIMEOUT": "0.3"})
    finally:
        lock.release()
    assert result.code == 1 and "lock" in result.stderr and result.stdout == ""
    # "Exit 1: nothing written" (docs/hooks.md): not error memory, not the call counter either.
    assert snapshot_bytes(project) == before


def test_a_corrupt_strike_file_is_reported_and_left_alone(project: Path) -> None:
    fail_cargo(project)
    path = project / ".loki" / "state" / "errors" / "main.json"
    path.write_text("{not json")
    before = snapshot_bytes(project)
    pre = hook("pre-tool-use", payload("pre_tool_use_bash", project), cwd=project)
    assert pre.code == 1 and "state/errors/main.json" in pre.stderr and pre.stdout == ""
    post = fail_cargo(project)
    assert post.code == 1 and "state/errors/main.json" in post.stderr
    assert snapshot_bytes(project) == before


def test_secrets_in_payloads_never_reach_the_disk(project: Path) -> None:
    secrets = ["sk-ant-api03-" + "Qw3rTy8UiOp2AsDfGhJkLz" * 3, "ghp_" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp9Oo",
               "s3cr3t-Pa55word", "AKIAJ7Q2EXAMPLEKEY9Z"]
    command = (f"curl -H 'x-api-key: {secrets[0]}' https://api.anthropic.com/v1/models && git clone "
               f"https://{secrets[1]}@github.com/acme/shop && psql postgres://admin:{secrets[2]}@db:5432/shop && "
               f"AWS_ACCESS_KEY_ID={secrets[3]} aws s3 ls")
    error = (f"Exit code 1\nremote: Invalid username or password for https://{secrets[1]}@github.com\n"
             f"psql: error: connection to server at \"db\" failed: password authentication failed for "
             f"postgres://admin:{secrets[2]}@db:5432/shop")
    for session in ("a", "b", "c"):
        fail_cargo(project, session_id=session, tool_input={"command": command, "description": "fetch"}, error=error)
    hook("session-start", payload("session_start", project), cwd=project)
    files = snapshot_bytes(project / ".loki")
    assert any(name.startswith("escalations/") for name in files)
    everything = b"".join(files.values())
    assert b"REDACTED" in everything
    for secret in secrets:
        assert secret.encode() not in everything, secret


# -- session start and stop ----------------------------------------------------------------------


def test_session_start_briefs_the_agent(project: Path) -> None:
    root = project / ".loki"
    for _ in range(3):
        fail_cargo(project)
    with (root / "CONTINUITY.md").open("a") as f:
        f.write("\n## 2026-01-25\n- cargo is missing in the container; use the rust image\n")
    first = context_of(hook("session-start", payload("session_start", project), cwd=project), "SessionStart")
    assert "open escalation" in first and "strike-" in first
    assert "failing call on branch main" in first and "Bash `cargo build --release`" in first and "STOPPED" in first
    assert "cargo is missing in the container" in first
    reviewed = Store(root).read(layout.DEADLETTER)["metadata"]["last_reviewed"]
    assert reviewed == NOW  # the session-start review ran (and recorded it)


def test_session_start_says_how_to_get_work_and_that_signals_wait(project: Path) -> None:
    root = project / ".loki"
    env = {"LOKI_NOW": NOW}
    for args in (["queue", "add", "one", "--id", "t1"], ["queue", "add", "two", "--id", "t2"],
                 ["queue", "add", "later", "--id", "t3", "--depends-on", "t1"], ["queue", "claim", "--agent", "a"],
                 ["signal", "emit", "DOCS_NEEDED", "message=x"]):
        assert cli(args, root=root, env=env).code == 0
    brief = context_of(hook("session-start", payload("session_start", project), cwd=project), "SessionStart")
    assert "- Queue: 1 ready (`loki queue claim --agent NAME -q` takes the best one" in brief
    assert "1 pending but not ready" in brief and "1 in progress" in brief
    assert "- Signals: 1 signal waiting and no watcher consumes them" in brief
    assert cli(["watch", "--once"], root=root, env=env).code == 0
    after = context_of(hook("session-start", payload("session_start", project), cwd=project), "SessionStart")
    assert "Signals:" not in after


def test_session_start_says_nothing_when_there_is_nothing(project: Path) -> None:
    result = hook("session-start", payload("session_start", project), cwd=project)
    assert (result.code, result.stdout, result.stderr) == (0, "", "")


def test_session_start_reports_a_broken_part_and_goes_on(project: Path) -> None:
    for _ in range(2):
        fail_cargo(project)
    (project / ".loki" / layout.DEADLETTER).write_text("[not json")
    context = context_of(hook("session-start", payload("session_start", project), cwd=project), "SessionStart")
    assert "Dead-letter review: unavailable (queue/dead-letter.json" in context
    assert "failing call on branch main" in context


def test_stop_is_advisory_only(project: Path) -> None:
    quiet = hook("stop", payload("stop", project), cwd=project)
    assert (quiet.code, quiet.stdout) == (0, "")
    for _ in range(3):
        fail_cargo(project)
    for active in (False, True):
        result = hook("stop", payload("stop", project, stop_hook_active=active), cwd=project)
        assert result.code == 0
        answer = result.json()
        assert set(answer) == {"systemMessage"}  # never "decision": "block"
        assert "1 call stopped by the 3-strike protocol on branch main" in answer["systemMessage"]


# -- the hot path's imports ----------------------------------------------------------------------

FORBIDDEN = ("typer", "rich", "jsonschema", "portalocker", "typing", "dataclasses", "loki.storage.store",
             "loki.storage.schema", "loki.text.errorscan", "subprocess", "pathlib")

# Runs the console script's entry point, then lists every module the process ended up with.
PROBE = """
import json, os, sys
sys.argv = ["loki", "hook", "pre-tool-use"]
from loki.entry import main
try:
    main()
except SystemExit as exit:
    code = exit.code
with open(os.environ["MODULES_OUT"], "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


def imported_by_pre_tool_use(project: Path, tmp_path: Path) -> tuple[int, list[str], str]:
    out = tmp_path / "modules.json"
    data = json.dumps(payload("pre_tool_use_bash", project)).encode()
    done = subprocess.run([sys.executable, "-c", PROBE], input=data, capture_output=True, cwd=project, timeout=60,
                          env={**os.environ, "MODULES_OUT": str(out)})
    result = json.loads(out.read_text())
    return result["code"], result["modules"], done.stdout.decode()


def test_pre_tool_use_imports_only_what_it_needs(project: Path, tmp_path: Path) -> None:
    code, modules, stdout = imported_by_pre_tool_use(project, tmp_path)
    assert code == 0 and stdout == ""
    heavy = [m for m in modules if m.split(".")[0] in FORBIDDEN or m in FORBIDDEN]
    assert heavy == []
    for _ in range(3):
        fail_cargo(project)
    code, modules, stdout = imported_by_pre_tool_use(project, tmp_path)  # a stop-tier answer: still light
    assert code == 0 and json.loads(stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    heavy = [m for m in modules if m.split(".")[0] in FORBIDDEN or m in FORBIDDEN]
    assert heavy == []
