"""One process's connection to a tree's database, and its units of work.

Both stores of a tree (the state store and the task store) share one :class:`Database`: one
connection per process, opened on first use (a command that touches no state never connects) and
checked against the schema version once (:func:`loki.storage.postgres.migrations.check`).

Units of work: :meth:`Database.transaction` is one PostgreSQL transaction; nested, a savepoint (a
task unit opened inside a state unit commits with it). A connection that broke (the server restarted,
the network dropped) is replaced at the start of the next unit, with the bounded retries of
:func:`loki.storage.postgres.connect.connect`; a unit the break interrupted was rolled back by the
server, so nothing of it was applied, and the caller gets :class:`DatabaseUnavailable` (exit 5) to
run it again. A long-running process (the watcher, ``loki work``) simply carries on with its next unit.

Locks by name (the lock domains of the file store) are advisory locks keyed by the schema and the
name, so two teams in two schemas of one database never block each other.

The one clock of a team (docs/postgres.md, "Clock skew"): leases are judged by the database's
``clock_timestamp()`` (:meth:`Database.now`), never by a machine's clock, so a machine whose clock is
hours off neither requeues the others' live leases nor writes leases they see as long expired. The
custom setting ``loki.now`` (``PGOPTIONS='-c loki.now=2026-01-25T10:00:00Z'``) stands in for the
server's clock in one session: it is how tests move the database's time, as ``LOKI_NOW`` moves a
machine's.
"""

from __future__ import annotations

from contextlib import contextmanager

from loki.clock import UTC, Clock
from loki.storage.postgres import connect as connecting
from loki.storage.postgres import migrations
from loki.storage.postgres.queries import query

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from contextlib import AbstractContextManager
    from datetime import datetime
    from typing import Any

    import psycopg


"""The database's clock: the statement's time, not the transaction's (a unit that waited for a lock
judges leases as of when it got it, so judgements follow the commit order)."""


