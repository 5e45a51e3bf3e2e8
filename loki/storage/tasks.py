"""The task store: the queue's whole lock domain, spoken in tasks (docs/storage.md, "The task store").

``Queue``, ``DeadLetter``, escalations, the signal rules and the tick use only this: no domain
module names a queue file, passes a ``(txn, session)`` pair around or writes the dead-letter
queue through a transaction. Every change that must be atomic (a claim with the expired leases
it requeues first, a failure that dead-letters, a cascade cancel, a human's approval) happens in
ONE :class:`TaskTxn`, committed when its ``with`` block ends without an exception and discarded
otherwise.

Why ``next_ready`` is a store method: a claim picks the best ready task. Files do that by reading
``pending`` and scanning it; PostgreSQL does it as ``SELECT ... ORDER BY priority_rank, created_at
LIMIT 1 FOR UPDATE SKIP LOCKED`` and the ``UPDATE`` of the move that follows in the same
transaction, so concurrent claimers never wait for each other. Keeping the choice behind the
interface is what lets the second one exist. A claim is the one unit opened with
``transaction(claim=True)``: it only requeues expired leases (:meth:`TaskTxn.expired`) and takes a
ready task, so PostgreSQL runs it without the queue-wide lock every other unit takes (docs/postgres.md).

Lookups are by key (:meth:`TaskTxn.find`, :meth:`TaskTxn.find_by_key`), never "read every task and
search": adding one task to 100,000 pending must not read the 100,000 (an index on PostgreSQL, a
dictionary per state built once per unit on files and in memory).

This module is for type checkers and readers: domain modules import it under ``TYPE_CHECKING``
only (``typing`` costs ~10 ms, which a hook cannot pay).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Iterator
from typing import Any, Protocol

Task = dict[str, Any]
Entry = dict[str, Any]
"""A dead-letter (or abandoned) entry: the reference's format, the whole task in ``task_data``."""


class Census(Protocol):
    """Why ``next_ready`` found nothing: counts the domain turns into the one-line reason."""

    pending: int
    other_type: int
    waiting: int
    next_time: str | None
    deferred: int
    deferred_until: str | None
    held: int
    on_dependencies: list[str]
    skipped: dict[str, int]
    busy: int
    """Ready, but locked by another unit of work at that instant (PostgreSQL's SKIP LOCKED; 0 elsewhere)."""


