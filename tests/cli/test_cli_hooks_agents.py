"""``loki hooks install|uninstall --agent gemini|codex``: Gemini CLI's and Codex CLI's settings.

The merge is the one Claude Code's settings get (tests/cli/test_cli_hooks.py); these tests check what
differs: the file, the events, the commands (``--agent gemini``, ``|| exit 1``), Gemini's own keys
inside ``hooks``, comments, and the switches that keep an agent from running hooks at all. That the
file install writes is what the real CLI loads is tests/agents/'s part.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from loki.hooks import agentsettings
from tests.helpers import cli

EVENTS = ["BeforeTool", "AfterTool", "SessionStart", "AfterAgent"]

# A project's Gemini settings as people write them: a model, their own hook, Gemini's hook switches.
EXISTING: dict[str, Any] = {
    "model": {"name": "gemini-2.5-pro"},
    "general": {"vimMode": True},
    "hooksConfig": {"notifications": False},
    "hooks": {
        "disabled": ["echo old"],
        "BeforeTool": [{"matcher": "write_file|replace", "hooks": [
            {"name": "security-check", "type": "command", "command": "$GEMINI_PROJECT_DIR/.gemini/hooks/security.sh",
             "timeout": 5000}]}],
        "SessionEnd": [{"hooks": [{"type": "command", "command": "notify-send 'Gemini CLI' 'bye'"}]}],
    },
}


@pytest.fixture
def settings(root: Path) -> Path:
    return root.parent / ".gemini" / "settings.json"


def gemini_cli(root: Path, *args: str) -> Any:
    result = cli([*args, "--agent", "gemini", "--json"], root=root)
    assert result.code == 0, result.stderr
    return result.json()


def install(root: Path, *args: str) -> Any:
    return gemini_cli(root, "hooks", "install", "--command", "loki", *args)


def test_install_creates_geminis_settings(root: Path, settings: Path) -> None:
    report = install(root)
    assert report["changed"] is True and report["settings"] == str(settings) and report["agent"] == "gemini"
    doc = json.loads(settings.read_text())
    assert list(doc["hooks"]) == EVENTS
    assert doc["hooks"]["BeforeTool"] == [{"matcher": "*", "hooks": [
        {"type": "command", "command": "loki hook --agent gemini before-tool || exit 1"}]}]
    assert doc["hooks"]["AfterAgent"] == [{"hooks": [
        {"type": "command", "command": "loki hook --agent gemini after-agent || exit 1"}]}]
    assert not (root.parent / ".claude").exists()  # Claude Code's settings are not touched


def test_install_keeps_everything_and_is_idempotent(root: Path, settings: Path) -> None:
    settings.parent.mkdir()
    settings.write_text(json.dumps(EXISTING, indent=2))
    report = install(root)
    assert [a["action"] for a in report["actions"]] == ["added"] * 4
    doc = json.loads(settings.read_text())
    assert {k: v for k, v in doc.items() if k != "hooks"} == {k: v for k, v in EXISTING.items() if k != "hooks"}
    assert doc["hooks"]["disabled"] == ["echo old"]  # Gemini's own switch inside "hooks" stays as it was
    assert doc["hooks"]["BeforeTool"][0] == EXISTING["hooks"]["BeforeTool"][0]
    assert doc["hooks"]["SessionEnd"] == EXISTING["hooks"]["SessionEnd"]
    written = settings.read_bytes()
    again = install(root)
    assert again["changed"] is False and [a["action"] for a in again["actions"]] == ["unchanged"] * 4
    assert settings.read_bytes() == written


def test_a_claude_command_under_a_gemini_event_is_updated_in_place(root: Path, settings: Path) -> None:
    settings.parent.mkdir()
    settings.write_text(json.dumps({"hooks": {"SessionStart": [{"matcher": "startup", "hooks": [
        {"type": "command", "command": "loki hook session-start", "timeout": 9000}]}]}}))
    report = install(root)
    assert {a["event"]: a["action"] for a in report["actions"]}["SessionStart"] == "updated"
    assert json.loads(settings.read_text())["hooks"]["SessionStart"] == [{"matcher": "startup", "hooks": [
        {"type": "command", "command": "loki hook --agent gemini session-start || exit 1", "timeout": 9000}]}]


def test_uninstall_removes_exactly_lokis_entries(root: Path, settings: Path) -> None:
    settings.parent.mkdir()
    settings.write_text(json.dumps(EXISTING, indent=2))
    install(root)
    report = gemini_cli(root, "hooks", "uninstall")
    assert [a["action"] for a in report["actions"]] == ["removed"] * 4 and report["removed"] is False
    assert json.loads(settings.read_text()) == EXISTING


def test_uninstall_deletes_the_file_and_directory_install_created(root: Path, settings: Path) -> None:
    install(root)
    dry = cli(["hooks", "uninstall", "--agent", "gemini", "--dry-run"], root=root)
    assert dry.code == 0 and "would be deleted" in dry.stdout and settings.exists()
    result = cli(["hooks", "uninstall", "--agent", "gemini"], root=root)
    assert result.code == 0, result.stderr
    assert "it held nothing but loki's hooks" in result.stdout
    assert not settings.exists() and not settings.parent.exists()
    # A directory holding something else stays, with that something.
    install(root)
    (settings.parent / "GEMINI.md").write_text("# context\n")
    assert gemini_cli(root, "hooks", "uninstall")["removed"] is True
    assert not settings.exists() and (settings.parent / "GEMINI.md").exists()


def test_claude_and_gemini_settings_live_side_by_side(root: Path, settings: Path) -> None:
    install(root)
    claude = cli(["hooks", "install", "--command", "loki", "--json"], root=root)
    assert claude.code == 0 and claude.json()["agent"] == "claude"
    claude_file = root.parent / ".claude" / "settings.json"
    assert "loki hook pre-tool-use" in claude_file.read_text()
    assert "--agent gemini" not in claude_file.read_text() and "pre-tool-use" not in settings.read_text()
    assert cli(["hooks", "uninstall"], root=root).code == 0
    assert not claude_file.exists() and settings.exists()  # each agent's uninstall minds its own file


def test_dry_run_shows_the_diff(root: Path, settings: Path) -> None:
    result = cli(["hooks", "install", "--agent", "gemini", "--command", "loki", "--dry-run"], root=root)
    assert result.code == 0, result.stderr
    assert '+            "command": "loki hook --agent gemini after-tool || exit 1"' in result.stdout
    assert "(dry run: nothing written)" in result.stdout and not settings.exists()


def test_a_settings_file_with_comments_is_refused_and_left_alone(root: Path, settings: Path) -> None:
    settings.parent.mkdir()
    content = '{\n  // the model we pay for\n  "model": {"name": "gemini-2.5-pro"}\n}\n'
    settings.write_text(content)
    for command in (["hooks", "install"], ["hooks", "uninstall"]):
        result = cli([*command, "--agent", "gemini"], root=root)
        assert result.code == 1 and str(settings) in result.stderr
        assert "Gemini CLI accepts comments in this file, loki does not" in result.stderr, result.stderr
    assert settings.read_text() == content
    url = '{"$schema": "https://example.com/settings.schema.json", "x": [}'
    settings.write_text(url)  # "//" inside a string is no comment: the plain JSON error only
    result = cli(["hooks", "install", "--agent", "gemini"], root=root)
    assert result.code == 1 and "invalid JSON" in result.stderr and "comments" not in result.stderr


@pytest.mark.parametrize(("content", "where"), [
    ('{"hooks": {"BeforeTool": {"matcher": "*"}}}', "at /hooks/BeforeTool:"),
    ('{"hooks": {"AfterAgent": [{"hooks": "loki"}]}}', "at /hooks/AfterAgent/0/hooks:"),
])
def test_a_malformed_hooks_section_is_refused(root: Path, settings: Path, content: str, where: str) -> None:
    settings.parent.mkdir()
    settings.write_text(content)
    result = cli(["hooks", "install", "--agent", "gemini"], root=root)
    assert result.code == 1 and where in result.stderr, result.stderr
    assert settings.read_text() == content


def test_install_says_when_gemini_would_not_run_the_hooks(root: Path, settings: Path) -> None:
    settings.parent.mkdir()
    settings.write_text(json.dumps({"hooksConfig": {"enabled": False,
                                                    "disabled": ["loki hook --agent gemini after-tool || exit 1"]}}))
    result = cli(["hooks", "install", "--agent", "gemini", "--command", "loki"], root=root)
    assert result.code == 0, result.stderr
    assert "note: hooksConfig.enabled is false in this file: Gemini CLI runs no hooks at all" in result.stderr
    assert "note: hooksConfig.disabled names loki's hooks: Gemini CLI skips them" in result.stderr
    assert len(install(root)["notes"]) == 2


def test_an_unknown_agent_is_a_usage_error(root: Path) -> None:
    for command in (["hooks", "install"], ["hooks", "uninstall"]):
        result = cli([*command, "--agent", "cursor"], root=root)
        assert result.code == 2 and "--agent 'cursor' is not one of: claude, gemini, codex" in result.stderr


def test_the_default_command_names_geminis_project_directory(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = os.path.join(os.path.dirname(sys.executable), "loki")
    monkeypatch.setenv("PATH", "/nonexistent")
    project = os.path.dirname(os.path.dirname(os.path.dirname(script)))  # .venv/bin/loki inside the repository
    # Gemini CLI replaces $GEMINI_PROJECT_DIR with the quoted directory: quoting it again would break the path.
    assert agentsettings.default_command(project, agentsettings.GEMINI) == "$GEMINI_PROJECT_DIR/" + os.path.relpath(
        os.path.realpath(script), os.path.realpath(project))


@pytest.mark.parametrize(("command", "found"), [
    ("loki hook --agent gemini before-tool || exit 1", ("gemini", "before-tool")),
    ("loki hook --agent gemini after-agent", ("gemini", "after-agent")),
    ("$GEMINI_PROJECT_DIR/.venv/bin/loki hook --agent=gemini session-start || exit 1", ("gemini", "session-start")),
    ("loki hook session-start", ("claude", "session-start")),
    ("loki hook --agent gemini pre-tool-use", None),  # not a Gemini event
    ("loki hook --agent claude before-tool", None),
    ("loki hook --agent nobody stop", None),
    ("other hook --agent gemini before-tool || exit 1", None),
    ("loki hook --agent codex post-tool-use || exit 1", ("codex", "post-tool-use")),
    ("loki hook --agent codex post-tool-use-failure", None),  # Codex has no such event
])
def test_which_commands_are_lokis(command: str, found: tuple[str, str] | None) -> None:
    assert agentsettings.loki_hook(command) == found


# -- Codex CLI: .codex/hooks.json ------------------------------------------------------------------


def test_install_for_codex_writes_its_hooks_json_and_says_what_codex_needs(root: Path) -> None:
    hooks_json = root.parent / ".codex" / "hooks.json"
    result = cli(["hooks", "install", "--agent", "codex", "--command", "loki"], root=root)
    assert result.code == 0, result.stderr
    doc = json.loads(hooks_json.read_text())
    assert list(doc["hooks"]) == ["PreToolUse", "PostToolUse", "SessionStart", "Stop"]
    assert doc["hooks"]["PostToolUse"] == [{"matcher": "*", "hooks": [
        {"type": "command", "command": "loki hook --agent codex post-tool-use || exit 1"}]}]
    assert "note: Codex CLI runs new or changed hooks only once they are reviewed" in result.stderr
    again = cli(["hooks", "install", "--agent", "codex", "--command", "loki"], root=root)
    assert again.code == 0 and "already up to date" in again.stdout and "reviewed" not in again.stderr
    assert cli(["hooks", "uninstall", "--agent", "codex"], root=root).code == 0
    assert not hooks_json.exists() and not hooks_json.parent.exists()


def test_codex_hooks_beside_claudes_and_geminis(root: Path) -> None:
    for agent in ("claude", "gemini", "codex"):
        assert cli(["hooks", "install", "--agent", agent, "--command", "loki"], root=root).code == 0
    texts = {agent: (root.parent / path).read_text() for agent, path in
             (("claude", ".claude/settings.json"), ("gemini", ".gemini/settings.json"), ("codex", ".codex/hooks.json"))}
    assert "--agent" not in texts["claude"]
    assert "--agent gemini" in texts["gemini"] and "--agent codex" in texts["codex"]


def test_the_default_command_for_codex_finds_the_repository_top(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = os.path.join(os.path.dirname(sys.executable), "loki")
    monkeypatch.setenv("PATH", "/nonexistent")
    project = os.path.dirname(os.path.dirname(os.path.dirname(script)))
    assert agentsettings.default_command(project, agentsettings.CODEX) == (
        '"$(git rev-parse --show-toplevel)"/' + os.path.relpath(os.path.realpath(script), os.path.realpath(project)))
