"""``loki hook [--agent A] EVENT`` and ``loki hooks install|uninstall [--agent A]``: the agents' hooks.

``loki hook EVENT`` is normally answered by the fast lane (:mod:`loki.hooks.boundary`, dispatched from
:mod:`loki.entry` before typer loads); this typer command exists for ``--help`` and runs the same
code. ``loki hooks install`` writes the settings that make Claude Code (or, with ``--agent gemini``,
Gemini CLI) call it.
"""

from __future__ import annotations

import os
import sys

import typer

from loki.cli import mcpinstall
from loki.cli.common import JSON_HELP, echo, print_json, root_option
from loki.cli.mcpinstall import MCP_AGENT_HELP, MCP_HELP
from loki.hooks.boundary import AGENTS, DEFAULT_AGENT, EVENTS
from loki.hooks.codex import EVENTS as CODEX_EVENTS
from loki.hooks.gemini import EVENTS as GEMINI_EVENTS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from loki.hooks.agentsettings import Agent

SETTINGS_HELP = ("The agent's settings file (default, beside .loki/: .claude/settings.json; with --agent gemini "
                 ".gemini/settings.json; with --agent codex .codex/hooks.json).")
AGENT_HELP = ("Whose hooks: claude (Claude Code, the default), gemini (Gemini CLI) or codex (Codex CLI); see "
              "docs/agents.md.")
EVENT_HELP = ("One of: " + ", ".join(EVENTS) + " (Claude Code's " + ", ".join(EVENTS.values()) + "); with "
              "--agent gemini: " + ", ".join(GEMINI_EVENTS) + "; with --agent codex: " + ", ".join(CODEX_EVENTS)
              + " (named after the agent's events).")

hooks_app = typer.Typer(
    help="Install loki's hooks into an agent's settings (.claude/settings.json, .gemini/settings.json, "
         ".codex/hooks.json), or remove them.",
    no_args_is_help=True,
)


def hook(
    ctx: typer.Context,
    event: str = typer.Argument(..., help=EVENT_HELP),
    agent: str = typer.Option(DEFAULT_AGENT, "--agent", help=AGENT_HELP),
) -> None:
    """Answer one hook event of an agent: its JSON on stdin, the answer on stdout (docs/hooks.md).

    Never blocks a session by accident: bad input or any failure is one line on stderr and exit 1
    (non-blocking for every agent); a repository without .loki/ gets exit 0 and no output.
    """
    from loki.hooks.boundary import run

    raise typer.Exit(run(event, root_option(ctx), sys.stdin.buffer, sys.stdout, sys.stderr, agent.lower()))


def _agent(name: str) -> Agent:
    from loki.errors import UsageError
    from loki.hooks.agentsettings import AGENTS as SETTINGS

    agent = SETTINGS.get(name.lower())
    if agent is None:
        raise UsageError(f"--agent {name!r} is not one of: {', '.join(AGENTS)}", option="--agent")
    return agent


def _settings_path(ctx: typer.Context, settings: str | None, agent: Agent) -> tuple[str, str]:
    """(settings file, project directory): --settings, else the agent's file beside .loki/."""
    if settings:
        path = os.path.abspath(settings)
        parent = os.path.dirname(path)
        own = os.path.dirname(agent.settings)  # .claude, .gemini, .codex
        project = os.path.dirname(parent) if os.path.basename(parent) == own else os.getcwd()
        return path, project
    from loki.storage.paths import find_root

    project = os.path.dirname(find_root(root_option(ctx)))
    return os.path.join(project, agent.settings), project


def _shared(path: str, agent: Agent) -> bool:
    """Whether a settings file is the kind a team commits (not settings.local.json, not the user's own)."""
    return (os.path.basename(path) != "settings.local.json"
            and path != os.path.join(os.path.expanduser("~"), agent.settings))


def _shown(path: str) -> str:
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else path