class TaskTxn(Protocol):
    """One unit of work over the queue domain (the lock is held from ``__enter__`` to ``__exit__``).

    Records returned are the unit's own: change them in place, then say so with :meth:`update`
    (or :meth:`put`/:meth:`move`), which is what gets written at commit.
    """

    dead_lettered: list[Task]
    """Tasks this unit moved to the dead-letter queue (their type's breaker hears of it after commit)."""

    def __enter__(self) -> TaskTxn: ...
    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None: ...

    # -- the hot states (pending, in-progress, blocked, completed, failed, cancelled) ---------------
    def tasks(self, state: str) -> list[Task]:
        """The tasks in ``state``, in insertion order (read only: change them through the methods below)."""
    def find(self, task_id: str, states: Iterable[str] = ...) -> tuple[str, Task] | None:
        """``(state, task)`` if ``task_id`` is in one of ``states`` (the hot states by default; ``dead-letter``
        and ``abandoned`` give the entry's ``task_data``); a lookup by id, not a scan."""
    def find_by_key(self, key: str) -> tuple[str, Task] | None:
        """The task holding idempotency key ``key``: hot, then dead-letter and abandoned (``task_data``),
        then archived."""
    def find_outside(self, task_id: str) -> tuple[str, Task] | None:
        """A task in the dead-letter queue, abandoned, or archived: ``(state, task)``."""
    def put(self, state: str, task: Task) -> None:
        """Add ``task`` to ``state`` (its ``status`` becomes ``state``)."""
    def remove(self, state: str, task: Task) -> None: ...
    def move(self, task: Task, source: str, target: str) -> None: ...
    def update(self, state: str, *tasks: Task) -> None:
        """``tasks`` in ``state`` were changed in place: write them (and validate them) at commit."""
    def next_ready(self, types: Collection[str], now: str, *, not_after: str,
                   skip_types: Collection[str] = ...) -> tuple[Task | None, Census]:
        """The best ready pending task: priority (high, medium, low), then oldest, then insertion.

        Ready: of one of ``types`` (any when empty) and not of ``skip_types``; not deferred
        (``deferred.until`` at or before ``now``); ``available_at`` at or before ``now`` (or after
        ``not_after``: written under a clock since set back); not held in place by a Loki Mode
        claim; every dependency completed (hot or archived). The rule is
        :func:`loki.tasks.readiness.select_ready`, which both stores that scan in Python run. The census
        says why nothing is ready; it is only counted when no task is returned.
        """
    def expired(self, now: str) -> list[Task]:
        """In-progress tasks whose lease ended before ``now``, or that have none, in insertion order
        (on files and in memory also those whose lease is not one loki gives:
        :func:`loki.tasks.record.plausible_lease`).

        In a claim unit on PostgreSQL they are locked with SKIP LOCKED: a lease another claimer is
        requeueing at that instant is left to it."""
    def newest_in_progress(self) -> str | None:
        """The latest ``claimed_at`` or ``updated_at`` (a claim, a heartbeat) among the in-progress tasks
        with a plausible lease (:func:`loki.tasks.record.plausible_lease`), or None: on a machine's own
        clock, the evidence that this clock is behind the tree's (the lease bounds, docs/queue.md)."""
    def waiting_chain(self, task_ids: Iterable[str]) -> list[Task]:
        """The pending and blocked tasks among ``task_ids`` and those they depend on, directly or through
        each other, in the order ``tasks("pending") + tasks("blocked")`` lists them: all that decides
        whether they can ever be ready (:func:`loki.queue.queue.never_ready`)."""

    # -- dead-letter and abandoned ---------------------------------------------------------------
    def spend_totals(self) -> dict[str, Any] | None:
        """The running totals of usage (loki/tasks/totals.py) as this unit sees them; None when absent."""
    def set_spend_totals(self, doc: dict[str, Any]) -> None:
        """Stage the totals, written with the unit's tasks (one unit of work)."""
    def dead_letters(self) -> list[Entry]: ...
    def dead_letter_metadata(self) -> dict[str, Any]: ...
    def find_dead_letter(self, task_id: str) -> Entry | None: ...
    def dead_letter(self, entry: Entry) -> None:
        """Append ``entry`` (made by :func:`loki.tasks.deadentry.make_entry`)."""
    def update_dead_letter(self, *entries: Entry) -> None: ...
    def recover(self, entry: Entry) -> Task:
        """Take ``entry`` out of the dead-letter queue as a recovery; returns its task."""
    def abandon(self, entry: Entry, reason: str, now: str) -> Entry:
        """Move ``entry`` to abandoned with ``reason``; returns the abandoned record."""
    def mark_reviewed(self, now: str) -> None: ...
    def abandoned(self) -> list[Entry]: ...
    def put_abandoned(self, record: Entry) -> None:
        """Add an abandoned record as it is (``loki migrate``; :meth:`abandon` makes new ones)."""

    # -- the archive -----------------------------------------------------------------------------
    def rotate(self, state: str, limit: int) -> None:
        """Archive the oldest finished tasks of ``state`` beyond ``limit`` (down to 90 % of it)."""
    def find_archived(self, task_id: str) -> tuple[str, Task] | None: ...
    def find_archived_by_key(self, key: str) -> tuple[str, Task] | None: ...
    def archive(self, state: str, tasks: list[Task]) -> None:
        """Put finished tasks of ``state`` straight into the archive (``loki migrate``)."""


class TaskStore(Protocol):
    """The queue domain of one tree. ``transaction()`` for changes; the rest reads without the lock."""

    def transaction(self, *, claim: bool = False) -> TaskTxn:
        """A unit of work. ``claim``: it only requeues expired leases and takes a ready task (and
        records what that needs), so PostgreSQL runs it without the queue-wide lock."""
    def view(self, states: Iterable[str]) -> dict[str, list[Any]]:
        """A consistent read of several states without the lock: tasks, or entries for dead-letter and
        abandoned."""
    def tasks_in(self, state: str) -> list[Task]:
        """One state's tasks, read without the lock (a cheap "is anything to do?" check)."""
    def dead_letter_doc(self) -> dict[str, Any]:
        """``{"tasks": [entries], "metadata": {...}}``, read without the lock."""
    def spend_totals(self) -> dict[str, Any] | None:
        """The running totals of usage, read without the lock; None when absent."""
    def change_token(self, state: str) -> Hashable | None:
        """Equal tokens: ``state`` (a hot state, dead-letter or abandoned) has not changed in between."""
    def find_archived(self, task_id: str) -> tuple[str, Task] | None: ...
    def find_archived_by_key(self, key: str) -> tuple[str, Task] | None: ...
    def archived(self) -> Iterator[tuple[str, Task]]:
        """Every archived ``(state, task)``, streamed (the archive grows without bound)."""
