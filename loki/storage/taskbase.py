"""What every task store shares: the state names, the unit of work's common half, the archive's rotation.

The file store (:mod:`loki.storage.filetasks`) and the memory store (:mod:`loki.storage.memory`) subclass
:class:`TaskTxnBase`; the PostgreSQL store (:mod:`loki.storage.postgres.tasks`) takes the state names and
:func:`abandoned_record` from here. No backend imports another's module for them.
"""

from __future__ import annotations

from loki.clock import ts_before
from loki.tasks.readiness import Census, DependencyIndex, select_ready
from loki.tasks.record import TASK_STATES, plausible_lease

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Collection, Iterable
    from typing import Any

    from loki.storage.tasks import TaskStore

HOT_STATES = tuple(s.value for s in TASK_STATES)
ROTATED_STATES = ("completed", "cancelled")
DEAD_LETTER, ABANDONED = "dead-letter", "abandoned"


def finished_at(task: dict[str, Any]) -> str:
    """When a task left the hot queue, for the archive's month (completed, else last updated, else created)."""
    return str(task.get("completed_at") or task.get("updated_at") or task["created_at"])


class TaskTxnBase:
    """What every unit of work does the same way, whatever holds the tasks (both stores subclass it).

    A store gives two hooks: :meth:`_list`, the live list of a state (a hot state, ``dead-letter`` or
    ``abandoned``), and :meth:`_mark`, which records that a state changed (with the records to validate);
    plus :meth:`dead_letter_metadata`, :meth:`rotate` and the ``with`` block, which are its own.

    Lookups by id and by idempotency key go through a dictionary per state, built the first time a
    state is searched and kept up to date by every change, so a batch of adds reads each state once
    instead of scanning it once per task.
    """

    _owner: TaskStore

    def __init__(self) -> None:
        self.dead_lettered: list[dict[str, Any]] = []
        self._archived: list[tuple[str, dict[str, Any]]] = []
        """Tasks this unit rotated out: in the archive from then on, though the store has them only at commit."""
        self._by_id: dict[str, dict[str, list[dict[str, Any]]]] = {}
        self._by_key: dict[str, dict[str, list[dict[str, Any]]]] = {}

    def _list(self, state: str) -> list[dict[str, Any]]:
        raise NotImplementedError

    def _mark(self, state: str, *records: dict[str, Any]) -> None:
        raise NotImplementedError

    def dead_letter_metadata(self) -> dict[str, Any]:
        raise NotImplementedError

    # -- the lookup dictionaries -------------------------------------------------------------------

    def _ids(self, state: str) -> dict[str, list[dict[str, Any]]]:
        """id -> the records of ``state`` with that id (one, unless a file was edited by hand)."""
        index = self._by_id.get(state)
        if index is None:
            index = self._by_id[state] = {}
            for record in self._list(state):
                index.setdefault(_record_id(state, record), []).append(record)
        return index

    def _keys(self, state: str) -> dict[str, list[dict[str, Any]]]:
        """idempotency key -> the tasks of ``state`` that hold it."""
        index = self._by_key.get(state)
        if index is None:
            index = self._by_key[state] = {}
            for record in self._list(state):
                key = _task_of(state, record).get("idempotency_key")
                if key:
                    index.setdefault(key, []).append(record)
        return index

    def _indexed(self, state: str, record: dict[str, Any]) -> None:
        if state in self._by_id:
            self._by_id[state].setdefault(_record_id(state, record), []).append(record)
        key = _task_of(state, record).get("idempotency_key")
        if key and state in self._by_key:
            self._by_key[state].setdefault(key, []).append(record)

    def _unindexed(self, state: str, record: dict[str, Any]) -> None:
        key = _task_of(state, record).get("idempotency_key")
        for index, name in ((self._by_id.get(state), _record_id(state, record)),
                            (self._by_key.get(state), key)):
            if index is None or not name or name not in index:
                continue
            kept = [r for r in index[name] if r is not record]
            if kept:
                index[name] = kept
            else:
                del index[name]

    def _forget(self, state: str) -> None:
        """``state``'s list was replaced (a rotation): its dictionaries are built again when needed."""
        self._by_id.pop(state, None)
        self._by_key.pop(state, None)

    # -- hot states ------------------------------------------------------------------------------

    def tasks(self, state: str) -> list[dict[str, Any]]:
        return self._list(state)

    def find(self, task_id: str, states: Iterable[str] = HOT_STATES) -> tuple[str, dict[str, Any]] | None:
        for state in states:
            found = self._ids(state).get(task_id)
            if found:
                return state, _task_of(state, found[0])
        return None

    def find_by_key(self, key: str) -> tuple[str, dict[str, Any]] | None:
        for state in (*HOT_STATES, DEAD_LETTER, ABANDONED):
            found = self._keys(state).get(key)
            if found:
                return state, _task_of(state, found[0])
        return self.find_archived_by_key(key)

    def find_outside(self, task_id: str) -> tuple[str, dict[str, Any]] | None:
        return self.find(task_id, (DEAD_LETTER, ABANDONED)) or self.find_archived(task_id)

    def find_archived(self, task_id: str) -> tuple[str, dict[str, Any]] | None:
        staged = next(((s, t) for s, t in reversed(self._archived) if t["id"] == task_id), None)
        return staged or self._owner.find_archived(task_id)

    def find_archived_by_key(self, key: str) -> tuple[str, dict[str, Any]] | None:
        staged = next(((s, t) for s, t in reversed(self._archived) if t.get("idempotency_key") == key), None)
        return staged or self._owner.find_archived_by_key(key)

    def put(self, state: str, task: dict[str, Any]) -> None:
        task["status"] = state
        self._list(state).append(task)
        self._indexed(state, task)
        self._mark(state, task)

    def remove(self, state: str, task: dict[str, Any]) -> None:
        tasks = self._list(state)
        for index, candidate in enumerate(tasks):
            if candidate is task:
                del tasks[index]
                self._unindexed(state, task)
                break
        self._mark(state)

    def move(self, task: dict[str, Any], source: str, target: str) -> None:
        self.remove(source, task)
        self.put(target, task)

    def update(self, state: str, *tasks: dict[str, Any]) -> None:
        self._mark(state, *tasks)

    def next_ready(self, types: Collection[str], now: str, *, not_after: str,
                   skip_types: Collection[str] = ()) -> tuple[dict[str, Any] | None, Census]:
        return select_ready(self._list("pending"), types, now, not_after, skip_types, DependencyIndex(self))

    def expired(self, now: str) -> list[dict[str, Any]]:
        return [task for task in self._list("in-progress")
                if not task.get("lease_until") or ts_before(task["lease_until"], now) or not plausible_lease(task)]

    def newest_in_progress(self) -> str | None:
        latest: str | None = None
        for task in self._list("in-progress"):
            if not (task.get("lease_until") and plausible_lease(task)):
                continue
            for field in ("claimed_at", "updated_at"):
                stamp = task.get(field)
                if isinstance(stamp, str) and (latest is None or ts_before(latest, stamp)):
                    latest = stamp
        return latest

    def waiting_chain(self, task_ids: Iterable[str]) -> list[dict[str, Any]]:
        order = {id(task): n for n, task in enumerate([*self._list("pending"), *self._list("blocked")])}
        chain: dict[int, dict[str, Any]] = {}
        frontier = list(task_ids)
        while frontier:
            found = self.find(frontier.pop(), ("pending", "blocked"))
            if found is not None and id(found[1]) not in chain:
                chain[id(found[1])] = found[1]
                frontier.extend(found[1].get("dependencies") or [])
        return [chain[key] for key in sorted(chain, key=order.__getitem__)]

    # -- dead-letter and abandoned -----------------------------------------------------------------

    def dead_letters(self) -> list[dict[str, Any]]:
        return self._list(DEAD_LETTER)

    def find_dead_letter(self, task_id: str) -> dict[str, Any] | None:
        return next((e for e in self.dead_letters() if e["task_id"] == task_id), None)

    def dead_letter(self, entry: dict[str, Any]) -> None:
        self.dead_letters().append(entry)
        self._indexed(DEAD_LETTER, entry)
        self._mark(DEAD_LETTER, entry)

    def update_dead_letter(self, *entries: dict[str, Any]) -> None:
        self._mark(DEAD_LETTER, *entries)

    def _take_out(self, entry: dict[str, Any], counter: str) -> None:
        self.dead_letters().remove(entry)
        self._unindexed(DEAD_LETTER, entry)
        self.dead_letter_metadata()[counter] += 1
        self._mark(DEAD_LETTER)

    def recover(self, entry: dict[str, Any]) -> dict[str, Any]:
        self._take_out(entry, "total_recovered")
        task: dict[str, Any] = entry["task_data"]
        return task

    def abandon(self, entry: dict[str, Any], reason: str, now: str) -> dict[str, Any]:
        self._take_out(entry, "total_abandoned")
        record = abandoned_record(entry, reason, now)
        self.abandoned().append(record)
        self._indexed(ABANDONED, record)
        self._mark(ABANDONED, record)
        return record

    def mark_reviewed(self, now: str) -> None:
        self.dead_letter_metadata()["last_reviewed"] = now
        self._mark(DEAD_LETTER)

    def abandoned(self) -> list[dict[str, Any]]:
        return self._list(ABANDONED)

    def put_abandoned(self, record: dict[str, Any]) -> None:
        self.abandoned().append(record)
        self._mark(ABANDONED, record)



