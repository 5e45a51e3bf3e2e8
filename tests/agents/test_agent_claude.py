"""loki with the real Claude Code: its hooks as Claude Code loads and runs them, end to end.

Each test starts the pinned Claude Code (tests/agents/claude.py) in a git repository where `loki init`
and `loki hooks install` ran, against the scripted model (tests/agents/modelserver.py). The model's
turns are data; what Claude Code then sends the model (tool results, the context loki's hooks
injected, the briefing) is asserted on, and so is the tree afterwards. No hook payload is written by
hand here: every payload is the one Claude Code built.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loki.storage.locks import FileLock
from loki.storage.store import Store
from loki.strikes.strikes import Strikes
from tests.agents.claude import claude_session, loki_command, make_project
from tests.agents.modelserver import bash, text, together
from tests.helpers import snapshot_bytes, tree_problems

pytestmark = [pytest.mark.slow, pytest.mark.agent]

LOKI_EVENTS = {"SessionStart", "PreToolUse", "PostToolUse", "PostToolUseFailure", "Stop"}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "shop")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def loki_json(project: Path, *args: str) -> Any:
    return json.loads(loki_command([*args, "--json"], project).stdout)


def assert_valid(project: Path) -> None:
    assert tree_problems(project / ".loki") == []
    assert loki_command(["validate"], project).returncode == 0


# -- the settings `loki hooks install` writes are what Claude Code runs ----------------------------------


def test_every_hook_loki_installs_is_run_by_claude_code(claude_code: Path, project: Path, home: Path) -> None:
    added = loki_json(project, "queue", "add", "Rotate the payment API keys")["task"]["id"]
    loki_command(["escalate", added, "--trigger", "security_decision"], project)
    escalation = loki_json(project, "escalations", "list", "--open")["escalations"][0]["file"]
    installed = json.loads((project / ".claude" / "settings.json").read_text())["hooks"]
    # TaskCompleted runs only when Claude Code's own task list completes a task: tests/agents/test_agent_teamtasks.py
    assert set(installed) == LOKI_EVENTS | {"TaskCompleted"}

    run, model = claude_session(claude_code, project, [
        bash("ls missing.txt"),      # fails: PostToolUseFailure, strike 1
        bash("ls missing.txt"),      # fails again: strike 2, context for the model
        bash("touch missing.txt"),   # succeeds: PostToolUse
        bash("ls missing.txt"),      # PreToolUse runs (strike 2 was said: once per session); it clears the streak
        text("All done."),           # Stop
    ], home=home)

    # Every event loki installed was run, each time by loki, and never failed. The session's HOME is
    # empty and the project's settings are loki's alone, so each hook that ran is one loki installed.
    ran = {hook["hook_event"] for hook in run.hook_runs()}
    assert ran == LOKI_EVENTS
    failed = [h for h in run.hook_runs() if h["exit_code"] != 0]
    assert failed == []
    assert len(run.hook_runs("PreToolUse")) == 4
    assert len(run.hook_runs("PostToolUseFailure")) == 2
    assert len(run.hook_runs("PostToolUse")) == 2

    # SessionStart: the briefing is in the model's first request, naming the open escalation.
    first = model.received(0)
    assert "loki briefing" in first and escalation in first
    # PostToolUseFailure: strike 2's guidance came with the second failure's result.
    assert "strike 2 of 3" in model.new_input(2) and "MUST use a different approach" in model.new_input(2)
    # PreToolUse ran before each call (counted above); strike 2 was said with the failure and is not said
    # again before the same call (docs/hooks.md: once per session). Its answers reaching the model are shown
    # by the denial at the stop tier (test_three_strikes_warn_then_claude_code_reports_the_denial).
    assert "strike 2 of 3" not in model.new_input(4)
    # PostToolUse: that success cleared the streak in the tree.
    assert loki_json(project, "errors", "list")["strikes"] == []
    assert_valid(project)


def test_without_the_hooks_claude_code_runs_none(claude_code: Path, project: Path, home: Path) -> None:
    """The control for the test above: the same tree after `loki hooks uninstall`, and nothing of loki runs."""
    added = loki_json(project, "queue", "add", "Rotate the payment API keys")["task"]["id"]
    loki_command(["escalate", added, "--trigger", "security_decision"], project)
    loki_command(["hooks", "uninstall"], project)
    before = snapshot_bytes(project / ".loki")

    run, model = claude_session(claude_code, project, [bash("ls missing.txt"), bash("ls missing.txt"),
                                                       text("done")], home=home)

    assert run.hook_runs() == []
    assert "loki briefing" not in model.received(0)
    assert "strike" not in model.new_input(2)
    assert snapshot_bytes(project / ".loki") == before


# -- the 3-strike protocol --------------------------------------------------------------------------------


def test_three_strikes_warn_then_claude_code_reports_the_denial(claude_code: Path, project: Path,
                                                                 home: Path) -> None:
    call = "echo attempt >> attempts.log; cargo-offline build --release"
    run, model = claude_session(claude_code, project, [bash(call), bash(call), bash(call), bash(call),
                                                       text("Stopping here.")], home=home, hook_events=False)

    # Strike 1: the failure only. Strike 2: change approach. Strike 3: stop, escalated.
    assert "3-strike" not in model.new_input(1)
    assert "strike 2 of 3" in model.new_input(2) and "MUST use a different approach" in model.new_input(2)
    assert "missing_command" in model.new_input(2)  # errorscan's class, from Claude Code's real error text
    assert "has failed 3 times in a row" in model.new_input(3) and "STOP" in model.new_input(3)
    # The fourth call never ran: PreToolUse denied it, the model was told why, Claude Code reports it.
    denied = model.tool_results(4)
    assert len(denied) == 1 and denied[0]["is_error"] is True
    assert "is stopped" in json.dumps(denied[0]) and "loki errors reset" in json.dumps(denied[0])
    assert (project / "attempts.log").read_text() == "attempt\n" * 3
    denials = run.permission_denials
    assert [(d["tool_name"], d["tool_input"]["command"]) for d in denials] == [("Bash", call)]
    assert run.result()["is_error"] is False

    # The tree: three strikes, one escalation file, one HUMAN_REVIEW_NEEDED signal.
    (key,) = loki_json(project, "errors", "list")["strikes"]
    assert key["strike_count"] == 3 and key["tier"] == "stop"
    escalations = sorted((project / ".loki" / "escalations").glob("*-strike-*.md"))
    assert len(escalations) == 1 and "cargo-offline build --release" in escalations[0].read_text()
    signals = [json.loads(p.read_text()) for p in (project / ".loki" / "signals").glob("HUMAN_REVIEW_NEEDED*")]
    assert len(signals) == 1 and signals[0]["strike_key"] == key["key"]
    assert signals[0]["escalation"] == escalations[0].name and signals[0]["blocking"] is True
    assert_valid(project)

    # The next session: the briefing says the call is stopped, and the Stop hook tells the user.
    run, model = claude_session(claude_code, project, [text("Read the briefing.")], home=home)
    assert "STOPPED" in model.received(0) and "cargo-offline build --release" in model.received(0)
    (stop,) = run.hook_runs("Stop")
    assert "stopped by the 3-strike protocol" in json.loads(stop["stdout"])["systemMessage"]


PERMISSION_MODES = {
    # What a person's session allows: the Bash tool by a permission rule.
    "allowed tools": ([], {}),
    # What an unattended agent loop runs with: no permission checks at all. Hooks still decide; as root
    # Claude Code takes this only in a sandbox (IS_SANDBOX=1), which a test directory is.
    "bypass permissions": (["--permission-mode", "bypassPermissions"], {"IS_SANDBOX": "1"}),
}


@pytest.mark.parametrize(("mode", "decision"), [("bypass permissions", "deny"), ("bypass permissions", "ask"),
                                                ("allowed tools", "ask")])
def test_a_stopped_call_is_refused_whatever_the_permission_mode(claude_code: Path, project: Path, home: Path,
                                                                mode: str, decision: str) -> None:
    """A call stopped in an earlier session (three failures recorded through the library) is refused in an
    unattended loop's mode too; ``ask`` (strikes.stop_decision) has nobody to ask under ``-p``: refused."""
    (project / ".loki" / "config" / "loki.json").write_text(json.dumps({"strikes": {"stop_decision": decision}}))
    call = "echo attempt >> attempts.log; cargo-offline build --release"
    strikes = Strikes(Store(project / ".loki"), branch="main")
    for _ in range(3):
        strikes.record_failure("Bash", {"command": call}, "/bin/bash: line 1: cargo-offline: command not found")
    args, env = PERMISSION_MODES[mode]

    run, model = claude_session(claude_code, project, [bash(call), text("Stopping here.")], home=home,
                                hook_events=False, args=args, env=env)

    assert not (project / "attempts.log").exists()
    assert [d["tool_input"]["command"] for d in run.permission_denials] == [call]
    (refused,) = model.tool_results(1)
    assert refused["is_error"] is True and "is stopped" in json.dumps(refused)


