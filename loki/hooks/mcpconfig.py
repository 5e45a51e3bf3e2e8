"""Add ``loki mcp`` to an agent's MCP configuration, and take it out again (``loki hooks install|uninstall --mcp``).

Where each agent reads a project's MCP servers (docs/mcp.md, "Installing"):

* Claude Code: ``.mcp.json`` beside ``.loki/``, ``{"mcpServers": {"loki": {"command", "args"}}}``;
* Gemini CLI: ``.gemini/settings.json``, the same ``mcpServers`` object (the file its hooks are in);
* Codex CLI: ``.codex/config.toml``, a ``[mcp_servers.loki]`` table (read in a trusted project).

The server is the entry named ``loki``; install adds it or brings it to the command asked for (idempotent:
the same entry twice is ``unchanged``), and everything else in the file stays. Uninstall removes that entry
alone; a file left with nothing in it (one install created) is deleted, and the agent's directory if that
leaves it empty. JSON files are read, checked and written as the hooks' settings are
(:mod:`loki.hooks.agentsettings`: never a file it cannot read, temp file and rename). The TOML file is edited
as text: the ``[mcp_servers.loki]`` table is the lines from its header to the next table header, so comments
and the layout of the rest are kept exactly.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from loki.hooks import agentsettings
from loki.hooks.agentsettings import CLAUDE, CODEX, GEMINI, Agent, SettingsError

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

SERVER = "loki"
"""The server's name in every agent's configuration (Claude Code calls its tools ``mcp__loki__claim`` ...)."""

CONFIG_FILES = {
    CLAUDE.name: ".mcp.json",
    GEMINI.name: os.path.join(".gemini", "settings.json"),
    CODEX.name: os.path.join(".codex", "config.toml"),
}


@dataclass(frozen=True)
class Change:
    """What install or uninstall makes of a configuration file's text."""

    before: str
    after: str
    action: str
    """``added``, ``updated``, ``unchanged``, ``removed`` or ``absent``."""
    entry: dict[str, Any]

    @property
    def changed(self) -> bool:
        return self.before != self.after


def server_entry(base_command: str, agent_name: str) -> dict[str, Any]:
    """``{"command", "args"}`` running ``loki mcp --agent NAME`` with ``base_command`` (``loki``, a path,
    ``uvx loki``): MCP hosts start the command without a shell, so its words are split here."""
    from loki.text.textsafe import check_name

    check_name(agent_name, "agent name")
    words = agentsettings._split(base_command)
    return {"command": words[0], "args": [*words[1:], "mcp", "--agent", agent_name]}


def http_entry(port: int, agent_name: str) -> dict[str, Any]:
    """Claude Code's HTTP form: ``/mcp`` of the tree's ``loki serve``, the token from ``$LOKI_SERVE_TOKEN`` (the
    file holds the variable's name, never the token) and the agent's name in ``X-Loki-Agent`` (docs/mcp.md)."""
    from loki.resident.files import TOKEN_ENV
    from loki.text.textsafe import check_name

    check_name(agent_name, "agent name")
    return {"type": "http", "url": f"http://127.0.0.1:{port}/mcp",
            "headers": {"Authorization": f"Bearer ${{{TOKEN_ENV}}}", "X-Loki-Agent": agent_name}}


def default_base(project_dir: str, agent: Agent) -> str:
    """``loki`` when this installation is on ``PATH``; else its absolute path (a host starts the server
    without a shell, so the hooks' ``$CLAUDE_PROJECT_DIR``-relative form does not apply)."""
    import shlex
    import sys

    base = agentsettings.default_command(project_dir, agent)
    if base == "loki" or not base.startswith(agent.project_dir):
        return base
    return shlex.quote(os.path.join(os.path.dirname(sys.executable), "loki"))


def read(path: str) -> tuple[str, bool]:
    from loki.regularfile import NotRegularFile, read_regular

    try:
        data = read_regular(path, agentsettings.MAX_SETTINGS_BYTES + 1)
    except FileNotFoundError:
        return "", False
    except NotRegularFile:
        raise SettingsError(path, "is not a regular file; loki will not read or replace it") from None
    except OSError as exc:
        raise SettingsError(path, f"cannot be read ({exc.strerror})") from None
    try:
        return data.decode("utf-8"), True
    except UnicodeDecodeError:
        raise SettingsError(path, "is not UTF-8 text") from None


def install(path: str, agent: Agent, entry: dict[str, Any]) -> Change:
    text, _ = read(path)
    if path.endswith(".toml"):
        return _toml_install(path, text, entry)
    doc = _json_doc(path, agent)
    servers = _servers(path, doc)
    current = servers.get(SERVER)
    if current == entry:
        return Change(text, text, "unchanged", entry)
    new = json.loads(json.dumps(doc))
    new.setdefault("mcpServers", {})[SERVER] = entry
    return Change(text, agentsettings.render(new), "updated" if current is not None else "added", entry)


