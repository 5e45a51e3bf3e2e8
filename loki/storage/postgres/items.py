"""Published items, their exclusive claim, long-held locks, and what this machine keeps locally.

**Items** (signals, escalations, a compacted log's set-aside lines) are rows of ``loki_items``
keyed by their name (``signals/HUMAN_REVIEW_NEEDED.2``, ``escalations/<ts>-<task>.md``):

* ``create_unique`` inserts under the first free name (``name``, ``name-2`` ...: ``INSERT ... ON
  CONFLICT DO NOTHING``, so two machines publishing at once get two names) and notifies the
  directory's channel in the same transaction (:mod:`loki.storage.postgres.listen`). An item's
  ``mtime_ns`` is the *database's* clock plus an order number, never the publisher's: signals are
  consumed oldest first, and two machines' clocks disagree (a HUMAN_APPROVED from a machine whose
  clock is behind must not overtake the HUMAN_REVIEW_NEEDED it answers).
* ``claim_into`` moves an item into ``signals/.processing/<id>`` with one ``UPDATE`` of a row
  locked ``FOR UPDATE SKIP LOCKED``: exactly one claimer gets it and none waits for another; the
  claim is one step, so there is never a twin to drop (``claims_in_one_step``: no ``drop_twin``). ``finish``
  deletes it or moves it to quarantine or archive.
* ``item_text``, ``write_item_text``, ``item_exists``, ``remove_item``, ``item_names`` and ``item_token``
  answer for items only (None, False: not an item); :class:`loki.storage.postgres.store.PgStore` asks them
  first for the store's ``read_text``, ``write_text``, ``exists``, ``remove``, ``list`` and
  ``change_token``, then the logs, then the documents: an escalation is written by ``create_unique`` and
  then read, resolved and listed like a document.

**Long-held locks** (the signal consumer's ``state/watch.consumer.lock``: one consuming watcher per
database schema) are session-level advisory locks on a connection of their own, so the lock is free
the moment its holder's connection ends (``kill -9``, a machine gone: the server notices the closed
socket; a network that silently drops packets: TCP keepalives). ``loki_lock_holders`` names the
holder (pid, command, host, since); :meth:`PgItems.lock_holder` believes that row only while
``pg_locks`` shows its backend holding the lock, as the file store checks ``/proc/locks``.

**This machine's copies** (:meth:`PgItems.keep_local`): the PreToolUse hook reads strike state, the
prefix hints and the strike settings from local files without importing a database driver (its
cold-start budget, docs/postgres.md). The hooks that connect anyway write those copies under
``.loki/cache/`` from the database, each under the document's lock, so copies follow commit order.

A part of :class:`loki.storage.postgres.store.PgStore`, which owns one and hands it the whole store (typed
as :class:`loki.storage.postgres.shape.PgState`) for what is the store's: the size limit, the lock timeout,
and a document read or listed whole for a local copy.
"""

from __future__ import annotations

import builtins
import os
from contextlib import suppress

from loki.errors import LockTimeout, StateFileError
from loki.storage import jsonio, layout
from loki.storage.postgres import domains, listen
from loki.storage.postgres.queries import query

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Iterable
    from typing import Any

    import psycopg

    from loki.storage.postgres.memorysearch import PgMemorySearch
    from loki.storage.postgres.shape import PgState
    from loki.storage.state import MemoryRules

HELD_NAMESPACE = "loki:held"
"""The first key of the long-held advisory locks (two-int form): apart from the units' xact locks."""
PROBE_SECONDS = 1.0
"""How often a held lock's connection is checked for life when asked."""

def _without_waiting_for_the_disk(conn: psycopg.Connection[Any]) -> None:
    """Commit the current transaction without waiting for its WAL to reach the disk.

    Safe for the consumer's finish: the WAL is written in order, so the first durable commit after it makes
    it durable too, and a server crash before that loses a finish whose outcome is logged already (recovery
    finishes it again). Not for the claim: a consumer outlives a server that stops at once (it reconnects
    and carries on), so a claim lost with the server's unflushed WAL would be applied by the consumer that
    believes it holds it, and then claimed and applied again under a new id (a friction counted twice under
    restarts: tests/storage/postgres/test_postgres_faults.py)."""
    conn.execute(query("commit_without_waiting_for_the_disk"))


def _range(rel_dir: str) -> tuple[str, str]:
    """Bounds of the keys strictly under ``rel_dir`` (bytewise: ``/`` is followed by ``0``)."""
    return rel_dir + "/", rel_dir + "0"


