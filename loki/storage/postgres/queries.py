"""The SQL of the PostgreSQL store, by name: ``sql/queries.sql`` beside ``migrations/``, read once.

The file is what a DBA reads: each statement under a header line ``-- name --``, then ``-- `` lines
saying what it promises (the locks it takes, ``SKIP LOCKED``, the readiness twin), then the statement,
``%s``/``%(name)s``-templated for psycopg (a literal ``%`` is written ``%%`` in those that take
parameters). A statement may use a shared fragment (a readiness condition, the columns a unit reads) as
``{{name}}``: the fragment is another entry of the file, spliced in when the file is read, so the claim
and the census say "deferred" with one text.

The code asks :func:`query` for a name. The file is read on the first such call, not at import: the
cold path of a command (``loki queue claim``) pays one read of one file, once per process.
"""

from __future__ import annotations

import os

SQL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sql")
QUERIES_FILE = os.path.join(SQL_DIR, "queries.sql")

_loaded: dict[str, str] | None = None


class QueryFileError(Exception):
    """The query file is malformed (a duplicate name, an unknown fragment): a bug in loki, not user input."""


def query(name: str) -> str:
    """The text of the named statement (``KeyError`` naming it when the file has none by that name)."""
    global _loaded
    if _loaded is None:
        _loaded = load(QUERIES_FILE)
    try:
        return _loaded[name]
    except KeyError:
        raise KeyError(f"{QUERIES_FILE} has no query named {name!r}") from None


def load(path: str) -> dict[str, str]:
    """Every named statement of ``path``, fragments spliced in."""
    with open(path, encoding="utf-8") as handle:
        return parse(handle.read(), path)


def parse(text: str, source: str = "queries.sql") -> dict[str, str]:
    """``{name: statement}`` of a query file's text; refuses a name given twice, a header without a
    statement, and a ``{{fragment}}`` that names nothing (each names the line)."""
    raw: dict[str, list[str]] = {}
    lines_of: dict[str, int] = {}
    current: list[str] | None = None
    in_header = False
    for number, line in enumerate(text.splitlines(), start=1):
        name = _header(line)
        if name is not None:
            if name in raw:
                raise QueryFileError(f"{source}:{number}: the query name {name!r} is already used at line "
                                     f"{lines_of[name]}")
            current = raw[name] = []
            lines_of[name] = number
            in_header = True
        elif current is None:
            continue  # the file's own preamble
        elif in_header and line.startswith("--"):
            continue  # the description: for the reader, not sent to the server
        else:
            in_header = False
            current.append(line)
    bodies = {name: _statement(lines) for name, lines in raw.items()}
    for name, body in bodies.items():
        if not body:
            raise QueryFileError(f"{source}:{lines_of[name]}: the query {name!r} has no statement")
    spliced: dict[str, str] = {}
    for name in bodies:
        spliced[name] = _splice(name, bodies, source, lines_of, (), spliced)
    return spliced


def _statement(lines: list[str]) -> str:
    """The statement of an entry: its lines without the comments and blank lines that follow it (a section's
    banner, the preamble of the next entries belong to no statement) and without a final ``;``."""
    while lines and (not lines[-1].strip() or lines[-1].lstrip().startswith("--")):
        lines = lines[:-1]
    return "\n".join(lines).strip().removesuffix(";").rstrip()


def fragments(text: str) -> list[str]:
    """The ``{{name}}`` references in a statement, in order."""
    found = []
    rest = text
    while "{{" in rest:
        _, _, rest = rest.partition("{{")
        name, closed, rest = rest.partition("}}")
        if closed:
            found.append(name.strip())
    return found


def _splice(name: str, bodies: dict[str, str], source: str, lines_of: dict[str, int], seen: tuple[str, ...],
            done: dict[str, str]) -> str:
    """``name``'s statement with its fragments spliced in (``done``: those already spliced)."""
    if name in done:
        return done[name]
    body = bodies[name]
    if "{{" not in body:
        return body
    for used in fragments(body):
        if used not in bodies:
            raise QueryFileError(f"{source}:{lines_of[name]}: the query {name!r} uses {{{{{used}}}}}, which is not "
                                 "a query of the file")
        if used in seen or used == name:
            raise QueryFileError(f"{source}:{lines_of[name]}: the fragment {used!r} includes itself")
        body = body.replace("{{" + used + "}}", _splice(used, bodies, source, lines_of, (*seen, name), done))
    return body


def _header(line: str) -> str | None:
    """The name of a header line ``-- name --`` (lower case, digits, ``_``), else None."""
    if not (line.startswith("-- ") and line.rstrip().endswith(" --")):
        return None
    name = line.rstrip()[3:-3]
    if name and all(c.islower() or c.isdigit() or c == "_" for c in name) and name[0].isalpha():
        return name
    return None