def _report(path: str, before: str, after: str, actions: list[dict[str, str]], *, dry_run: bool, changed: bool,
            json_output: bool, document: dict[str, object] | None, agent: Agent, removed: bool = False,
            notes: list[str] | None = None) -> None:
    if json_output:
        print_json({"settings": path, "agent": agent.name, "dry_run": dry_run, "changed": changed,
                    "removed": removed, "actions": actions, "document": document, "notes": notes or []})
        return
    for action in actions:
        echo(f"{action['action']:<9} {action['event']:<19} {action['command']}")
    if not actions:
        echo("no loki hooks found")
    if dry_run and changed:
        import difflib

        shown = _shown(path)
        diff = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                    fromfile=shown, tofile=shown)
        from loki.text.textsafe import for_terminal

        sys.stdout.writelines(for_terminal(line.rstrip("\n")) + "\n" if line.endswith("\n") else for_terminal(line)
                              for line in diff)
        if removed:
            echo(f"(nothing else is in it: {_shown(path)} would be deleted)")
        echo("(dry run: nothing written)")
    elif removed:
        echo(f"deleted {_shown(path)}: it held nothing but loki's hooks")
    elif changed:
        echo(f"wrote {_shown(path)}")
    else:
        echo(f"{_shown(path)} already up to date")
    for note in notes or []:
        sys.stderr.write(f"note: {note}\n")


