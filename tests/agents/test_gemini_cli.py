"""loki with the real Gemini CLI (pinned, installed by npm into .cache/agents/), end to end and offline.

Each test sets up a git repository with ``.loki/``, installs the hooks with ``loki hooks install
--agent gemini`` (the file the real CLI then loads: a hook that is not loaded fails a test), and runs
a headless Gemini session whose model is a script served on 127.0.0.1 (tests/agents/geminiserver.py).
The assertions are on what the model was sent (tool results with the hooks' context, denials, the
briefing in the prompt), on what Gemini reports (``--output-format json``, stderr) and on the tree
afterwards. Skipped with the reason when node or npm is missing; ``LOKI_REQUIRE_AGENTS=1`` (CI)
turns that into a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loki.storage.locks import FileLock
from tests.agents.geminicli import Run, gemini_bin, run_gemini
from tests.agents.geminiserver import last_tool_result, prompt_text, say, shell
from tests.helpers import snapshot_bytes, tree_problems

pytestmark = pytest.mark.slow

MISSING = "lokitest-missing-tool build --release"
"""A command that fails the same way everywhere: exit 127, "command not found"."""


def loki(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "loki", *args], cwd=project, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def gemini() -> Path:
    return gemini_bin()  # installs once (or skips with the reason) before any test of this module


@pytest.fixture
def project(tmp_path: Path, gemini: Path) -> Path:
    """A git repository on branch main, with .loki/ and loki's Gemini hooks installed the documented way."""
    top = tmp_path / "shop"
    top.mkdir()
    if shutil.which("git"):
        subprocess.run(["git", "init", "-q", "-b", "main", str(top)], check=True, timeout=60)
    else:
        (top / ".git").mkdir()
        (top / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    loki(top, "init")
    loki(top, "hooks", "install", "--agent", "gemini")
    return top


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def context_in(run: Run, request: int) -> str:
    """What the hooks appended to the tool result the model got in request ``request``."""
    result = last_tool_result(run.requests[request])
    assert "<hook_context>" in result, result
    return result.split("<hook_context>", 1)[1]


# -- the four hooks, loaded from what `loki hooks install --agent gemini` wrote ---------------------


def test_the_strike_protocol_and_the_briefing_through_the_real_gemini_cli(project: Path, home: Path) -> None:
    with (project / ".loki" / "CONTINUITY.md").open("a") as f:
        f.write("\n## 2026-01-25\n- the release build needs the vendored crates (see docs/build.md)\n")
    run = run_gemini(project, home, [shell(MISSING), shell(MISSING), shell(MISSING), shell(MISSING),
                                     say("I stopped: the build tool is missing.")])
    assert run.code == 0, run.stderr
    assert "Invalid hook event name" not in run.stderr and "Discarding invalid hook" not in run.stderr

    # SessionStart: the briefing is prepended to the prompt of the first request.
    prompt = prompt_text(run.requests[0])
    assert "loki briefing" in prompt and "the release build needs the vendored crates" in prompt

    # AfterTool: strike 1 says nothing; strike 2's guidance is in the next request; strike 3 says STOP.
    assert "<hook_context>" not in last_tool_result(run.requests[1])
    assert "command not found" in last_tool_result(run.requests[1])
    second = context_in(run, 2)
    assert "strike 2 of 3" in second and "MUST use a different approach" in second
    assert "STOP" in context_in(run, 3)

    # BeforeTool: the fourth attempt is denied; the model gets the reason as the tool's error.
    denied = last_tool_result(run.requests[4])
    assert denied.startswith("Tool execution blocked: loki 3-strike protocol: Bash `lokitest-missing-tool build "
                             "--release` has failed 3 times in a row on branch main"), denied
    stats = run.tool_stats()
    assert stats["count"] == 4 and stats["fail"] == 1  # Gemini's own report: one call refused

    # AfterAgent: the user is told which call is stopped.
    assert "loki: 1 call stopped by the 3-strike protocol on branch main" in run.stderr

    root = project / ".loki"
    assert len(os.listdir(root / "escalations")) == 1 and os.listdir(root / "signals") == ["HUMAN_REVIEW_NEEDED"]
    listed = json.loads(loki(project, "errors", "list", "--json").stdout)
    assert [(e["call"], e["strike_count"]) for e in listed["strikes"]] == [("Bash `" + MISSING + "`", 3)]
    assert tree_problems(root) == []


def test_an_error_memory_hint_from_an_earlier_session(project: Path, home: Path) -> None:
    tool = project / "mk"
    tool.write_text("#!/bin/sh\ncase \" $* \" in *' --offline '*) echo 'built offline'; exit 0 ;; esac\n"
                    "echo 'error: failed to fetch the crate index: Could not resolve host: index.crates.io' >&2\n"
                    "exit 101\n")
    tool.chmod(0o755)
    first = run_gemini(project, home, [shell("./mk build"), shell("./mk build"), shell("./mk build --offline"),
                                       say("Built offline.")])
    assert first.code == 0, first.stderr
    assert "built offline" in last_tool_result(first.requests[3])

    later = run_gemini(project, home, [shell("./mk build --release"), say("I will build offline.")])
    assert later.code == 0, later.stderr
    hint = context_in(later, 1)
    assert "loki memory: last time `./mk build` failed here with" in hint
    assert "Could not resolve host" in hint and "it was fixed by `./mk build --offline`" in hint


def test_a_secret_in_a_tools_output_never_reaches_loki(project: Path, home: Path) -> None:
    token = "ghp_" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp9Oo"
    password = "s3cr3t-Pa55word"
    leak = project / "deploy.sh"
    leak.write_text(f"#!/bin/sh\necho 'fatal: could not read from https://{token}@github.com/acme/shop' >&2\n"
                    f"echo 'psql: error: password authentication failed for postgres://admin:{password}@db/shop' >&2\n"
                    "exit 128\n")
    leak.chmod(0o755)
    run = run_gemini(project, home, [shell("./deploy.sh"), shell("./deploy.sh"), shell("./deploy.sh"),
                                     say("Deploy fails.")])
    assert run.code == 0, run.stderr
    assert token in last_tool_result(run.requests[1])  # the model saw the output as it was ...
    everything = b"".join(snapshot_bytes(project / ".loki").values())
    assert b"REDACTED" in everything and b"could not read from" in everything
    for secret in (token, password):  # ... loki stored none of it
        assert secret.encode() not in everything, secret


# -- a hook never blocks Gemini by its own failure -------------------------------------------------


def markers(project: Path) -> list[str]:
    return sorted(p.name for p in project.glob("ran-*"))


TWO_CALLS = [shell("touch ran-1"), shell("touch ran-2"), say("done.")]


def test_a_broken_tree_warns_and_blocks_nothing(project: Path, home: Path) -> None:
    errors = project / ".loki" / "state" / "errors"
    errors.mkdir(parents=True, exist_ok=True)
    (errors / "main.json").write_text("{not json")  # every BeforeTool now exits 1 naming the file
    run = run_gemini(project, home, TWO_CALLS)
    assert run.code == 0, run.stderr
    assert markers(project) == ["ran-1", "ran-2"]  # both calls ran
    assert "state/errors/main.json" in run.stderr  # Gemini shows the hook's one line as a warning
    assert (errors / "main.json").read_text() == "{not json"


def test_a_lock_timeout_warns_and_blocks_nothing(project: Path, home: Path) -> None:
    errors = project / ".loki" / "state" / "errors"
    errors.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(errors / "main.json.lock"), 5, "state/errors/main.json.lock")
    lock.acquire()  # held for the whole session: recording the failure times out
    try:
        run = run_gemini(project, home, [shell("touch ran-1 && exit 3"), shell("touch ran-2"), say("done.")],
                         env={"LOKI_LOCK_TIMEOUT": "0.3"})
    finally:
        lock.release()
    assert run.code == 0, run.stderr
    assert markers(project) == ["ran-1", "ran-2"]
    assert "lock" in run.stderr
    assert not (errors / "main.json").exists()  # exit 1 wrote nothing


