"""The database schema loki owns, as numbered migrations (``migrations/NNN_name.sql``), and the checks
that keep a loki from writing to a database it does not understand.

A migration is applied once, in order, in its own transaction, under an advisory lock (two machines
running ``loki db upgrade`` at once apply each migration once). ``loki_migrations`` records what was
applied; the schema's version is the highest number there. Opening a tree checks it (:func:`check`):
a database of another application, a schema older than this loki (``loki db upgrade``), or newer
(upgrade loki): each a one-line error, exit 1, before anything is written.
"""

from __future__ import annotations

import os
import re

from loki.storage.postgres.connect import DatabaseError, driver, without_password
from loki.storage.postgres.queries import query

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

    import psycopg

_FILE = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")
_HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "migrations")


def migrations() -> list[tuple[int, str, str]]:
    """``(version, name, sql)`` of every migration this loki ships, in order."""
    found = []
    for entry in sorted(os.listdir(_HERE)):
        match = _FILE.match(entry)
        if match:
            with open(os.path.join(_HERE, entry), encoding="utf-8") as handle:
                found.append((int(match.group(1)), match.group(2), handle.read()))
    versions = [v for v, _, _ in found]
    if versions != list(range(1, len(found) + 1)):
        raise AssertionError(f"migrations must be numbered 1..N without gaps: {versions}")
    return found


_latest: list[int] = []


def latest() -> int:
    """The version this loki's migrations lead to (their files are counted once per process)."""
    if not _latest:
        _latest.append(len(migrations()))
    return _latest[0]


def _tables(conn: psycopg.Connection[Any]) -> list[str]:
    rows = conn.execute(query("schema_tables")).fetchall()
    return [str(r[0]) for r in rows]


def schema_name(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute(query("current_schema")).fetchone()
    if row is None or row[0] is None:
        raise DatabaseError("the connection has no schema to use (search_path names none that exists)")
    return str(row[0])


def version(conn: psycopg.Connection[Any]) -> int | None:
    """The schema's version, 0 for an empty schema, None when another application's tables are there."""
    tables = _tables(conn)
    if "loki_meta" not in tables:
        return 0 if not tables else None
    row = conn.execute(query("schema_version")).fetchone()
    return int(row[0]) if row else 0


def _where(conn: psycopg.Connection[Any]) -> str:
    info = conn.info
    return without_password(f"postgresql://{info.user}@{info.host}:{info.port}/{info.dbname}") + \
        f" (schema {schema_name(conn)})"


def foreign_error(conn: psycopg.Connection[Any]) -> DatabaseError:
    tables = _tables(conn)
    shown = ", ".join(tables[:5]) + (f" and {len(tables) - 5} more" if len(tables) > 5 else "")
    return DatabaseError(f"{_where(conn)} holds another application's tables ({shown}) and no loki schema: "
                         "give loki a database (or schema) of its own", tables=tables)


def check(conn: psycopg.Connection[Any]) -> int:
    """The schema's version if this loki can use it; else the one-line reason (exit 1)."""
    have, want = version(conn), latest()
    if have is None:
        raise foreign_error(conn)
    if have == 0:
        raise DatabaseError(f"{_where(conn)} has no loki schema: run `loki init --database URL` first")
    if have > want:
        raise DatabaseError(f"{_where(conn)} has loki schema version {have}, newer than this loki's {want}: "
                            "upgrade loki on this machine (every machine of a team runs the same loki)",
                            schema_version=have, supported=want)
    if have < want:
        raise DatabaseError(f"{_where(conn)} has loki schema version {have}; this loki needs {want}: "
                            "run `loki db upgrade`", schema_version=have, supported=want)
    return have


def schema_and_version(conn: psycopg.Connection[Any]) -> tuple[str, int]:
    """:func:`schema_name` and :func:`check` of a connection just opened, in one round trip when the schema
    is loki's at this loki's version (every open of a tree but the first); anything else (no loki tables,
    another application's, an older or newer version) is asked again one query at a time, for the error
    that says which."""
    psycopg = driver()
    try:
        row = conn.execute(query("schema_at_open")).fetchone()
    except psycopg.Error:
        if conn.broken:
            raise
        row = None  # no loki_migrations on the search_path (autocommit: nothing was aborted)
    if row is not None and row[0] is not None and row[1] and row[2] == latest():
        return str(row[0]), int(row[2])
    return schema_name(conn), check(conn)


def upgrade(conn: psycopg.Connection[Any]) -> list[tuple[int, str]]:
    """Apply the migrations the schema lacks; returns those applied (none: it was current).

    Refuses another application's tables and a newer schema. ``conn`` must not be in a transaction.
    """
    applied: list[tuple[int, str]] = []
    with conn.transaction():
        # One upgrader per schema at a time, across machines; released at commit.
        conn.execute(query("lock_migrations"))
        have = version(conn)
        if have is None:
            raise foreign_error(conn)
        if have > latest():
            check(conn)
        for number, name, sql in migrations():
            if number <= have:
                continue
            conn.execute(sql.encode())  # our own files, not user input (bytes: no placeholders parsed)
            conn.execute(query("record_migration"), (number, name))
            applied.append((number, name))
    return applied
