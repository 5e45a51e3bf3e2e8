"""The task store on PostgreSQL: tasks as rows of ``loki_tasks``, claimed with ``FOR UPDATE SKIP LOCKED``.

One row per task id, wherever the task is: a hot state, the dead-letter queue, abandoned, or the
archive (``archived``: a completed or cancelled task rotated out of the hot listing). ``doc`` is the
record as the file store writes it (the task; an entry for dead-letter and abandoned), and the
columns beside it are copies of the fields SQL decides on (priority, age, insertion order, type,
``available_at``, the lease, the idempotency key, the dependencies), written with it. The schema is
migrations/002_tasks.sql, the statements are named in sql/queries.sql (the claim and its readiness
fragments among them); why it is correct under concurrency is docs/postgres.md.

Two kinds of unit of work (:meth:`PgTasks.transaction`):

* a **claim** (``claim=True``) takes no queue-wide lock. :meth:`PgTaskTxn.expired` and
  :meth:`PgTaskTxn.next_ready` each lock the rows they return with ``FOR UPDATE SKIP LOCKED``, so
  two claimers never wait for each other: each skips the rows the other holds. The domain fills in
  the claim's fields (holder, lease, token) and moves the row; the ``UPDATE`` goes out at commit.
* **every other unit** (add, complete, fail, cancel, retry, the review, approvals, the tick ...)
  first takes the queue domain's advisory lock, so those units run one at a time, and reads the rows
  it may change ``FOR UPDATE``: a row a claimer holds is waited for (the wait is bounded by the lock
  timeout), a row such a unit holds is skipped by claimers.

A unit keeps every row it read in an identity map (the same dict for the same task, as the file
store's lists give), stages what the domain says it changed (``put``/``move``/``update``...) and
writes those rows, validated against the same schemas, before its next read and at commit.
"""

from __future__ import annotations

from contextlib import contextmanager

from loki.clock import format_ts, parse_ts
from loki.errors import Conflict, LockTimeout, StateFileError
from loki.storage import jsonio, layout
from loki.storage.postgres import domains, listen
from loki.storage.postgres.connect import driver
from loki.storage.postgres.queries import query
from loki.storage.taskbase import ABANDONED, DEAD_LETTER, HOT_STATES, abandoned_record
from loki.tasks.readiness import Census
from loki.tasks.record import PRIORITY_RANK

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Iterator
    from contextlib import AbstractContextManager
    from datetime import datetime
    from typing import Any, Protocol

    import psycopg

    from loki.storage.postgres.shape import PgState as PgStore
    from loki.storage.schema import Registry

    class Checker(Protocol):
        """A schema checker: the compiled one (a read) or jsonschema, the reference (``loki validate``)."""

        def problems(self, name: str, value: Any) -> list[tuple[str, str]]: ...

ANALYZE_AFTER = 500
"""Rows one unit adds beyond which the planner's statistics of ``loki_tasks`` are refreshed at once."""
QUEUE_CHANNEL_REL = f"{layout.QUEUE_DIR}/tasks"
"""What a write to the task table announces: a name under ``queue/``, so its notification goes to queue/'s channel."""
CLAIMED_STATES = ("pending", "in-progress", "dead-letter")
"""The states a claim moves rows between: a unit that reads any of them whole reads all three in one
statement, so a row a claimer moves at that moment is seen once, in the state it ends in."""
ENTRY_STATES = (DEAD_LETTER, ABANDONED)
SEQ = 5
"""The index of ``t.seq`` in a row read as ``task_columns, t.seq`` (the statements are sql/queries.sql's)."""


