"""The typer application. Each command group lives in its own module.

:mod:`loki.entry` calls :func:`run` for every command the fast lanes (:mod:`loki.cli.fast`)
decline; this is the only module of the package that imports typer at the top besides the
command groups themselves.

Building a typer app inspects the signature of every command it contains (~1 ms
each), so ``loki queue claim`` only builds the ``queue`` group: the registry below
maps each top-level name to the function that registers it. ``loki --help`` and
unknown commands build everything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from loki import __version__


def _version(value: bool) -> None:
    if value:
        typer.echo(f"loki {__version__}")
        raise typer.Exit()


def _main(
    ctx: typer.Context,
    root: str = typer.Option(None, "--root", envvar="LOKI_ROOT",
                             help="The state directory (default: the nearest .loki/ above the current directory)."),
    version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    ctx.obj = {"root": root}


def _admin(app: typer.Typer) -> None:
    from loki.cli import admin

    admin.register(app)


def _queue(app: typer.Typer) -> None:
    from loki.cli import queue

    app.add_typer(queue.app, name="queue")


def _deadletter(app: typer.Typer) -> None:
    from loki.cli import deadletter

    app.add_typer(deadletter.app, name="deadletter")
    app.add_typer(deadletter.abandoned_app, name="abandoned")


def _escalations(app: typer.Typer) -> None:
    from loki.cli import escalations

    escalations.register(app)


def _breaker(app: typer.Typer) -> None:
    from loki.cli import breaker

    app.add_typer(breaker.app, name="breaker")


def _signal(app: typer.Typer) -> None:
    from loki.cli import signal

    app.add_typer(signal.app, name="signal")


def _watch(app: typer.Typer) -> None:
    from loki.cli import watch

    app.command("watch")(watch.watch)


def _run(app: typer.Typer) -> None:
    from loki.cli import run_command

    app.command("run", context_settings=run_command.CONTEXT)(run_command.run)


def _work(app: typer.Typer) -> None:
    from loki.cli import work

    app.command("work", context_settings=work.CONTEXT)(work.work)


def _hooks(app: typer.Typer) -> None:
    from loki.cli import hooks

    hooks.register(app)


def _errors(app: typer.Typer) -> None:
    from loki.cli import errormemory

    app.add_typer(errormemory.app, name="errors")


def _agents(app: typer.Typer) -> None:
    from loki.cli import agents

    app.command("agents")(agents.agents)


def _budget(app: typer.Typer) -> None:
    from loki.cli import budget

    app.add_typer(budget.app, name="budget")


def _usage(app: typer.Typer) -> None:
    from loki.cli import usage

    app.command("usage")(usage.usage)


def _completion(app: typer.Typer) -> None:
    from loki.cli import completion

    app.command("completion")(completion.completion)


def _database(app: typer.Typer) -> None:
    from loki.cli import database

    app.add_typer(database.app, name="db")


def _mcp(app: typer.Typer) -> None:
    from loki.cli import mcp

    app.command("mcp")(mcp.mcp)

def _lease(app: typer.Typer) -> None:
    from loki.cli import lease

    app.add_typer(lease.app, name="lease")


def _migrate(app: typer.Typer) -> None:
    from loki.cli import migrate

    app.command("migrate")(migrate.migrate)


def _serve(app: typer.Typer) -> None:
    from loki.cli import serve

    serve.register(app)


REGISTRY: dict[str, Callable[[typer.Typer], None]] = {
    "init": _admin,
    "status": _admin,
    "validate": _admin,
    "doctor": _admin,
    "queue": _queue,
    "deadletter": _deadletter,
    "abandoned": _deadletter,
    "escalate": _escalations,
    "approve": _escalations,
    "escalations": _escalations,
    "breaker": _breaker,
    "signal": _signal,
    "watch": _watch,
    "run": _run,
    "work": _work,
    "hook": _hooks,
    "hooks": _hooks,
    "errors": _errors,
    "agents": _agents,
    "usage": _usage,
    "budget": _budget,
    "completion": _completion,
    "db": _database,
    "migrate": _migrate,
    "mcp": _mcp,
    "lease": _lease,
    "serve": _serve,
}


def build_app(command: str | None = None) -> typer.Typer:
    """The app with only ``command``'s group registered (all of them when None or unknown)."""
    app = typer.Typer(
        name="loki",
        help="Locked, atomic, crash-safe shared state for a team of AI coding agents (.loki/).",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        # -h as --help, for every command: click hands a context's help option names down to its children
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_main)
    registrars = [REGISTRY[command]] if command in REGISTRY else list(dict.fromkeys(REGISTRY.values()))
    for register in registrars:
        register(app)
    reflow_help(app)
    return app


def reflow_help(group: typer.Typer) -> None:
    """Docstrings break lines where the source does (120 columns); help text should break where the
    terminal does. Typer keeps single line breaks after a command's first paragraph, so each help text
    has them joined here, paragraphs (blank lines) kept."""
    for info in group.registered_commands:
        doc = info.help or (info.callback.__doc__ if info.callback is not None else None)
        if doc:
            info.help = reflowed(doc)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            reflow_help(sub.typer_instance)


def reflowed(doc: str) -> str:
    """``doc`` dedented, each paragraph on one line."""
    import inspect

    return "\n\n".join(" ".join(paragraph.split()) for paragraph in inspect.cleandoc(doc).split("\n\n"))


def command_name(args: list[str]) -> str | None:
    """The top-level command in ``args`` (after global options), if any."""
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--root":
            index += 2
            continue
        if arg.startswith("-"):
            if arg in ("--help", "-h"):
                return None
            index += 1
            continue
        return arg
    return None


def hoist_root(args: list[str]) -> list[str]:
    """Accept the global ``--root`` anywhere before ``--`` (``loki validate --root DIR``)."""
    from loki.argv import split_root

    cut = args.index("--") if "--" in args else len(args)
    split = split_root(args[:cut])
    if split is None:  # `--root` as the last word: typer says it needs a value
        return args
    root, rest = split
    return (["--root", root] if root is not None else []) + rest + args[cut:]


_click_commands: dict[str | None, Any] = {}


def click_command(command: str | None) -> Any:
    """:func:`build_app` converted to click once per process and command group: what ``Typer.__call__`` does
    at every call (the conversion is ~3/4 of an in-process command's CPU; a process of the CLI makes one call,
    a process running many in process -- the tests, ``loki work``'s nested commands -- reuses it). Called
    without typer's wrapper, which only decorates an exception for its pretty traceback, off here."""
    key = command if command in REGISTRY else None  # build_app builds the whole app for an unknown name
    if key not in _click_commands:
        _click_commands[key] = typer.main.get_command(build_app(key))
    return _click_commands[key]


def run(args: list[str]) -> int:
    """Run the app; loki's exceptions become a message on stderr and their exit code, exactly as
    in the fast lanes (:func:`loki.cli.output.guarded`)."""
    from loki.cli.output import guarded, json_errors

    def command() -> int:
        hoisted = hoist_root(args)
        try:
            click_command(command_name(hoisted))(args=hoisted, prog_name="loki")
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        return 0

    return guarded(command, json_errors(args))


def __getattr__(name: str) -> typer.Typer:
    """``loki.cli.app.app``: the whole application (for typer's CliRunner, docs generation)."""
    if name == "app":
        return build_app()
    raise AttributeError(name)
