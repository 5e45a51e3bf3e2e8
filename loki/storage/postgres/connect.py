"""Reaching a tree's database: the URL, the driver, and errors a user can act on.

Where the URL comes from: ``LOKI_DATABASE_URL`` when set, else the ``storage.database`` of the tree's
``config/loki.json``. The saved URL never holds a password (:func:`without_password`): libpq's own
``PGPASSWORD``, ``PGPASSFILE``/``~/.pgpass`` and the other ``PG*`` variables supply what it leaves out,
so a secret never lands in the tree or a log.

Exit codes (docs/design.md §5): what stops a tree from being opened at all -- psycopg missing, a
malformed URL, a refused password, no such database, a host that cannot be reached within the retry
window -- is exit 1 (:class:`DatabaseError`), with one line naming the database (password removed)
and the server's reason. A connection lost in the middle of a run is retried within the same bounded
window and then is exit 5 (:class:`DatabaseUnavailable`), like a lock that cannot be had; a unit of
work whose connection dropped under it (``pg_terminate_backend``, a server restarted with ``-m
immediate``: "consuming input failed", "server closed the connection") is exit 5 too, saying that
nothing of it was applied and that running it again is safe. Any other error of the driver is exit 1
(:class:`DatabaseError`) naming the database: :func:`as_loki_error` is the one mapping, so no driver
error ever reaches a person as "internal error".

A retry that starts says so at once on stderr, once per wait, naming what it waits for
(:func:`connect`): an unreachable database is never ten seconds of silence.
"""

from __future__ import annotations

import os
import sys
import time

from loki.errors import ExitCode, LokiError

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

    import psycopg

EXTRA = "pip install 'loki-state[postgres]'"  # the distribution's name: `loki` on the index is another project
URL_ENV = "LOKI_DATABASE_URL"
RETRY_ENV = "LOKI_DB_RETRY_SECONDS"
DEFAULT_RETRY_SECONDS = 10.0
CONNECT_TIMEOUT_SECONDS = 5
"""libpq's connect_timeout: a host that drops packets fails in seconds, never hangs."""


class DatabaseError(LokiError):
    """The tree's database cannot be used: bad URL, refused login, no such database, another app's
    tables, a schema newer than this loki, the driver missing (exit 1)."""

    kind = "database_error"


class DatabaseUnavailable(LokiError):
    """The database went away mid-run and did not come back within the retry window (exit 5)."""

    exit_code = ExitCode.LOCK_TIMEOUT
    kind = "database_unavailable"


def driver() -> Any:
    """psycopg, or a clear error naming the extra that installs it."""
    try:
        import psycopg
    except ImportError:
        raise DatabaseError(f"this tree is on PostgreSQL, and PostgreSQL support is not installed: {EXTRA}",
                            missing="psycopg") from None
    return psycopg


def is_database_url(text: str) -> bool:
    return text.startswith(("postgresql://", "postgres://"))


def without_password(url: str) -> str:
    """``url`` as it may be saved or printed: no password, no query parameter that can hold a secret
    (``password``, ``sslpassword``, ...), read the way libpq reads it; never raises (loki/storage/postgres/urls.py)."""
    from loki.storage.postgres.urls import shown

    return shown(url)


def check_url(url: str, where: str = URL_ENV) -> str:
    """Refuse what is not a PostgreSQL URL before any connection is tried (exit 1, naming it)."""
    if not is_database_url(url):
        raise DatabaseError(f"{where}: {without_password(url)!r} is not a PostgreSQL URL "
                            "(postgresql://[user@]host[:port]/database)", field=where)
    _refuse_malformed(url, where)
    return url


def _refuse_malformed(url: str, where: str) -> None:
    """What libpq would misread, or answer by quoting the password back, is refused first (exit 1), in
    words that quote none of the URL's secrets."""
    from loki.storage.postgres.urls import names_database, problem

    why = problem(url)
    if why is not None:
        raise DatabaseError(f"{where}: {without_password(url)!r} is not a valid URL: {why}", field=where)
    if not names_database(url):
        raise DatabaseError(f"{where}: {without_password(url)!r} names no database (…/DATABASE)", field=where)


def retry_seconds() -> float:
    raw = os.environ.get(RETRY_ENV)
    if raw is None:
        return DEFAULT_RETRY_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:
        from loki.errors import InvalidArgument

        raise InvalidArgument(f"{RETRY_ENV}={raw!r} must be a number of seconds from 0 to 3600", field=RETRY_ENV)
    return value


_TRANSIENT_MARKERS = (
    "connection refused", "the database system is starting up", "the database system is shutting down",
    "the database system is in recovery mode", "server closed the connection", "no such file or directory",
    "terminating connection due to administrator command", "could not receive data", "timeout expired",
    "connection timed out", "consuming input failed", "server conn crashed", "the connection is lost",
)


