"""Control characters and bidi overrides never reach a terminal raw, and never get into a name.

Titles (free text) keep what was typed and are escaped by every printer; names (agents, breakers,
task types, labels) refuse them. --json stays JSON that parses back to the same value.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from loki.cli.watchview import to_text
from loki.storage import layout
from loki.storage.store import Store
from loki.text.textsafe import for_terminal, json_for_terminal
from loki.watch.dashboard import Dashboard
from loki.watch.feed import Feed
from loki.watch.screen import View, compose
from tests.helpers import cli, loki_proc, put_tasks, task

# Clear the screen, set the window title, ring the bell, a C1 CSI, DEL, and a right-to-left override.
EVIL = "evil \x1b[2J\x1b]0;pwned\x07 \x9b31m \x7f x\u202egnp.exe\u2066"
RAW = ["\x1b", "\x07", "\x9b", "\x7f", "\u202e", "\u2066"]


def assert_safe(text: str) -> None:
    assert not [c for c in RAW if c in text], repr(text)


def test_for_terminal_escapes_what_a_terminal_acts_on_and_keeps_lines() -> None:
    assert for_terminal("a\tb\nc") == "a\tb\nc"
    assert for_terminal("a\rb\x00\x1b[31m\u202e\x85") == "a\\x0db\\x00\\x1b[31m\\u202e\\x85"
    document = json.dumps({"t": EVIL}, ensure_ascii=False)
    assert "\u202e" in document and "\x9b" in document  # what json.dumps leaves raw
    safe = json_for_terminal(document)
    assert_safe(safe)
    assert json.loads(safe) == {"t": EVIL}


def test_titles_print_escaped_in_every_command(root: Path) -> None:
    added = cli(["queue", "add", EVIL, "--id", "t1", "--description", "line one\nline two \x1b[31m"], root=root)
    assert added.code == 0, added.stderr
    assert_safe(added.stdout)
    for args in (["queue", "list"], ["queue", "show", "t1"], ["queue", "list", "--json"],
                 ["queue", "show", "t1", "--json"]):
        result = cli(args, root=root)
        assert result.code == 0, result.stderr
        assert_safe(result.stdout)
    shown = cli(["queue", "show", "t1"], root=root).stdout
    assert "\\x1b[2J" in shown and "\\u202e" in shown and "line one\nline two \\x1b[31m" in shown
    assert cli(["queue", "show", "t1", "--json"], root=root).json()["task"]["title"] == EVIL  # stored as given
    # The claim's fast lane (a real process) and the typer command print the same, escaped.
    claimed = loki_proc(["queue", "claim", "--agent", "a1"], root=root)
    assert claimed.code == 0 and "\\x1b[2J" in claimed.stdout, claimed
    assert_safe(claimed.stdout)
    failed = cli(["queue", "fail", "t1", "--agent", "a1", "--error", EVIL, "--approach", "x"], root=root)
    assert failed.code == 0, failed.stderr
    assert_safe(failed.stdout)
    assert_safe(cli(["queue", "show", "t1"], root=root).stdout)


@pytest.mark.parametrize("args", [
    ["queue", "claim", "--agent", "eng\x1b[2J"],
    ["queue", "claim", "--agent", "eng\u202e1"],
    ["queue", "claim", "--agent", "eng\x9b1"],
    ["breaker", "failure", "api\u2066x"],
    ["breaker", "trip", "api\x1b]0;x\x07"],
    ["queue", "add", "x", "--type", "eng\u202d"],
    ["queue", "add", "x", "--label", "a\x1b"],
    ["signal", "emit", "DOCS_NEEDED", "--agent", "a\u202eb"],
    ["approve", "t1", "--decision", "approve", "--approver", "bob\x1b[8m"],
])
def test_names_refuse_controls_and_bidi_overrides(root: Path, args: list[str]) -> None:
    put_tasks(Store(root), "blocked", [task("t1", status="blocked")])
    result = cli(args, root=root)
    assert result.code == 2, (result.code, result.stderr)
    assert "names may not contain control characters or bidi overrides" in result.stderr
    assert_safe(result.stderr)


def test_a_hand_edited_breaker_name_prints_escaped(root: Path) -> None:
    name = "api\u202eclaude"  # the schema refuses controls in a hand-edited file, not bidi
    Path(root / layout.BREAKERS).write_text(json.dumps({name: {
        "state": "OPEN", "failure_count": 3, "last_failure_time": "2026-01-25T09:59:00Z",
        "last_state_change": "2026-01-25T09:59:00Z", "cooldown_until": "2026-01-25T10:04:00Z"}}))
    for args in (["breaker", "status"], ["breaker", "status", "--json"], ["status"]):
        result = cli(args, root=root, env={"LOKI_NOW": "2026-01-25T10:00:00Z"})
        assert result.code == 0, result.stderr
        assert_safe(result.stdout)
    assert "api\\u202eclaude" in cli(["breaker", "status"], root=root).stdout


def test_the_watch_view_escapes_titles_holders_and_breakers(store: Store) -> None:
    held = task("w1", title=EVIL, status="in-progress", claimed_by="eng\u202e", claimed_at="2026-01-25T10:00:00Z",
                claim_token="t", lease_until="2026-01-25T11:00:00Z")
    put_tasks(store, "in-progress", [held])
    feed = Feed()
    feed.add({"event": "warning", "detail": f"note {EVIL}"}, "2026-01-25T10:00:00Z")
    console = Console(record=True, width=200, color_system=None)
    console.print(to_text(compose(Dashboard(store).snapshot(), feed, View(), 200, 40)))
    text = console.export_text()
    assert_safe(text)
    assert "\\x1b[2J" in text
