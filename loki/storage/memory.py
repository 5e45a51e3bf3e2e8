"""Both storage interfaces in memory: dicts and one lock (huey's ``MemoryStorage``, sqlite-utils' ``memory=True``).

What it is for: the API-level test suites run against it as well as against the files (the
``backend`` fixture in tests/conftest.py), which is the proof that the domain modules speak the
interfaces and nothing file-shaped; and domain-rule tests that do not fsync. It is not a
production backend: nothing survives the process, and one ``threading.RLock`` serialises every
unit of work (one lock per store is the simplest thing that is obviously right).

It keeps the rules a caller can observe: documents are validated against the same schemas on
every write (in full, as ``LOKI_VALIDATE_ALL`` does for the files), a reader gets its own copy
(documents are kept serialised, as on disk), a unit of work that raises changes nothing, a
published name is never overwritten (``name-2``, ``name-3`` ...). Log positions are offsets into
the log's buffer; change tokens are a counter bumped on every write.
"""

from __future__ import annotations

import builtins
import os
import pickle
import threading

from loki.clock import default_clock, format_ts
from loki.errors import InvalidInput, LockTimeout
from loki.storage import jsonio, layout
from loki.storage.logpos import LogReads
from loki.storage.schema import registry
from loki.storage.taskbase import HOT_STATES, TaskTxnBase, rotation

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from typing import Any, Literal, TypeVar

    from loki.clock import Clock
    from loki.storage.problems import DoctorReport, Problem
    from loki.storage.schema import Registry
    from loki.storage.state import MemoryRules

    Document = TypeVar("Document")

DEFAULT_MAX_BYTES = 64 * 1024 * 1024


def _private_copy(value: Document) -> Document:
    """A deep copy of a JSON document, as ``copy.deepcopy`` makes it (shared parts stay shared), at a quarter
    of the cost: its C pickler walks the plain dicts and lists that documents are made of."""
    copied: Document = pickle.loads(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))
    return copied


