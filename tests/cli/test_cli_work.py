"""``loki work`` through the command line: in process (the typer app) and as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import forkstart
from tests.helpers import cli

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]


def add(root: Path, *titles: str) -> None:
    for n, title in enumerate(titles, start=1):
        assert cli(["queue", "add", title, "--id", f"t{n}"], root=root).code == 0


def work_process(args: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> forkstart.Done:
    """``python -m loki ARGS`` in a real process, forked warm (tests/forkstart.py). What the command runs is cold
    and real; a nested ``$PY -m loki`` finds this checkout through ``export PYTHONPATH="$CHECKOUT"`` in its script
    (PYTHONPATH on the outer process would make forkstart start it cold: it changes how an interpreter starts)."""
    return forkstart.run(args, cwd=cwd, timeout=120,
                         env={**(os.environ if env is None else env), "PY": PY, "CHECKOUT": str(REPO)})


def test_nothing_ready_is_exit_3_with_the_reason(root: Path) -> None:
    result = cli(["work", "--agent", "eng-001", "--", "true"], root=root)
    assert result.code == 3
    assert result.stderr == ("loki work: nothing to claim: the pending queue is empty; 0 tasks claimed; exit 3\n")
    assert result.stdout == ""


def test_work_runs_each_task_and_reports_each_on_stderr(root: Path) -> None:
    add(root, "Write the endpoint", "Write its tests")
    result = cli(["work", "--agent", "eng-001", "--", PY, "-c", "import sys; print('working on', sys.argv[1])",
                  "{id}"], root=root)
    assert result.code == 0, result.stderr
    assert result.stdout == "working on t1\nworking on t2\n"  # stdout is the command's
    lines = result.stderr.splitlines()
    assert lines[0] == "loki work: claimed t1 (Write the endpoint): lease 3600s, renewed every 1200s"
    assert lines[1].startswith("loki work: completed t1 in ") and lines[1].endswith("s (exit 0)")
    assert lines[-1] == ("loki work: nothing to claim: the pending queue is empty; 2 tasks claimed (2 completed); "
                         "exit 0")
    shown = cli(["queue", "show", "t2", "--json"], root=root).json()
    assert shown["state"] == "completed" and shown["task"]["result"]["exit_code"] == 0


def test_a_failing_task_makes_the_exit_1_and_the_loop_goes_on(root: Path) -> None:
    add(root, "Breaks", "Works")
    script = '[ "$LOKI_TASK_ID" = t2 ] || { echo "ModuleNotFoundError: No module named \'flask\'" >&2; exit 1; }'
    result = cli(["work", "--agent", "eng-001", "--", "sh", "-c", script], root=root)
    assert result.code == 1
    assert ("loki work: failed t1: exit 1 (missing_module): ModuleNotFoundError: No module named 'flask'; "
            "retry after ") in result.stderr
    assert "2 tasks claimed (1 completed, 1 failed); exit 1" in result.stderr
    attempt = cli(["queue", "show", "t1", "--json"], root=root).json()["task"]["attempts"][0]
    assert attempt["error_message"].startswith("exit 1 (missing_module): ")


def test_json_prints_one_summary_on_stderr_and_no_progress_lines(root: Path) -> None:
    add(root, "One task")
    result = cli(["work", "--agent", "eng-001", "--json", "--max-tasks", "1", "--", "sh", "-c", "exit 2"], root=root)
    assert result.code == 1
    summary = json.loads(result.stderr)
    assert (summary["agent"], summary["stopped"], summary["claimed"], summary["failed"]) == ("eng-001", "max_tasks",
                                                                                             1, 1)
    task = summary["tasks"][0]
    assert (task["task_id"], task["outcome"], task["exit_code"], task["error_type"], task["state"]) == (
        "t1", "failed", 2, "other", "pending")
    assert task["error"] == "exit 2 (exit_status): exited with code 2"


def test_the_command_and_its_options_come_after_the_double_dash_or_the_first_word(root: Path) -> None:
    add(root, "One", "Two")
    with_dashes = cli(["work", "--agent", "a", "--max-tasks", "1", "--", PY, "-c", "print('x')", "--json"], root=root)
    assert with_dashes.code == 0 and with_dashes.stdout == "x\n"
    without = cli(["work", "--agent", "a", "--max-tasks", "1", PY, "-c", "print('y')", "--max-tasks"], root=root)
    assert without.code == 0 and without.stdout == "y\n"


def test_usage_errors_are_exit_2_and_claim_nothing(root: Path) -> None:
    add(root, "Must stay pending")
    unknown = cli(["work", "--agent", "a", "--", "claude", "-p", "{titel}"], root=root)
    assert unknown.code == 2 and "unknown placeholder {titel}" in unknown.stderr
    assert cli(["work", "--agent", "a"], root=root).code == 2
    zero = cli(["work", "--agent", "a", "--max-tasks", "0", "--", "true"], root=root)
    assert zero.code == 2 and "invalid --max-tasks 0: it must be a whole number >= 1" in zero.stderr
    no_agent = cli(["work", "--", "true"], root=root)
    assert no_agent.code == 2 and "--agent" in no_agent.stderr
    assert cli(["queue", "show", "t1", "--json"], root=root).json()["state"] == "pending"


def test_a_usage_error_with_json_is_a_json_document_but_not_for_the_commands_own_json(root: Path) -> None:
    ours = cli(["work", "--agent", "a", "--json", "--", "echo", "{titel}"], root=root)
    assert ours.code == 2 and json.loads(ours.stderr)["error"] == "usage"
    theirs = cli(["work", "--agent", "a", "--", "echo", "{titel}", "--json"], root=root)
    assert theirs.code == 2 and theirs.stderr.startswith("error: unknown placeholder {titel}")


def test_help_lists_the_placeholders_and_the_environment(root: Path) -> None:
    result = cli(["work", "--help"], root=root)
    assert result.code == 0
    text = " ".join(result.stdout.split())
    for word in ("{id}", "{title}", "{task_file}", "{result_file}", "LOKI_TASK_ID", "LOKI_TASK_FILE",
                 "LOKI_RESULT_FILE", "--until-empty", "--max-tasks", "--breaker"):
        assert word in text, word


def test_a_real_process_with_nested_loki_commands_on_the_same_tree(root: Path, tmp_path: Path) -> None:
    add(root, "Nested")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = ('export PYTHONPATH="$CHECKOUT"; loki_show() { "$PY" -m loki queue show "$LOKI_TASK_ID" --json; }; '
              'loki_show > "$LOKI_RESULT_FILE.tmp" && '
              '"$PY" -c "import json,sys; t=json.load(open(sys.argv[1]))[\'task\']; '
              'json.dump({\'held_by\': t[\'claimed_by\']}, open(sys.argv[2], \'w\'))" '
              '"$LOKI_RESULT_FILE.tmp" "$LOKI_RESULT_FILE"')
    # Run from a directory with no .loki/ above it: only LOKI_ROOT can lead the nested command to the tree.
    done = work_process(["--root", str(root), "work", "--agent", "eng-007", "--", "sh", "-c", script], cwd=elsewhere)
    assert done.returncode == 0, done.stderr.decode()
    result = cli(["queue", "show", "t1", "--json"], root=root).json()["task"]["result"]
    assert result["data"] == {"held_by": "eng-007"}  # the nested `loki` found the tree through LOKI_ROOT


def test_an_agent_on_a_tree_with_http_hooks_gets_the_serve_token(root: Path, tmp_path: Path) -> None:
    """`loki hooks install --via http` then `loki work`: the command's environment has the tree's LOKI_SERVE_TOKEN
    (its Claude Code's HTTP hooks send it), though the shell that ran loki work had none."""
    from loki.resident import files

    assert cli(["hooks", "install", "--via", "http"], root=root).code == 0
    add(root, "Over HTTP")
    out = tmp_path / "token"
    env = {k: v for k, v in os.environ.items() if k != files.TOKEN_ENV}
    done = work_process(["--root", str(root), "work", "--agent", "eng-008", "--", "sh", "-c",
                         f'printf %s "${{LOKI_SERVE_TOKEN-unset}}" > {out}'], env=env)
    assert done.returncode == 0, done.stderr.decode()
    assert out.read_text() == files.token(str(root))


@pytest.mark.slow  # real processes one after another: over 1 s (issue 24's --durations)
def test_the_readme_shell_agent_runs_as_shown(tmp_path: Path) -> None:
    """The README's "A team of agents" example, run as written: two `loki work` sharing three tasks."""
    readme = (REPO / "README.md").read_text()
    opening = "A shell\nagent, for instance:\n\n```bash\n"
    start = readme.index(opening) + len(opening)
    script = readme[start:readme.index("```", start)]
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "Makefile").write_text("test:\n\t@echo all tests pass\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for args in (["init", "-q"], ["add", "Makefile"], ["commit", "-qm", "start"]):
        subprocess.run([*git, *args], cwd=repo, check=True, capture_output=True)
    env = {**os.environ, "PATH": f"{Path(PY).parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["loki", "init"], cwd=repo, check=True, capture_output=True, env=env)
    for n in range(3):
        subprocess.run(["loki", "queue", "add", f"task {n}", "--id", f"t{n}"], cwd=repo, check=True,
                       capture_output=True, env=env)
    done = subprocess.run(["bash", "-c", script], cwd=repo, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True).stdout
    for n in range(3):
        shown = cli(["queue", "show", f"t{n}", "--json"], root=repo / ".loki").json()
        assert shown["state"] == "completed" and shown["task"]["result"]["data"] == {"commit": head.strip()}
    assert done.stdout.count("working on t") == 3


def test_checks_added_mid_run_refuse_the_completion_and_the_release_keeps_the_usage(root: Path, tmp_path: Path) -> None:
    add(root, "Edited while it runs")
    report = json.dumps({"type": "result", "subtype": "success", "total_cost_usd": 0.5,
                         "usage": {"input_tokens": 1, "output_tokens": 2}})
    script = ('export PYTHONPATH="$CHECKOUT"; '
              '"$PY" -m loki queue edit "$LOKI_TASK_ID" --verify false --force --by lead >/dev/null && '
              f"echo '{report}'")
    done = work_process(["--root", str(root), "work", "--agent", "eng-007", "--", "sh", "-c", script], cwd=tmp_path)
    assert done.returncode == 1, done.stderr.decode()
    assert "loki work: released t1 (back to pending, untouched)" in done.stderr.decode()
    shown = cli(["queue", "show", "t1", "--json"], root=root).json()
    assert shown["state"] == "pending"
    assert [(e["outcome"], e["usd"]) for e in shown["task"]["usage"]] == [("released", 0.5)]
