"""Error memory through the real hooks: ``loki hook ...`` processes fed Claude Code's payloads.

Failures are captured by PostToolUseFailure (and by PostToolUse when a pipe hid them), found again
with ``loki errors search``, linked to the success that ended their streak, and brought back by
PreToolUse before the same kind of command runs again. The outputs are real: Python, pytest,
rustc and node are run here, and tsc's output is the one recorded in tests/corpus/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loki.storage import layout
from tests.helpers import cli, loki_proc, snapshot_bytes, tree_problems
from tests.hooks.test_hooks import PAYLOADS, context_of, hook, imported_by_pre_tool_use, payload

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run a real command; its exit code and its output as a terminal shows it (stdout, then stderr)."""
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})
    return done.returncode, done.stdout + done.stderr


def fail(project: Path, command: str, code: int, output: str, **changes: Any) -> None:
    """Feed one failed Bash call to ``loki hook post-tool-use-failure``, as Claude Code does."""
    data = payload("post_tool_use_failure_bash", project, tool_input={"command": command, "description": "run"},
                   error=f"Exit code {code}\n{output}", **changes)
    result = hook("post-tool-use-failure", data, cwd=project)
    assert result.code == 0 and result.stderr == "", result.stderr


def succeed(project: Path, command: str, stdout: str = "ok\n") -> None:
    data = payload("post_tool_use_bash", project, tool_input={"command": command, "description": "run"},
                   tool_response={"stdout": stdout, "stderr": "", "interrupted": False, "isImage": False})
    result = hook("post-tool-use", data, cwd=project)
    assert (result.code, result.stdout, result.stderr) == (0, "", "")


def other_call(project: Path) -> None:
    """A call in between (an Edit), which the hooks count while a streak is open."""
    data = payload("post_tool_use_read", project)
    assert hook("post-tool-use", data, cwd=project).code == 0


def search(project: Path, *args: str) -> list[dict[str, Any]]:
    result = cli(["errors", "search", *args, "--json"], root=project / ".loki")
    assert result.code == 0, result.stderr
    hits: list[dict[str, Any]] = result.json()["results"]
    return hits


def hit_for(project: Path, query: str, command: str) -> dict[str, Any]:
    matching = [h for h in search(project, query, "--limit", "50") if h["command"] == command]
    assert len(matching) == 1, [h["command"] for h in search(project, query, "--limit", "50")]
    return matching[0]


def pre_tool_use(project: Path, command: str, **changes: Any) -> Any:
    result = hook("pre-tool-use", payload("pre_tool_use_bash", project, tool_input={"command": command}, **changes),
                  cwd=project)
    assert result.code == 0, result.stderr
    return result


# -- capture -> search ------------------------------------------------------------------------------------


def test_capture_then_search_round_trip_with_claude_codes_payloads(project: Path) -> None:
    failure = json.loads((PAYLOADS / "post_tool_use_failure_bash.json").read_text())
    for _ in range(2):
        assert hook("post-tool-use-failure", payload("post_tool_use_failure_bash", project), cwd=project).code == 0
    piped = hook("post-tool-use", payload("post_tool_use_bash_piped_failure", project), cwd=project)
    assert piped.code == 0  # a failure a pipe hid is captured too
    lines = (project / ".loki" / layout.MEMORY_LOG).read_text().splitlines()
    assert len(lines) == 3 and not (project / ".loki" / layout.MEMORY_INDEX).exists()  # the hook only appends
    (cargo,) = search(project, "cargo not found")
    assert cargo["command"] == failure["tool_input"]["command"] and cargo["occurrences"] == 2
    assert (cargo["error_class"], cargo["exit_code"], cargo["branch"]) == ("missing_command", 127, "main")
    assert cargo["error_message"] == "/bin/bash: line 1: cargo: command not found"
    assert cargo["session_id"] == failure["session_id"] and cargo["resolution"] is None
    assert search(project, "FAILED", "--class", "test_failure")[0]["tool"] == "Bash"
    people = loki_proc(["errors", "search", "cargo not found"], root=project / ".loki")  # a real process too
    assert people.code == 0 and "Bash `cargo build --release`" in people.stdout and "2x" in people.stdout
    assert tree_problems(project / ".loki") == []