class MemoryStore(LogReads):
    """A tree's state in memory (:class:`loki.storage.state.StateStore`)."""

    backend = "memory"
    # Capabilities (loki/storage/state.py): a claim is one step, keys need no directories, nothing is local.
    claims_in_one_step: Literal[True] = True
    keys_need_dirs: Literal[False] = False
    keeps_local_copies: Literal[False] = False

    def __init__(self, *, clock: Clock | None = None, config: dict[str, Any] | None = None,
                 schemas: Registry | None = None, lock_timeout: float = 10.0) -> None:
        self.clock = clock or default_clock()
        self.schemas = schemas or registry()
        self.notes: list[str] = []
        self.validate_all = True
        self.lock_timeout = lock_timeout
        self.max_file_bytes = DEFAULT_MAX_BYTES
        self.where = ":memory:"
        self.local_root: str | None = None  # no tree on any disk
        self._lock = threading.RLock()
        self._items: dict[str, bytes] = {}
        self._versions: dict[str, int] = {}
        self._mtimes: dict[str, int] = {}
        self._holders: dict[str, dict[str, Any]] = {}
        self._observers: list[MemoryObserver] = []
        self._counter = 0
        self._config: dict[str, Any] | None = None
        self._tasks = MemoryTasks(self)
        if config is not None:
            self._put(layout.CONFIG, jsonio.dumps_document(config, None))

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._items)} items)"

    # -- shared plumbing ---------------------------------------------------------------------------

    def _put(self, rel: str, data: bytes) -> None:
        self._counter += 1
        self._items[rel] = data
        self._versions[rel] = self._counter

    def check_size(self, rel: str, size: int) -> None:
        if size > self.max_file_bytes:
            raise InvalidInput(f"{rel}: this change would make it {size} bytes, over the {self.max_file_bytes}-byte "
                               "limit for a state file; nothing was changed", file=rel, size=size,
                               limit=self.max_file_bytes)

    def _encode(self, rel: str, doc: Any) -> bytes:
        kind = layout.kind_for(rel)
        if kind is not None:
            self.schemas.validate(kind.schema, doc, rel)
        data = jsonio.dumps_document(doc, kind.records_key if kind is not None else None)
        self.check_size(rel, len(data))
        return data

    def _decode(self, rel: str, data: bytes | None) -> Any:
        if data is None:
            kind = layout.kind_for(rel)
            return kind.empty() if kind is not None else None
        return jsonio.loads_strict(data)

    # -- settings ----------------------------------------------------------------------------------

    @property
    def config(self) -> dict[str, Any]:
        if self._config is None:
            self._config = self.read(layout.CONFIG)
        return self._config

    def setting(self, section: str, key: str, default: Any) -> Any:
        from loki.config import setting

        return setting(self.config, section, key, default)

    def now_ts(self) -> str:
        return format_ts(self.clock.now())

    # -- documents ---------------------------------------------------------------------------------

    def transaction(self, lock: str) -> MemoryTxn:
        return MemoryTxn(self, lock)

    def recover(self, lock: str) -> bool:
        return False  # nothing is ever half-committed in memory

    def read(self, rel: str, digests: dict[str, Any] | None = None) -> Any:
        with self._lock:
            return self._decode(rel, self._items.get(rel))

    def snapshot(self, rels: Iterable[str], attempts: int = 20, *, wait: bool = False) -> dict[str, Any]:
        with self._lock:
            return {rel: self._decode(rel, self._items.get(rel)) for rel in rels}

    def exists(self, rel: str) -> bool:
        return rel in self._items

    def read_bytes(self, rel: str, *, limit: int | None = None) -> bytes | None:
        return self._items.get(rel)

    def read_text(self, rel: str) -> str | None:
        data = self._items.get(rel)
        return None if data is None else jsonio.decode_utf8(data)

    def write_text(self, rel: str, text: str) -> None:
        data = text.encode("utf-8")
        self.check_size(rel, len(data))
        with self._lock:
            self._put(rel, data)

    def remove(self, rel: str) -> bool:
        with self._lock:
            self._versions.pop(rel, None)
            self._mtimes.pop(rel, None)
            return self._items.pop(rel, None) is not None

    def entry(self, rel: str) -> dict[str, Any] | None:
        if rel in self._items:
            return {"name": rel.rsplit("/", 1)[-1], "kind": "file", "bytes": len(self._items[rel]),
                    "mtime_ns": self._mtimes.get(rel, self._versions[rel])}
        prefix = rel + "/"
        if any(key.startswith(prefix) for key in self._items):
            return {"name": rel.rsplit("/", 1)[-1], "kind": "directory", "bytes": 0, "mtime_ns": 0}
        return None

    def scan(self, rel_dir: str) -> list[dict[str, Any]]:
        with self._lock:
            return [row for name in self.list(rel_dir) if (row := self.entry(f"{rel_dir}/{name}")) is not None]

    def list(self, rel_dir: str) -> list[str]:
        prefix = rel_dir.rstrip("/") + "/"
        with self._lock:
            return sorted({rel[len(prefix):].split("/", 1)[0] for rel in self._items if rel.startswith(prefix)})

    def change_token(self, rel: str) -> int | None:
        """The change token: the counter value of the last write (None: absent)."""
        return self._versions.get(rel)

    # -- logs --------------------------------------------------------------------------------------

    def append_bytes(self, rel: str, payload: bytes, *, lock: bool = True, read_whole: bool = False) -> int:
        with self._lock:
            current = self._items.get(rel, b"")
            if current and not current.endswith(b"\n"):
                current += b"\n"  # a torn last line is never glued onto (docs/storage.md)
            if read_whole:
                self.check_size(rel, len(current) + len(payload))
            self._put(rel, current + payload)
            self._published(rel)
        return len(payload)

    def append_lines(self, rel: str, records: Iterable[Any], *, lock: bool = True) -> int:
        return self.append_bytes(rel, "".join(jsonio.dumps_compact(r) + "\n" for r in records).encode("utf-8"))

    def append_text(self, rel: str, lines: Iterable[str], *, lock: bool = True, read_whole: bool = False) -> int:
        return self.append_bytes(rel, "".join(line + "\n" for line in lines).encode("utf-8"), read_whole=read_whole)

    def rewrite_lines(self, rel: str, records: Iterable[Any]) -> int:
        lines = [jsonio.dumps_compact(r) + "\n" for r in records]
        with self._lock:
            self._put(rel, "".join(lines).encode("utf-8"))
        return len(lines)

    def read_from(self, rel: str, offset: int, limit: int = 1 << 20) -> tuple[bytes, int]:
        data = self._items.get(rel, b"")
        return data[offset:offset + limit], len(data)

    def iter_lines(self, rel: str, chunk: int = 1 << 20) -> Iterator[tuple[int, int, bytes]]:
        data = self._items.get(rel, b"")
        offset = 0
        for number, line in enumerate(data.splitlines(keepends=True), start=1):
            if line.endswith(b"\n"):
                yield number, offset, line.rstrip(b"\n")
            offset += len(line)

    # -- published items ---------------------------------------------------------------------------

    def create_unique(self, rel_dir: str, name: str, data: bytes, *, suffix: str = "", separator: str = "-",
                      mtime_ns: int | None = None, state_file: bool = True) -> str:
        if state_file:
            self.check_size(f"{rel_dir}/{name}{suffix}", len(data))
        with self._lock:
            number = 1
            while True:
                numbered = name if number == 1 else f"{name}{separator}{number}"
                candidate = f"{rel_dir}/{numbered}{suffix}"
                if candidate not in self._items:
                    self._put(candidate, data)
                    if mtime_ns is not None:
                        self._mtimes[candidate] = mtime_ns
                    self._published(candidate)
                    return candidate
                number += 1

    # -- claiming published items, long-held locks --------------------------------------------------

    def claim_into(self, rel: str, rel_dir: str, entry: str) -> bool:
        with self._lock:
            if rel not in self._items:
                return False
            target = f"{rel_dir}/{entry}"
            self._items[target] = self._items.pop(rel)
            self._versions[target] = self._versions.pop(rel)
            if rel in self._mtimes:
                self._mtimes[target] = self._mtimes.pop(rel)
            return True

    def finish(self, rel: str, target_dir: str | None) -> None:
        with self._lock:
            data = self._items.pop(rel, None)
            self._versions.pop(rel, None)
            mtime = self._mtimes.pop(rel, None)
            if data is not None and target_dir is not None:
                target = f"{target_dir}/{rel.rsplit('/', 1)[-1]}"
                self._put(target, data)
                if mtime is not None:
                    self._mtimes[target] = mtime

    def lock(self, rel: str, timeout: float) -> MemoryLock:
        return MemoryLock(self, rel)

    def lock_holder(self, rel: str) -> dict[str, Any] | None:
        return dict(self._holders[rel]) if rel in self._holders else None

    def observe(self, rel_dir: str, wake: Callable[[], None]) -> MemoryObserver:
        """``wake`` is called (in the publishing thread) when an item or a log line is published under ``rel_dir``."""
        observer = MemoryObserver(self, rel_dir, wake)
        with self._lock:
            self._observers.append(observer)
        return observer

    def _published(self, rel: str) -> None:
        directory = rel.rsplit("/", 1)[0] if "/" in rel else ""
        for observer in list(self._observers):
            if observer.rel_dir == directory:
                observer.wake()

    def memory_search(self, rules: MemoryRules) -> None:
        """None: error memory keeps its SQLite cache (an in-memory database, :meth:`index_database`)."""
        return None

    def index_database(self, rel: str, side_files: Iterable[str] = ()) -> str:
        """An in-memory SQLite database: the index is a cache, rebuilt from the log when it is missing."""
        return ":memory:"

    # -- the queue ---------------------------------------------------------------------------------

    # -- administration ----------------------------------------------------------------------------

    def validate_state(self) -> builtins.list[Problem]:
        """The checks across records (a task in two states, one that can never be ready): every write
        was validated against its schema, and nothing edits the memory by hand."""
        from loki.storage.checks import state_problems

        return state_problems(self, self.stored_records([*HOT_STATES, "dead-letter", "abandoned"]))

    def doctor_state(self, *, repair: bool = False) -> DoctorReport:
        """What validate finds: nothing to finish or sweep in memory."""
        from loki.storage.problems import DoctorReport

        return DoctorReport(problems=self.validate_state())

    def stored_records(self, states: builtins.list[str]) -> dict[str, builtins.list[Any]]:
        return self._tasks.view(states)

    def tasks(self) -> MemoryTasks:
        return self._tasks