def test_a_failure_a_pipe_hid_counts_from_claude_codes_tool_response(claude_code: Path, project: Path,
                                                                     home: Path) -> None:
    """``pytest | tail`` exits 0 and Claude Code calls it a success; loki reads its ``tool_response``."""
    (project / "tests").mkdir()
    (project / "tests" / "test_cart.py").write_text("def test_total():\n    assert 2 + 2 == 5\n")
    call = "python -m pytest -q -p no:cacheprovider tests 2>&1 | tail -3"
    run, model = claude_session(claude_code, project, [bash(call), text("done")], home=home)

    assert [h["hook_event"] for h in run.hook_runs() if h["hook_event"].startswith("PostToolUse")] == [
        "PostToolUse"]  # no PostToolUseFailure: the pipe's exit status is tail's, 0
    assert "1 failed" in model.new_input(1)
    (key,) = loki_json(project, "errors", "list")["strikes"]
    assert key["strike_count"] == 1 and key["error_class"] == "test_failure"
    assert "test_cart.py" in key["last_error"]
    (record,) = _memory_records(project)
    assert record["command"] == call and record["exit_code"] == 0


def test_tool_calls_claude_code_runs_concurrently_are_each_counted_once(claude_code: Path, project: Path,
                                                                        home: Path) -> None:
    """Five calls in one reply: Claude Code runs them, and their hooks, at the same time."""
    reply = together(bash("ls gone.txt"), bash("cat gone.cfg"), bash("ls gone.txt"), bash("ls gone.dir"),
                     bash("ls gone.txt"))
    run, _ = claude_session(claude_code, project, [reply, reply, text("done")], home=home)

    started = [d["hook_name"] for d in run.documents() if d.get("subtype") == "hook_started"]
    assert started[1:6] == ["PreToolUse:Bash"] * 5  # every PreToolUse before any PostToolUseFailure: together
    counts = {key["call"]: key["strike_count"] for key in loki_json(project, "errors", "list")["strikes"]}
    # `ls gone.txt` failed three times at once: the stop tier, escalated once; the next reply's three are refused.
    assert counts == {"Bash `ls gone.txt`": 3, "Bash `cat gone.cfg`": 2, "Bash `ls gone.dir`": 2}
    assert [d["tool_input"]["command"] for d in run.permission_denials] == ["ls gone.txt"] * 3
    assert len(_memory_records(project)) == 7
    assert len(list((project / ".loki" / "escalations").glob("*-strike-*.md"))) == 1
    assert_valid(project)