class PgTasks:
    """The queue domain of one database (:class:`loki.storage.tasks.TaskStore`)."""

    def __init__(self, store: PgStore) -> None:
        self.store = store

    def transaction(self, *, claim: bool = False) -> PgTaskTxn:
        """A unit of work: a claim takes no queue-wide lock; every other unit takes the queue's."""
        return PgTaskTxn(self, claim=claim)

    def view(self, states: Iterable[str]) -> dict[str, list[Any]]:
        """Several states as of one instant (one statement, one snapshot), in insertion order."""
        wanted = list(states)
        found: dict[str, list[Any]] = {state: [] for state in wanted}
        schemas = self.store.schemas
        for task_id, state, rank, doc in self.store.rows(query("view_states"), (wanted,)):
            found[state].append(checked(schemas, task_id, state, rank, doc))
        return found

    def tasks_in(self, state: str) -> list[dict[str, Any]]:
        return self.view([state])[state]

    def spend_totals(self) -> dict[str, Any] | None:
        """The running totals of usage (loki/tasks/totals.py): the ``queue/spend.json`` document; None when
        absent."""
        doc: dict[str, Any] | None = self.store.read(layout.SPEND)
        return doc

    def dead_letter_doc(self) -> dict[str, Any]:
        """``{"tasks": [entries], "metadata": {...}}`` as of one instant."""
        rows = self.store.rows(query("dead_letter_document"))
        schemas = self.store.schemas
        metadata = checked_metadata(schemas, rows[0][2]) if rows and rows[0][0] == 0 else _empty_metadata()
        return {"tasks": [checked(schemas, task_id, DEAD_LETTER, rank, doc)
                          for part, _, doc, task_id, rank in rows if part == 1], "metadata": metadata}

    def change_token(self, state: str) -> tuple[int, int, int] | None:
        """A fingerprint of ``state``: its row count, the sum of its rows' versions (every write gives a
        row a new, never reused one), and for dead-letter the metadata's version."""
        statement = query("dead_letter_token") if state == DEAD_LETTER else query("state_token")
        row = self.store.rows(statement, (state,))[0]
        return int(row[0]), int(row[1]), int(row[2] or 0)

    def archived(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every archived task, a page at a time (keyset on the id: the archive grows without bound)."""
        after = ""
        while True:
            page = self.store.rows(query("archived_page"), (after,))
            for task_id, state, rank, doc in page:
                yield state, checked(self.store.schemas, task_id, state, rank, doc)
                after = task_id
            if len(page) < 1000:
                return

    def find_archived(self, task_id: str) -> tuple[str, dict[str, Any]] | None:
        found = self.store.rows(query("archived_by_id"), (task_id,))
        return self._archived_row(found)

    def find_archived_by_key(self, key: str) -> tuple[str, dict[str, Any]] | None:
        found = self.store.rows(query("archived_by_key"), (key_digest(key),))
        return self._archived_row(found)

    def _archived_row(self, found: list[tuple[Any, ...]]) -> tuple[str, dict[str, Any]] | None:
        if not found:
            return None
        task_id, state, rank, doc = found[0]
        return state, checked(self.store.schemas, task_id, state, rank, doc)


class _Row:
    """A task id as this unit knows it: where it is now (None: nowhere), its record, whether the
    table has a row for it (``stored``: None when never looked up)."""

    __slots__ = ("archived", "doc", "state", "stored")

    def __init__(self, state: str | None, doc: Any, archived: bool, stored: bool | None) -> None:
        self.state = state
        self.doc = doc
        self.archived = archived
        self.stored = stored


class PgTaskTxn:
    """One unit of work over the queue domain (see the module's docstring for the two kinds)."""

    def __init__(self, owner: PgTasks, *, claim: bool) -> None:
        self._owner = owner
        self.store = owner.store
        self.claim = claim
        self.dead_lettered: list[dict[str, Any]] = []
        self._rows: dict[str, _Row] = {}
        self._lists: dict[str, list[dict[str, Any]]] = {}
        self._dirty: dict[str, None] = {}
        """Ids whose rows must be written (insertion-ordered set)."""
        self._fresh: dict[str, None] = {}
        """Ids put into a state by this unit, in the order they were put: each takes a new ``seq``."""
        self.inserted = 0
        """Rows this unit added: after a large batch, the planner's statistics are refreshed (see __exit__)."""
        self._metadata: dict[str, Any] | None = None
        self._metadata_dirty = False
        self._spend: tuple[dict[str, Any] | None] | None = None
        """The totals document as this unit read (or staged) it, once read."""
        self._spend_dirty = False
        self._announced = False
        """Whether this unit has sent its notification (queue/'s channel, at commit: :meth:`_announce`)."""
        self._unit: AbstractContextManager[psycopg.Connection[Any]] | None = None

    # -- the unit --------------------------------------------------------------------------------

    def __enter__(self) -> PgTaskTxn:
        # A claim takes no queue-wide lock: its rows are locked with SKIP LOCKED (docs/postgres.md).
        self._unit = domains.begin(self.store.db, None if self.claim else layout.QUEUE_LOCK, self.store.lock_timeout)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        unit = self._unit
        assert unit is not None, "use the unit of work in a with block"
        self._unit = None
        domains.end(unit, exc_type, exc, tb, self._flush)
        if exc_type is None and self.inserted >= ANALYZE_AFTER:
            # A big batch leaves the statistics saying "a few pending rows" until autovacuum comes by (up to
            # a minute): the planner would then sort every pending row for each claim instead of reading
            # the claim index from its front. Counting them again takes a sample, tens of milliseconds.
            self.store.rows(query("analyze_tasks"))

    def _execute(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        """One statement of this unit (its refusals: :meth:`_refusals`)."""
        with self._refusals():
            cursor = self.store.db.conn.execute(sql, params)
            return cursor.fetchall() if cursor.description is not None else []

    def _execute_many(self, sql: str, params: list[dict[str, Any]]) -> None:
        """``sql`` for each of ``params``, in order, pipelined (one round trip for a batch of adds)."""
        if len(params) == 1:
            self._execute(sql, params[0])
            return
        with self._refusals(), self.store.db.conn.cursor() as cursor:
            cursor.executemany(sql, params)

    @contextmanager
    def _refusals(self) -> Iterator[None]:
        """What the server refuses, in loki's terms: a lock wait that ran out is exit 5, a duplicate id or
        key exit 4."""
        psycopg = driver()
        try:
            yield
        except psycopg.errors.LockNotAvailable:
            raise self._row_wait_error() from None
        except psycopg.errors.UniqueViolation as exc:
            detail = (exc.diag.message_detail or str(exc)).strip()
            raise Conflict(f"the task store refused a duplicate: {detail}") from None

    def _row_wait_error(self) -> LockTimeout:
        timeout = self.store.lock_timeout
        return LockTimeout(f"timed out after {timeout:g}s waiting for tasks another process holds in "
                           f"{self.store.db.where} (a claim or a command in the middle of its work)",
                           lock=layout.QUEUE_LOCK, timeout=timeout)

    def _lock(self) -> str:
        """How this unit reads rows it may change: a claim never waits; every other unit locks them."""
        return "" if self.claim else " " + query("lock_rows")

    # -- the identity map ------------------------------------------------------------------------

    def _known(self, task_id: str, state: str, archived: bool, doc: Any, rank: int) -> _Row:
        """The unit's row for a row the table returned: the one it already has, else this one, checked
        first (a row edited with psql is refused by name before the domain sees it)."""
        row = self._rows.get(task_id)
        if row is None or row.stored is False:
            row = self._rows[task_id] = _Row(state, checked(self.store.schemas, task_id, state, rank, doc),
                                             archived, True)
        return row

    def _merge(self, found: Iterable[tuple[Any, ...]]) -> list[_Row]:
        return [self._known(task_id, state, archived, doc, rank) for task_id, state, archived, doc, rank, *_ in found]

    def _row(self, task_id: str) -> _Row:
        """The unit's row for ``task_id``, read (and, outside a claim, locked) on first use."""
        row = self._rows.get(task_id)
        if row is None:
            found = self._execute(query("task_by_id") + self._lock(), (task_id,))
            row = self._merge(found)[0] if found else _Row(None, None, False, False)
            self._rows[task_id] = row
        return row

    def _load(self, state: str) -> list[dict[str, Any]]:
        """The live list of ``state`` (a hot state, dead-letter or abandoned), read whole on first use."""
        if state not in self._lists:
            group = CLAIMED_STATES if state in CLAIMED_STATES and not self.claim else (state,)
            self._flush()
            found = self._execute(query("tasks_in_states") + self._lock(), (list(group),))
            # FOR UPDATE may return a row it waited for out of ORDER BY's order: sort after the locks.
            rows = self._merge(sorted(found, key=lambda r: r[SEQ]))
            for name in group:
                if name not in self._lists:
                    self._lists[name] = [row.doc for row in rows if row.state == name and not row.archived]
        return self._lists[state]

    # -- writing -----------------------------------------------------------------------------------

    def _stage(self, task_id: str, state: str | None, doc: Any, *, fresh: bool) -> _Row:
        row = self._rows.get(task_id)
        if row is None:
            row = self._rows[task_id] = _Row(None, None, False, None)
        previous = row.state
        if previous is not None and previous in self._lists and not row.archived:
            _drop(self._lists[previous], row.doc)
        row.state, row.doc = state, doc
        if state is not None and state in self._lists:
            self._lists[state].append(doc)
        self._dirty[task_id] = None
        if fresh:
            self._fresh.pop(task_id, None)
            self._fresh[task_id] = None
        return row

    def spend_totals(self) -> dict[str, Any] | None:
        # A document row in this unit's transaction: written only by units holding the queue's lock (a claim
        # records no usage), so the entry and its total commit together.
        if self._spend is None:
            self._spend = (self.store.read(layout.SPEND),)
        return self._spend[0]

    def set_spend_totals(self, doc: dict[str, Any]) -> None:
        self._spend, self._spend_dirty = (doc,), True

    def _flush(self) -> None:
        """Write every staged row (deletions, then changes in place, then rows put, in put order)."""
        if self._spend_dirty and self._spend is not None:
            self._execute(query("put_document"), (layout.SPEND, self.store.encode(layout.SPEND, self._spend[0]), None))
            self._spend_dirty = False
        if self._metadata_dirty and self._metadata is not None:
            self.store.schemas.validate("deadletter-file.json", {"tasks": [], "metadata": self._metadata},
                                        "the dead-letter metadata")
            self._execute(query("write_dead_letter_metadata"), (jsonio.dumps_compact(self._metadata),))
            self._metadata_dirty = False
            self._announce()
        if not self._dirty:
            return
        self._announce()
        dirty, fresh = self._dirty, self._fresh
        self._dirty, self._fresh = {}, {}
        gone = [task_id for task_id in dirty if self._rows[task_id].state is None and self._rows[task_id].stored]
        if gone:
            self._execute(query("delete_tasks"), (gone,))
        for task_id in gone:
            self._rows[task_id].stored = False
        kept = [task_id for task_id in dirty if task_id not in fresh and self._rows[task_id].state is not None]
        batch: list[dict[str, Any]] = []
        update, insert = query("update_task"), query("insert_task")
        statement = update
        for task_id in [*kept, *(t for t in fresh if t in dirty and self._rows[t].state is not None)]:
            row = self._rows[task_id]
            wanted = update if row.stored else insert
            if wanted is not statement and batch:
                self._execute_many(statement, batch)  # in order: each row put takes the next seq
                batch = []
            statement = wanted
            batch.append(self._params(task_id, row, fresh=task_id in fresh))
            if not row.stored:
                self.inserted += 1
            row.stored = True
        if batch:
            self._execute_many(statement, batch)

    def _announce(self) -> None:
        """NOTIFY queue/'s channel once per unit that writes (sent when it commits, with nothing if it rolls
        back): the task table's change feed, which ``store.observe("queue", ...)`` listens to. A claim, a
        completion, a lease renewal or a failure then reaches a board of ``loki serve`` at once, on any machine,
        where it would wait for a look at the table (docs/serve.md, "The board")."""
        if not self._announced:
            self._announced = True
            listen.notify(self.store.db.conn, self.store.db, QUEUE_CHANNEL_REL, "tasks")

    def _params(self, task_id: str, row: _Row, *, fresh: bool) -> dict[str, Any]:
        """The row as it is written: the record, validated, and the columns copied from it."""
        state = row.state
        assert state is not None
        self._validate(task_id, state, row.doc)
        doc = jsonio.dumps_compact(row.doc)
        self.store.check_size(f"task {task_id}", len(doc.encode("utf-8")))
        return {"id": task_id, "state": state, "archived": row.archived, "fresh": fresh, "doc": doc,
                **derived_columns(state, row.doc)}

    def _validate(self, task_id: str, state: str, doc: Any) -> None:
        """Each record against the schema the file store checks it with (every write: as LOKI_VALIDATE_ALL)."""
        schemas = self.store.schemas
        where = f"the task store's {state} row {task_id!r}"
        if state == DEAD_LETTER:
            schemas.validate("deadletter-entry.json", doc, where)
        elif state == ABANDONED:
            schemas.validate("abandoned-file.json", {"version": 1, "tasks": [doc]}, where)
        else:
            schemas.validate("task.json", doc, where)

    # -- hot states --------------------------------------------------------------------------------

    def tasks(self, state: str) -> list[dict[str, Any]]:
        return self._load(state)

    def find(self, task_id: str, states: Iterable[str] = HOT_STATES) -> tuple[str, dict[str, Any]] | None:
        row = self._row(task_id)
        if row.state is None or row.archived or row.state not in tuple(states):
            return None
        return row.state, _task_of(row.state, row.doc)

    def find_by_key(self, key: str) -> tuple[str, dict[str, Any]] | None:
        self._flush()
        found = self._execute(query("task_by_key") + self._lock(), (key_digest(key),))
        for row in self._merge(found):
            if row.state is not None:
                return row.state, _task_of(row.state, row.doc)
        return None

    def find_outside(self, task_id: str) -> tuple[str, dict[str, Any]] | None:
        row = self._row(task_id)
        if row.state in ENTRY_STATES or (row.state is not None and row.archived):
            return row.state, _task_of(row.state, row.doc)
        return None

    def find_archived(self, task_id: str) -> tuple[str, dict[str, Any]] | None:
        row = self._row(task_id)
        return (row.state, row.doc) if row.state is not None and row.archived else None

    def find_archived_by_key(self, key: str) -> tuple[str, dict[str, Any]] | None:
        self._flush()
        found = self._execute(query("archived_task_by_key"), (key_digest(key),))
        for row in self._merge(found):
            if row.state is not None and row.archived:
                return row.state, row.doc
        return None

    def put(self, state: str, task: dict[str, Any]) -> None:
        task["status"] = state
        self._stage(task["id"], state, task, fresh=True)

    def remove(self, state: str, task: dict[str, Any]) -> None:
        self._stage(task["id"], None, None, fresh=False)

    def move(self, task: dict[str, Any], source: str, target: str) -> None:
        self.remove(source, task)
        self.put(target, task)

    def update(self, state: str, *tasks: dict[str, Any]) -> None:
        for task in tasks:
            self._changed(task["id"], state, task)

    def _changed(self, task_id: str, state: str, record: dict[str, Any]) -> None:
        """``record`` (in ``state``) was changed in place: write it."""
        if task_id not in self._rows or self._rows[task_id].state is None:
            self._rows[task_id] = _Row(state, record, False, None)
        self._dirty[task_id] = None

    def next_ready(self, types: Collection[str], now: str, *, not_after: str,
                   skip_types: Collection[str] = ()) -> tuple[dict[str, Any] | None, Census]:
        """The best ready task in one statement, locked with SKIP LOCKED; the census only when none is."""
        self._flush()
        params = {"typed": bool(types), "types": list(types), "skip": list(skip_types), "now": parse_ts(now),
                  "not_after": parse_ts(not_after)}
        found = self._execute(query("claim"), params)
        if found:
            row = self._merge(found)[0]
            return row.doc, Census(0)
        return None, self._census(params)

    def _census(self, params: dict[str, Any]) -> Census:
        census = Census(0)
        for why, skipped_type, count, earliest, on_dependencies in self._execute(query("census"), params):
            census.pending += count
            if why == "other":
                census.other_type += count
            elif why == "waiting":
                census.waiting += count
                census.next_time = format_ts(earliest)
            elif why == "deferred":
                census.deferred += count
                census.deferred_until = format_ts(earliest)
            elif why == "held":
                census.held += count
            elif why == "deps":
                census.on_dependencies = list(on_dependencies)
            elif why == "skipped":
                census.skipped[skipped_type] = count
            else:
                census.busy += count
        return census

    def expired(self, now: str) -> list[dict[str, Any]]:
        self._flush()
        rows = self._merge(self._execute(query("expired"), (parse_ts(now),)))
        return [row.doc for row in rows if row.state == "in-progress"]

    def newest_in_progress(self) -> str | None:
        """Not a lease rule's evidence here (leases are on the database's clock), but the same answer."""
        self._flush()
        found = self._execute(query("newest_in_progress"))
        latest: str | None = found[0][0] if found else None
        return latest

    def waiting_chain(self, task_ids: Iterable[str]) -> list[dict[str, Any]]:
        wanted = list(task_ids)
        if not wanted:
            return []
        self._flush()
        found = self._execute(query("waiting_chain") + self._lock(), (wanted,))
        order = {"pending": 0, "blocked": 1}
        rows = self._merge(sorted(found, key=lambda r: (order[r[1]], r[SEQ])))
        return [row.doc for row in rows if row.state in order]

    # -- dead-letter and abandoned -------------------------------------------------------------------

    def dead_letters(self) -> list[dict[str, Any]]:
        return self._load(DEAD_LETTER)

    def abandoned(self) -> list[dict[str, Any]]:
        return self._load(ABANDONED)

    def dead_letter_metadata(self) -> dict[str, Any]:
        if self._metadata is None:
            found = self._execute(query("dead_letter_metadata" if self.claim else "dead_letter_metadata_for_update"))
            self._metadata = checked_metadata(self.store.schemas, found[0][0]) if found else _empty_metadata()
        return self._metadata

    def find_dead_letter(self, task_id: str) -> dict[str, Any] | None:
        row = self._row(task_id)
        entry: dict[str, Any] | None = row.doc if row.state == DEAD_LETTER else None
        return entry

    def dead_letter(self, entry: dict[str, Any]) -> None:
        self._stage(entry["task_id"], DEAD_LETTER, entry, fresh=True)

    def update_dead_letter(self, *entries: dict[str, Any]) -> None:
        """``entries`` changed in place; and the metadata, when it was read for change (it is written whole)."""
        for entry in entries:
            self._changed(entry["task_id"], DEAD_LETTER, entry)
        if self._metadata is not None:
            self._metadata_dirty = True

    def _take_out(self, entry: dict[str, Any], counter: str) -> None:
        self.dead_letter_metadata()[counter] += 1
        self._metadata_dirty = True

    def recover(self, entry: dict[str, Any]) -> dict[str, Any]:
        self._stage(entry["task_id"], None, None, fresh=False)
        self._take_out(entry, "total_recovered")
        task: dict[str, Any] = entry["task_data"]
        return task

    def abandon(self, entry: dict[str, Any], reason: str, now: str) -> dict[str, Any]:
        record = abandoned_record(entry, reason, now)
        self._stage(entry["task_id"], ABANDONED, record, fresh=True)
        self._take_out(entry, "total_abandoned")
        return record

    def mark_reviewed(self, now: str) -> None:
        self.dead_letter_metadata()["last_reviewed"] = now
        self._metadata_dirty = True

    def put_abandoned(self, record: dict[str, Any]) -> None:
        self._stage(record["task_id"], ABANDONED, record, fresh=True)

    # -- the archive -------------------------------------------------------------------------------

    def archive(self, state: str, tasks: list[dict[str, Any]]) -> None:
        """Rows written straight into the archive (``loki migrate``): archived from the start."""
        for task in tasks:
            task["status"] = state
            row = self._stage(task["id"], state, task, fresh=True)
            if state in self._lists:
                _drop(self._lists[state], task)
            row.archived = True

    def rotate(self, state: str, limit: int) -> None:
        """Archive the oldest finished tasks of ``state`` beyond ``limit``, down to 90 % of it: rows change
        state in place (``archived``), nothing is copied or rewritten."""
        self._flush()
        hot = self._execute(query("count_hot_up_to"), (state, limit + 1))[0][0]
        if hot <= limit:
            return
        total = self._execute(query("count_hot"), (state,))[0][0]
        for (task_id,) in self._execute(query("rotate"), (state, total - (limit - limit // 10))):
            row = self._rows.get(task_id)
            if row is not None:
                if state in self._lists:
                    _drop(self._lists[state], row.doc)
                row.archived = True


DERIVED = ("priority_rank", "created_at", "available_at", "type", "claimed_by", "lease_until", "deferred_until",
           "key_digest", "dependencies", "labels", "finished_at")
"""The columns copied from a row's record (what SQL decides on), in :func:`derived_columns`' order (and in
the order the queries ``every_hot_row_unchecked`` and ``every_archived_row_unchecked`` read them)."""


def derived_columns(state: str, record: dict[str, Any]) -> dict[str, Any]:
    """The columns a row's record gives (written with it; ``loki validate`` compares them with the row's)."""
    task: Any = record["task_data"] if state in ENTRY_STATES else record
    deferred = task.get("deferred")
    return {
        "priority_rank": PRIORITY_RANK.get(task.get("priority"), PRIORITY_RANK["medium"]),
        "created_at": _text(task.get("created_at")), "available_at": _ts(task.get("available_at")),
        "type": _text(task.get("type")), "claimed_by": _text(task.get("claimed_by")),
        "lease_until": _ts(task.get("lease_until")),
        "deferred_until": _ts(deferred.get("until")) if isinstance(deferred, dict) else None,
        "key_digest": key_digest(task["idempotency_key"]) if task.get("idempotency_key") else None,
        "dependencies": [_text(dep) for dep in task.get("dependencies") or []],
        "labels": [_text(label) for label in task.get("labels") or []],
        "finished_at": _text(task.get("completed_at") or task.get("updated_at") or task.get("created_at")),
    }


def every_row(store: PgStore) -> Iterator[tuple[str, str, bool, Any, dict[str, Any]]]:
    """Every row of ``loki_tasks`` as stored, unchecked (``loki validate`` checks each): ``(id, state,
    archived, record or BadJson, the derived columns)``, hot rows in insertion order, then the archive a page
    at a time."""
    for task_id, state, archived, doc, *values in store.rows(query("every_hot_row_unchecked")):
        yield task_id, state, archived, doc, dict(zip(DERIVED, values, strict=True))
    after = ""
    while True:
        page = store.rows(query("every_archived_row_unchecked"), (after,))
        for task_id, state, archived, doc, *values in page:
            yield task_id, state, archived, doc, dict(zip(DERIVED, values, strict=True))
            after = task_id
        if len(page) < 1000:
            return


def column_problems(state: str, record: dict[str, Any], stored: dict[str, Any]) -> list[tuple[str, str]]:
    """The derived columns that disagree with the record (a row edited with psql): each makes SQL decide on
    something the record does not say (a claim order, a lease, a dependency)."""
    found = []
    for name, wanted in derived_columns(state, record).items():
        if stored[name] != wanted and name != "priority_rank":  # priority_rank: row_problems says it
            found.append(("", f"the row's {name} column is {stored[name]!r}, but its record gives {wanted!r}"))
    return found


def _drop(records: list[dict[str, Any]], record: Any) -> None:
    """Take ``record`` (this very object) out of a live list."""
    for index, candidate in enumerate(records):
        if candidate is record:
            del records[index]
            return


def _task_of(state: str, record: dict[str, Any]) -> dict[str, Any]:
    task: dict[str, Any] = record["task_data"] if state in ENTRY_STATES else record
    return task


def key_digest(key: str) -> str:
    """What the unique index holds for an idempotency key: its SHA-256. A key is any string, of any length
    (a btree entry may not pass ~2.7 kB) and may hold NUL, which a text column cannot; the record keeps it."""
    import hashlib

    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def _text(value: Any) -> Any:
    """A text column's copy of a field: a NUL (which PostgreSQL's text cannot hold) becomes U+FFFD there;
    the record keeps the field as it is."""
    return value.replace("\x00", "\ufffd") if isinstance(value, str) else value


def _ts(value: Any) -> datetime | None:
    """A timestamp column's value (None when the record has none it can give)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_ts(value)
    except (ValueError, OverflowError):
        return None


# -- rows read back: checked before anything trusts them ----------------------------------------------

ROW_HINT = ("the row was changed outside loki (psql?): fix it there, from what `loki validate` lists; on a database "
            "`loki doctor` reports it and changes nothing (there is no file to set aside)")
METADATA = "the dead-letter metadata (loki_queue_meta 'dead-letter')"


def row_name(task_id: str, state: str) -> str:
    """A row as messages name it (the file store names a file and a pointer; a database, the row)."""
    return f"the task store's {state} row {task_id!r}"


def row_problems(schemas: Checker, task_id: str, state: str, rank: Any, doc: Any) -> list[tuple[str, str]]:
    """What is wrong with a row of ``loki_tasks`` as read back: its record breaks its schema or is not strict
    JSON (``BadJson``), names another id than the row, or ``priority_rank`` (what claims order by)
    disagrees with the record's priority. Empty: the row is what loki would have written."""
    from loki.storage.postgres.session import BadJson

    if isinstance(doc, BadJson):
        return [("", f"doc is not strict JSON: {doc.reason}")]
    if not isinstance(doc, dict):
        return [("", f"doc is {_json_type(doc)}, not an object (a task record)")]
    entry = state in ENTRY_STATES
    if state == DEAD_LETTER:
        found = schemas.problems("deadletter-entry.json", doc)
    elif state == ABANDONED:
        found = [(p.removeprefix("/tasks/0"), m)
                 for p, m in schemas.problems("abandoned-file.json", {"version": 1, "tasks": [doc]})]
    else:
        found = schemas.problems("task.json", doc)
    field = "task_id" if entry else "id"
    if doc.get(field) != task_id:
        found.append((f"/{field}", f"doc's {field} is {doc.get(field)!r}, not the row's id {task_id!r}"))
    task = doc.get("task_data") if entry else doc
    if isinstance(task, dict):
        if entry and task.get("id") != task_id:
            found.append(("/task_data/id", f"the entry's task_data.id is {task.get('id')!r}, not the row's id "
                                           f"{task_id!r}"))
        priority = task.get("priority")
        wanted = PRIORITY_RANK.get(priority) if isinstance(priority, str) else None
        if wanted is not None and rank != wanted:
            found.append(("/task_data/priority" if entry else "/priority",
                          f"the row's priority_rank {rank} disagrees with the record's priority "
                          f"{priority!r} (rank {wanted}): claims would take it out of order"))
    return found


def checked(schemas: Registry, task_id: str, state: str, rank: Any, doc: Any) -> Any:
    """``doc``, once :func:`row_problems` finds nothing; else the first problem, naming the row (exit 1)."""
    found = row_problems(schemas, task_id, state, rank, doc)
    if found:
        pointer, reason = found[0]
        raise StateFileError(row_name(task_id, state), reason, pointer, hint=ROW_HINT)
    return doc


def metadata_problems(schemas: Checker, value: Any) -> list[tuple[str, str]]:
    from loki.storage.postgres.session import BadJson

    if isinstance(value, BadJson):
        return [("", f"not strict JSON: {value.reason}")]
    if not isinstance(value, dict):
        return [("", f"is {_json_type(value)}, not an object (last_reviewed, total_abandoned, total_recovered)")]
    return [(p.removeprefix("/metadata"), m)
            for p, m in schemas.problems("deadletter-file.json", {"tasks": [], "metadata": value})]


def checked_metadata(schemas: Registry, value: Any) -> dict[str, Any]:
    found = metadata_problems(schemas, value)
    if found:
        pointer, reason = found[0]
        raise StateFileError(METADATA, reason, pointer, hint=ROW_HINT)
    metadata: dict[str, Any] = value
    return metadata


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    return names.get(type(value), "a number")


def _empty_metadata() -> dict[str, Any]:
    return {"last_reviewed": None, "total_abandoned": 0, "total_recovered": 0}



if TYPE_CHECKING:
    from loki.storage.tasks import TaskStore, TaskTxn

    def _implements_the_task_store(tasks: PgTasks) -> None:
        """Never called: mypy (``make lint``) checks here that the task store satisfies its protocol."""
        store: TaskStore = tasks
        unit: TaskTxn = tasks.transaction()
        del store, unit