def test_a_python_traceback_run_here(project: Path) -> None:
    (project / "app.py").write_text("def parse(raw):\n    return int(raw)\n\n\nparse('twelve')\n")
    code, output = run([sys.executable, "app.py"], project)
    assert code == 1 and "Traceback" in output
    fail(project, "python app.py", code, output)
    hit = hit_for(project, "ValueError invalid literal", "python app.py")
    app = str(project / "app.py")
    assert hit["file_references"][:2] == [{"file": app, "line": 2}, {"file": app, "line": 5}]  # innermost first
    assert hit["stack_trace"].startswith("Traceback (most recent call last):")
    assert hit["stack_trace"].endswith("ValueError: invalid literal for int() with base 10: 'twelve'")
    assert hit["error_class"] == "python_exception"


def test_a_pytest_failure_run_here(project: Path) -> None:
    (project / "tests").mkdir()
    (project / "tests" / "test_calc.py").write_text(
        "def add(a, b):\n    return a - b\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    # Without the installed plugins (xdist, hypothesis ...): the same report, a third of the CPU (~0.3 s, not ~1 s).
    code, output = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_calc.py"],
                       project, env={"PYTEST_ADDOPTS": "", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert code == 1 and "1 failed" in output
    fail(project, "python -m pytest -q tests/test_calc.py", code, output)
    hit = hit_for(project, "test_add assert", "python -m pytest -q tests/test_calc.py")
    assert hit["error_class"] == "test_failure" and {"file": "tests/test_calc.py", "line": 6} in hit["file_references"]
    assert " FAILURES " in hit["stack_trace"] and "E       assert -1 == 5" in hit["stack_trace"]
    assert hit["stack_trace"].rstrip().endswith("tests/test_calc.py:6: AssertionError")


def test_a_typescript_compile_error_recorded_from_tsc(project: Path) -> None:
    case = json.loads((CORPUS / "tsc_errors.json").read_text())  # tsc 5, run by tests/corpus/generate.py
    fail(project, case["command"], case["exit_code"], case["output"])
    hit = hit_for(project, "TS2322 not assignable", case["command"])
    assert hit["error_class"] == "compile_error"
    assert hit["file_references"] == [{"file": "src/user.ts", "line": 4, "column": 9},
                                      {"file": "src/user.ts", "line": 5, "column": 25}]
    assert hit["stack_trace"] is None  # a compile error has locations, not a stack


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed here")
def test_a_javascript_type_error_run_here(project: Path) -> None:
    (project / "app.js").write_text("function name(user) {\n  return user.name;\n}\nname(undefined);\n")
    code, output = run(["node", "app.js"], project)
    assert code == 1
    fail(project, "node app.js", code, output)
    hit = hit_for(project, "TypeError undefined", "node app.js")
    assert {"file": str(project / "app.js"), "line": 2, "column": 15} in hit["file_references"]
    assert hit["stack_trace"].startswith("TypeError: Cannot read properties of undefined")
    assert f"at name ({project / 'app.js'}:2:15)" in hit["stack_trace"]


@pytest.mark.slow  # two real rustc compiles and a link: ~11 s at load ~7, the slowest test of the fast lane
@pytest.mark.skipif(shutil.which("rustc") is None, reason="rustc is not installed here")
def test_a_rust_compile_error_and_a_rust_panic_run_here(project: Path) -> None:
    (project / "mismatch.rs").write_text('fn port(raw: &str) -> u16 {\n    raw\n}\n\nfn main() {\n    port("80");\n}\n')
    code, output = run(["rustc", "--edition", "2021", "mismatch.rs"], project)
    assert code == 1 and "E0308" in output
    fail(project, "rustc --edition 2021 mismatch.rs", code, output)
    hit = hit_for(project, "mismatched types", "rustc --edition 2021 mismatch.rs")
    assert hit["error_class"] == "compile_error" and hit["error_message"] == "error[E0308]: mismatched types"
    assert hit["file_references"][0] == {"file": "mismatch.rs", "line": 2, "column": 5}

    (project / "panic.rs").write_text('fn main() {\n    let v: Vec<u8> = Vec::new();\n    let first = v.first();\n'
                                      '    println!("{}", first.unwrap());\n}\n')
    code, _ = run(["rustc", "--edition", "2021", "-o", "panicky", "panic.rs"], project)
    assert code == 0
    code, output = run(["./panicky"], project, env={"RUST_BACKTRACE": "1"})
    assert code == 101 and "panicked at" in output
    fail(project, "RUST_BACKTRACE=1 ./panicky", code, output)
    hit = hit_for(project, "panicked unwrap", "RUST_BACKTRACE=1 ./panicky")
    assert hit["file_references"][0] == {"file": "panic.rs", "line": 4, "column": 26}
    assert hit["stack_trace"].startswith("thread 'main'") and "stack backtrace:" in hit["stack_trace"]


# -- a streak, a fix, a resolution ----------------------------------------------------------------------------


MISSING = "Traceback (most recent call last):\n  File \"app.py\", line 1, in <module>\n    import requests\n" \
          "ModuleNotFoundError: No module named 'requests'"


def test_a_fixed_streak_is_shown_by_search_and_by_pre_tool_use(project: Path) -> None:
    fail(project, "python app.py", 1, MISSING)
    fail(project, "python app.py", 1, MISSING)
    other_call(project)  # a call in between: confidence 0.79
    succeed(project, "python -m pip install requests && python app.py")  # another prefix: ends nothing
    assert search(project, "requests", "--with-resolution") == []
    succeed(project, "python app.py --vendor ./vendor")  # the same kind of command
    (hit,) = search(project, "requests", "--with-resolution")
    assert hit["occurrences"] == 2
    assert hit["resolution"] == {"id": hit["resolution"]["id"], "resolution": "python app.py --vendor ./vendor",
                                 "confidence": 0.63, "calls_between": 2, "same_input": False,
                                 "timestamp": hit["resolution"]["timestamp"]}
    people = cli(["errors", "search", "requests"], root=project / ".loki")
    assert "fixed by `python app.py --vendor ./vendor` (2 calls later, confidence 0.63)" in people.stdout

    # the failing session was warned right after strike 2: now it gets the hint alone; another session both
    assert context_of(pre_tool_use(project, "python app.py"), "PreToolUse").count("\n") == 0
    strikes, hint = context_of(pre_tool_use(project, "python app.py", session_id="another"), "PreToolUse").split("\n")
    assert "strike 2 of 3" in strikes  # the failing call itself still has its strikes: both are said
    assert "Recovery suggestion (missing_module) at app.py:1:" in strikes  # the primary location is named
    assert hint == (
        "loki memory: last time `python app.py` failed here with \"ModuleNotFoundError: No module named 'requests'\" "
        "at app.py:1; it was fixed by `python app.py --vendor ./vendor` (2 calls later, confidence 0.63).")
    assert context_of(pre_tool_use(project, "python app.py -v"), "PreToolUse") == hint  # the same kind
    assert pre_tool_use(project, "python app.py --vendor ./vendor").stdout == ""  # that is the fix itself
    assert pre_tool_use(project, "python other.py").stdout == ""  # another kind of command
    stats = cli(["errors", "stats", "--json"], root=project / ".loki").json()
    assert (stats["patterns"], stats["resolved_patterns"], stats["resolved_share"]) == (1, 1, 1.0)


def test_a_rerun_with_an_output_flag_passed_on_retry_it_is_no_fix(project: Path) -> None:
    for _ in range(2):
        fail(project, "pytest tests/test_x.py", 1, "FAILED tests/test_x.py::test_login - AssertionError")
    succeed(project, "pytest tests/test_x.py -v", stdout="1 passed\n")
    (hit,) = search(project, "test_login", "--with-resolution")
    assert hit["resolution"]["same_input"] is True  # a rerun: what fixed it happened in between
    people = cli(["errors", "search", "test_login"], root=project / ".loki")
    assert "passed on retry" in people.stdout and "fixed by" not in people.stdout
    assert "it was fixed by" not in pre_tool_use(project, "pytest tests/test_x.py").stdout  # no hint
    # A flag that changes what runs is still a fix.
    for _ in range(2):
        fail(project, "pytest tests/test_y.py", 1, "FAILED tests/test_y.py::test_db - OperationalError")
    succeed(project, "pytest tests/test_y.py -v --import-mode=importlib --tb=short")
    (fixed,) = search(project, "test_db", "--with-resolution")
    assert fixed["resolution"]["same_input"] is False


def test_pytest_again_on_fewer_tests_is_no_fix(project: Path) -> None:
    """``pytest ... -x`` (``-k``, ``--lf``, a narrower path) passing after ``pytest ...`` failed ran less."""
    for succeeded in ("pytest tests/test_x.py -x", "pytest tests/test_x.py -k test_other --lf",
                      "pytest tests/test_x.py::test_other -p no:randomly"):
        for _ in range(2):
            fail(project, "pytest tests/test_x.py", 1, "FAILED tests/test_x.py::test_login - AssertionError")
        succeed(project, succeeded, stdout="1 passed\n")
        (hit,) = search(project, "test_login", "--with-resolution")
        assert hit["resolution"]["same_input"] is True, succeeded
        assert "it was fixed by" not in pre_tool_use(project, "pytest tests/test_x.py").stdout


def test_the_hint_joins_the_strike_guidance(project: Path) -> None:
    for _ in range(2):
        fail(project, "cargo build", 127, "/bin/bash: line 1: cargo: command not found")
    succeed(project, "cargo build --offline")
    for _ in range(3):
        fail(project, "cargo build", 127, "/bin/bash: line 1: cargo: command not found")
    answer = pre_tool_use(project, "cargo build").json()["hookSpecificOutput"]
    assert answer["permissionDecision"] == "deny"  # the strikes of `cargo build` still stand
    reason = answer["permissionDecisionReason"]
    assert "failed 5 times in a row" in reason and "it was fixed by `cargo build --offline`" in reason


def test_deleting_the_index_loses_nothing(project: Path) -> None:
    for command, output in (("python app.py", MISSING), ("cargo build", "cargo: command not found"),
                            ("npm test", "npm ERR! missing script: test")):
        fail(project, command, 1, output)
        fail(project, command, 1, output)
    succeed(project, "npm test --if-present")
    queries = ["requests", "cargo", "npm missing script", "not found", "test"]
    before = {q: search(project, q) for q in queries}
    for suffix in ("", "-wal", "-shm"):
        (project / ".loki" / (layout.MEMORY_INDEX + suffix)).unlink(missing_ok=True)
    assert {q: search(project, q) for q in queries} == before


def test_no_secret_from_a_payload_lands_anywhere_under_loki(project: Path) -> None:
    secrets = ["sk-ant-api03-" + "Qw3rTy8UiOp2AsDfGhJkLz" * 3, "sk-proj-" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv",
               "ghp_" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp9Oo", "s3cr3t-Pa55word", "AKIAJ7Q2EXAMPLEKEY9Z",
               "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"]
    command = (f"OPENAI_API_KEY={secrets[1]} curl -H 'x-api-key: {secrets[0]}' https://api.anthropic.com/v1/models "
               f"&& git clone https://{secrets[2]}@github.com/acme/shop && psql postgres://admin:{secrets[3]}@db:5432/"
               f"shop && AWS_ACCESS_KEY_ID={secrets[4]} AWS_SECRET_ACCESS_KEY={secrets[5]} aws s3 ls")
    output = (f"remote: Invalid username or password for https://{secrets[2]}@github.com\n"
              f"psql: error: connection to server at \"db\" failed: password authentication failed for "
              f"postgres://admin:{secrets[3]}@db:5432/shop\nTraceback (most recent call last):\n"
              f"  File \"/srv/{secrets[4]}/app.py\", line 3, in <module>\n"
              f"    client = Client(api_key=\"{secrets[1]}\")\nValueError: bad key {secrets[0]}")
    for session in ("a", "b", "c"):
        fail(project, command, 1, output, session_id=session)
    succeed(project, f"OPENAI_API_KEY={secrets[1]} curl --retry 3 -H 'x-api-key: {secrets[0]}' https://api.x.com")
    fail(project, f"psql postgres://admin:{secrets[3]}@db:5432/shop -c 'select 1'", 2, output)
    succeed(project, f"psql postgres://admin:{secrets[3]}@db:5432/shop --no-psqlrc -c 'select 1'")
    pre_tool_use(project, f"psql postgres://admin:{secrets[3]}@db:5432/shop")
    assert search(project, "password authentication")  # the index is built: errors.db holds them too
    assert cli(["errors", "stats"], root=project / ".loki").code == 0
    assert cli(["errors", "reindex"], root=project / ".loki").code == 0
    files = snapshot_bytes(project / ".loki")
    assert {layout.MEMORY_LOG, layout.MEMORY_INDEX} <= set(files)
    assert any(name.startswith(layout.MEMORY_HINTS_DIR) for name in files)
    everything = b"".join(files.values())
    assert b"REDACTED" in everything
    for secret in secrets:
        assert secret.encode() not in everything, secret


# -- never in the way ---------------------------------------------------------------------------------------


def test_a_corrupt_log_line_never_blocks_a_hook(project: Path) -> None:
    log = project / ".loki" / layout.MEMORY_LOG
    log.parent.mkdir(exist_ok=True)
    log.write_text('{"kind": "error", "torn')
    fail(project, "cargo build", 127, "cargo: command not found")
    succeed(project, "cargo build --offline")
    assert "it was fixed by" in context_of(pre_tool_use(project, "cargo build"), "PreToolUse")
    result = cli(["errors", "search", "cargo"], root=project / ".loki")
    assert result.code == 0 and "Bash `cargo build`" in result.stdout
    assert "warning: memory/errors.jsonl line 1: invalid JSON" in result.stderr


def test_a_broken_memory_never_costs_the_strike(project: Path) -> None:
    (project / ".loki" / layout.MEMORY_LOG).mkdir(parents=True)  # the log cannot be appended to
    data = payload("post_tool_use_failure_bash", project)
    first = hook("post-tool-use-failure", data, cwd=project)
    assert first.code == 0 and first.stderr.startswith("loki hook: error memory: the failure was not captured (")
    second = hook("post-tool-use-failure", data, cwd=project)
    assert "strike 2 of 3" in context_of(second, "PostToolUseFailure")


def test_a_broken_hint_is_no_hint_and_no_error(project: Path) -> None:
    fail(project, "cargo build", 127, "cargo: command not found")
    succeed(project, "cargo build --offline")
    (name,) = os.listdir(project / ".loki" / layout.MEMORY_HINTS_DIR)
    (project / ".loki" / layout.MEMORY_HINTS_DIR / name).write_text("{not json")
    result = pre_tool_use(project, "cargo build")
    assert (result.stdout, result.stderr) == ("", "")


def test_pre_tool_use_with_a_hint_imports_only_what_it_needs(project: Path, tmp_path: Path) -> None:
    fail(project, "cargo build", 127, "cargo: command not found")
    succeed(project, "~/.cargo/bin/cargo build --release")
    code, modules, stdout = imported_by_pre_tool_use(project, tmp_path)  # Claude Code's `cargo build --release`
    assert code == 0 and "it was fixed by" in json.loads(stdout)["hookSpecificOutput"]["additionalContext"]
    heavy = {"typer", "rich", "jsonschema", "portalocker", "typing", "dataclasses", "sqlite3", "_sqlite3",
             "loki.storage.store", "loki.storage.schema", "loki.text.errorscan", "loki.memory.memory",
             "loki.memory.index", "subprocess", "pathlib"}
    assert [m for m in modules if m in heavy or m.split(".")[0] in heavy] == []