@pytest.mark.parametrize("command", [
    "/nonexistent/bin/loki",  # not installed where the settings say: the shell exits 127
    f"{sys.executable} -m loki --no-such-option",  # an option this loki does not know: exit 2
])
def test_a_hook_that_cannot_even_start_warns_and_blocks_nothing(project: Path, home: Path, command: str) -> None:
    loki(project, "hooks", "install", "--agent", "gemini", "--command", command)
    run = run_gemini(project, home, TWO_CALLS)
    assert run.code == 0, run.stderr
    assert markers(project) == ["ran-1", "ran-2"]  # `|| exit 1` turned 127 and 2 into Gemini's "warning"


def test_without_the_guard_gemini_would_block_every_tool(project: Path, home: Path) -> None:
    """Why install appends ``|| exit 1``: Gemini CLI blocks a tool on any hook exit but 0 and 1."""
    settings = project / ".gemini" / "settings.json"
    doc = json.loads(settings.read_text())
    doc["hooks"]["BeforeTool"][0]["hooks"][0]["command"] = "/nonexistent/bin/loki hook --agent gemini before-tool"
    settings.write_text(json.dumps(doc))
    run = run_gemini(project, home, TWO_CALLS)
    assert markers(project) == []  # exit 127 denied both calls
    assert "Tool execution blocked" in last_tool_result(run.requests[1])


def test_bad_stdin_is_a_warning_not_a_block(project: Path, home: Path) -> None:
    settings = project / ".gemini" / "settings.json"
    doc = json.loads(settings.read_text())
    entry = doc["hooks"]["BeforeTool"][0]["hooks"][0]
    entry["command"] = "echo '{\"tool_name\": ' | " + entry["command"]  # loki reads a truncated payload
    settings.write_text(json.dumps(doc))
    run = run_gemini(project, home, TWO_CALLS)
    assert run.code == 0, run.stderr
    assert markers(project) == ["ran-1", "ran-2"]
    assert "stdin is not valid JSON" in run.stderr
