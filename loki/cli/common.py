"""What every command shares: finding the store, printing JSON or tables, errors.

All printing lives in ``loki/cli``. Library code returns values and raises
:class:`loki.errors.LokiError`; this layer turns them into output and exit codes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from loki.storage.state import StateStore as Store

JSON_HELP = "Print one JSON document on stdout (stable keys, for agents and scripts)."
BY_HELP = "Who makes the change, kept in the task's history (default: $USER); the holder needs no --force."


def format_option() -> Any:
    """``--format table|id|json|jsonl`` of a list-like command (loki/cli/output.py, FORMATS)."""
    from loki.cli.output import FORMAT_HELP

    return typer.Option(None, "--format", metavar="table|id|json|jsonl", help=FORMAT_HELP)


def quiet_option() -> Any:
    """``-q``: only the ids (``--format id``)."""
    from loki.cli.output import QUIET_HELP

    return typer.Option(False, "--quiet", "-q", help=QUIET_HELP)


def store_from(ctx: typer.Context) -> Store:
    """The store for this invocation (``--root``/``LOKI_ROOT`` or the nearest ``.loki/``)."""
    from loki.storage.opening import open_store

    return open_store(root_option(ctx))


def root_option(ctx: typer.Context) -> str | None:
    obj = ctx.find_root().obj
    return obj.get("root") if isinstance(obj, dict) else None


def print_json(value: Any) -> None:
    from loki.text.textsafe import json_for_terminal

    sys.stdout.write(json_for_terminal(json.dumps(value, ensure_ascii=False, default=str)) + "\n")


def print_listing(fmt: str, document: dict[str, Any], items: list[dict[str, Any]], id_key: str,
                  people: Callable[[], None]) -> None:
    """A list-like command's output in the format asked (:func:`loki.cli.output.resolve_format`):
    ``json`` the document, ``jsonl`` one line per item (the document's list, same keys), ``id`` each
    item's ``id_key``, ``table`` what ``people`` prints."""
    from loki.cli.output import write_ids, write_jsonl

    if fmt == "json":
        print_json(document)
    elif fmt == "jsonl":
        write_jsonl(items)
    elif fmt == "id":
        write_ids([item[id_key] for item in items if item.get(id_key) is not None])
    else:
        people()


def footer(message: str) -> None:
    """A list's closing line ("3 of 40 pending tasks"): under the table on a terminal; on stderr when
    stdout is a pipe, so ``loki queue list | cut -f1`` reads rows and nothing else (gh prints rows only)."""
    from loki.cli.output import terminal_width

    if terminal_width() is None:
        echo(message, err=True)
    else:
        say(message)


_console: Console | None = None
_console_for: tuple[object, int | None] | None = None
_err_console: Console | None = None


def console() -> Console:
    """A rich console for people (imported only when something is drawn), as wide as the terminal;
    a pipe gets long lines unwrapped (agents, logs), never squeezed into 80 columns."""
    global _console, _console_for
    from loki.cli.output import terminal_width

    width = terminal_width()
    if _console is None or _console_for != (sys.stdout, width):
        from rich.console import Console

        _console = Console(highlight=False, width=width if width is not None else 10_000, file=sys.stdout,
                           force_terminal=False if width is None else None)
        _console_for = (sys.stdout, width)
    return _console


def err_console() -> Console:
    global _err_console
    if _err_console is None:
        from rich.console import Console

        _err_console = Console(stderr=True, highlight=False)
    return _err_console


def say(message: str) -> None:
    """One plain line for people (markup-free, so ids with brackets print as they are; control
    characters and bidi overrides escaped, so a title cannot drive the terminal: loki/text/textsafe.py).
    On a terminal a long line wraps between words (a timestamp or an id is never split); in a pipe
    it stays one line."""
    from loki.cli.output import terminal_width
    from loki.text.textsafe import for_terminal

    if terminal_width() is None:
        sys.stdout.write(for_terminal(message) + "\n")
        return
    console().print(for_terminal(message), markup=False, soft_wrap=False, overflow="fold")


def echo(message: str, err: bool = False) -> None:
    """A line without rich (plain text, as typer.echo), escaped as :func:`say` does."""
    from loki.text.textsafe import for_terminal

    (sys.stderr if err else sys.stdout).write(for_terminal(message) + "\n")


def table(title: str | None, columns: list[str], rows: list[list[Any]], *, droppable: Sequence[str] = ()) -> None:
    """Rows for people: on a terminal a table as wide as the terminal at most; in a pipe tab-separated
    rows without a header, nothing cut (gh's rule; a titled table's title goes first, on its own line).

    On a terminal the first column (what you copy into the next command: an id, a file), every column of
    timestamps and every header are never cut or wrapped: the other columns wrap between words. A column empty
    in every row is left out, and when even that does not fit, the ``droppable`` columns are left out, in the
    order given (``loki/cli/layout.py``).
    """
    from loki.cli.output import terminal_width, write_plain_rows
    from loki.text.textsafe import for_terminal

    width = terminal_width()
    if width is None:
        if title is not None:
            echo(title)
        write_plain_rows(rows)
        return
    if not rows:
        return  # a header over nothing says less than the footer that follows ("0 entries")
    from rich import box
    from rich.table import Table

    from loki.cli import layout

    cells = [["" if cell is None else for_terminal(str(cell)) for cell in row] for row in rows]
    # A column empty in every row (no holder, no lease, while nothing is claimed) says nothing on a terminal and
    # takes the width from the text; a pipe keeps every field, so that `cut -f` finds each where it always is.
    drawn = [index for index in range(len(columns)) if index == 0 or any(row[index] for row in cells)]
    if len(drawn) < len(columns):
        columns = [columns[index] for index in drawn]
        cells = [[row[index] for index in drawn] for row in cells]
    keep = layout.columns_that_fit(columns, cells, width, droppable)
    # Even so too wide: timestamps and words fold; the first column (the id) last, when it alone is too wide.
    squeezed = layout.needed(columns, cells, keep) > width
    id_fits = not squeezed or layout.squeezed_fit(columns, cells, keep, width)
    from rich.text import Text

    # Cells and the title are Text, never markup: a title "[red]x" or "[link=URL]" stored by an agent is shown
    # as written, not styled or turned into a hyperlink (issue 23); the headers are loki's own words.
    grid = Table(title=None if title is None else Text(for_terminal(title)), show_header=True, header_style="bold",
                 title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    shared = None if squeezed else layout.shared_widths(columns, cells, keep, width)
    for position, index in enumerate(keep):
        column = [row[index] for row in cells]
        fixed = (index == 0 and id_fits) or (not squeezed and layout.is_timestamp_column(column))
        least = len(columns[index]) if squeezed else layout.minimum(columns[index], column, fixed)
        grid.add_column(columns[index], no_wrap=fixed, min_width=least, overflow="fold",
                        width=None if shared is None else shared[position])
    for row in cells:
        grid.add_row(*[Text(row[index]) for index in keep])
    console().print(grid)


def report_notes(store: Store, result: dict[str, Any] | None = None) -> None:
    """Tell the user how the store read what they see (a commit in flight, read from its journal):
    one ``note:`` line each on stderr, and a ``notes`` list in a ``--json`` result when there are any."""
    for note in store.notes:
        sys.stderr.write(f"note: {note}\n")
    if result is not None and store.notes:
        result["notes"] = list(store.notes)


def fail(message: str, code: int = 1) -> None:
    from loki.text.textsafe import for_terminal

    sys.stderr.write(f"error: {for_terminal(message)}\n")
    raise typer.Exit(code)


def who(by: str | None) -> str | None:
    """``--by``, else the login name: a person's change to a task is recorded with who made it."""
    import os

    return by or os.environ.get("USER") or None
