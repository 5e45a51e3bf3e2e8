"""Output for scripts and people: ``--format id|json|jsonl|table`` and ``-q`` on every list-like command and
on ``queue claim``; tab-separated rows in a pipe, tables that fit the terminal on one."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loki.clock import ManualClock
from loki.memory.memory import ErrorMemory
from loki.storage.store import Store
from loki.strikes.strikes import Strikes
from tests.helpers import NOW, cli, loki_proc, snapshot_bytes

ENV = {"LOKI_NOW": NOW}


@pytest.fixture(scope="module")
def seeded_template(tmp_path_factory: pytest.TempPathFactory, template_tree: Path) -> Path:
    """The seeded tree, built once per module through the CLI (some 20 commands: seconds on a loaded
    machine); ``seeded`` copies it, so every test still gets a tree of its own to change."""
    root = tmp_path_factory.mktemp("seeded") / ".loki"
    shutil.copytree(template_tree, root, symlinks=True)
    return _seed(root, Store(root, clock=ManualClock("2026-01-25T10:00:00Z")))  # the `clock` fixture's time


@pytest.fixture
def seeded(root: Path, seeded_template: Path) -> Path:
    """A tree with something in every listing (a copy of the module's, mtimes and all)."""
    shutil.rmtree(root)
    shutil.copytree(seeded_template, root, symlinks=True)
    return root


def _seed(root: Path, store: Store) -> Path:
    for args in (["queue", "add", "Add rate limiting to the login endpoint", "--id", "t1", "-p", "high"],
                 ["queue", "add", "Write the docs", "--id", "t2"],
                 ["queue", "add", "Flaky one", "--id", "t3", "--max-attempts", "1", "-p", "low"],
                 ["queue", "add", "Dropped", "--id", "t4", "--max-attempts", "1", "-p", "low"],
                 ["queue", "claim", "--agent", "eng-1"],
                 ["escalate", "t1", "--trigger", "security_decision"],
                 ["queue", "claim", "--agent", "eng-2"],
                 ["queue", "claim", "--agent", "eng-2"],
                 ["queue", "fail", "t3", "--agent", "eng-2", "--error", "boom"],
                 ["queue", "claim", "--agent", "eng-2"],
                 ["queue", "fail", "t4", "--agent", "eng-2", "--error", "boom"],
                 ["deadletter", "abandon", "t4", "--reason", "out of scope"],
                 ["breaker", "failure", "api/claude", "--error", "429"],
                 ["breaker", "failure", "api/codex"],
                 ["signal", "emit", "DOCS_NEEDED", "message=write it"],
                 ["watch", "--once", "--no-tui"],
                 ["signal", "emit", "BLOG_POST_QUEUED", "title=soon"]):
        done = cli(args, root=root, env=ENV)
        assert done.code == 0, (args, done.stderr)
    strikes = Strikes(store, branch="main")
    strikes.record_failure("Bash", {"command": "cargo build"}, "bash: cargo: command not found")
    ErrorMemory(store).capture("Bash", {"command": "cargo build"}, "bash: cargo: command not found", branch="main")
    return root


# (command, the key of the list in its --json document, the key each item's id is under)
LISTINGS = [
    (["queue", "list", "--state", "all"], "tasks", "id"),
    (["deadletter", "list"], "entries", "task_id"),
    (["abandoned", "list"], "entries", "task_id"),
    (["escalations", "list"], "escalations", "id"),
    (["breaker", "status"], "breakers", "name"),
    (["signal", "list"], "signals", "id"),
    (["signal", "log"], "outcomes", "id"),
    (["errors", "list", "--branch", "main"], "strikes", "key"),
    (["errors", "search", "cargo"], "results", "content_hash"),
]


@pytest.mark.parametrize(("args", "key", "id_key"), LISTINGS, ids=[" ".join(a[:2]) for a, _, _ in LISTINGS])
def test_every_format_of_every_listing_says_the_same(seeded: Path, args: list[str], key: str, id_key: str) -> None:
    document = cli([*args, "--json"], root=seeded, env=ENV).json()
    items = document[key]
    assert items, f"{args}: the seeded tree should list something"
    assert cli([*args, "--format", "json"], root=seeded, env=ENV).json() == document
    jsonl = cli([*args, "--format", "jsonl"], root=seeded, env=ENV)
    assert [json.loads(line) for line in jsonl.stdout.splitlines()] == items  # the same keys, one item a line
    ids = [str(item[id_key]) for item in items]
    assert cli([*args, "-q"], root=seeded, env=ENV).stdout.splitlines() == ids
    assert cli([*args, "--format", "ID"], root=seeded, env=ENV).stdout.splitlines() == ids  # choices are case-blind
    rows = cli([*args, "--format", "table"], root=seeded, env=ENV).stdout.splitlines()
    assert rows and "─" not in "".join(rows)  # piped: no box drawing
    if args[:2] != ["errors", "search"]:  # search hits are paragraphs, not rows
        assert len(rows) == len(items) and all(row.split("\t")[0] == i for row, i in zip(rows, ids, strict=True))


@pytest.mark.parametrize("args", [["--json", "--format", "id"], ["-q", "--format", "jsonl"], ["--json", "-q"],
                                  ["--format", "xml"], ["--format", ""]])
def test_formats_that_disagree_or_do_not_exist_are_usage_errors(seeded: Path, args: list[str]) -> None:
    before = snapshot_bytes(seeded)
    for command in (["queue", "list"], ["queue", "claim", "--agent", "a9"]):
        done = cli([*command, *args], root=seeded, env=ENV)
        assert done.code == 2, done.stderr
        assert "--format" in done.stderr or "output format" in done.stderr
        assert done.stdout == ""
    assert snapshot_bytes(seeded) == before  # the claim took nothing


def test_a_json_format_error_is_one_json_document_on_stderr(seeded: Path) -> None:
    done = cli(["queue", "show", "nope", "--format", "json"], root=seeded)
    assert done.code == 2  # `queue show` has no --format: the parser says so
    missing = cli(["queue", "list", "--state", "done", "--format", "jsonl"], root=seeded)
    assert missing.code == 2 and json.loads(missing.stderr)["error"] == "usage"


# -- queue claim: the agent loop's id, without Python -------------------------------------------------------


def test_claim_q_prints_the_id_alone_through_the_fast_lane(root: Path) -> None:
    cli(["queue", "add", "one", "--id", "t1"], root=root)
    cli(["queue", "add", "two", "--id", "t2"], root=root)
    done = loki_proc(["queue", "claim", "--agent", "a1", "-q"], root=root)
    assert (done.code, done.stdout, done.stderr) == (0, "t1\n", "")
    line = loki_proc(["queue", "claim", "--agent", "a1", "--format=jsonl"], root=root)
    task = json.loads(line.stdout)
    assert line.stdout.count("\n") == 1 and task["id"] == "t2" and task["claimed_by"] == "a1"
    nothing = loki_proc(["queue", "claim", "--agent", "a1", "-q"], root=root)
    assert (nothing.code, nothing.stdout) == (3, "")  # exit 3 and nothing on stdout: `id=$(...)` stays empty
    assert "nothing to claim" in nothing.stderr


def test_claim_formats_are_the_same_through_typer_and_the_fast_lane(tmp_path: Path) -> None:
    outputs = {}
    for lane in ("fast", "typer"):
        root = tmp_path / lane / ".loki"
        assert cli(["init", "--path", str(root.parent)]).code == 0
        cli(["queue", "add", "one", "--id", "t1"], root=root, env=ENV)
        runner = loki_proc if lane == "fast" else cli
        # `--lease` given as `--lease=` is not the fast lane's shape: typer answers (loki/cli/fast.py)
        args = ["queue", "claim", "--agent", "a1", "--format", "jsonl"] + (["--lease=3600"] if lane == "typer" else [])
        done = runner(args, root=root, env=ENV)
        task = json.loads(done.stdout)
        outputs[lane] = {k: v for k, v in task.items() if k != "claim_token"}
    assert outputs["fast"] == outputs["typer"]


def test_claim_q_loads_no_typer_or_rich(root: Path) -> None:
    cli(["queue", "add", "one", "--id", "t1"], root=root)
    code = ("import sys; from loki.entry import main\n"
            f"try:\n    main(['--root', {str(root)!r}, 'queue', 'claim', '--agent', 'a1', '-q'])\n"
            "except SystemExit: pass\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'typer', 'click', 'rich', 'jsonschema'}),"
            " file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout == "t1\n" and done.stderr.strip() == "[]"


def test_the_readme_agent_loop_runs_in_bash(root: Path) -> None:
    """The loop the README shows, as it is written there, with this loki."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    loop = readme.split("An agent's\nloop:\n\n```bash\n", 1)[1].split("```", 1)[0]
    cli(["queue", "add", "one", "--id", "t1"], root=root)
    script = f'loki() {{ {sys.executable} -m loki --root "{root}" "$@"; }}\n' + loop
    first = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert cli(["queue", "show", "t1", "--json"], root=root).json()["state"] == "completed"
    empty = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert (empty.returncode, empty.stdout) == (0, "nothing ready\n")


# -- tables for people ---------------------------------------------------------------------------------------


def test_piped_tables_are_tab_separated_rows_with_the_count_on_stderr(seeded: Path) -> None:
    done = cli(["queue", "list", "--state", "all"], root=seeded, env=ENV)
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    assert [row[0] for row in rows] == ["t2", "t1", "t3", "t4"] or {row[0] for row in rows} == {"t1", "t2", "t3", "t4"}
    assert all(len(row) == 9 for row in rows)
    assert done.stderr == "4 of 4 tasks\n"


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("args", [["queue", "list", "--state", "all"], ["queue", "list", "--state", "in-progress"],
                                  ["status"], ["deadletter", "list"], ["escalations", "list"], ["abandoned", "list"],
                                  ["breaker", "status"], ["signal", "list"], ["errors", "list", "--branch", "main"]])
def test_tables_fit_the_terminal_and_cut_no_timestamp_or_header(seeded: Path, args: list[str], width: int) -> None:
    done = cli(args, root=seeded, env={**ENV, "LOKI_FORCE_TTY": str(width)})
    assert done.code == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= width, "\n".join(lines)
    assert "…" not in done.stdout, done.stdout  # nothing is cut short: it wraps or the column gives way
    shown = re.findall(r"\d{4}-\d\d-\d\d(?:T[0-9:]*Z?)?", done.stdout)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", s) for s in shown), shown


def test_a_terminal_gets_a_drawn_table_with_headers(seeded: Path) -> None:
    done = cli(["queue", "list", "--state", "all"], root=seeded, env={**ENV, "LOKI_FORCE_TTY": "80"})
    head = done.stdout.splitlines()[0].split()
    # gave way, so that no title or reason takes more than two lines (the holder too: issue 23); state stays
    assert head[0] == "id" and {"state", "priority", "title"} <= set(head) and "type" not in head
    rows = done.stdout.splitlines()[2:-1]
    assert len(rows) <= 2 * 4
    wide = cli(["queue", "list", "--state", "all"], root=seeded, env={**ENV, "LOKI_FORCE_TTY": "160"})
    assert wide.stdout.splitlines()[0].split()[:4] == ["id", "state", "priority", "type"]
    assert wide.stdout.splitlines()[-1] == "4 of 4 tasks"