@hooks_app.command("install")
def install(
    ctx: typer.Context,
    agent_name: str = typer.Option(DEFAULT_AGENT, "--agent", help=AGENT_HELP),
    settings: str | None = typer.Option(None, "--settings", help=SETTINGS_HELP + " Use .claude/settings.local.json "
                                        "for a personal, uncommitted one (Claude Code)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the change as a diff; write nothing."),
    command: str | None = typer.Option(None, "--command", help="How hooks run loki, e.g. 'uvx loki' (default: 'loki' "
                                       "if this installation is on PATH, else its path; see docs/hooks.md)."),
    git: bool = typer.Option(False, "--git", help="Install the git pre-commit path-lease guard instead: a commit "
                                                  "of a file another agent holds is refused (docs/leases.md)."),
    via: str = typer.Option("command", "--via", metavar="command|http",
                            help="How Claude Code reaches loki for the tool-call events: a command per call, or "
                                 "HTTP to the tree's `loki serve` (docs/serve.md). SessionStart and Stop stay "
                                 "commands."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
    mcp: bool = typer.Option(False, "--mcp", help=MCP_HELP),
    mcp_agent: str | None = typer.Option(None, "--mcp-agent", help=MCP_AGENT_HELP),
) -> None:
    """Merge loki's hooks into an agent's settings, keeping everything already there.

    Idempotent: an event that already runs `loki hook <event>` is left alone (under whatever matcher it
    has). A settings file that is not valid is refused with its JSON pointer and never rewritten.
    """
    from loki.hooks import agentsettings

    agent = _agent(agent_name)
    _one_target(ctx, mcp=mcp, git=git, mcp_agent=mcp_agent)
    if mcp:
        mcpinstall.install(ctx, agent, settings, command, mcp_agent, dry_run, json_output, via=via.lower())
        return
    path, project = _settings_path(ctx, settings, agent)
    if git:
        from loki.leases import guard

        base = command.strip() if command and command.strip() else guard.default_command()
        hook, done = guard.install(project, base, dry_run=dry_run)
        if json_output:
            print_json({"path": hook, "action": done, "dry_run": dry_run})
        else:
            sys.stdout.write(f"{done} {hook}\n")
            if dry_run and done != "unchanged":
                from loki.text.textsafe import for_terminal

                sys.stdout.writelines(for_terminal(line) + "\n" for line in guard.hook_script(base).splitlines())
                sys.stdout.write("(dry run: nothing written)\n")
        return
    http_port = _http_port(ctx, via.lower(), agent, dry_run)
    doc, existed = agentsettings.load(path, agent)
    base = command.strip() if command and command.strip() else agentsettings.default_command(project, agent)
    new, actions = agentsettings.install(doc, base, agent, http_port=http_port)
    before = agentsettings.render(doc) if existed else ""
    after = agentsettings.render(new)
    changed = new != doc or not existed
    if changed and not dry_run:
        agentsettings.write(path, after)
    notes = agentsettings.notes(new, agent)
    if agent.review and any(action["action"] != "unchanged" for action in actions):
        notes.append(agent.review)
    if http_port is not None:
        from loki.resident.files import TOKEN_ENV

        notes.append(f"Claude Code sends the tree's token from ${TOKEN_ENV}: start it from a shell that ran "
                     f"`eval \"$(loki serve --env)\"`; its SessionStart hook starts `loki serve` when none answers")
    _report(path, before, after, actions, dry_run=dry_run, changed=changed, json_output=json_output, document=new,
            agent=agent, notes=notes)
    if command is None and os.path.isabs(base.split()[0].strip("'\"")) and not json_output and _shared(path, agent):
        sys.stderr.write(f"note: the hooks run {base}, a path on this machine only; commit the settings only if "
                         f"everyone has loki there, {agent.personal}\n")


def _one_target(ctx: typer.Context, *, mcp: bool, git: bool, mcp_agent: str | None = None) -> None:
    """``--git`` installs something else than the agent's hooks (``--via``) or its MCP entry (``--mcp``, whose
    ``--via http`` chooses the HTTP form): ``--git`` with either is a usage error, not silently one of them.
    ``--mcp-agent`` names who the MCP server claims as: without ``--mcp`` nothing would read it, so it is refused
    rather than ignored (a user who typed it expects an MCP entry)."""
    from loki.errors import UsageError

    if mcp_agent is not None and not mcp:
        raise UsageError("--mcp-agent is for --mcp: without it nothing is installed that names an agent "
                         "(add --mcp, or set LOKI_AGENT for hooks)", option="--mcp-agent")

    via = ctx.get_parameter_source("via")  # given on the command line, not its default
    given = [name for name, on in (("--git", git), ("--mcp", mcp),
                                   ("--via", via is not None and via.name == "COMMANDLINE")) if on]
    if git and len(given) > 1:
        raise UsageError(f"{given[0]} and {given[1]} cannot be combined: each installs something else",
                         option=given[1])


def _http_port(ctx: typer.Context, via: str, agent: Agent, dry_run: bool) -> int | None:
    """``--via http``: the tree's server port (chosen now if it has none); records the tree's hook mode."""
    from loki.errors import UsageError

    if via not in ("command", "http"):
        raise UsageError(f"--via {via!r} is not one of: command, http", option="--via")
    if via == "http" and agent.name != "claude":
        raise UsageError(f"--via http is for Claude Code only: {agent.title} has no HTTP hooks (docs/serve.md)",
                         option="--via")
    from loki.resident import files
    from loki.storage.paths import find_root

    if via == "command":
        from loki.errors import NotInitialized

        try:
            root = find_root(root_option(ctx))
        except NotInitialized:
            return None  # --settings outside a tree: there is no server to tell
        if not dry_run and agent.name == "claude" and os.path.exists(files.path(root, files.SETTINGS_FILE)):
            files.set_hooks_mode(root, "command")
        return None
    root = find_root(root_option(ctx))
    if dry_run:
        return files.configured_port(root) or 0
    port = files.choose_port(root)
    files.token(root)
    files.set_hooks_mode(root, "http")
    return port


@hooks_app.command("uninstall")
def uninstall(
    ctx: typer.Context,
    agent_name: str = typer.Option(DEFAULT_AGENT, "--agent", help=AGENT_HELP),
    settings: str | None = typer.Option(None, "--settings", help=SETTINGS_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the change as a diff; write nothing."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
    mcp: bool = typer.Option(False, "--mcp", help=MCP_HELP),
) -> None:
    """Remove exactly loki's hook entries (`loki hook ...`); everything else stays.

    A file left with nothing at all in it (it held only loki's hooks, as one install created does) is
    deleted, and the agent's directory (.gemini/) with it if that leaves it empty.
    """
    from loki.hooks import agentsettings

    agent = _agent(agent_name)
    if mcp:
        mcpinstall.uninstall(ctx, agent, settings, dry_run, json_output)
        return
    path, _ = _settings_path(ctx, settings, agent)
    doc, existed = agentsettings.load(path, agent)
    if not existed:
        if json_output:
            print_json({"settings": path, "agent": agent.name, "dry_run": dry_run, "changed": False,
                        "removed": False, "actions": [], "document": None, "notes": []})
        else:
            echo(f"no settings file at {_shown(path)}: nothing to uninstall")
        return
    new, actions = agentsettings.uninstall(doc, agent)
    if not dry_run and agent.name == "claude":
        _http_port(ctx, "command", agent, dry_run)  # nothing of loki's goes to the server any more
    changed = new != doc
    empty = changed and not new and not os.path.islink(path)
    before = agentsettings.render(doc)
    after = "" if empty else agentsettings.render(new)
    removed = False
    if changed and not dry_run:
        removed = agentsettings.remove(path, agent) if empty else False
        if not removed:
            agentsettings.write(path, agentsettings.render(new))
    _report(path, before, after, actions, dry_run=dry_run, changed=changed, json_output=json_output,
            document=None if empty else new, agent=agent, removed=removed or (dry_run and empty))


def register(app: typer.Typer) -> None:
    app.command("hook")(hook)
    app.add_typer(hooks_app, name="hooks")