class MemoryObserver:
    """A wake-up callback registered with the store until ``stop()``."""

    kind = "memory"

    def __init__(self, store: MemoryStore, rel_dir: str, wake: Callable[[], None]) -> None:
        self.store, self.rel_dir, self.wake = store, rel_dir, wake

    def stop(self) -> None:
        with self.store._lock:
            if self in self.store._observers:
                self.store._observers.remove(self)


class MemoryLock:
    """A lock held for as long as its holder runs (the signal consumer's); never waits."""

    def __init__(self, store: MemoryStore, rel: str) -> None:
        self.store = store
        self.rel = rel
        self.held = False
        self.record: dict[str, Any] = {}

    def acquire(self) -> None:
        with self.store._lock:
            if self.rel in self.store._holders:
                raise LockTimeout(f"{self.rel} is held", lock=self.rel)
            self.record = {"holder": {"pid": os.getpid(), "since": self.store.now_ts()}}
            self.store._holders[self.rel] = self.record["holder"]
            self.held = True

    def confirm(self) -> bool:
        return self.held

    def release(self) -> None:
        if self.held:
            with self.store._lock:
                self.store._holders.pop(self.rel, None)
            self.held = False


class MemoryTxn:
    """Staged writes of one lock domain, applied together at commit (one lock for the whole store)."""

    def __init__(self, store: MemoryStore, lock: str) -> None:
        self.store = store
        self.lock_rel = lock
        self._staged: dict[str, tuple[Any, bytes]] = {}
        self._appends: dict[str, list[Any]] = {}
        self.recovered = False

    def __enter__(self) -> MemoryTxn:
        self.store._lock.acquire()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is None:
                self.commit()
        finally:
            self.store._lock.release()

    def read(self, rel: str) -> Any:
        if rel in self._staged:
            return self._staged[rel][0]
        return self.store._decode(rel, self.store._items.get(rel))

    def write(self, rel: str, doc: Any, *, changed: Iterable[Any] | None = None) -> None:
        self._staged[rel] = (doc, self.store._encode(rel, doc))

    def append(self, rel: str, records: Iterable[Any]) -> None:
        self._appends.setdefault(rel, []).extend(records)

    def commit(self) -> None:
        for rel, (_, data) in self._staged.items():
            self.store._put(rel, data)
        for rel, records in self._appends.items():
            self.store.append_lines(rel, records)
        self._staged, self._appends = {}, {}