# -- error memory across sessions ----------------------------------------------------------------------------

BUILD_SCRIPT = """#!/bin/sh
if [ "$2" = "--offline" ]; then echo "built target/app (offline)"; exit 0; fi
echo "error: failed to fetch the crate index: Could not resolve host" >&2
exit 101
"""


def test_an_earlier_sessions_fix_reaches_the_model_before_the_same_command(claude_code: Path, project: Path,
                                                                             home: Path) -> None:
    (project / "build.sh").write_text(BUILD_SCRIPT)
    # Session 1: the build fails, then an offline build succeeds: error memory links the two.
    claude_session(claude_code, project, [bash("sh build.sh --release"), bash("sh build.sh --release --offline"),
                                          text("Built offline.")], home=home)
    search = loki_json(project, "errors", "search", "crate index", "--with-resolution")
    assert search["results"] and search["results"][0]["resolution"]["resolution"] == "sh build.sh --release --offline"

    # Session 2, a new process and session id: before the same command runs, PreToolUse says what fixed it.
    run, model = claude_session(claude_code, project, [bash("sh build.sh --release"), text("ok")], home=home)
    hint = model.new_input(1)
    assert "last time" in hint and "it was fixed by" in hint and "sh build.sh --release --offline" in hint
    (pre,) = run.hook_runs("PreToolUse")
    assert "it was fixed by" in json.loads(pre["stdout"])["hookSpecificOutput"]["additionalContext"]
    sessions = {r["session_id"] for r in _memory_records(project)}
    assert len(sessions) == 2  # the failure of each session, each under its own Claude Code session id


def _memory_records(project: Path) -> list[dict[str, Any]]:
    log = project / ".loki" / "memory" / "errors.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines() if json.loads(line)["kind"] == "error"]


# -- secrets -------------------------------------------------------------------------------------------------

GITHUB_TOKEN = "ghp_Zx81kQm2Lp9sT4vW7yB3nC6dF0hJ5gR1aE8u"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq91kLmQ3T"
LEAKY_SCRIPT = f"""#!/bin/sh
if [ "$1" = "--dry-run" ]; then echo "dry run with token $GITHUB_TOKEN: ok"; exit 0; fi
echo "export GITHUB_TOKEN={GITHUB_TOKEN}"
echo "aws_secret_access_key = {AWS_SECRET}" >&2
echo "Traceback (most recent call last):" >&2
echo "RuntimeError: deploy refused" >&2
exit 1
"""