class Database:
    """The connection of one process to one tree's database (see the module's docstring)."""

    def __init__(self, url: str, *, application_name: str = "loki", check_schema: bool = True) -> None:
        self.url = url
        self.application_name = application_name
        self.check_schema = check_schema
        self._conn: psycopg.Connection[Any] | None = None
        self._depth = 0
        self.guard: Callable[[], None] | None = None
        """Called before each outermost unit (loki/storage/moving.py: no migration under way)."""
        self.schema: str | None = None
        self.schema_version: int | None = None

    # -- the connection --------------------------------------------------------------------------

    @property
    def conn(self) -> psycopg.Connection[Any]:
        """The open connection (made, or made again after a break, on first use)."""
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            conn = self._open(mid_run=conn is not None)
        return conn

    def _open(self, *, mid_run: bool) -> psycopg.Connection[Any]:
        self.close()
        conn = connecting.connect(self.url, autocommit=True, application_name=self.application_name,
                                  mid_run=mid_run)
        psycopg = connecting.driver()
        try:
            strict_json(conn)
            if self.check_schema:
                self.schema, self.schema_version = migrations.schema_and_version(conn)
            else:
                self.schema = migrations.schema_name(conn)
        except psycopg.Error as exc:  # the server went away again right after accepting us
            conn.close()
            raise connecting.as_loki_error(self.url, exc, conn=conn) from None
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    @property
    def where(self) -> str:
        """The database for messages: its URL without a password, and the schema."""
        return f"{connecting.without_password(self.url)} (schema {self.schema or '?'})"

    # -- units of work ---------------------------------------------------------------------------

    @property
    def in_transaction(self) -> bool:
        return self._depth > 0

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """One transaction (a savepoint when nested): committed when the block ends cleanly.

        A unit whose ``BEGIN`` finds the connection dropped since the last unit (a server restarted, a
        backend terminated) reconnects, within the bounded retries, and begins again: nothing of it had
        run. A connection that drops once the unit has begun is :class:`DatabaseUnavailable` (exit 5):
        the server rolled the unit back, and the caller may run it again."""
        pg = connecting.driver()
        if self._depth == 0 and self.guard is not None:
            self.guard()  # a tree being migrated takes no write (loki/storage/moving.py)
        self._depth += 1
        outermost = self._depth == 1
        conn: psycopg.Connection[Any] | None = self._conn
        try:
            conn, unit = self._begin(outermost)
            try:
                yield conn
            except BaseException as error:
                if not unit.__exit__(type(error), error, error.__traceback__):
                    raise
            else:
                unit.__exit__(None, None, None)
        except pg.OperationalError as exc:
            if conn is not None and (conn.broken or connecting.is_transient(exc)):
                raise connecting.dropped(self.url, exc) from None
            if outermost:
                raise connecting.as_loki_error(self.url, exc, conn=conn) from None
            raise
        except pg.Error as exc:
            # Inside, code may catch the driver's own errors (a lock wait that ran out, in a savepoint);
            # what leaves the unit is loki's, with an exit code (never "internal error").
            if outermost:
                raise connecting.as_loki_error(self.url, exc, conn=conn) from None
            raise
        finally:
            self._depth -= 1

    def _begin(self, outermost: bool) -> tuple[psycopg.Connection[Any], AbstractContextManager[Any]]:
        """The connection and its entered transaction (see :meth:`transaction` for the one retry)."""
        pg = connecting.driver()
        conn = self.conn
        unit = conn.transaction()
        try:
            unit.__enter__()
        except pg.OperationalError as exc:
            if not (outermost and (conn.broken or connecting.is_transient(exc))):
                raise
            conn = self._open(mid_run=True)
            unit = conn.transaction()
            unit.__enter__()
        return conn, unit

    def rows(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        """The rows of one statement: in the current unit of work, else on its own (one snapshot).

        Outside a unit, a connection that broke since the last statement (a server restart) is
        replaced and the read tried once more: a read changes nothing, so it is safe to repeat.
        """
        if self.in_transaction:
            return _fetched(self.conn.execute(sql, params))
        pg = connecting.driver()  # missing: the error names the extra that installs it
        for attempt in (1, 2):
            conn = self.conn
            try:
                return _fetched(conn.execute(sql, params))
            except pg.OperationalError as exc:
                if not (conn.broken or connecting.is_transient(exc)):
                    raise connecting.as_loki_error(self.url, exc, conn=conn) from None
                if attempt == 2:
                    raise connecting.unreachable(self.url, exc, mid_run=True) from None
            except pg.Error as exc:
                raise connecting.as_loki_error(self.url, exc, conn=conn) from None
        raise AssertionError("unreachable")

    def now(self) -> datetime:
        """The database's clock, in whole seconds (``loki.now`` when the session sets it: see the module)."""
        pg = connecting.driver()
        row = None
        for attempt in (1, 2):
            conn = self.conn
            try:
                row = conn.execute(query("database_now")).fetchone()
                break
            except pg.Error as exc:
                # Outside a unit a read is safe to repeat: a connection dropped since the last unit is replaced.
                retry = attempt == 1 and self._depth == 0 and isinstance(exc, pg.OperationalError) and (
                    conn.broken or connecting.is_transient(exc))
                if not retry:
                    raise connecting.as_loki_error(self.url, exc, conn=conn) from None
        assert row is not None
        when: datetime = row[0]
        return when.astimezone(UTC).replace(microsecond=0)

    def lock(self, name: str) -> None:
        """Hold the lock ``name`` until the current transaction ends (a lock domain of the tree)."""
        assert self._depth > 0, "a named lock is taken inside a transaction"
        self.conn.execute(query("lock_domain"), (name,))

    def try_lock(self, name: str) -> bool:
        """Take the lock ``name`` for the current transaction if nobody holds it; never waits."""
        assert self._depth > 0, "a named lock is taken inside a transaction"
        row = self.conn.execute(query("try_lock_domain"), (name,)).fetchone()
        return bool(row and row[0])


def _fetched(cursor: psycopg.Cursor[Any]) -> list[tuple[Any, ...]]:
    """The rows a statement returned ([] for one that returns none: an UPDATE, ANALYZE)."""
    return cursor.fetchall() if cursor.description is not None else []


class BadJson:
    """What a ``json`` column holds when it is not strict JSON (a row edited with psql: duplicate keys, a
    NaN): kept as a value, so the reader that checks the row names it, instead of a parse error raised from
    the middle of a fetch that cannot say which row it was (loki/storage/postgres/tasks.py)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def strict_json(conn: psycopg.Connection[Any]) -> None:
    """Read this connection's ``json`` columns with loki's strict parser. PostgreSQL's ``json`` keeps the
    text as written, duplicate keys included, and ``json.loads`` would silently keep the last of two."""
    from psycopg.types.json import set_json_loads

    set_json_loads(_strict_loads, conn)


def _strict_loads(data: bytes | str) -> Any:
    """A ``json`` column's value, or :class:`BadJson` saying why it is not strict JSON."""
    from loki.storage import jsonio

    try:
        return jsonio.loads_strict(data)
    except jsonio.JsonError as exc:
        return BadJson(exc.reason)


class DatabaseClock(Clock):
    """The clock leases are judged by on PostgreSQL: the database's (:meth:`Database.now`)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def now(self) -> datetime:
        return self.db.now()
