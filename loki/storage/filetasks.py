"""The task store on files: ``queue/<state>.json``, the dead-letter and abandoned files, ``archive/``.

It implements :class:`loki.storage.tasks.TaskStore` on :class:`loki.storage.store.Store`, which keeps every
storage rule (one lock for the whole domain, a redo journal for a change to several files, the
digests that spare re-validation). The on-disk format is the one docs/queue.md describes; this
module is the only one that knows which file a state lives in.

A unit of work reads each file lazily, at most once, and writes once at commit each file whose
tasks changed, declaring the changed records so only they are validated (docs/storage.md).

The archive keeps the hot queue files small: completed and cancelled tasks rotate into ``archive/``.

When ``completed.json`` (or ``cancelled.json``) holds more than
``queue.completed_hot_limit`` tasks, the oldest are moved, in the same journaled
change, into ``archive/<state>-YYYY-MM.jsonl`` (by the month they finished), down to
90 % of the limit so a busy queue does not rotate on every completion. Nothing is
dropped; ``loki queue show`` still finds an archived task.
"""

from __future__ import annotations

from loki.storage import jsonio, layout
from loki.storage.taskbase import ABANDONED, DEAD_LETTER, ROTATED_STATES, TaskTxnBase, finished_at, rotation

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Hashable, Iterable, Iterator
    from typing import Any, Protocol

    from loki.storage.state import FileState
    from loki.storage.state import StateTxn as Transaction

    class Store(FileState, Protocol):
        """The file store (:class:`loki.storage.store.Store`) as its task store sees it (named here, not
        imported: the store imports this module)."""

        def iter_lines(self, rel: str, chunk: int = ...) -> Iterator[tuple[int, int, bytes]]: ...


