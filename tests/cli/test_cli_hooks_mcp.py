"""``loki hooks install|uninstall --mcp``: ``loki mcp`` in Claude Code's ``.mcp.json``, Gemini CLI's
``.gemini/settings.json`` and Codex CLI's ``.codex/config.toml`` (loki/hooks/mcpconfig.py): added once, idempotent,
everything else kept, removed by uninstall; an unreadable file refused and left alone. The entry it writes is
started by the SDK's client and serves the tools."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import cli

FILES = {"claude": ".mcp.json", "gemini": ".gemini/settings.json", "codex": ".codex/config.toml"}

THEIR_JSON: dict[str, Any] = {"mcpServers": {"github": {"command": "npx", "args": ["-y", "gh-mcp"]}},
                              "theme": "dark"}
THEIR_TOML = ('# my codex settings\nmodel = "o3"  # the big one\n\n[mcp_servers.github]\ncommand = "npx"\n'
              'args = ["-y", "gh-mcp"]\n\n[tui]\nnotifications = true\n')


def run(root: Path, *args: str) -> Any:
    result = cli(["hooks", *args, "--json"], root=root)
    assert result.code == 0, result.stderr
    return result.json()


def loki_entry(path: Path) -> Any:
    if path.suffix == ".toml":
        import tomllib  # Python 3.11+: the suite's interpreter

        return tomllib.loads(path.read_text())["mcp_servers"]["loki"]
    return json.loads(path.read_text())["mcpServers"]["loki"]


@pytest.mark.parametrize("agent", list(FILES))
def test_install_adds_loki_mcp_once_and_uninstall_deletes_the_file_it_made(root: Path, agent: str) -> None:
    path = root.parent / FILES[agent]
    first = run(root, "install", "--mcp", "--agent", agent, "--command", "loki")
    assert first["action"] == "added" and first["changed"] is True and first["settings"] == str(path)
    assert loki_entry(path) == {"command": "loki", "args": ["mcp", "--agent", agent]}
    written = path.read_bytes()
    again = run(root, "install", "--mcp", "--agent", agent, "--command", "loki")
    assert again["action"] == "unchanged" and again["changed"] is False and path.read_bytes() == written
    gone = run(root, "uninstall", "--mcp", "--agent", agent)
    assert gone["action"] == "removed" and gone["removed"] is True and not path.exists()
    if agent != "claude":
        assert not path.parent.exists()  # .gemini/, .codex/: made by install, empty again
    assert run(root, "uninstall", "--mcp", "--agent", agent)["action"] == "absent"


@pytest.mark.parametrize("agent", ["claude", "gemini"])
def test_a_json_file_keeps_everything_else(root: Path, agent: str) -> None:
    path = root.parent / FILES[agent]
    path.parent.mkdir(exist_ok=True)
    original = json.dumps(THEIR_JSON, indent=2) + "\n"
    path.write_text(original)
    run(root, "install", "--mcp", "--agent", agent, "--command", "uvx loki", "--mcp-agent", "eng-2")
    doc = json.loads(path.read_text())
    assert doc["theme"] == "dark" and doc["mcpServers"]["github"] == THEIR_JSON["mcpServers"]["github"]
    assert doc["mcpServers"]["loki"] == {"command": "uvx", "args": ["loki", "mcp", "--agent", "eng-2"]}
    changed = run(root, "install", "--mcp", "--agent", agent, "--command", "loki")
    assert changed["action"] == "updated" and loki_entry(path)["args"] == ["mcp", "--agent", agent]
    run(root, "uninstall", "--mcp", "--agent", agent)
    assert path.read_text() == original


def test_the_codex_toml_keeps_its_comments_and_layout_byte_for_byte(root: Path) -> None:
    path = root.parent / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text(THEIR_TOML)
    run(root, "install", "--mcp", "--agent", "codex", "--command", "loki")
    text = path.read_text()
    assert text.startswith(THEIR_TOML) and loki_entry(path)["args"] == ["mcp", "--agent", "codex"]
    # keys added by hand to the table (Codex waits for a `required` server at start) and a subtable of its own
    # (its env) stay through install; uninstall takes them with it; what follows stays
    path.write_text(text + 'required = true\n\n[mcp_servers.loki.env]\nLOKI_ROOT = "/srv/.loki"\n\n[history]\n'
                    'persistence = "none"\n')
    before = path.read_bytes()
    assert run(root, "install", "--mcp", "--agent", "codex", "--command", "loki")["action"] == "unchanged"
    assert path.read_bytes() == before
    updated = run(root, "install", "--mcp", "--agent", "codex", "--command", "/opt/loki/bin/loki")
    assert updated["action"] == "updated" and loki_entry(path)["command"] == "/opt/loki/bin/loki"
    assert loki_entry(path)["env"] == {"LOKI_ROOT": "/srv/.loki"} and loki_entry(path)["required"] is True
    assert path.read_bytes() == before.replace(b'command = "loki"', b'command = "/opt/loki/bin/loki"')
    run(root, "uninstall", "--mcp", "--agent", "codex")
    assert path.read_text() == THEIR_TOML + '\n[history]\npersistence = "none"\n'


@pytest.mark.parametrize(("agent", "text", "says"), [
    ("claude", '{"mcpServers": ', "JSON"),
    ("claude", '{"mcpServers": ["loki"]}', "mcpServers"),
    ("gemini", '{"mcpServers": {}, // a comment\n}', "comments"),
    ("codex", "model = \n", "TOML"),
])
def test_a_file_it_cannot_read_is_refused_and_left_alone(root: Path, agent: str, text: str, says: str) -> None:
    path = root.parent / FILES[agent]
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    for args in (["install", "--mcp", "--agent", agent], ["uninstall", "--mcp", "--agent", agent]):
        result = cli(["hooks", *args], root=root)
        assert result.code == 1 and says in result.stderr and str(path) in result.stderr, result.stderr
        assert path.read_text() == text


def test_a_bad_mcp_agent_name_is_refused(root: Path) -> None:
    result = cli(["hooks", "install", "--mcp", "--mcp-agent", "eng\x1b[2J"], root=root)
    assert result.code == 2 and "agent name" in result.stderr
    assert not (root.parent / ".mcp.json").exists()


def test_mcp_agent_without_mcp_is_refused_not_ignored(root: Path) -> None:
    settings = root.parent / ".claude" / "settings.json"
    result = cli(["hooks", "install", "--mcp-agent", "eng-2"], root=root)
    assert result.code == 2 and "--mcp-agent is for --mcp" in result.stderr, result.stderr
    assert not settings.exists() and not (root.parent / ".mcp.json").exists()


def test_dry_run_shows_the_change_and_writes_nothing(root: Path) -> None:
    result = cli(["hooks", "install", "--mcp", "--agent", "codex", "--command", "loki", "--dry-run"], root=root)
    assert result.code == 0 and '+args = ["mcp", "--agent", "codex"]' in result.stdout
    assert not (root.parent / ".codex").exists()


@pytest.mark.slow
def test_the_installed_entry_starts_a_server_the_sdk_client_talks_to(root: Path) -> None:
    mcp = pytest.importorskip("mcp", reason="the mcp extra is not installed")
    import anyio

    command = f"{sys.executable} -m loki"
    run(root, "install", "--mcp", "--command", command, "--mcp-agent", "from-config")
    assert cli(["queue", "add", "one", "--id", "t1"], root=root).code == 0
    entry = json.loads((root.parent / ".mcp.json").read_text())["mcpServers"]["loki"]

    async def scenario() -> dict[str, Any]:
        params = mcp.StdioServerParameters(command=entry["command"], args=entry["args"], cwd=str(root.parent))
        async with mcp.Client(params) as client:
            result = await client.call_tool("claim", {})
            reply: dict[str, Any] = result.structured_content
            return reply

    claimed = anyio.run(scenario)
    assert claimed["status"] == "claimed" and claimed["task_id"] == "t1"
    held = cli(["queue", "show", "t1", "--json"], root=root).json()
    assert held["task"]["claimed_by"] == "from-config"
