"""``loki hooks install|uninstall``: merging into Claude Code's settings (loki/hooks/agentsettings.py).

Gemini CLI's settings (``--agent gemini``, the same merge) are tested in test_cli_hooks_gemini.py."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from loki.hooks import agentsettings
from tests.helpers import cli, loki_proc

EVENTS = ["PreToolUse", "PostToolUse", "PostToolUseFailure", "SessionStart", "Stop", "TaskCompleted"]

# A project's settings as people write them: permissions, env, their own hooks.
EXISTING: dict[str, Any] = {
    "$schema": "https://json.schemastore.org/claude-code-settings.json",
    "permissions": {"allow": ["Bash(npm run lint)", "Bash(npm test:*)"], "deny": ["Read(./.env)"]},
    "env": {"NODE_ENV": "development"},
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [
                {"type": "command", "command": "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/guard.sh", "timeout": 10}]},
        ],
        "PostToolUse": [
            {"matcher": "Edit|MultiEdit|Write", "hooks": [{"type": "command", "command": "npx prettier --write"}]},
        ],
        "Notification": [{"hooks": [{"type": "command", "command": "notify-send 'Claude Code' 'needs you'"}]}],
    },
}


@pytest.fixture
def settings(root: Path) -> Path:
    return root.parent / ".claude" / "settings.json"


def install(root: Path, *args: str) -> Any:
    result = cli(["hooks", "install", "--command", "loki", "--json", *args], root=root)
    assert result.code == 0, result.stderr
    return result.json()


def loki_commands(doc: dict[str, Any]) -> dict[str, list[str]]:
    return {event: [h["command"] for g in groups for h in g["hooks"] if agentsettings.loki_hook(h.get("command"))]
            for event, groups in doc.get("hooks", {}).items()}


def test_install_creates_the_settings_file(root: Path, settings: Path) -> None:
    report = install(root)
    assert report["changed"] is True and report["settings"] == str(settings)
    doc = json.loads(settings.read_text())
    assert list(doc["hooks"]) == EVENTS
    assert doc["hooks"]["PreToolUse"] == [{"matcher": "*", "hooks": [{"type": "command",
                                                                      "command": "loki hook pre-tool-use"}]}]
    assert doc["hooks"]["SessionStart"] == [{"hooks": [{"type": "command", "command": "loki hook session-start"}]}]
    assert settings.read_text().startswith('{\n  "hooks": {\n    "PreToolUse": [')


def test_install_keeps_everything_and_is_idempotent(root: Path, settings: Path) -> None:
    settings.parent.mkdir()
    settings.write_text(json.dumps(EXISTING, indent=2))
    report = install(root)
    assert [a["action"] for a in report["actions"]] == ["added"] * 6
    doc = json.loads(settings.read_text())
    assert {k: v for k, v in doc.items() if k != "hooks"} == {k: v for k, v in EXISTING.items() if k != "hooks"}
    assert doc["hooks"]["PreToolUse"][0] == EXISTING["hooks"]["PreToolUse"][0]  # theirs first, untouched
    assert doc["hooks"]["PostToolUse"][0] == EXISTING["hooks"]["PostToolUse"][0]
    assert doc["hooks"]["Notification"] == EXISTING["hooks"]["Notification"]
    assert loki_commands(doc)["PostToolUseFailure"] == ["loki hook post-tool-use-failure"]
    written = settings.read_bytes()
    again = install(root)
    assert again["changed"] is False and [a["action"] for a in again["actions"]] == ["unchanged"] * 6
    assert settings.read_bytes() == written


def test_uninstall_removes_exactly_lokis_entries(root: Path, settings: Path) -> None:
    settings.parent.mkdir()
    settings.write_text(json.dumps(EXISTING, indent=2))
    install(root)
    result = cli(["hooks", "uninstall", "--json"], root=root)
    assert result.code == 0, result.stderr
    assert [a["action"] for a in result.json()["actions"]] == ["removed"] * 6
    assert json.loads(settings.read_text()) == EXISTING
    empty = cli(["hooks", "uninstall", "--json"], root=root).json()
    assert empty["changed"] is False and empty["actions"] == []


def test_uninstall_deletes_a_file_left_empty_and_only_that(root: Path, settings: Path) -> None:
    install(root)
    report = cli(["hooks", "uninstall", "--json"], root=root).json()
    assert report["removed"] is True and report["document"] is None
    assert not settings.exists() and not settings.parent.exists()  # .claude/ was loki's too
    settings.parent.mkdir()
    settings.write_text("{}")
    install(root)
    (settings.parent / "settings.local.json").write_text("{}")
    assert cli(["hooks", "uninstall", "--json"], root=root).json()["removed"] is True
    assert (settings.parent / "settings.local.json").exists()  # the directory holds something else: it stays


def test_a_group_shared_with_another_hook_keeps_the_other_hook(root: Path, settings: Path) -> None:
    shared = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "afplay done.aiff"},
                                            {"type": "command", "command": "loki hook stop"}]}]}}
    settings.parent.mkdir()
    settings.write_text(json.dumps(shared))
    report = install(root)
    assert {a["event"]: a["action"] for a in report["actions"]}["Stop"] == "unchanged"
    cli(["hooks", "uninstall"], root=root)
    assert json.loads(settings.read_text()) == {
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "afplay done.aiff"}]}]}}


def test_a_matcher_the_user_chose_is_respected_and_a_new_command_updates_in_place(root: Path, settings: Path) -> None:
    mine = {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": "/opt/old/bin/loki hook pre-tool-use", "timeout": 5}]}]}}
    settings.parent.mkdir()
    settings.write_text(json.dumps(mine))
    report = install(root)
    assert {a["event"]: a["action"] for a in report["actions"]}["PreToolUse"] == "updated"
    doc = json.loads(settings.read_text())
    assert doc["hooks"]["PreToolUse"] == [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": "loki hook pre-tool-use", "timeout": 5}]}]


def test_dry_run_writes_nothing_and_shows_the_diff(root: Path, settings: Path) -> None:
    result = cli(["hooks", "install", "--command", "loki", "--dry-run"], root=root)
    assert result.code == 0, result.stderr
    assert not settings.exists()
    assert '+            "command": "loki hook post-tool-use-failure"' in result.stdout
    assert "(dry run: nothing written)" in result.stdout


@pytest.mark.parametrize(("content", "where"), [
    ('{"hooks": {"PreToolUse": [}', "invalid JSON"),
    ('{"hooks": [], "model": "opus"}', "at /hooks:"),
    ('{"hooks": {"PreToolUse": {"matcher": "*"}}}', "at /hooks/PreToolUse:"),
    ('{"hooks": {"Stop": [{"hooks": "loki hook stop"}]}}', "at /hooks/Stop/0/hooks:"),
    ('{"hooks": {"Stop": [{"matcher": 3, "hooks": []}]}}', "at /hooks/Stop/0/matcher:"),
    ('{"a": 1, "a": 2}', "duplicate key"),
    ('["hooks"]', "must be a JSON object"),
])
def test_a_malformed_settings_file_is_refused_and_left_alone(root: Path, settings: Path, content: str,
                                                             where: str) -> None:
    settings.parent.mkdir()
    settings.write_text(content)
    for command in (["hooks", "install"], ["hooks", "uninstall"]):
        result = cli(command, root=root)
        assert result.code == 1
        assert str(settings) in result.stderr and where in result.stderr, result.stderr
    assert settings.read_text() == content


def test_a_fifo_as_the_settings_file_is_refused_without_blocking(root: Path, settings: Path) -> None:
    settings.parent.mkdir()
    os.mkfifo(settings)
    for command in (["hooks", "install"], ["hooks", "uninstall"]):
        # A real process with a timeout: a blocking open() fails the test instead of hanging the suite.
        result = loki_proc(command, root=root, timeout=20)
        assert result.code == 1 and "is not a regular file" in result.stderr, result.stderr
    assert stat.S_ISFIFO(os.lstat(settings).st_mode)


def test_settings_option_and_a_symlinked_file(root: Path, tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "settings.local.json"
    real.parent.mkdir()
    real.write_text("{}")
    link = root.parent / ".claude" / "settings.local.json"
    link.parent.mkdir()
    link.symlink_to(real)
    result = cli(["hooks", "install", "--command", "loki", "--settings", str(link)], root=root)
    assert result.code == 0, result.stderr
    assert link.is_symlink() and "loki hook stop" in real.read_text()


def test_the_default_command(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = os.path.join(os.path.dirname(sys.executable), "loki")
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    assert agentsettings.default_command(str(root.parent)) == "loki"  # portable: this loki is on PATH
    monkeypatch.setenv("PATH", "/nonexistent")
    assert agentsettings.default_command(str(root.parent)) == script  # not on PATH: where it is
    project = os.path.dirname(os.path.dirname(os.path.dirname(script)))  # .venv/bin/loki inside the repository
    assert agentsettings.default_command(project) == '"$CLAUDE_PROJECT_DIR"/' + os.path.relpath(
        os.path.realpath(script), os.path.realpath(project))


@pytest.mark.parametrize(("command", "event"), [
    ("loki hook pre-tool-use", "pre-tool-use"),
    ("/home/me/.venv/bin/loki hook stop", "stop"),
    ("\"$CLAUDE_PROJECT_DIR\"/.venv/bin/loki hook post-tool-use-failure", "post-tool-use-failure"),
    ("python3 -m loki --root /x/.loki hook session-start", "session-start"),
    ("loki hook user-prompt-submit", None),
    ("other-tool hook stop", None),
    ("loki hooks install", None),
    ("echo loki hook stop >> log; true", None),
    (42, None),
])
def test_which_commands_are_lokis(command: object, event: str | None) -> None:
    assert agentsettings.loki_hook(command) == (None if event is None else ("claude", event))


def test_every_hook_command_has_help() -> None:
    for command in (["hook"], ["hooks", "install"], ["hooks", "uninstall"]):
        result = cli([*command, "--help"])
        assert result.code == 0 and len(result.stdout) > 200, command
    assert "post-tool-use-failure" in cli(["hook", "--help"]).stdout


def test_uninstall_without_a_settings_file_says_so(tmp_path: Path) -> None:
    result = cli(["hooks", "uninstall", "--settings", str(tmp_path / "none.json")])
    assert result.code == 0 and "nothing to uninstall" in result.stdout
    assert not (tmp_path / "none.json").exists()


def test_a_machine_specific_command_is_flagged_only_for_a_shared_settings_file(
        root: Path, settings: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agentsettings, "default_command", lambda project, agent: "/opt/tools/bin/loki")
    shared = cli(["hooks", "install", "--dry-run"], root=root)
    assert shared.code == 0 and "a path on this machine only" in shared.stderr
    local = cli(["hooks", "install", "--dry-run", "--settings", str(settings.parent / "settings.local.json")],
                root=root)
    assert local.code == 0 and "/opt/tools/bin/loki hook pre-tool-use" in local.stdout
    assert "a path on this machine only" not in local.stderr  # already what the note would advise


def test_uninstall_removes_a_settings_file_that_held_only_lokis_hooks(root: Path, settings: Path) -> None:
    install(root)  # loki created .claude/settings.json
    dry = cli(["hooks", "uninstall", "--dry-run"], root=root)
    assert "would be deleted" in dry.stdout and "(dry run: nothing written)" in dry.stdout and settings.exists()
    done = cli(["hooks", "uninstall", "--json"], root=root).json()
    assert done["removed"] is True and done["document"] is None
    assert not settings.exists() and not settings.parent.exists()  # no `{}` left behind, no empty .claude/
    install(root)
    (settings.parent / "agents").mkdir()  # something else of the user's in .claude/
    assert cli(["hooks", "uninstall"], root=root).code == 0
    assert not settings.exists() and settings.parent.exists()
