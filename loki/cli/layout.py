"""Which columns of a table fit a terminal's width, and which columns must never be cut.

The command's ``droppable`` columns give way (in its order) so that every cell shows on one line when
that is enough; when it is not, so that no wrapped cell (a title, an error) takes more than two lines.

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
TEXT_LINES = 2
"""A droppable column gives way while a wrapped cell would take more lines than this."""
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


def natural_width(columns: Sequence[str], rows: Sequence[Sequence[str]], keep: Sequence[int]) -> int:
    """How wide the kept columns are with every cell on one line."""
    return sum(max([len(columns[i]), *(len(row[i]) for row in rows)]) for i in keep) + GAP * (len(keep) - 1)


def squeezed_fit(columns: Sequence[str], rows: Sequence[Sequence[str]], keep: Sequence[int], width: int) -> bool:
    """Whether the first column fits whole when every other kept column is squeezed to its header."""
    first = max([len(columns[keep[0]]), *(len(row[keep[0]]) for row in rows)])
    return first + sum(len(columns[i]) for i in keep[1:]) + GAP * (len(keep) - 1) <= width


def columns_that_fit(columns: Sequence[str], rows: Sequence[Sequence[str]], width: int,
                     droppable: Sequence[str] = ()) -> list[int]:
    """The indexes of the columns to draw: all of them when every cell fits ``width`` on one line, else without
    the fewest ``droppable`` ones (by header, in the order given) that make it so; when no choice does, the
    fewest that fit without cutting a word and wrap no cell to more than two lines (:func:`text_has_room`);
    else without all of them."""
    order = [columns.index(name) for name in droppable if name in columns]
    choices = [[i for i in range(len(columns)) if i not in order[:count]] for count in range(len(order) + 1)]
    # The fewest droppable columns whose leaving lets every cell show on one line; else, the fewest that give
    # the text half the terminal; else all of them.
    for keep in choices:
        if natural_width(columns, rows, keep) <= width:
            return keep
    for keep in choices:
        if needed(columns, rows, keep) <= width and text_has_room(columns, rows, keep, width):
            return keep
    return choices[-1]


def text_has_room(columns: Sequence[str], rows: Sequence[Sequence[str]], keep: Sequence[int], width: int) -> bool:
    """Whether every cell that wraps takes at most :data:`TEXT_LINES` lines at the width it gets.

    A table is read for its text: 15 titles wrapped to 20 characters beside a ``type`` column that says
    ``general`` 15 times took three lines each at 80 columns. Until the text has that room, the droppable
    columns give way (issue 23, "tables give the width to the text")."""
    if natural_width(columns, rows, keep) <= width:
        return True
    given = shared_widths(columns, rows, keep, width)
    if given is None:
        return False  # squeezed: nothing gets its share
    return all(wrapped_lines(row[index], room) <= TEXT_LINES
               for index, room in zip(keep, given, strict=True) for row in rows)


def wrapped_lines(text: str, width: int) -> int:
    """How many lines ``text`` takes wrapped between words at ``width`` (a longer word is folded)."""
    lines, used = 1, 0
    for word in text.split():
        size = len(word)
        if used and used + 1 + size <= width:
            used += 1 + size
            continue
        if used:
            lines += 1
        lines += (size - 1) // max(width, 1)
        used = size - ((size - 1) // max(width, 1)) * width
    return lines


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
