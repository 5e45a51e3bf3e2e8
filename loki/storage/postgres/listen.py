"""LISTEN/NOTIFY: what wakes a watcher at once, on any machine, when a signal is published.

Every publication -- an item created (:meth:`Items.create_unique`), a line appended to a log -- runs
``pg_notify`` on the channel of its directory in the same transaction, so the notification goes out
when (and only if) it commits. So does every other write a live view shows: a unit of work on the task table
(``queue/``), a state document's transaction (its directory), an item rewritten or removed (docs/postgres.md).
A channel is named for the schema and the directory (``loki:<schema>:signals``): two teams (two schemas) in
one database never wake each other.

:class:`Listener` is what ``store.observe(dir, wake)`` returns on PostgreSQL: a thread with a
connection of its own that LISTENs and calls ``wake`` on every notification. A notification is a
hint, like a watchdog event on the files: the watcher still rescans on its timer, so a listener that
lost its connection (a server restart) only delays signals until it reconnects -- it retries with the
store's bounded retries, then every second -- and it wakes the watcher once it is back, because
whatever was published in between sent its notification to nobody.
"""

from __future__ import annotations

import hashlib
import threading

from loki.storage.postgres.queries import query

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    import psycopg

    from loki.storage.postgres.session import Database

MAX_CHANNEL = 63
"""PostgreSQL's identifier limit (NAMEDATALEN - 1): a longer channel name is hashed to fit."""
POLL_SECONDS = 0.2
"""How long one wait for notifications lasts before the thread looks at its stop flag."""
RETRY_SECONDS = 1.0


def channel(schema: str, rel_dir: str) -> str:
    """The channel of a directory of a schema's tree."""
    name = f"loki:{schema}:{rel_dir}"
    if len(name.encode("utf-8")) <= MAX_CHANNEL:
        return name
    return "loki:" + hashlib.blake2b(f"{schema}\0{rel_dir}".encode(), digest_size=16).hexdigest()


def directory_of(rel: str) -> str:
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


def notify(conn: psycopg.Connection[Any], db: Database, rel: str, payload: str) -> None:
    """Announce ``rel`` on its directory's channel (sent when the current transaction commits)."""
    assert db.schema is not None  # set when the connection was opened
    conn.execute(query("notify"), (channel(db.schema, directory_of(rel)), payload[:1000]))


class Listener:
    """A thread that calls ``wake`` whenever something is published under one directory (see the module)."""

    kind = "notify"

    def __init__(self, url: str, name: str, wake: Callable[[], None]) -> None:
        self.url = url
        self.channel = name
        self.wake = wake
        self.error: str | None = None
        """Why the listener is not listening now (None while it is)."""
        self._stop = threading.Event()
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"loki listen {name}", daemon=True)

    def start(self, timeout: float = 10.0) -> Listener:
        """Start listening; returns once the first LISTEN is in place (or ``timeout`` passed)."""
        self._thread.start()
        self._listening.wait(timeout)
        return self

    @property
    def listening(self) -> bool:
        return self._listening.is_set()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        from loki.errors import LokiError
        from loki.storage.postgres import connect as connecting

        pg = connecting.driver()
        while not self._stop.is_set():
            conn = None
            try:
                conn = connecting.connect(self.url, autocommit=True, application_name="loki watch (listen)",
                                          mid_run=True)
                conn.execute(pg.sql.SQL(query("listen")).format(pg.sql.Identifier(self.channel)))
                self.error = None
                self._listening.set()
                self.wake()  # what was published while nobody listened sent its notification to no one
                while not self._stop.is_set():
                    for _ in conn.notifies(timeout=POLL_SECONDS):
                        self.wake()
            except (pg.Error, LokiError) as exc:
                self.error = " ".join(str(getattr(exc, "message", exc)).split())
                self._listening.clear()
                self._stop.wait(RETRY_SECONDS)
            finally:
                if conn is not None:
                    conn.close()
        self._listening.clear()
