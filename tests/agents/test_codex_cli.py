"""loki with the real Codex CLI (pinned, installed by npm into .cache/agents/), end to end and offline.

As tests/agents/test_gemini_cli.py does for Gemini CLI: a git repository with ``.loki/``, the hooks
installed by ``loki hooks install --agent codex`` (``.codex/hooks.json``, which the real CLI must
load), a headless ``codex exec`` whose model is a script on 127.0.0.1 (tests/agents/
responsesserver.py), and assertions on what the model was sent (developer messages carry the hooks'
context; a denied command's output carries the reason) and on the tree afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agents.codexcli import codex_bin, run_codex
from tests.agents.responsesserver import after_last_call, call_outputs, developer_texts, run, say
from tests.helpers import tree_problems

pytestmark = pytest.mark.slow

MISSING = "lokitest-missing-tool build --release"


def loki(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "loki", *args], cwd=project, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def codex() -> Path:
    return codex_bin()


@pytest.fixture
def project(tmp_path: Path, codex: Path) -> Path:
    top = tmp_path / "shop"
    top.mkdir()
    if shutil.which("git"):
        subprocess.run(["git", "init", "-q", "-b", "main", str(top)], check=True, timeout=60)
    else:
        (top / ".git").mkdir()
        (top / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    loki(top, "init")
    installed = loki(top, "hooks", "install", "--agent", "codex")
    assert "reviewed" in installed.stderr  # install says what Codex needs before it runs new hooks
    return top


@pytest.fixture
def codex_home(tmp_path: Path) -> Path:
    return tmp_path / "home" / ".codex"


def test_the_strike_protocol_and_the_briefing_through_the_real_codex_cli(project: Path, codex_home: Path) -> None:
    with (project / ".loki" / "CONTINUITY.md").open("a") as f:
        f.write("\n## 2026-01-25\n- the release build needs the vendored crates (see docs/build.md)\n")
    result = run_codex(project, codex_home, [run(MISSING)] * 4 + [say("I stopped: the build tool is missing.")])
    assert result.code == 0, result.stderr

    briefing = [text for text in developer_texts(result.requests[0]) if text.startswith("loki briefing")]
    assert len(briefing) == 1 and "the release build needs the vendored crates" in briefing[0]  # SessionStart

    assert after_last_call(result.requests[1]) == ""  # strike 1: nothing said
    second = after_last_call(result.requests[2])  # PostToolUse
    assert "strike 2 of 3" in second and "MUST use a different approach" in second
    third = after_last_call(result.requests[3])  # PostToolUse said STOP; strike 2 is not said again (once per session)
    assert "strike 2 of 3" not in third and "has failed 3 times in a row" in third

    denied = call_outputs(result.requests[4])[-1]  # PreToolUse denied the fourth attempt
    assert denied.startswith("Command blocked by PreToolUse hook: loki 3-strike protocol: Bash `" + MISSING), denied
    ran = result.commands()
    assert len(ran) == 3 and all(c["exit_code"] == 127 for c in ran)  # Codex ran three, refused the fourth

    root = project / ".loki"
    assert len(os.listdir(root / "escalations")) == 1 and os.listdir(root / "signals") == ["HUMAN_REVIEW_NEEDED"]
    listed = json.loads(loki(project, "errors", "list", "--json").stdout)
    assert [(e["call"], e["strike_count"]) for e in listed["strikes"]] == [("Bash `" + MISSING + "`", 3)]
    assert tree_problems(root) == []


def test_an_error_memory_hint_reaches_the_model_before_the_command(project: Path, codex_home: Path) -> None:
    tool = project / "mk"
    tool.write_text("#!/bin/sh\ncase \" $* \" in *' --offline '*) echo 'built offline'; exit 0 ;; esac\n"
                    "echo 'error: failed to fetch the crate index: Could not resolve host: index.crates.io' >&2\n"
                    "exit 101\n")
    tool.chmod(0o755)
    first = run_codex(project, codex_home, [run("./mk build"), run("./mk build"), run("./mk build --offline"),
                                            say("Built offline.")])
    assert first.code == 0, first.stderr
    later = run_codex(project, codex_home, [run("./mk build --release"), say("I will build offline.")])
    assert later.code == 0, later.stderr
    hint = after_last_call(later.requests[1])  # PreToolUse's context, given before the command ran
    assert "loki memory: last time `./mk build` failed here with" in hint
    assert "it was fixed by `./mk build --offline`" in hint


def markers(project: Path) -> list[str]:
    return sorted(p.name for p in project.glob("ran-*"))


def test_a_broken_tree_warns_and_blocks_nothing(project: Path, codex_home: Path) -> None:
    errors = project / ".loki" / "state" / "errors"
    errors.mkdir(parents=True, exist_ok=True)
    (errors / "main.json").write_text("{not json")
    result = run_codex(project, codex_home, [run("touch ran-1"), run("touch ran-2"), say("done.")])
    assert result.code == 0, result.stderr
    assert markers(project) == ["ran-1", "ran-2"]
    assert (errors / "main.json").read_text() == "{not json"


def test_a_loki_too_old_or_missing_blocks_nothing(project: Path, codex_home: Path) -> None:
    # A usage error (2) blocks a Codex tool call; the `|| exit 1` install writes turns it into a warning.
    loki(project, "hooks", "install", "--agent", "codex", "--command", f"{sys.executable} -m loki --no-such-option")
    result = run_codex(project, codex_home, [run("touch ran-1"), run("touch ran-2"), say("done.")])
    assert result.code == 0, result.stderr
    assert markers(project) == ["ran-1", "ran-2"]
