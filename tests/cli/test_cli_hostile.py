"""Stored text never drives the terminal (issue 23): every human-facing printer, byte for byte.

A title, an error, a label, an agent's name, a trigger are an agent's (or an imported issue's) text. Drawn
as rich markup, ``[red]`` styles it, ``[link=URL]`` emits an OSC 8 hyperlink to any URL and ``[ci]`` or
``[eng-1]`` vanish; written raw, an ESC sequence clears the screen or sets the window title. Each command that
shows stored text to a person is run here on a terminal with colours forced (``FORCE_COLOR``: rich emits
what it would on a real one), and its bytes are checked: loki's own styling (SGR) aside, no ESC at all (no OSC
8, no sequence from the text), and the text shown literally.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from loki.cli.completiontable import TABLE
from loki.memory.memory import ErrorMemory
from loki.queue.queue import Queue
from loki.storage.store import Store
from loki.strikes.strikes import Strikes
from tests.helpers import NOW, cli

ENV = {"LOKI_NOW": NOW}
# Short words, so a wide terminal shows each whole on one line.
HOSTILE = "[bold]B[/bold] [red]R[/red] [link=https://evil.example/x]L[/link] [ci] \x1b[2J\x1b]0;pwn\x07 end"
LITERAL = ["[bold]B[/bold]", "[red]R[/red]", "[link=https://evil.example/x]L[/link]", "[ci]", "\\x1b[2J",
           "\\x1b]0;pwn\\x07"]
MARKUP = "[bold]B[/bold] [red]R[/red] [link=https://evil.example/x]L[/link] [ci] end"  # HOSTILE without its ESCs
AGENT = "[eng-1]"  # a name: no control character, but brackets
LABEL = "[ci]"
SGR = re.compile(r"\x1b\[[0-9;]*m")

# Every command that shows stored text to a person, with what it is run with here.
PRINTERS: dict[str, list[list[str]]] = {
    "queue list": [["queue", "list"], ["queue", "list", "--state", "all"], ["queue", "list", "--state", "dead-letter"],
                   ["queue", "list", "--state", "blocked"]],
    "queue show": [["queue", "show", "t1"], ["queue", "show", "t3"]],
    "queue history": [["queue", "history", "t1"]],
    "queue ready": [["queue", "ready"], ["queue", "ready", "--explain"]],
    "deadletter list": [["deadletter", "list"]],
    "deadletter show": [["deadletter", "show", "t3"]],
    "abandoned list": [["abandoned", "list"]],
    "escalations list": [["escalations", "list"]],
    "escalations show": [["escalations", "show", "t2"]],
    "agents": [["agents"]],
    "breaker status": [["breaker", "status"], ["breaker", "status", "svc"]],
    "status": [["status"]],
    "errors list": [["errors", "list", "--branch", "main"]],
    "errors show": [["errors", "show", "--branch", "main"]],
    "errors search": [["errors", "search", "end"]],
    "errors stats": [["errors", "stats"]],
    "signal list": [["signal", "list"]],
    "signal show": [],  # run below with the names of the tree's signals
    "lease list": [["lease", "list"], ["lease", "list", "--conflicts"], ["lease", "list", "--history"]],
    "budget list": [["budget", "list"]],
    "budget show": [["budget", "show", "b1"]],
    "usage": [["usage"], ["usage", "--by", "model"], ["usage", "--by", "agent"], ["usage", "--by", "label"]],
    "signal log": [["signal", "log"]],
}
# Commands that show no stored text a person did not just type (or only through say(), which never reads markup:
# their answers are checked below through the state-changing commands of the setup).
NO_STORED_TEXT = {
    "approve", "budget remove", "budget set",
    "breaker capacity", "breaker check", "breaker failure", "breaker reset", "breaker success",
    "breaker trip", "completion", "db upgrade", "deadletter abandon", "deadletter propose", "deadletter retry",
    "deadletter review", "deadletter split", "doctor", "errors compact", "errors reindex", "errors reset", "escalate",
    "escalations close", "hook", "hooks install", "hooks uninstall", "init",
    "lease acquire", "lease break", "lease guard", "lease release", "lease renew",  # a refusal: checked in the setup
    "mcp",  # JSON-RPC to an MCP client on stdout, never a terminal: tests/mcpserver checks its replies
    "migrate", "queue add", "queue cancel",
    "queue claim", "queue close", "queue complete", "queue defer", "queue edit", "queue fail", "queue heartbeat",
    "queue land-check",  # ids, commits and branch names, each checked when it was stored
    "queue release", "queue requeue-stale", "queue retry", "run", "signal emit", "signal fields", "signal rules",
    "serve",  # pid, URL and path on the terminal; the board's stored text is HTML-escaped (tests/serve/)
    "validate", "watch", "work",
}


def test_every_command_is_either_a_printer_checked_here_or_shows_no_stored_text() -> None:
    leaves = {path for path, entry in TABLE.items() if path and not entry.get("subcommands")}
    assert leaves == set(PRINTERS) | NO_STORED_TEXT, "a new command: add it to PRINTERS (or NO_STORED_TEXT)"


def check_bytes(output: str, where: str, literal: list[str]) -> None:
    assert "\x1b]8;" not in output, f"{where}: an OSC 8 hyperlink"
    plain = SGR.sub("", output)
    assert "\x1b" not in plain and "\x07" not in plain, f"{where}: a raw escape sequence: {plain!r}"
    for text in literal:
        assert text in plain, f"{where}: {text!r} not shown literally in {plain!r}"


def _hostile_tree(root: Path) -> None:
    def run(*args: str, now: str = NOW) -> None:
        done = cli(list(args), root=root, env={"LOKI_NOW": now})
        assert done.code == 0, (args, done.stderr)
        check_bytes(done.stdout + done.stderr, " ".join(args[:2]), [])

    run("queue", "add", HOSTILE, "--id", "t1", "--label", LABEL, "--description", HOSTILE, "--type", "eng")
    run("queue", "add", HOSTILE, "--id", "t2", "--label", LABEL)
    run("queue", "add", HOSTILE, "--id", "t3", "--max-attempts", "1")
    run("queue", "add", HOSTILE, "--id", "t4", "--max-attempts", "1")
    run("queue", "add", HOSTILE, "--id", "t5", "--depends-on", "t3")
    run("queue", "claim", "--agent", AGENT, "--id", "t1")
    run("queue", "fail", "t1", "--agent", AGENT, "--error", HOSTILE)
    for task in ("t3", "t4"):
        run("queue", "claim", "--agent", AGENT, "--id", task)
        run("queue", "fail", task, "--agent", AGENT, "--error", HOSTILE)
    run("deadletter", "abandon", "t4", "--reason", HOSTILE)
    run("queue", "claim", "--agent", AGENT, "--id", "t1", now="2026-01-25T10:01:00Z")  # after its backoff
    run("escalate", "t2", "--trigger", HOSTILE, "--analysis", HOSTILE, "--option", HOSTILE, "--agent", AGENT)
    run("breaker", "failure", "svc", "--error", HOSTILE)
    run("signal", "emit", "PROGRESS_UPDATE", "--task", "t1", "--agent", AGENT, f"message={HOSTILE}")
    run("watch", "--once")  # consumed: signal log and signal show have an outcome to show
    run("signal", "emit", "PROGRESS_UPDATE", "--task", "t1", "--agent", AGENT, f"message={HOSTILE}")  # waiting
    store = Store(root)
    Strikes(store, branch="main").record_failure("Bash", {"command": f"make {HOSTILE}"}, HOSTILE)
    ErrorMemory(store).capture("Bash", {"command": f"make {HOSTILE}"}, f"error: {HOSTILE}", branch="main")
    # A path lease (docs/leases.md): a reason may not hold control characters, markup it may
    run("lease", "acquire", "src/x/**", "--agent", AGENT, "--reason", MARKUP)
    refused = cli(["lease", "acquire", "src/x/a.py", "--agent", "eng-2"], root=root, env={"LOKI_NOW": NOW})
    assert refused.code == 4, refused.stderr
    check_bytes(refused.stdout + refused.stderr, "lease acquire (refused)", [AGENT])
    run("budget", "set", "b1", "--usd", "5", "--per", "day", "--scope", f"label:{LABEL}")
    # What an agent reported spending, its model name hostile (docs/spend.md)
    run("queue", "add", HOSTILE, "--id", "t6", "--label", LABEL)
    queue = Queue(store)
    claimed = queue.claim(AGENT, task_id="t6")
    queue.complete("t6", AGENT, token=claimed["claim_token"], usage={
        "input_tokens": 1, "output_tokens": 2, "cache_read_tokens": 3, "cache_creation_tokens": 0,
        "source": "result_file", "model": HOSTILE, "usd": None})


@pytest.mark.slow  # ~30 commands, 2-4 s
@pytest.mark.files
@pytest.mark.parametrize("width", ["250", ""])
def test_hostile_text_through_every_human_facing_printer(root: Path, width: str) -> None:
    """On a terminal (rich draws, colours forced) and in a pipe (tab-separated rows)."""
    _hostile_tree(root)
    env = {**ENV, "FORCE_COLOR": "1", **({"LOKI_FORCE_TTY": width} if width else {})}
    for runs in PRINTERS.values():
        for args in runs:
            done = cli(args, root=root, env=env)
            assert done.code == 0, (args, done.stderr)
            check_bytes(done.stdout + done.stderr, " ".join(args), [])
    names = [row["name"] for row in cli(["signal", "log", "--json"], root=root, env=ENV).json()["outcomes"]]
    names += [row["name"] for row in cli(["signal", "list", "--json"], root=root, env=ENV).json()["signals"]]
    assert len(names) >= 2
    for name in names:
        done = cli(["signal", "show", name], root=root, env=env)
        assert done.code == 0, done.stderr
        check_bytes(done.stdout + done.stderr, f"signal show {name}", [])
    # where each kind of text shows up, literally
    shows = {
        ("queue", "list", "--state", "all"): [*LITERAL, LABEL],
        ("queue", "show", "t1"): [*LITERAL, AGENT, LABEL],
        ("queue", "show", "t3"): [*LITERAL, AGENT],
        ("queue", "history", "t1"): [AGENT, "[bold]B[/bold]"],
        ("deadletter", "list"): LITERAL,
        ("deadletter", "show", "t3"): [*LITERAL, AGENT],
        ("abandoned", "list"): LITERAL,
        ("escalations", "list"): ["[bold]B[/bold]", "[ci]"],
        ("escalations", "show", "t2"): ["[link=https://evil.example/x]L[/link]", "[ci]"],
        ("agents",): [AGENT],
        ("breaker", "status"): ["[bold]B[/bold]", "[ci]"],
        ("errors", "list", "--branch", "main"): ["[bold]B[/bold]", "[ci]"],
        ("errors", "search", "end"): ["[bold]B[/bold]", "[ci]", "\\x1b[2J"],
        ("signal", "log"): ["PROGRESS_UPDATE"],
        ("usage", "--by", "model"): LITERAL,
        ("budget", "list"): [LABEL],
        ("budget", "show", "b1"): [LABEL],
        ("usage", "--by", "agent"): [AGENT],
        ("usage", "--by", "label"): [LABEL],
        ("queue", "show", "t6"): [*LITERAL, AGENT],
        ("lease", "list"): [AGENT],
    }
    for args, literal in shows.items():
        done = cli(list(args), root=root, env=env)
        check_bytes(done.stdout, " ".join(args), literal)