class PgItems:
    """``create_unique``, ``claim_into``, ``finish``, ``scan``, ``entry``, ``lock``, ``observe``, ``keep_local`` ...
    (see the module)."""

    def __init__(self, store: PgState) -> None:
        self.store = store
        self.db = store.db

    # -- publishing --------------------------------------------------------------------------------

    def create_unique(self, rel_dir: str, name: str, data: bytes, *, suffix: str = "", separator: str = "-",
                      mtime_ns: int | None = None, state_file: bool = True) -> str:
        """Publish ``rel_dir/name`` (else ``name-2`` ...) without overwriting anything; returns the key.
        ``mtime_ns`` is not used: the database's clock orders items (see the module)."""
        if state_file:
            self.store.check_size(f"{rel_dir}/{name}{suffix}", len(data))
        first = f"{rel_dir}/{name}{suffix}"
        with self.db.transaction() as conn:
            taken: set[str] | None = None
            for number in range(1, 10_000):
                key = first if number == 1 else f"{rel_dir}/{name}{separator}{number}{suffix}"
                if taken is not None and key in taken:
                    continue
                row = conn.execute(query("publish_item"), (key, rel_dir, data)).fetchone()
                if row is not None:
                    listen.notify(conn, self.db, key, key)
                    return key
                if taken is None:  # one look at every taken number, rather than one insert per number
                    prefix = f"{rel_dir}/{name}{separator}"
                    taken = {str(r[0]) for r in conn.execute(query("taken_item_names"), (rel_dir, prefix)).fetchall()}
        raise StateFileError(first, "could not find a free name")

    # -- claiming (the signal consumer's protocol) ----------------------------------------------------

    def claim_into(self, rel: str, rel_dir: str, entry: str) -> bool:
        """Move an item to ``rel_dir/entry`` so that exactly one claimer gets it (False: it is gone,
        or another claimer holds it this instant). A durable commit: the claimer applies the item next, and
        must never apply one whose claim a server that stopped at once lost (:func:`_without_waiting_for_the_disk`)."""
        with self.db.transaction() as conn:
            row = conn.execute(query("claim_item"), (f"{rel_dir}/{entry}", rel_dir, rel)).fetchone()
        return row is not None

    def finish(self, rel: str, target_dir: str | None) -> None:
        """A claimed item is done: delete it, or move it into ``target_dir`` (quarantine, archive).
        Committed without waiting for the disk, as the claim is."""
        with self.db.transaction() as conn:
            _without_waiting_for_the_disk(conn)
            if target_dir is None:
                conn.execute(query("delete_item"), (rel,))
                return
            target = f"{target_dir}/{rel.rsplit('/', 1)[-1]}"
            conn.execute(query("delete_item"), (target,))  # as a rename replaces
            conn.execute(query("move_item"), (target, target_dir, rel))

    # -- looking -------------------------------------------------------------------------------------

    def _children(self, rel_dir: str) -> builtins.list[tuple[Any, ...]]:
        low, high = _range(rel_dir)
        return self.db.rows(query("item_children"), {"cut": len(low) + 1, "dir": rel_dir, "low": low, "high": high})

    def scan(self, rel_dir: str) -> builtins.list[dict[str, Any]]:
        """Every item directly under ``rel_dir`` (``{"name", "kind", "bytes", "mtime_ns"}``), and the
        directories holding items below it; unsorted."""
        return [{"name": str(name), "kind": "file", "bytes": int(size), "mtime_ns": int(mtime)} if size is not None
                else {"name": str(name), "kind": "directory", "bytes": 0, "mtime_ns": 0}
                for name, size, mtime in self._children(rel_dir)]

    def entry(self, rel: str) -> dict[str, Any] | None:
        """What is at ``rel``: an item (a file), a directory of items, or None."""
        name = rel.rsplit("/", 1)[-1]
        low, high = _range(rel)
        found = self.db.rows(query("item_entry"), {"rel": rel, "low": low, "high": high})
        if not found:
            return None
        size, mtime = found[0]
        if size is None:
            return {"name": name, "kind": "directory", "bytes": 0, "mtime_ns": 0}
        return {"name": name, "kind": "file", "bytes": int(size), "mtime_ns": int(mtime)}

    def item_bytes(self, rel: str, *, limit: int | None = None) -> bytes | None:
        """An item's bytes (None: no such item), refused over ``limit``."""
        item = self._item(rel)
        if item is None:
            return None
        data = item
        bound = self.store.max_file_bytes if limit is None else limit
        if len(data) > bound:
            raise StateFileError(rel, f"is {len(data)} bytes, over the {bound}-byte limit")
        return data

    # -- the items' answers to names the logs and the documents share (PgStore asks them first: store.py)

    def _item(self, rel: str) -> bytes | None:
        found = self.db.rows(query("item_data"), (rel,))
        return bytes(found[0][0]) if found else None

    def item_text(self, rel: str) -> str | None:
        """An item's text (None: no such item)."""
        data = self._item(rel)
        if data is None:
            return None
        try:
            return jsonio.decode_utf8(data)
        except jsonio.JsonError as exc:
            raise StateFileError(rel, exc.reason) from None

    def write_item_text(self, rel: str, text: str) -> bool:
        """Replace an item's content (an escalation's resolution); False: no such item."""
        data = text.encode("utf-8")
        self.store.check_size(rel, len(data))
        with self.db.transaction() as conn:  # the change and its notification commit together
            replaced = bool(conn.execute(query("replace_item"), (data, rel)).fetchall())
            if replaced:
                listen.notify(conn, self.db, rel, rel)
        return replaced

    def item_exists(self, rel: str) -> bool:
        return self._item(rel) is not None

    def remove_item(self, rel: str) -> bool:
        with self.db.transaction() as conn:
            removed = bool(conn.execute(query("delete_item_returning"), (rel,)).fetchall())
            if removed:
                listen.notify(conn, self.db, rel, rel)
        return removed

    def item_names(self, rel_dir: str) -> set[str]:
        """The names under ``rel_dir`` (no trailing ``/``): items and directories of items."""
        return {str(row[0]) for row in self._children(rel_dir)}

    def item_token(self, rel: str) -> Hashable | None:
        """An item's change token (None: no such item)."""
        found = self.db.rows(query("item_version"), (rel,))
        if found:
            return ("item", int(found[0][0]), int(found[0][1]))
        return None

    # -- waking a watcher -----------------------------------------------------------------------------

    def observe(self, rel_dir: str, wake: Callable[[], None]) -> listen.Listener:
        """A listener that calls ``wake`` (from its thread) whenever something is published under
        ``rel_dir`` on any machine; ``stop()`` ends it. A hint: the caller still rescans."""
        self.db.conn  # noqa: B018 -- opens the connection, which learns the schema
        assert self.db.schema is not None
        return listen.Listener(self.db.url, listen.channel(self.db.schema, rel_dir), wake).start()

    # -- long-held locks ---------------------------------------------------------------------------

    def lock(self, rel: str, timeout: float) -> PgHeldLock:
        """A session-level advisory lock (not yet taken) that a process holds while it runs."""
        return PgHeldLock(self.store, rel, timeout)

    def lock_holder(self, rel: str) -> dict[str, Any] | None:
        """Who holds the lock ``rel`` now (pid, command, host, since), or None when nobody does."""
        with self.db.transaction() as conn:  # the lock and its record as of one snapshot
            held = conn.execute(query("held_lock_backend"), (HELD_NAMESPACE, rel)).fetchone()
            if held is None:
                return None
            record = conn.execute(query("held_lock_record"), (rel, held[0])).fetchone()
        if record is not None:
            return {"pid": record[0], "host": record[1], "command": record[2], "since": record[3]}
        # Held by a backend that has not written its record yet (or never will): say what the server knows.
        return {"pid": None, "host": held[2] or "local socket", "command": held[1] or "unknown",
                "since": held[3].strftime("%Y-%m-%dT%H:%M:%SZ") if held[3] is not None else None,
                "backend_pid": held[0]}

    # -- error memory's search ------------------------------------------------------------------------

    def memory_search(self, rules: MemoryRules) -> PgMemorySearch:
        """Error memory's search in the database (tsvector, ts_rank), shared by every machine."""
        from loki.storage.postgres.memorysearch import PgMemorySearch

        return PgMemorySearch(self.store, rules)

    def index_database(self, rel: str, side_files: Iterable[str] = ()) -> str:
        """Not used on PostgreSQL (error memory searches the database: :meth:`memory_search`); an
        in-memory SQLite database if asked all the same."""
        return ":memory:"

    # -- this machine's copies for the hot path ----------------------------------------------------------

    def keep_local(self, rels: Iterable[str] = (), dirs: Iterable[str] = ()) -> builtins.list[str]:
        """Refresh this machine's copies of documents the hot path reads (``rels``; every document
        under ``dirs``) under ``.loki/cache/``; a copy of a document that is gone is removed. Returns
        the names copied. Nothing when the store was opened without a local tree."""
        if self.store.local_root is None:
            return []
        copied = []
        for rel in rels:
            self._copy_local(rel)
            copied.append(rel)
        for rel_dir in dirs:
            names = [n for n in self.store.list(rel_dir) if n.endswith(".json") and not n.startswith(".")]
            for name in names:
                self._copy_local(f"{rel_dir}/{name}")
                copied.append(f"{rel_dir}/{name}")
            self._drop_local_except(rel_dir, set(names))
        return copied

    def local_path(self, rel: str) -> str:
        local_root = self.store.local_root
        assert local_root is not None
        return os.path.join(local_root, layout.LOCAL_CACHE_DIR, *rel.split("/"))

    def _copy_local(self, rel: str) -> None:
        from loki.storage.store import atomic_write

        path = self.local_path(rel)
        with self.db.transaction():
            # The document's writers hold it: copies are written in commit order.
            domains.hold(self.db, layout.lock_for(rel), self.store.lock_timeout)
            text = self.store.read_text(rel)  # the store's: items, logs, documents
            if text is None:
                with suppress(FileNotFoundError):
                    os.unlink(path)
                return
            os.makedirs(os.path.dirname(path), exist_ok=True)
            atomic_write(path, text.encode("utf-8"), sync_dir=False)  # a cache: the database is the truth

    def _drop_local_except(self, rel_dir: str, keep: set[str]) -> None:
        directory = os.path.dirname(self.local_path(f"{rel_dir}/x"))
        try:
            present = os.listdir(directory)
        except FileNotFoundError:
            return
        for name in present:
            if name.endswith(".json") and name not in keep:
                with suppress(FileNotFoundError):
                    os.unlink(os.path.join(directory, name))


