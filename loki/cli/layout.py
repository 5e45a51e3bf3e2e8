"""Which columns of a table fit a terminal's width, and which columns must never be cut.

Rendering decisions only (the CLI's): rich draws the table, this says which columns it gets. A
timestamp cut to ``2026-01-25T1…`` or a header squeezed to ``p…`` is worse than a column left
out, so the columns whose cells cannot wrap (the first, an id or file to copy; timestamps) and every
header keep their full width, and a table that cannot fit that way loses its ``droppable`` columns,
in the order the command gives, before anything is cut.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Sequence

_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
GAP = 2
"""Columns are two spaces apart (rich's padding with a borderless box, as gh and kubectl print)."""
WRAPPED_MIN = 12
"""A column that wraps (a title, an error) is given at least this many characters, or its header's length."""


def is_timestamp_column(cells: Sequence[str]) -> bool:
    """Every non-empty cell is one ISO 8601 UTC timestamp (and there is one)."""
    filled = [cell for cell in cells if cell]
    return bool(filled) and all(_TIMESTAMP.fullmatch(cell) for cell in filled)


def fixed(index: int, cells: Sequence[str]) -> bool:
    """Whether a column is never wrapped: the first one, or one of timestamps."""
    return index == 0 or is_timestamp_column(cells)


def minimum(header: str, cells: Sequence[str], is_fixed: bool) -> int:
    """The narrowest a column may be: a fixed one its longest cell; one that wraps, its longest word (a
    strategy such as ``retry_with_simpler_approach`` is one word: folding it is cutting it) but at least
    ``WRAPPED_MIN`` characters or its whole longest cell if shorter; never narrower than its header."""
    longest = max((len(cell) for cell in cells), default=0)
    if is_fixed:
        return max(len(header), longest)
    word = max((len(w) for cell in cells for w in cell.split()), default=0)
    return max(len(header), min(longest, max(WRAPPED_MIN, word)))


def needed(columns: Sequence[str], rows: Sequence[Sequence[str]], keep: Sequence[int]) -> int:
    """The narrowest the kept columns can be drawn without cutting a fixed cell, a word or a header."""
    total = 0
    for index in keep:
        cells = [row[index] for row in rows]
        total += minimum(columns[index], cells, fixed(index, cells))
    return total + GAP * (len(keep) - 1)


def squeezed_fit(columns: Sequence[str], rows: Sequence[Sequence[str]], keep: Sequence[int], width: int) -> bool:
    """Whether the first column fits whole when every other kept column is squeezed to its header."""
    first = max([len(columns[keep[0]]), *(len(row[keep[0]]) for row in rows)])
    return first + sum(len(columns[i]) for i in keep[1:]) + GAP * (len(keep) - 1) <= width


def columns_that_fit(columns: Sequence[str], rows: Sequence[Sequence[str]], width: int,
                     droppable: Sequence[str] = ()) -> list[int]:
    """The indexes of the columns to draw: all of them if they fit ``width``, else without the
    ``droppable`` ones (by header, in order) until they do, or until none is left to drop."""
    keep = list(range(len(columns)))
    for name in droppable:
        if needed(columns, rows, keep) <= width:
            break
        if name in columns:
            keep.remove(columns.index(name))
    return keep


def shared_widths(columns: Sequence[str], rows: Sequence[Sequence[str]], keep: Sequence[int],
                  width: int) -> list[int] | None:
    """The width of each kept column when they do not all fit at their natural width (None: they do).

    Every column gets its :func:`minimum` first, then the room left goes to the columns that wrap, in
    proportion to what they would still take, never beyond their natural width. rich, left alone, levels
    the widest columns down to one width and can fold a long word (a timestamp inside a sentence) that the
    minimum was computed to keep whole.
    """
    cells = [[row[index] for row in rows] for index in keep]
    natural = [max([len(columns[i]), *(len(cell) for cell in column)]) for i, column in zip(keep, cells, strict=True)]
    room = width - GAP * (len(keep) - 1)
    if sum(natural) <= room:
        return None
    least = [minimum(columns[i], column, fixed(i, column)) for i, column in zip(keep, cells, strict=True)]
    spare = room - sum(least)
    if spare < 0:
        return None  # squeezed anyway: rich folds what it must
    wants = [n - m for n, m in zip(natural, least, strict=True)]
    total = sum(wants)
    given = [m + (spare * want // total if total else 0) for m, want in zip(least, wants, strict=True)]
    for index in sorted(range(len(given)), key=lambda k: wants[k], reverse=True):  # the rounding's leftover
        if sum(given) >= room:
            break
        if given[index] < natural[index]:
            given[index] += 1
    return given