def _record_id(state: str, record: dict[str, Any]) -> str:
    """A task's id; a dead-letter or abandoned entry's ``task_id``."""
    return str(record["task_id"] if state in (DEAD_LETTER, ABANDONED) else record["id"])


def _task_of(state: str, record: dict[str, Any]) -> dict[str, Any]:
    """The task of a record: itself, or a dead-letter or abandoned entry's ``task_data``."""
    task: dict[str, Any] = record["task_data"] if state in (DEAD_LETTER, ABANDONED) else record
    return task


def abandoned_record(entry: dict[str, Any], reason: str, now: str) -> dict[str, Any]:
    """A dead-letter entry as ``abandoned.json`` keeps it (both task stores write this one shape)."""
    return {**entry, "recovery_strategy": "permanent_abandon", "abandoned_at": now, "abandon_reason": reason}


def rotation(tasks: list[dict[str, Any]], limit: int) -> tuple[list[dict[str, Any]],
                                                                 list[tuple[str, list[dict[str, Any]]]]]:
    """The tasks to keep, and the oldest beyond ``limit`` by the month they finished (oldest month first).

    Down to 90 % of the limit, so a busy queue does not rotate on every completion. Nothing is dropped.
    """
    if len(tasks) <= limit:
        return tasks, []
    target = limit - limit // 10
    excess = len(tasks) - target
    oldest = set(sorted(range(len(tasks)), key=lambda i: (finished_at(tasks[i]), i))[:excess])
    by_month: dict[str, list[dict[str, Any]]] = {}
    for index in sorted(oldest):
        task = tasks[index]
        by_month.setdefault(finished_at(task)[:7], []).append(task)
    return [task for index, task in enumerate(tasks) if index not in oldest], sorted(by_month.items())