class MemoryTasks:
    """The queue domain in memory (:class:`loki.storage.tasks.TaskStore`): a list of tasks per state."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self._states: dict[str, list[dict[str, Any]]] = {state: [] for state in HOT_STATES}
        self._dead: dict[str, Any] = layout.kind_for(layout.DEADLETTER).empty()  # type: ignore[union-attr]
        self._abandoned: list[dict[str, Any]] = []
        self._archive: list[tuple[str, dict[str, Any]]] = []
        self._versions: dict[str, int] = {}
        self._spend: dict[str, Any] | None = None

    def transaction(self, *, claim: bool = False) -> MemoryTaskTxn:
        return MemoryTaskTxn(self)

    def view(self, states: Iterable[str]) -> dict[str, list[Any]]:
        with self.store._lock:
            return {state: _private_copy(self._list(state)) for state in states}

    def _list(self, state: str) -> list[dict[str, Any]]:
        if state == "dead-letter":
            tasks: list[dict[str, Any]] = self._dead["tasks"]
            return tasks
        if state == "abandoned":
            return self._abandoned
        return self._states[state]

    def tasks_in(self, state: str) -> list[dict[str, Any]]:
        return self.view([state])[state]

    def dead_letter_doc(self) -> dict[str, Any]:
        with self.store._lock:
            return _private_copy(self._dead)

    def change_token(self, state: str) -> int | None:
        """The store's write counter at the last commit that changed ``state``."""
        return self._versions.get(state)

    def spend_totals(self) -> dict[str, Any] | None:
        with self.store._lock:
            return _private_copy(self._spend)

    def archived(self) -> Iterator[tuple[str, dict[str, Any]]]:
        with self.store._lock:
            return iter(list(self._archive))

    def find_archived(self, task_id: str) -> tuple[str, dict[str, Any]] | None:
        with self.store._lock:
            for state, task in reversed(self._archive):  # the newest first, as the file store's months
                if task["id"] == task_id:
                    return state, _private_copy(task)
        return None

    def find_archived_by_key(self, key: str) -> tuple[str, dict[str, Any]] | None:
        with self.store._lock:
            for state, task in reversed(self._archive):
                if task.get("idempotency_key") == key:
                    return state, _private_copy(task)
        return None


