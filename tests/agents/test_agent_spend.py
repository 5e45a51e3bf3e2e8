"""The meter against the real Claude Code (docs/spend.md): `loki work` runs `claude -p --output-format json` and
`stream-json` against a scripted model whose every reply reports input, output, cache-read and cache-write
tokens; the session's usage arrives in the task's attempt exactly (the sum over the replies the model sent),
with Claude Code's own dollars, and what Claude Code printed reaches `loki work`'s stdout unchanged."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agents.claude import DUMMY_KEY, QUIET_ENV, make_project, tool_dirs
from tests.agents.modelserver import ModelServer, bash, text
from tests.helpers import tree_problems

pytestmark = [pytest.mark.slow, pytest.mark.agent]

USAGE = {"input_tokens": 37, "output_tokens": 11, "cache_read_input_tokens": 52_000,
         "cache_creation_input_tokens": 1_300}


@pytest.mark.parametrize("output_format", ["json", "stream-json"])
def test_claude_codes_usage_arrives_in_the_attempt_exactly(claude_code: Path, tmp_path: Path,
                                                          output_format: str) -> None:
    project = make_project(tmp_path / "shop")
    loki = os.path.join(os.path.dirname(sys.executable), "loki")
    subprocess.run([loki, "queue", "add", "Add pagination", "--id", "t1"], cwd=project, check=True,
                   capture_output=True)
    verbose = ["--verbose"] if output_format == "stream-json" else []
    home = tmp_path / "home"
    home.mkdir()
    with ModelServer([bash("echo paginated", description="Do the work"), text("Done.")], usage=USAGE) as model:
        env = {"PATH": os.pathsep.join(tool_dirs()), "HOME": str(home), "LANG": "C.UTF-8", "SHELL": "/bin/bash",
               "ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": DUMMY_KEY, **QUIET_ENV,
               **{k: v for k, v in os.environ.items() if k.startswith("LOKI_") and k != "LOKI_AGENTS_CACHE"}}
        done = subprocess.run([loki, "work", "--agent", "claude-1", "--json", "--", str(claude_code), "-p",
                               "Do task {id}: {title}", "--output-format", output_format, *verbose,
                               "--allowedTools", "Bash"], cwd=project, env=env, capture_output=True, timeout=600)
    summary = json.loads(done.stderr.decode().splitlines()[-1])
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    replies = model.replies
    assert replies >= 2  # the session's two turns (and whatever else Claude Code asked the model)

    # What Claude Code printed passed through unchanged: its result is the last document of loki work's stdout.
    lines = [json.loads(line) for line in done.stdout.decode().splitlines() if line.startswith("{")]
    result = [doc for doc in lines if doc.get("type") == "result"][-1]

    entry = json.loads(subprocess.run([loki, "queue", "show", "t1", "--json"], cwd=project, check=True,
                                      capture_output=True, text=True).stdout)["task"]["usage"]
    assert len(entry) == 1
    usage = entry[0]
    # The model server's figures, summed over its replies, are what Claude Code reported and what loki kept.
    assert (usage["cache_read_tokens"], usage["cache_creation_tokens"], usage["input_tokens"]) == (
        replies * USAGE["cache_read_input_tokens"], replies * USAGE["cache_creation_input_tokens"],
        replies * USAGE["input_tokens"])
    assert usage["output_tokens"] == result["usage"]["output_tokens"] > 0
    assert usage["usd"] == result["total_cost_usd"] and usage["usd_source"] == "agent"
    assert (usage["source"], usage["agent"], usage["outcome"], usage["attempt"]) == ("claude", "claude-1",
                                                                                     "completed", 1)
    assert summary["tasks"][0]["usage"]["cache_read_tokens"] == usage["cache_read_tokens"]
    assert tree_problems(project / ".loki") == []


def test_claude_code_stopped_by_max_task_usd_is_a_budget_failure_with_its_usage(claude_code: Path,
                                                                               tmp_path: Path) -> None:
    """`loki work --max-task-usd` passes Claude Code a tiny `--max-budget-usd`: Claude Code stops after the first
    reply with its `error_max_budget_usd` result (exit 1, `usage` zeroed, the tokens in `modelUsage`); the
    attempt is a failure of class `budget`, and its usage is the model server's reply exactly."""
    project = make_project(tmp_path / "shop")
    loki = os.path.join(os.path.dirname(sys.executable), "loki")
    subprocess.run([loki, "queue", "add", "Add pagination", "--id", "t1"], cwd=project, check=True,
                   capture_output=True)
    home = tmp_path / "home"
    home.mkdir()
    turns = [bash(f"echo step {n}", description=f"Step {n}") for n in range(3)] + [text("Done.")]
    with ModelServer(turns, usage=USAGE) as model:
        env = {"PATH": os.pathsep.join(tool_dirs()), "HOME": str(home), "LANG": "C.UTF-8", "SHELL": "/bin/bash",
               "ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": DUMMY_KEY, **QUIET_ENV,
               **{k: v for k, v in os.environ.items() if k.startswith("LOKI_") and k != "LOKI_AGENTS_CACHE"}}
        done = subprocess.run([loki, "work", "--agent", "claude-1", "--json", "--max-tasks", "1",
                               "--max-task-usd", "0.0001", "--", str(claude_code), "-p", "Do task {id}: {title}",
                               "--output-format", "json", "--allowedTools", "Bash"],
                              cwd=project, env=env, capture_output=True, timeout=600)
    result = [json.loads(line) for line in done.stdout.decode().splitlines() if line.startswith("{")][-1]
    assert (result["subtype"], result["is_error"]) == ("error_max_budget_usd", True), result
    summary = json.loads(done.stderr.decode().splitlines()[-1])
    run = summary["tasks"][0]
    assert run["outcome"] == "failed" and run["error_class"] == "budget", done.stderr.decode()[-2000:]
    task = json.loads(subprocess.run([loki, "queue", "show", "t1", "--json"], cwd=project, check=True,
                                     capture_output=True, text=True).stdout)["task"]
    assert task["attempts"][0]["error_message"].startswith(
        "exit 1 (budget): Claude Code stopped at its cap: Reached maximum budget ($0.0001); spent $")
    [usage] = task["usage"]
    replies = model.replies
    assert (usage["input_tokens"], usage["output_tokens"], usage["cache_read_tokens"],
            usage["cache_creation_tokens"]) == (replies * USAGE["input_tokens"], replies * USAGE["output_tokens"],
                                                replies * USAGE["cache_read_input_tokens"],
                                                replies * USAGE["cache_creation_input_tokens"])
    assert usage["usd"] == result["total_cost_usd"] > 0.0001 and usage["outcome"] == "failed"
    assert tree_problems(project / ".loki") == []