class PgHeldLock:
    """A session-level advisory lock on a connection of its own, with a holder record (see the module)."""

    def __init__(self, store: PgState, rel: str, timeout: float) -> None:
        self.store = store
        self.rel = rel
        self.timeout = timeout
        self._conn: psycopg.Connection[Any] | None = None
        self._probed = 0.0

    @property
    def held(self) -> bool:
        """Whether the lock is still ours: its connection is alive (checked at most once a second)."""
        import time

        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            return False
        if time.monotonic() - self._probed >= PROBE_SECONDS:
            return self.confirm()
        return True

    def confirm(self) -> bool:
        """Whether the lock is still ours, asked now: one round trip on its connection. The consumer asks
        before each signal, so a lock lost with its connection stops it before the next one, while the
        watcher taking over is only starting (its ``recover`` and the rules' markers handle the one in hand)."""
        import time

        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            return False
        self._probed = time.monotonic()
        try:
            conn.execute(query("probe_connection"))
        except Exception:  # the connection is gone, and the server released the lock with it
            self._close()
            return False
        return True

    def acquire(self) -> PgHeldLock:
        from loki.storage.locks import describe_command
        from loki.storage.postgres import connect as connecting

        if self.timeout <= 0:
            # A display-only watcher asks every second: one query on the store's connection while the
            # lock is held, rather than a new connection each time.
            holder = self.store.lock_holder(self.rel)
            if holder is not None:
                raise self._held(holder)
        pg = connecting.driver()
        conn = connecting.connect(self.store.db.url, autocommit=True, application_name=f"loki lock {self.rel}"[:63])
        key = (HELD_NAMESPACE, self.rel)
        try:
            if self.timeout <= 0:
                row = conn.execute(query("try_held_lock"), key).fetchone()
                got = bool(row and row[0])
            else:
                wait = pg.sql.Literal(f"{int(self.timeout * 1000)}ms")
                conn.execute(pg.sql.SQL(query("set_lock_timeout")).format(wait))
                try:
                    conn.execute(query("wait_held_lock"), key)
                    got = True
                except pg.errors.LockNotAvailable:
                    got = False
            if not got:
                raise self._held(self.store.lock_holder(self.rel))
            conn.execute(
                query("record_held_lock"),
                (self.rel, os.getpid(), os.uname().nodename, describe_command(), self.store.now_ts()))
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return self

    def _held(self, holder: dict[str, Any] | None) -> LockTimeout:
        from loki.storage.locks import describe_holder

        return LockTimeout(f"{self.rel} is held; {describe_holder(holder or {})}", lock=self.rel, holder=holder,
                           timeout=self.timeout)

    def release(self) -> None:
        conn = self._conn
        if conn is None:
            return
        try:
            conn.execute(query("forget_held_lock"), (self.rel,))
            # Unlocked here, not only by closing: the server ends a closed session a moment later, and
            # whoever asks next (a watcher taking over) must find the lock free already.
            conn.execute(query("release_held_lock"), (HELD_NAMESPACE, self.rel))
        except Exception:  # the connection is gone: so is the lock
            pass
        self._close()

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()  # ends the session: the server releases its advisory locks
            self._conn = None

    def __enter__(self) -> PgHeldLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
