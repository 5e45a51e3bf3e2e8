"""The typer application. Each command group lives in its own module."""

from __future__ import annotations

import json
import os
import sys

import typer

from loki import __version__
from loki.cli import admin

app = typer.Typer(
    name="loki",
    help="Locked, atomic, crash-safe shared state for a team of AI coding agents (.loki/).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"loki {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    root: str = typer.Option(None, "--root", envvar="LOKI_ROOT",
                             help="The state directory (default: the nearest .loki/ above the current directory)."),
    version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    ctx.obj = {"root": root}


admin.register(app)


def hoist_root(args: list[str]) -> list[str]:
    """Accept the global ``--root`` anywhere before ``--`` (``loki validate --root DIR``)."""
    rest: list[str] = []
    front: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            rest.extend(args[index:])
            break
        if arg == "--root" and index + 1 < len(args):
            front = ["--root", args[index + 1]]
            index += 2
            continue
        if arg.startswith("--root="):
            front = [arg]
        else:
            rest.append(arg)
        index += 1
    return front + rest


def run(args: list[str]) -> int:
    """Run the app; map loki's exceptions to a message on stderr and their exit code."""
    from loki.errors import LokiError

    try:
        app(args=hoist_root(args), prog_name="loki")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except LokiError as exc:
        if "--json" in args:
            sys.stderr.write(json.dumps(exc.to_json(), ensure_ascii=False) + "\n")
        else:
            sys.stderr.write(f"error: {exc.message}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except Exception as exc:  # a bug: say so plainly, never a traceback unless asked for
        if os.environ.get("LOKI_DEBUG"):
            raise
        sys.stderr.write(f"internal error: {type(exc).__name__}: {exc} (set LOKI_DEBUG=1 for the traceback)\n")
        return 1
    return 0
