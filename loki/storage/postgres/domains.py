"""Lock domains on PostgreSQL: an advisory transaction lock per domain, a bounded wait, a named holder.

The file store's lock domains (``queue/.lock``, ``state/circuit-breakers.json.lock`` ...) become
advisory locks keyed by the schema and the lock's name (:meth:`Database.lock`), held until the unit
of work commits or rolls back. Waiting is bounded as the files bound it: ``lock_timeout`` (the tree's
``lock_timeout``, 10 s by default) is set for the transaction, so a wait for a domain, or for a row
another unit has locked, ends in :class:`loki.errors.LockTimeout` (exit 5) naming the backend that
holds it now (its pid, application, client and since when), as the kernel's ``/proc/locks`` names the
holder of a file lock.
"""

from __future__ import annotations

from loki.errors import LockTimeout
from loki.storage.postgres.queries import query

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager
    from typing import Any

    import psycopg

    from loki.storage.postgres.session import Database

    Unit = AbstractContextManager[psycopg.Connection[Any]]

def _milliseconds(timeout: float) -> str:
    """``lock_timeout``'s value for a wait of ``timeout`` seconds (0 would mean "wait for ever" to PostgreSQL)."""
    return f"{max(int(timeout * 1000), 1)}ms"


def begin(db: Database, name: str | None, timeout: float) -> Unit:
    """A unit of work entered and holding the lock domain ``name`` (None: no domain lock, a claim's);
    when the lock cannot be had, the unit is ended again before the error is raised."""
    unit = db.transaction()
    unit.__enter__()
    if name is not None:
        try:
            hold(db, name, timeout)
        except BaseException as error:
            unit.__exit__(type(error), error, error.__traceback__)
            raise
    return unit


def end(unit: Unit, exc_type: Any, exc: Any, tb: Any, before_commit: Callable[[], None]) -> None:
    """End a unit :func:`begin` opened: ``before_commit`` writes what was staged when the block ended
    cleanly; if it fails, the unit rolls back with its error."""
    try:
        if exc_type is None:
            before_commit()
    except BaseException as error:
        unit.__exit__(type(error), error, error.__traceback__)
        raise
    unit.__exit__(exc_type, exc, tb)


def hold(db: Database, name: str, timeout: float) -> None:
    """Take the lock domain ``name`` for the current transaction, waiting at most ``timeout`` seconds.

    Raises :class:`LockTimeout` (exit 5) naming the holder when the wait runs out; the transaction
    stays usable (the wait runs in a savepoint), so the caller's ``with`` block ends it cleanly.
    """
    import psycopg

    conn = db.conn
    # The usual case in one round trip: bound the waits of this transaction, and take the lock if free.
    row = conn.execute(query("bound_and_try_domain"), (_milliseconds(timeout), name)).fetchone()
    if row is not None and row[1]:
        return
    try:
        with conn.transaction():  # a savepoint: a timed-out wait must not abort the whole unit
            db.lock(name)
    except psycopg.errors.LockNotAvailable:
        raise timed_out(db, name, timeout) from None
    # The savepoint was released, not rolled back: the lock taken inside it stays held.


def timed_out(db: Database, name: str, timeout: float) -> LockTimeout:
    """The error for a wait on ``name`` that ran out, naming who holds it now (if anyone still does)."""
    holder = holder_of(db, name)
    who = describe(holder) if holder else "its holder released it just as the wait ended"
    return LockTimeout(f"timed out after {timeout:g}s waiting for the lock {name} in {db.where}; {who}",
                       lock=name, holder=holder, timeout=timeout)


def holder_of(db: Database, name: str) -> dict[str, Any] | None:
    """The backend holding the advisory lock ``name`` now: pid, application, client, since; or None."""
    row = db.conn.execute(query("domain_holder"), (name,)).fetchone()
    if row is None:
        return None
    return {"pid": row[0], "application": row[1], "client": row[3] or row[2] or "local socket", "since": row[4]}


def describe(holder: dict[str, Any]) -> str:
    return (f"held by PostgreSQL backend pid {holder['pid']} ({holder['application'] or 'unnamed'}, "
            f"from {holder['client']}), in a transaction since {holder['since']}")