class FileTasks:
    """The queue domain of one ``.loki/`` tree, on files."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def transaction(self, *, claim: bool = False) -> FileTaskTxn:
        """A unit of work under the queue lock (a claim too: one lock over the domain is what files allow)."""
        return FileTaskTxn(self)

    def _files(self, states: Iterable[str]) -> dict[str, str]:
        return {state: _file_of(state) for state in states}

    def view(self, states: Iterable[str]) -> dict[str, list[Any]]:
        files = self._files(states)
        docs = self.store.snapshot(files.values())
        return {state: docs[rel]["tasks"] for state, rel in files.items()}

    def tasks_in(self, state: str) -> list[dict[str, Any]]:
        tasks: list[dict[str, Any]] = self.store.read(self._files([state])[state])["tasks"]
        return tasks

    def dead_letter_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = self.store.read(layout.DEADLETTER)
        return doc

    def change_token(self, state: str) -> Hashable | None:
        return self.store.change_token(self._files([state])[state])

    def spend_totals(self) -> dict[str, Any] | None:
        """The running totals of usage (loki/tasks/totals.py), read without the lock; None when absent."""
        doc: dict[str, Any] | None = self.store.read(layout.SPEND)
        return doc

    # -- the archive: append-only monthly logs -----------------------------------------------------

    def archive_files(self) -> list[str]:
        """Archive files, newest month first."""
        names = self.store.list(layout.ARCHIVE_DIR)
        files = [n for n in names if n.endswith(".jsonl") and n.split("-", 1)[0] in ROTATED_STATES]
        return [f"{layout.ARCHIVE_DIR}/{n}" for n in sorted(files, key=lambda n: n.split("-", 1)[1], reverse=True)]

    def iter_archived(self, needle: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        """(state, task) for archived tasks, streamed (a month of archive may be large); with ``needle``,
        only lines containing it are parsed (a prefilter: the caller checks the parsed field)."""
        raw_needle = needle.encode("utf-8") if needle is not None else None
        for rel in self.archive_files():
            state = rel.rsplit("/", 1)[-1].split("-", 1)[0]
            for _, _, line in self.store.iter_lines(rel):
                if not line.strip() or (raw_needle is not None and raw_needle not in line):
                    continue
                try:
                    task = jsonio.loads_strict(line)
                except jsonio.JsonError:
                    continue  # a torn line from a crash; `loki validate` reports it
                if isinstance(task, dict) and "id" in task:
                    yield state, task

    def archived(self) -> Iterator[tuple[str, dict[str, Any]]]:
        return self.iter_archived()

    def find_archived(self, task_id: str) -> tuple[str, dict[str, Any]] | None:
        # The writer's own spelling ('"id":"task-1"') finds the few candidate lines without parsing
        # every line of every month: the file store's substitute for an index on id. A line written
        # by another hand with other spacing is missed, as before (the archive is loki's own).
        needle = jsonio.dumps_compact({"id": task_id})[1:-1]
        for state, task in self.iter_archived(needle):
            if task["id"] == task_id:
                return state, task
        return None

    def find_archived_by_key(self, key: str) -> tuple[str, dict[str, Any]] | None:
        needle = jsonio.dumps_compact({"idempotency_key": key})[1:-1]
        for state, task in self.iter_archived(needle):
            if task.get("idempotency_key") == key:
                return state, task
        return None




def _file_of(state: str) -> str:
    """The file a state lives in."""
    return layout.DEADLETTER if state == DEAD_LETTER else layout.ABANDONED if state == ABANDONED \
        else layout.queue_file(state)


class FileTaskTxn(TaskTxnBase):
    """One unit of work: the queue lock, the files read lazily, each changed file written once at the end."""

    _owner: FileTasks

    def __init__(self, tasks: FileTasks) -> None:
        super().__init__()
        self._owner = tasks
        self.store = tasks.store
        self._txn: Transaction | None = None
        self._docs: dict[str, Any] = {}
        self._changed: dict[str, list[Any]] = {}

    def __enter__(self) -> FileTaskTxn:
        self._txn = self.store.transaction(layout.QUEUE_LOCK)
        self._txn.__enter__()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        txn = self._txn
        assert txn is not None
        try:
            if exc_type is None:
                self._flush(txn)
        except BaseException as error:
            txn.__exit__(type(error), error, error.__traceback__)
            raise
        txn.__exit__(exc_type, exc, tb)

    @property
    def txn(self) -> Transaction:
        assert self._txn is not None, "use the unit of work in a with block"
        return self._txn

    # -- documents -------------------------------------------------------------------------------

    def _doc(self, rel: str) -> Any:
        if rel not in self._docs:
            self._docs[rel] = self.txn.read(rel)
        return self._docs[rel]

    def _touch(self, rel: str, *records: Any) -> None:
        self._doc(rel)
        self._changed.setdefault(rel, []).extend(records)

    def _flush(self, txn: Transaction) -> None:
        for rel, records in self._changed.items():
            txn.write(rel, self._docs[rel], changed=records)
        self._changed = {}

    # -- the hooks of TaskTxnBase ------------------------------------------------------------------

    def _list(self, state: str) -> list[dict[str, Any]]:
        tasks: list[dict[str, Any]] = self._doc(_file_of(state))["tasks"]
        return tasks

    def _mark(self, state: str, *records: dict[str, Any]) -> None:
        self._touch(_file_of(state), *records)

    def dead_letter_metadata(self) -> dict[str, Any]:
        metadata: dict[str, Any] = self._doc(layout.DEADLETTER)["metadata"]
        return metadata

    def spend_totals(self) -> dict[str, Any] | None:
        doc: dict[str, Any] | None = self._doc(layout.SPEND)
        return doc

    def set_spend_totals(self, doc: dict[str, Any]) -> None:
        self._docs[layout.SPEND] = doc
        self._changed.setdefault(layout.SPEND, [])

    # -- the archive -------------------------------------------------------------------------------

    def rotate(self, state: str, limit: int) -> None:
        """Stage the archive appends for the oldest tasks beyond ``limit``, in this unit's commit."""
        doc = self._doc(layout.queue_file(state))
        kept, by_month = rotation(doc["tasks"], limit)
        if not by_month:
            return
        for month, moved in by_month:
            self.txn.append(layout.archive_file(state, month), moved)
            self._archived.extend((state, task) for task in moved)
        doc["tasks"] = kept
        self._forget(state)
        self._touch(layout.queue_file(state))

    def archive(self, state: str, tasks: list[dict[str, Any]]) -> None:
        by_month: dict[str, list[dict[str, Any]]] = {}
        for task in tasks:
            by_month.setdefault(finished_at(task)[:7], []).append(task)
        for month, moved in sorted(by_month.items()):
            self.txn.append(layout.archive_file(state, month), moved)
        self._archived.extend((state, task) for task in tasks)