def uninstall(path: str, agent: Agent) -> Change:
    text, _ = read(path)
    if path.endswith(".toml"):
        return _toml_uninstall(path, text)
    doc = _json_doc(path, agent)
    servers = _servers(path, doc)
    if SERVER not in servers:
        return Change(text, text, "absent", {})
    new = json.loads(json.dumps(doc))
    entry = new["mcpServers"].pop(SERVER)
    if not new["mcpServers"]:
        del new["mcpServers"]
    return Change(text, agentsettings.render(new) if new else "", "removed", entry)


def _json_doc(path: str, agent: Agent) -> dict[str, Any]:
    # .mcp.json holds no hooks: any agent's check of a `hooks` section passes it
    doc, _ = agentsettings.load(path, agent if agent is GEMINI else CLAUDE)
    return doc


def _servers(path: str, doc: dict[str, Any]) -> dict[str, Any]:
    servers = doc.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise SettingsError(path, "'mcpServers' must be an object of server names", "/mcpServers")
    return servers


# -- TOML, as text --------------------------------------------------------------------------------------

_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_OURS = ("mcp_servers.loki", 'mcp_servers."loki"', "mcp_servers.'loki'")


def _toml_check(path: str, text: str) -> None:
    import importlib

    try:
        tomllib: Any = importlib.import_module("tomllib")  # Python 3.11+ (mypy checks as 3.10)
    except ImportError:  # Python 3.10: the table is found by its header alone
        return
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(path, f"is not valid TOML ({exc})") from None


def _toml_table(text: str) -> tuple[int, int, int] | None:
    """Where the ``[mcp_servers.loki]`` table is, as line numbers: its header, the end of its own lines (the
    next header), and the end of its subtables too (``[mcp_servers.loki.env]``: the next other table)."""
    lines = text.splitlines(keepends=True)
    start = own_end = None
    for number, line in enumerate(lines):
        found = _HEADER.match(line)
        if found is None:
            continue
        name = found.group(1).replace(" ", "")
        ours = name in _OURS or any(name.startswith(prefix + ".") for prefix in _OURS)
        if start is not None and own_end is None:
            own_end = number
        if start is None and ours:
            start = number
        elif start is not None and not ours:
            return start, own_end or number, number
    if start is None:
        return None
    return start, own_end if own_end is not None else len(lines), len(lines)


def _toml_lines(entry: dict[str, Any]) -> tuple[str, str, str]:
    """The table's header, its ``command`` line and its ``args`` line."""
    # a JSON string is a TOML basic string for any text a command line holds (quotes and backslashes escaped)
    args = ", ".join(json.dumps(arg, ensure_ascii=False) for arg in entry["args"])
    return (f"[mcp_servers.{SERVER}]  # loki hooks install --mcp\n",
            f"command = {json.dumps(entry['command'], ensure_ascii=False)}\n", f"args = [{args}]\n")


_KEY = re.compile(r"^\s*(command|args)\s*=")


def _toml_install(path: str, text: str, entry: dict[str, Any]) -> Change:
    """Add the table, or set its ``command`` and ``args`` lines; any other key in it (``required = true``,
    ``startup_timeout_sec``, an ``env`` subtable) stays as it is."""
    _toml_check(path, text)
    header, command, args = _toml_lines(entry)
    span = _toml_table(text)
    lines = text.splitlines(keepends=True)
    if span is None:
        joined = text if not text or text.endswith("\n") else text + "\n"
        after = joined + ("\n" if joined.strip() else "") + header + command + args
        return Change(text, after, "added", entry)
    start, end, _ = span
    own = lines[start + 1:end]
    keys = {found.group(1): index for index, line in enumerate(own) if (found := _KEY.match(line))}
    single_line = "args" not in keys or own[keys["args"]].rstrip().endswith("]")
    if "command" in keys and "args" in keys and own[keys["command"]] == command and own[keys["args"]] == args:
        return Change(text, text, "unchanged", entry)
    if single_line:  # set the two lines where they are (or first in the table)
        kept = [line for index, line in enumerate(own) if index not in keys.values()]
        at = min(keys.values(), default=0)
        body = [*kept[:at], command, args, *kept[at:]]
    else:  # an args array over several lines: the table's own lines are written anew
        trailing = [line for line in own if not line.strip()]
        body = [command, args, *trailing]
    after = "".join(lines[:start + 1]) + "".join(body) + "".join(lines[end:])
    _toml_check(path, after)
    return Change(text, after, "updated", entry)


def _toml_uninstall(path: str, text: str) -> Change:
    _toml_check(path, text)
    span = _toml_table(text)
    if span is None:
        return Change(text, text, "absent", {})
    start, _, end = span
    lines = text.splitlines(keepends=True)
    head = "".join(lines[:start])
    removed = "".join(lines[start:end])
    if head.endswith("\n\n") and not removed.endswith("\n\n"):
        head = head[:-1]  # one blank line between tables, as before install put one before the table
    after = head + "".join(lines[end:])
    return Change(text, "" if not after.strip() else after, "removed", {})


def write(path: str, change: Change, agent: Agent) -> bool:
    """Write ``change`` (or delete the file it empties). Returns whether the file was deleted."""
    if not change.after and change.before:
        return agentsettings.remove(path, agent)
    agentsettings.write(path, change.after)
    return False
