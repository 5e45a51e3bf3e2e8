"""``loki hooks install|uninstall --mcp``: ``loki mcp`` in an agent's MCP configuration (loki/hooks/mcpconfig.py)."""

from __future__ import annotations

import os
import sys

import typer

from loki.cli.common import echo, print_json, root_option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from loki.hooks.agentsettings import Agent
    from loki.hooks.mcpconfig import Change

MCP_HELP = ("The MCP server instead of the hooks: `loki mcp` in the agent's MCP configuration (.mcp.json, "
            ".gemini/settings.json, .codex/config.toml; docs/mcp.md).")
MCP_AGENT_HELP = "With --mcp: the agent name the server claims as (default: the agent's: claude, gemini, codex)."


def config_path(ctx: typer.Context, settings: str | None, agent: Agent) -> tuple[str, str]:
    """(configuration file, project directory): --settings, else the agent's file beside .loki/."""
    from loki.hooks.mcpconfig import CONFIG_FILES
    from loki.storage.paths import find_root

    project = os.path.dirname(find_root(root_option(ctx)))
    if settings:
        return os.path.abspath(settings), project
    return os.path.join(project, CONFIG_FILES[agent.name]), project


def install(ctx: typer.Context, agent: Agent, settings: str | None, command: str | None, mcp_agent: str | None,
            dry_run: bool, json_output: bool, via: str = "command") -> None:
    from loki.hooks import mcpconfig

    if via not in ("command", "http"):
        from loki.errors import UsageError

        raise UsageError(f"--via {via!r} is not one of: command, http", option="--via")
    path, project = config_path(ctx, settings, agent)
    if via == "http":
        entry = mcpconfig.http_entry(_http_port(ctx, agent, dry_run), mcp_agent or agent.name)
    else:
        base = command.strip() if command and command.strip() else mcpconfig.default_base(project, agent)
        entry = mcpconfig.server_entry(base, mcp_agent or agent.name)
    change = mcpconfig.install(path, agent, entry)
    if change.changed and not dry_run:
        mcpconfig.write(path, change, agent)
    _report(path, agent, change, dry_run=dry_run, json_output=json_output, removed=False)
    if not json_output and change.action != "unchanged" and agent.name == "claude":
        sys.stderr.write("note: Claude Code asks once whether to use the servers a project's .mcp.json names "
                         "(or `claude mcp list`)\n")


def _http_port(ctx: typer.Context, agent: Agent, dry_run: bool) -> int:
    """``--mcp --via http``: the tree's server port (chosen now, with its token, if it has none)."""
    from loki.errors import UsageError
    from loki.resident import files
    from loki.storage.paths import find_root

    if agent.name != "claude":
        raise UsageError(f"--mcp --via http is written for Claude Code only; {agent.title} gets `loki mcp` over "
                         "stdio (docs/mcp.md)", option="--via")
    root = find_root(root_option(ctx))
    if dry_run:
        return files.configured_port(root) or 0
    port = files.choose_port(root)
    files.token(root)
    return port


def uninstall(ctx: typer.Context, agent: Agent, settings: str | None, dry_run: bool, json_output: bool) -> None:
    from loki.hooks import mcpconfig

    path, _ = config_path(ctx, settings, agent)
    change = mcpconfig.uninstall(path, agent)
    removed = False
    if change.changed and not dry_run:
        removed = mcpconfig.write(path, change, agent)
    _report(path, agent, change, dry_run=dry_run, json_output=json_output,
            removed=removed or (dry_run and change.changed and not change.after))


def _report(path: str, agent: Agent, change: Change, *, dry_run: bool, json_output: bool, removed: bool) -> None:
    from loki.hooks.mcpconfig import SERVER

    if json_output:
        print_json({"settings": path, "agent": agent.name, "server": SERVER, "action": change.action,
                    "entry": change.entry, "dry_run": dry_run, "changed": change.changed, "removed": removed})
        return
    shown = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else path
    if change.action == "absent":
        echo(f"no loki MCP server in {shown}: nothing to uninstall")
        return
    entry = change.entry
    words = (entry["url"] if "url" in entry else " ".join([entry["command"], *entry["args"]])) if entry else ""
    echo(f"{change.action:<9} MCP server {SERVER:<8} {words}".rstrip())
    if dry_run and change.changed:
        import difflib

        from loki.text.textsafe import for_terminal

        diff = difflib.unified_diff(change.before.splitlines(keepends=True), change.after.splitlines(keepends=True),
                                    fromfile=shown, tofile=shown)
        sys.stdout.writelines(for_terminal(line.rstrip("\n")) + "\n" for line in diff)
        echo("(dry run: nothing written)")
    elif removed:
        echo(f"deleted {shown}: it held nothing but loki's MCP server")
    elif change.changed:
        echo(f"wrote {shown}")
    else:
        echo(f"{shown} already up to date")
