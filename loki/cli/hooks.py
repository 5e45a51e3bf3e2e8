"""``loki hook EVENT`` and ``loki hooks install|uninstall``: Claude Code integration.

``loki hook EVENT`` is normally answered by the fast lane (:mod:`loki.hooks.boundary`, dispatched from
:mod:`loki.entry` before typer loads); this typer command exists for ``--help`` and runs the same
code. ``loki hooks install`` writes the settings that make Claude Code call it.
"""

from __future__ import annotations

import os
import sys

import typer

from loki.cli.common import JSON_HELP, echo, print_json, root_option
from loki.hooks.boundary import EVENTS

SETTINGS_HELP = "Claude Code's settings file (default: .claude/settings.json beside .loki/)."
EVENT_HELP = "One of: " + ", ".join(EVENTS) + " (Claude Code's " + ", ".join(EVENTS.values()) + ")."

hooks_app = typer.Typer(
    help="Install loki's hooks into Claude Code's settings (.claude/settings.json), or remove them.",
    no_args_is_help=True,
)


def hook(
    ctx: typer.Context,
    event: str = typer.Argument(..., help=EVENT_HELP),
) -> None:
    """Answer one Claude Code hook event: its JSON on stdin, the answer on stdout (docs/hooks.md).

    Never blocks a session by accident: bad input or any failure is one line on stderr and exit 1
    (non-blocking for Claude Code); a repository without .loki/ gets exit 0 and no output.
    """
    from loki.hooks.boundary import run

    raise typer.Exit(run(event, root_option(ctx), sys.stdin.buffer, sys.stdout, sys.stderr))


def _settings_path(ctx: typer.Context, settings: str | None) -> tuple[str, str]:
    """(settings file, project directory): --settings, else .claude/settings.json beside .loki/."""
    if settings:
        path = os.path.abspath(settings)
        parent = os.path.dirname(path)
        project = os.path.dirname(parent) if os.path.basename(parent) == ".claude" else os.getcwd()
        return path, project
    from loki.storage.paths import find_root

    project = os.path.dirname(find_root(root_option(ctx)))
    return os.path.join(project, ".claude", "settings.json"), project


def _shared(path: str) -> bool:
    """Whether a settings file is the kind a team commits (not settings.local.json, not the user's own)."""
    return (os.path.basename(path) != "settings.local.json"
            and path != os.path.join(os.path.expanduser("~"), ".claude", "settings.json"))


def _shown(path: str) -> str:
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else path


def _report(path: str, before: str, after: str, actions: list[dict[str, str]], *, dry_run: bool, changed: bool,
            json_output: bool, document: dict[str, object]) -> None:
    if json_output:
        print_json({"settings": path, "dry_run": dry_run, "changed": changed, "actions": actions,
                    "document": document})
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
        from loki.textsafe import for_terminal

        sys.stdout.writelines(for_terminal(line.rstrip("\n")) + "\n" if line.endswith("\n") else for_terminal(line)
                              for line in diff)
        echo("(dry run: nothing written)")
    elif changed:
        echo(f"wrote {_shown(path)}")
    else:
        echo(f"{_shown(path)} already up to date")


@hooks_app.command("install")
def install(
    ctx: typer.Context,
    settings: str | None = typer.Option(None, "--settings", help=SETTINGS_HELP + " Use .claude/settings.local.json "
                                        "for a personal, uncommitted one."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the change as a diff; write nothing."),
    command: str | None = typer.Option(None, "--command", help="How hooks run loki, e.g. 'uvx loki' (default: 'loki' "
                                       "if this installation is on PATH, else its path; see docs/hooks.md)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Merge loki's five hooks into Claude Code's settings, keeping everything already there.

    Idempotent: an event that already runs `loki hook <event>` is left alone (under whatever matcher it
    has). A settings file that is not valid is refused with its JSON pointer and never rewritten.
    """
    from loki.hooks import claudesettings

    path, project = _settings_path(ctx, settings)
    doc, existed = claudesettings.load(path)
    base = command.strip() if command and command.strip() else claudesettings.default_command(project)
    new, actions = claudesettings.install(doc, base)
    before = claudesettings.render(doc) if existed else ""
    after = claudesettings.render(new)
    changed = new != doc or not existed
    if changed and not dry_run:
        claudesettings.write(path, after)
    _report(path, before, after, actions, dry_run=dry_run, changed=changed, json_output=json_output, document=new)
    if command is None and os.path.isabs(base.split()[0].strip("'\"")) and not json_output and _shared(path):
        sys.stderr.write(f"note: the hooks run {base}, a path on this machine only; commit the settings only if "
                         "everyone has loki there, or use --settings .claude/settings.local.json (or --command)\n")


@hooks_app.command("uninstall")
def uninstall(
    ctx: typer.Context,
    settings: str | None = typer.Option(None, "--settings", help=SETTINGS_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the change as a diff; write nothing."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Remove exactly loki's hook entries (`loki hook <event>`); everything else stays."""
    from loki.hooks import claudesettings

    path, _ = _settings_path(ctx, settings)
    doc, existed = claudesettings.load(path)
    if not existed:
        if json_output:
            print_json({"settings": path, "dry_run": dry_run, "changed": False, "actions": [], "document": None})
        else:
            echo(f"no settings file at {_shown(path)}: nothing to uninstall")
        return
    new, actions = claudesettings.uninstall(doc)
    changed = existed and new != doc
    before = claudesettings.render(doc) if existed else ""
    after = claudesettings.render(new)
    if changed and not dry_run:
        claudesettings.write(path, after)
    _report(path, before, after, actions, dry_run=dry_run, changed=changed, json_output=json_output, document=new)


def register(app: typer.Typer) -> None:
    app.command("hook")(hook)
    app.add_typer(hooks_app, name="hooks")
