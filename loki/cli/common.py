"""What every command shares: finding the store, printing JSON or tables, errors.

All printing lives in ``loki/cli``. Library code returns values and raises
:class:`loki.errors.LokiError`; this layer turns them into output and exit codes.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from loki.storage.state import StateStore as Store

JSON_HELP = "Print one JSON document on stdout (stable keys, for agents and scripts)."


def store_from(ctx: typer.Context) -> Store:
    """The store for this invocation (``--root``/``LOKI_ROOT`` or the nearest ``.loki/``)."""
    from loki.storage.opening import open_store

    return open_store(root_option(ctx))


def root_option(ctx: typer.Context) -> str | None:
    obj = ctx.find_root().obj
    return obj.get("root") if isinstance(obj, dict) else None


def print_json(value: Any) -> None:
    from loki.textsafe import json_for_terminal

    sys.stdout.write(json_for_terminal(json.dumps(value, ensure_ascii=False, default=str)) + "\n")


_console: Console | None = None
_err_console: Console | None = None


def console() -> Console:
    """A rich console for people (imported only when a table is printed)."""
    global _console
    if _console is None:
        from rich.console import Console

        # Piped output (agents, logs) would otherwise be squeezed into 80 columns.
        width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "160"))
        _console = Console(highlight=False, width=width)
    return _console


def err_console() -> Console:
    global _err_console
    if _err_console is None:
        from rich.console import Console

        _err_console = Console(stderr=True, highlight=False)
    return _err_console


def say(message: str) -> None:
    """One plain line for people (markup-free, so ids with brackets print as they are; control
    characters and bidi overrides escaped, so a title cannot drive the terminal: loki/textsafe.py)."""
    from loki.textsafe import for_terminal

    console().print(for_terminal(message), markup=False, soft_wrap=True)


def echo(message: str, err: bool = False) -> None:
    """A line without rich (plain text, as typer.echo), escaped as :func:`say` does."""
    from loki.textsafe import for_terminal

    (sys.stderr if err else sys.stdout).write(for_terminal(message) + "\n")


def table(title: str | None, columns: list[str], rows: list[list[Any]]) -> None:
    from rich.table import Table

    from loki.textsafe import for_terminal

    grid = Table(title=None if title is None else for_terminal(title), show_header=True, header_style="bold",
                 title_justify="left")
    for index, column in enumerate(columns):
        # The first column is what you copy into the next command (an id, a file): never cut it.
        grid.add_column(column, no_wrap=index == 0, min_width=None)
    for row in rows:
        grid.add_row(*["" if cell is None else for_terminal(str(cell)) for cell in row])
    console().print(grid)


def report_notes(store: Store, result: dict[str, Any] | None = None) -> None:
    """Tell the user how the store read what they see (a commit in flight, read from its journal):
    one ``note:`` line each on stderr, and a ``notes`` list in a ``--json`` result when there are any."""
    for note in store.notes:
        sys.stderr.write(f"note: {note}\n")
    if result is not None and store.notes:
        result["notes"] = list(store.notes)


def fail(message: str, code: int = 1) -> None:
    from loki.textsafe import for_terminal

    sys.stderr.write(f"error: {for_terminal(message)}\n")
    raise typer.Exit(code)
