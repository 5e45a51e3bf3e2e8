"""``loki.cli.app.run`` converts each command group to click once per process and reuses it: a call's options
and arguments never carry over to the next call, whose output is what a fresh conversion prints."""

from __future__ import annotations

import shutil
from pathlib import Path

from loki.cli import app
from tests.helpers import cli

CALLS = [["queue", "add", "first", "--id", "t1", "--priority", "high", "--label", "x"], ["queue", "list", "--json"],
         ["queue", "add", "second", "--id", "t2"], ["queue", "list"], ["queue", "list", "--state", "pending", "--json"],
         ["status"], ["queue", "nosuch"], ["nosuch"]]


def outputs(root: Path, fresh: bool) -> list[tuple[int, str, str]]:
    found = []
    for args in CALLS:
        if fresh:
            app._click_commands.clear()
        result = cli(args, root=root, env={"LOKI_NOW": "2026-01-25T10:00:00Z"})
        found.append((result.code, result.stdout.replace(str(root), "ROOT"), result.stderr.replace(str(root), "ROOT")))
    return found


def test_a_reused_command_prints_what_a_fresh_one_prints(tmp_path: Path, template_tree: Path) -> None:
    roots = [tmp_path / name / ".loki" for name in ("reused", "fresh")]
    for root in roots:
        shutil.copytree(template_tree, root)
    reused, fresh = outputs(roots[0], fresh=False), outputs(roots[1], fresh=True)
    assert reused == fresh
    assert [code for code, _, _ in reused] == [0, 0, 0, 0, 0, 0, 2, 2]


def test_each_group_is_converted_once_and_an_unknown_name_gets_the_whole_app() -> None:
    assert app.click_command("queue") is app.click_command("queue")
    assert app.click_command("nosuch") is app.click_command(None) is app.click_command("typo")
    assert app.click_command("queue") is not app.click_command(None)
