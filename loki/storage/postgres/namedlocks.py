"""A named lock of the tree (a log's, a document's) taken within the lock timeout, as on the files.

:meth:`loki.storage.postgres.session.Database.lock` waits for as long as it takes; a holder stopped
mid-transaction (SIGSTOP, a suspended laptop) would hang everyone behind it. Here the wait is bounded
by the store's ``lock_timeout`` (``SET LOCAL lock_timeout``) and ends in :class:`loki.errors.LockTimeout`
(exit 5) naming the database session that holds the lock, as the file store names the process.
"""

from __future__ import annotations

from loki.errors import LockTimeout

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from loki.storage.postgres.session import Database

_HOLDER = """
SELECT l.pid, a.application_name, a.client_addr::text, a.xact_start FROM pg_locks l
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.objid = hashtext(current_schema() || ':' || %(name)s)::oid
  AND l.classid = CASE WHEN hashtext(current_schema() || ':' || %(name)s) < 0 THEN 4294967295 ELSE 0 END::oid
LIMIT 1
"""


def take(db: Database, name: str, timeout: float) -> None:
    """Hold the lock ``name`` until the current transaction ends; :class:`LockTimeout` past ``timeout``."""
    from loki.storage.postgres import connect as connecting

    pg = connecting.driver()
    conn = db.conn
    conn.execute("SELECT set_config('lock_timeout', %s, true)", (f"{max(1, int(timeout * 1000))}ms",))
    try:
        with conn.transaction():  # a savepoint: the outer unit survives to report the timeout
            db.lock(name)
    except pg.errors.LockNotAvailable:
        raise timeout_error(db, name, timeout) from None


def timeout_error(db: Database, name: str, timeout: float) -> LockTimeout:
    row = db.conn.execute(_HOLDER, {"name": name}).fetchone()
    if row is None:
        who = "its holder has just let it go"
        holder: dict[str, object] = {}
    else:
        holder = {"backend_pid": row[0], "command": row[1] or "unknown", "host": row[2] or "local socket",
                  "since": row[3].strftime("%Y-%m-%dT%H:%M:%SZ") if row[3] is not None else None}
        who = f"held by database session {row[0]} ({holder['command']}) from {holder['host']}"
        if holder["since"]:
            who += f", in a transaction since {holder['since']}"
    return LockTimeout(f"timed out after {timeout:g}s waiting for the lock {name} in {db.where}; {who}",
                       lock=name, holder=holder, timeout=timeout)
