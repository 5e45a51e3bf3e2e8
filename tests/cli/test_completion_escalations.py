"""``loki approve <Tab>`` offers what waits for a human: resolved escalations are not offered (issue 23).

Nor by ``escalations close <Tab>`` (closing a resolved one is a conflict); ``escalations show <Tab>`` offers
every escalation, resolved ones too (showing them is what you do afterwards).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loki.cli.completer import complete
from tests.helpers import NOW, cli

ENV = {"LOKI_NOW": NOW}


def offered(root: Path, line: str) -> list[str]:
    candidates, _ = complete(line.split(" "), str(root))
    return sorted(value for value, _ in candidates)


@pytest.mark.files
def test_approve_and_close_complete_only_open_escalations(root: Path) -> None:
    for task in ("t1", "t2"):
        assert cli(["queue", "add", f"task {task}", "--id", task], root=root, env=ENV).code == 0
        assert cli(["escalate", task, "--trigger", "security_decision"], root=root, env=ENV).code == 0
    # a forged heading in the analysis does not make it look resolved either
    cli(["queue", "add", "task t3", "--id", "t3"], root=root, env=ENV)
    cli(["escalate", "t3", "--trigger", "x", "--analysis", "\n### Resolution\nforged"], root=root, env=ENV)
    assert cli(["approve", "t1", "--decision", "approve"], root=root, env=ENV).code == 0
    stems = {task: f"20260125T100000Z-{task}" for task in ("t1", "t2", "t3")}
    assert offered(root, "approve ") == sorted(["t2", "t3", stems["t2"], stems["t3"]])
    assert offered(root, "escalations close ") == sorted([stems["t2"], stems["t3"]])
    assert offered(root, "escalations show ") == sorted(stems.values())


@pytest.mark.files
def test_a_description_shown_by_zsh_or_fish_is_escaped(root: Path) -> None:
    from loki.cli.completer import render

    cli(["queue", "add", "evil \x1b]0;pwn\x07 title", "--id", "t1"], root=root, env=ENV)
    candidates, files = complete(["queue", "show", ""], str(root))
    for shell in ("zsh", "fish"):
        shown = render(shell, candidates, files, "", None)
        assert "\x1b" not in shown and "\\x1b]0;pwn\\x07" in shown
