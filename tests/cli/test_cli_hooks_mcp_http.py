"""``loki hooks install --mcp --via http``: Claude Code's ``.mcp.json`` gets the HTTP form (``/mcp`` of the tree's
``loki serve``, the token from ``$LOKI_SERVE_TOKEN``, never the token itself); idempotent; uninstall takes it out.
That the entry reaches the tools is tests/serve/test_serve_mcp.py's."""

from __future__ import annotations

import json
from pathlib import Path

from loki.resident import files
from tests.helpers import cli, snapshot_bytes


def test_install_writes_the_http_form_with_the_token_from_the_environment(root: Path) -> None:
    done = cli(["hooks", "install", "--mcp", "--via", "http", "--mcp-agent", "eng-1", "--json"], root=root)
    assert done.code == 0, done.stderr
    assert done.json()["action"] == "added"
    port = files.configured_port(str(root))
    assert port is not None
    config = root.parent / ".mcp.json"
    entry = json.loads(config.read_text())["mcpServers"]["loki"]
    assert entry == {"type": "http", "url": f"http://127.0.0.1:{port}/mcp",
                     "headers": {"Authorization": "Bearer ${LOKI_SERVE_TOKEN}", "X-Loki-Agent": "eng-1"}}
    token = files.token(str(root))
    assert token and token not in config.read_text()

    before = config.read_bytes()
    again = cli(["hooks", "install", "--mcp", "--via", "http", "--mcp-agent", "eng-1", "--json"], root=root)
    assert again.json()["action"] == "unchanged" and config.read_bytes() == before
    text = cli(["hooks", "install", "--mcp", "--via", "http"], root=root)  # the default name: the agent's
    assert text.code == 0 and f"updated   MCP server loki     http://127.0.0.1:{port}/mcp" in text.stdout
    assert json.loads(config.read_text())["mcpServers"]["loki"]["headers"]["X-Loki-Agent"] == "claude"
    back = cli(["hooks", "install", "--mcp", "--json"], root=root)  # back to the stdio form, in place
    assert back.json()["action"] == "updated" and "command" in json.loads(config.read_text())["mcpServers"]["loki"]
    assert cli(["hooks", "uninstall", "--mcp", "--json"], root=root).json()["action"] == "removed"
    assert not config.exists()


def test_http_is_for_claude_code_and_a_bad_via_is_a_usage_error(root: Path) -> None:
    before = snapshot_bytes(root.parent)
    gemini = cli(["hooks", "install", "--mcp", "--via", "http", "--agent", "gemini"], root=root)
    assert gemini.code == 2 and "--mcp --via http is written for Claude Code only" in gemini.stderr
    bad = cli(["hooks", "install", "--mcp", "--via", "carrier-pigeon"], root=root)
    assert bad.code == 2 and "--via 'carrier-pigeon' is not one of: command, http" in bad.stderr
    assert snapshot_bytes(root.parent) == before


def test_a_dry_run_writes_nothing(root: Path) -> None:
    before = snapshot_bytes(root.parent)
    done = cli(["hooks", "install", "--mcp", "--via", "http", "--dry-run"], root=root)
    assert done.code == 0 and '"type": "http"' in done.stdout and "(dry run: nothing written)" in done.stdout
    assert snapshot_bytes(root.parent) == before


def test_writing_the_http_form_imports_neither_the_sdk_nor_the_server(root: Path) -> None:
    import subprocess
    import sys

    code = ("import sys\nfrom loki.entry import main\nsys.argv = ['loki'] + sys.argv[1:]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'mcp', 'mcp_types', 'starlette', 'uvicorn', "
            "'anyio'}), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code, "--root", str(root), "hooks", "install", "--mcp", "--via",
                           "http"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr.strip().splitlines()[-1] == "[]", done.stderr