def test_codex_clis_usage_arrives_in_the_attempt_exactly(tmp_path: Path) -> None:
    """`codex exec --json` through `loki work`: every turn.completed summed, cached input counted apart."""
    from tests.agents.codexcli import MODEL, codex_bin, config
    from tests.agents.responsesserver import ResponsesServer, run, say

    binary = codex_bin()
    project = tmp_path / "shop"
    project.mkdir()
    loki = os.path.join(os.path.dirname(sys.executable), "loki")
    subprocess.run([loki, "init"], cwd=project, check=True, capture_output=True)
    subprocess.run([loki, "queue", "add", "Add pagination", "--id", "t1"], cwd=project, check=True,
                   capture_output=True)
    codex_home = tmp_path / "home" / ".codex"
    figures = {"input_tokens": 4_000, "cached_tokens": 3_500, "output_tokens": 70}
    node = shutil.which("node")
    path = [os.path.dirname(sys.executable), *([os.path.dirname(node)] if node else []), "/usr/local/bin",
            "/usr/bin", "/bin"]
    with ResponsesServer([run("echo paginated"), say("Done.")], usage=figures) as server:
        config(codex_home, project, server.url)
        env = {"PATH": os.pathsep.join(dict.fromkeys(path)), "HOME": str(codex_home.parent),
               "CODEX_HOME": str(codex_home), "SCRIPTED_MODEL_KEY": "scripted", "LANG": "C.UTF-8", "NO_COLOR": "1",
               **{k: v for k, v in os.environ.items() if k.startswith("LOKI_") and k != "LOKI_AGENTS_CACHE"}}
        done = subprocess.run([loki, "work", "--agent", "codex-1", "--", str(binary), "exec", "--json",
                               "--dangerously-bypass-approvals-and-sandbox", "-m", MODEL, "Do task {id}: {title}"],
                              cwd=project, env=env, capture_output=True, timeout=600, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    turns = [json.loads(line) for line in done.stdout.decode().splitlines()
             if line.startswith("{") and json.loads(line).get("type") == "turn.completed"]
    assert turns and server.replies >= 2
    usage = json.loads(subprocess.run([loki, "queue", "show", "t1", "--json"], cwd=project, check=True,
                                      capture_output=True, text=True).stdout)["task"]["usage"][0]
    # What the server reported, summed over its replies, is what Codex printed and what loki kept.
    replies = server.replies
    assert (usage["input_tokens"], usage["cache_read_tokens"], usage["output_tokens"]) == (
        replies * (figures["input_tokens"] - figures["cached_tokens"]), replies * figures["cached_tokens"],
        replies * figures["output_tokens"])
    assert sum(t["usage"]["cached_input_tokens"] for t in turns) == usage["cache_read_tokens"]
    assert (usage["source"], usage["model"], usage["usd_source"]) == ("codex", MODEL, "prices")
    assert usage["usd"] > 0  # gpt-5.1-codex is priced as gpt-5 (the longest known prefix)


def test_gemini_clis_usage_arrives_in_the_attempt_exactly(tmp_path: Path) -> None:
    """`gemini -p --output-format json` through `loki work`: the pretty-printed stats read whole."""
    from tests.agents.geminicli import MODEL, USER_SETTINGS, environment, gemini_bin
    from tests.agents.geminiserver import GeminiServer, say, shell

    binary = gemini_bin()
    project = tmp_path / "shop"
    project.mkdir()
    loki = os.path.join(os.path.dirname(sys.executable), "loki")
    subprocess.run([loki, "init"], cwd=project, check=True, capture_output=True)
    subprocess.run([loki, "queue", "add", "Add pagination", "--id", "t1"], cwd=project, check=True,
                   capture_output=True)
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(USER_SETTINGS))
    figures = {"promptTokenCount": 6_000, "cachedContentTokenCount": 5_000, "candidatesTokenCount": 40}
    with GeminiServer([shell("echo paginated"), say("Done.")], usage=figures) as server:
        env = environment(home, server.url, {k: v for k, v in os.environ.items()
                                             if k.startswith("LOKI_") and k != "LOKI_AGENTS_CACHE"})
        done = subprocess.run([loki, "work", "--agent", "gemini-1", "--", str(binary), "-m", MODEL, "-p",
                               "Do task {id}: {title}", "--yolo", "--output-format", "json"],
                              cwd=project, env=env, capture_output=True, timeout=600, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    printed = json.loads(done.stdout)  # Gemini's document passed through whole
    tokens = printed["stats"]["models"][MODEL]["tokens"]
    replies = len(server.requests)
    assert replies >= 2
    usage = json.loads(subprocess.run([loki, "queue", "show", "t1", "--json"], cwd=project, check=True,
                                      capture_output=True, text=True).stdout)["task"]["usage"][0]
    assert (usage["input_tokens"], usage["cache_read_tokens"]) == (
        replies * (figures["promptTokenCount"] - figures["cachedContentTokenCount"]),
        replies * figures["cachedContentTokenCount"])
    assert usage["output_tokens"] == replies * figures["candidatesTokenCount"] + tokens.get("thoughts", 0)
    assert (usage["source"], usage["model"], usage["usd_source"]) == ("gemini", MODEL, "prices")