def is_transient(exc: BaseException) -> bool:
    """A failure that a restarting or briefly unreachable server explains (worth a retry)."""
    text = str(exc).lower()
    return any(marker in text for marker in _TRANSIENT_MARKERS)


def describe(exc: BaseException) -> str:
    """The server's or libpq's reason, on one line, without the password."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    reason = lines[0] if lines else type(exc).__name__
    # libpq repeats the conninfo's host in its messages, never the password; trim its prefix noise
    return reason.removeprefix("connection failed: ")


def connect(url: str, *, autocommit: bool = False, application_name: str = "loki",
            mid_run: bool = False) -> psycopg.Connection[Any]:
    """A connection to ``url``, retried while the server is restarting or unreachable.

    Transient failures are retried with a growing pause for up to ``LOKI_DB_RETRY_SECONDS`` (10 s);
    past that, :class:`DatabaseError` (exit 1), or :class:`DatabaseUnavailable` (exit 5) when the
    connection was lost ``mid_run``. A refused password or a missing database is not retried.
    """
    pg = driver()
    window = retry_seconds()
    deadline = time.monotonic() + window
    pause = 0.05
    said = False
    while True:
        try:
            conn: psycopg.Connection[Any] = pg.connect(
                url, autocommit=autocommit, connect_timeout=CONNECT_TIMEOUT_SECONDS, application_name=application_name)
            return conn
        except pg.Error as exc:
            if is_transient(exc) and time.monotonic() + pause < deadline:
                if not said:  # once per wait, before the first pause: a person sees at once what loki waits for
                    say_retrying(url, exc, window)
                    said = True
                time.sleep(pause)
                pause = min(pause * 2, 1.0)
                continue
            raise unreachable(url, exc, mid_run=mid_run) from None


def _scrubbed(reason: str, url: str) -> str:
    """The driver's reason without any part of the URL that can hold a secret: libpq and psycopg quote
    the token they could not read (a password's tail after an unescaped '@' became a host name)."""
    from loki.storage.postgres.urls import scrub

    return scrub(reason, url)


def say_retrying(url: str, exc: BaseException, window: float) -> None:
    """One line on stderr: what loki is waiting for, why, and for how long at most."""
    try:
        sys.stderr.write(f"loki: cannot reach the database {without_password(url)} ({describe(exc)}); "
                         f"retrying for up to {window:g}s ({RETRY_ENV})\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed (a daemonised agent): the wait goes on regardless
        pass


def as_loki_error(url: str | None, exc: BaseException, *, conn: Any = None) -> LokiError:
    """Any error of the driver as loki's: a connection that dropped (or a server going away) is
    :class:`DatabaseUnavailable` (exit 5: nothing of the interrupted unit was applied; run it again);
    anything else the server or libpq refused is :class:`DatabaseError` (exit 1), naming the database
    (``url`` None: the CLI's last resort, which does not know which)."""
    pg = driver()
    broken = conn is not None and (conn.closed or conn.broken)
    if isinstance(exc, (pg.OperationalError, pg.InterfaceError)) and (broken or is_transient(exc)):
        return dropped(url, exc)
    where = without_password(url) if url else "the database"
    reason = describe(exc)
    return DatabaseError(f"the database {where} refused the command: {reason}", database=where, reason=reason,
                         error=type(exc).__name__)


def dropped(url: str | None, exc: BaseException) -> DatabaseUnavailable:
    """A unit of work whose connection dropped under it: the server rolled it back."""
    where = without_password(url) if url else "the database"
    reason = describe(exc)
    return DatabaseUnavailable(f"lost the connection to {where} in the middle of a command ({reason}); the "
                               "server rolled that unit of work back, so nothing of it was applied: run it again",
                               database=where, reason=reason)


def is_driver_error(exc: BaseException) -> bool:
    """An exception of psycopg's (told without importing it: the cold path does not load the driver)."""
    return type(exc).__module__.split(".", 1)[0] == "psycopg"


def unreachable(url: str, exc: BaseException, *, mid_run: bool = False) -> LokiError:
    """The error for a connection that could not be made (or kept), naming the database and the cause."""
    where = without_password(url)
    reason = _scrubbed(describe(exc), url)
    if mid_run:
        return DatabaseUnavailable(f"lost the connection to {where} and could not reconnect within "
                                   f"{retry_seconds():g}s ({RETRY_ENV}): {reason}", database=where, reason=reason)
    return DatabaseError(f"cannot connect to {where}: {reason}", database=where, reason=reason)