def test_a_secret_in_tool_output_reaches_the_model_but_never_loki(claude_code: Path, project: Path,
                                                                  home: Path) -> None:
    (project / "deploy.sh").write_text(LEAKY_SCRIPT)
    fix = f"GITHUB_TOKEN={GITHUB_TOKEN} sh deploy.sh --dry-run"
    _, model = claude_session(claude_code, project, [
        bash("sh deploy.sh"), bash("sh deploy.sh"),  # secrets in the output of two failures: memory, strikes
        bash(fix),                                   # a secret in the input of the call that ends the streak
        text("done"),
    ], home=home)

    # Claude Code really passed the secrets through (so their absence below means something) ...
    assert GITHUB_TOKEN in model.new_input(1) and AWS_SECRET in model.new_input(1)
    # ... and the hooks stored the failures and their resolution, redacted.
    records = _memory_records(project)
    assert len(records) == 2 and "[REDACTED:github_token]" in records[0]["output"]
    log = (project / ".loki" / "memory" / "errors.jsonl").read_text()
    resolution = [json.loads(line) for line in log.splitlines() if json.loads(line)["kind"] == "resolution"]
    assert len(resolution) == 1 and "sh deploy.sh --dry-run" in resolution[0]["resolution"]
    assert list((project / ".loki" / "memory" / "hints").glob("*.json"))
    loki_json(project, "errors", "search", "deploy refused")  # builds the SQLite index, which is checked too
    for path, data in snapshot_bytes(project / ".loki").items():
        for secret in (GITHUB_TOKEN, AWS_SECRET, GITHUB_TOKEN[4:20], AWS_SECRET[:16]):
            assert secret.encode() not in data, f"{secret[:8]}... stored in .loki/{path}"
    assert_valid(project)


# -- a hook never blocks Claude Code by its own failure --------------------------------------------------------

RAN = "echo ran-{n} | tee -a ran.txt"


def _broken_tree(project: Path) -> dict[str, str]:
    (project / ".loki" / "state" / "errors").mkdir(parents=True, exist_ok=True)
    (project / ".loki" / "state" / "errors" / "main.json").write_text('{"version": 1, "keys": {')
    return {}


def _bad_stdin(project: Path) -> dict[str, str]:
    # Each hook gets the first 40 bytes of Claude Code's payload: cut-off JSON on stdin.
    loki_command(["hooks", "install", "--command", "head -c 40 | loki"], project)
    return {}


@pytest.mark.parametrize("breakage", ["broken tree", "bad stdin", "lock timeout"])
def test_a_failing_hook_never_blocks_claude_code(claude_code: Path, project: Path, home: Path, breakage: str) -> None:
    env = {"bad stdin": _bad_stdin, "broken tree": _broken_tree}.get(breakage, lambda _: {})(project)
    if breakage == "lock timeout":
        env = {"LOKI_LOCK_TIMEOUT": "0.3"}
    loki_command(["deadletter", "review"], project)  # done for today: SessionStart's review writes nothing
    before = snapshot_bytes(project / ".loki")
    turns = [bash(RAN.format(n=1)), bash(RAN.format(n=2) + "; ls missing.txt"), text("finished")]
    if breakage == "lock timeout":
        # Another process holds the branch's strike lock throughout: recording the failure times out.
        with FileLock(str(project / ".loki" / "state" / "errors" / "main.json.lock"), timeout=5):
            run, model = claude_session(claude_code, project, turns, home=home, env=env)
    else:
        run, model = claude_session(claude_code, project, turns, home=home, env=env)

    # The session went on as if loki were not there: both commands ran, their output reached the model,
    # nothing was denied, the session ended normally.
    assert (project / "ran.txt").read_text() == "ran-1\nran-2\n"
    assert "ran-1" in model.new_input(1) and "ran-2" in model.new_input(2)
    assert run.permission_denials == [] and run.result()["subtype"] == "success"
    # The hooks did fail (exit 1, one line saying why), and Claude Code took that as non-blocking.
    failed = [h for h in run.hook_runs() if h["exit_code"] != 0]
    assert failed and {(h["exit_code"], h["outcome"]) for h in failed} == {(1, "error")}
    assert all(h["stderr"].startswith("loki hook ") and h["stderr"].count("\n") == 1 for h in failed)
    assert "loki hook" not in model.new_input(1) + model.new_input(2)  # shown to the user, not the model
    expected = {"broken tree": {"PreToolUse", "PostToolUse", "PostToolUseFailure", "Stop"},
                "bad stdin": LOKI_EVENTS, "lock timeout": {"PostToolUseFailure"}}[breakage]
    assert {h["hook_event"] for h in failed} == expected
    if breakage == "lock timeout":
        assert "lock" in failed[0]["stderr"].lower()
    # And nothing was written.
    assert snapshot_bytes(project / ".loki") == before