class MemoryTaskTxn(TaskTxnBase):
    """A unit of work: a private copy of the domain, swapped in at commit if the block ends cleanly."""

    _owner: MemoryTasks

    def __init__(self, owner: MemoryTasks) -> None:
        super().__init__()
        self._owner = owner
        self._changed: set[str] = set()

    def __enter__(self) -> MemoryTaskTxn:
        owner = self._owner
        owner.store._lock.acquire()
        # Private copies are made on first use, one state at a time: a claim reads two or three states of
        # seven, and copying the whole domain on entry was most of a unit of work's cost. Nothing else
        # changes the store's lists while the lock is held (commits replace them, readers copy them).
        self._states: dict[str, list[dict[str, Any]]] = {}
        self._dead: dict[str, Any] | None = None
        self._abandoned: list[dict[str, Any]] | None = None
        self._spend: dict[str, Any] | None = None
        self._spend_copied = False
        self._spend_changed = False
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        owner = self._owner
        try:
            if exc_type is None:
                self._validate()
                owner._states = {**owner._states, **self._states}
                if self._dead is not None:
                    owner._dead = self._dead
                if self._abandoned is not None:
                    owner._abandoned = self._abandoned
                if self._spend_copied:
                    owner._spend = self._spend
                owner._archive.extend(self._archived)
                for state in self._changed:
                    owner.store._counter += 1
                    owner._versions[state] = owner.store._counter
        finally:
            owner.store._lock.release()

    def _validate(self) -> None:
        """Every changed state as the document the file store would write, against the same schemas."""
        schemas = self._owner.store.schemas
        if self._spend_changed:
            schemas.validate(layout.SPEND_KIND.schema, self._spend, layout.SPEND)
        for state in self._changed:
            if state == "dead-letter":
                rel, doc = layout.DEADLETTER, self._dead_doc()
            else:
                rel = layout.ABANDONED if state == "abandoned" else layout.queue_file(state)
                doc = layout.kind_for(rel).empty()  # type: ignore[union-attr]
                doc["tasks"] = self._list(state)
            schemas.validate(layout.kind_for(rel).schema, doc, rel)  # type: ignore[union-attr]

    def _dead_doc(self) -> dict[str, Any]:
        if self._dead is None:
            self._dead = _private_copy(self._owner._dead)
        return self._dead

    # -- the hooks of TaskTxnBase ------------------------------------------------------------------

    def _list(self, state: str) -> list[dict[str, Any]]:
        if state == "dead-letter":
            entries: list[dict[str, Any]] = self._dead_doc()["tasks"]
            return entries
        if state == "abandoned":
            if self._abandoned is None:
                self._abandoned = _private_copy(self._owner._abandoned)
            return self._abandoned
        tasks = self._states.get(state)
        if tasks is None:
            tasks = self._states[state] = _private_copy(self._owner._states[state])
        return tasks

    def _mark(self, state: str, *records: dict[str, Any]) -> None:
        self._changed.add(state)  # validated in full at commit: the records need not be named

    def dead_letter_metadata(self) -> dict[str, Any]:
        metadata: dict[str, Any] = self._dead_doc()["metadata"]
        return metadata

    def spend_totals(self) -> dict[str, Any] | None:
        if not self._spend_copied:
            self._spend, self._spend_copied = _private_copy(self._owner._spend), True
        return self._spend

    def set_spend_totals(self, doc: dict[str, Any]) -> None:
        self._spend, self._spend_copied, self._spend_changed = doc, True, True

    # -- the archive -------------------------------------------------------------------------------

    def archive(self, state: str, tasks: list[dict[str, Any]]) -> None:
        self._archived.extend((state, task) for task in tasks)

    def rotate(self, state: str, limit: int) -> None:
        kept, by_month = rotation(self._list(state), limit)
        if by_month:
            self._archived.extend((state, task) for _, moved in by_month for task in moved)
            self._states[state] = kept
            self._forget(state)
            self._changed.add(state)

if TYPE_CHECKING:
    from loki.storage.state import StateStore
    from loki.storage.store import Store
    from loki.storage.tasks import TaskStore, TaskTxn

    def _both_implement_both_interfaces(memory: MemoryStore, files: Store) -> None:
        """Never called: mypy (``make lint``) checks here that each store satisfies each protocol."""
        states: list[StateStore] = [memory, files]
        tasks: list[TaskStore] = [memory.tasks(), files.tasks()]
        units: list[TaskTxn] = [memory.tasks().transaction(), files.tasks().transaction()]
        del states, tasks, units
