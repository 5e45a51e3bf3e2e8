"""`loki hooks install --via http`: Claude Code's HTTP hooks for the tool-call events, the token by name."""

from __future__ import annotations

import json
from pathlib import Path

from loki.hooks import agentsettings
from loki.resident import files
from tests.helpers import cli


def test_http_hooks_name_the_token_variable_never_its_value(root: Path, project: Path) -> None:
    done = cli(["hooks", "install", "--via", "http"], root=root)
    assert done.code == 0, done.stderr
    settings = json.loads((project / ".claude" / "settings.json").read_text())["hooks"]
    port = files.configured_port(str(root))
    assert port is not None
    for event, arg in (("PreToolUse", "pre-tool-use"), ("PostToolUse", "post-tool-use"),
                       ("PostToolUseFailure", "post-tool-use-failure")):
        (group,) = settings[event]
        assert group["matcher"] == "*"
        assert group["hooks"] == [{"type": "http", "url": f"http://127.0.0.1:{port}/hook/{arg}",
                                   "headers": {"X-Loki-Token": "$LOKI_SERVE_TOKEN",
                                               "X-Loki-Agent": "$LOKI_AGENT"},
                                   "allowedEnvVars": ["LOKI_SERVE_TOKEN", "LOKI_AGENT"], "timeout": 10}]
    for event in ("SessionStart", "Stop"):
        assert settings[event][0]["hooks"][0]["type"] == "command"
    token = files.token(str(root))
    assert token and token not in (project / ".claude" / "settings.json").read_text()
    assert files.wants_server(str(root))
    assert "LOKI_SERVE_TOKEN" in done.stderr


def test_switching_is_in_place_and_idempotent(root: Path, project: Path) -> None:
    path = project / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": "./mine.sh"}]}]}, "model": "x"}))
    assert cli(["hooks", "install"], root=root).code == 0
    assert cli(["hooks", "install", "--via", "http"], root=root).code == 0
    again = cli(["hooks", "install", "--via", "http", "--json"], root=root)
    assert {a["action"] for a in json.loads(again.stdout)["actions"]} == {"unchanged"}
    doc = json.loads(path.read_text())
    entries = [e for g in doc["hooks"]["PreToolUse"] for e in g["hooks"]]
    assert [e["type"] for e in entries] == ["command", "http"]  # the user's own hook is kept, loki's is one
    back = cli(["hooks", "install", "--json"], root=root)
    assert {a["event"] for a in json.loads(back.stdout)["actions"] if a["action"] == "updated"} == {
        "PreToolUse", "PostToolUse", "PostToolUseFailure"}
    assert not files.wants_server(str(root))
    assert cli(["hooks", "install", "--via", "http"], root=root).code == 0
    assert cli(["hooks", "uninstall"], root=root).code == 0
    assert json.loads(path.read_text()) == {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": "./mine.sh"}]}]}, "model": "x"}
    assert not files.wants_server(str(root))


def test_via_http_is_claude_codes_only_and_a_bad_via_is_a_usage_error(root: Path, project: Path) -> None:
    gemini = cli(["hooks", "install", "--agent", "gemini", "--via", "http"], root=root)
    assert gemini.code == 2 and "Gemini CLI has no HTTP hooks" in gemini.stderr
    bad = cli(["hooks", "install", "--via", "smtp"], root=root)
    assert bad.code == 2 and "--via 'smtp' is not one of: command, http" in bad.stderr
    assert not (project / ".claude").exists() and not (root / "serve").exists()


def test_a_loki_http_hook_is_recognised_only_at_loopback_on_loki_routes() -> None:
    assert agentsettings.loki_entry({"type": "http", "url": "http://127.0.0.1:4000/hook/stop"}) == ("claude", "stop")
    assert agentsettings.loki_entry({"type": "http", "url": "https://example.com/hook/stop"}) is None
    assert agentsettings.loki_entry({"type": "http", "url": "http://127.0.0.1:4000/other"}) is None


def test_serve_env_status_and_usage(root: Path) -> None:
    env = cli(["serve", "--env"], root=root)
    assert env.code == 0 and env.stdout == f"export LOKI_SERVE_TOKEN={files.token(str(root))}\n"
    status = cli(["serve", "--status"], root=root)
    assert status.code == 3 and "loki serve is not running for this tree" in status.stderr
    assert cli(["serve", "--stop"], root=root).code == 3
    both = cli(["serve", "--detach", "--stop"], root=root)
    assert both.code == 2 and "go alone" in both.stderr
    assert cli(["serve", "--port", "0"], root=root).code == 2
