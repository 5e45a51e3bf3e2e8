"""The state store, cut into the roles every backend has (docs/storage.md, "The state store").

What breakers, strikes, signals, escalations and error memory need, and nothing file-shaped:
names are ``/``-separated keys under the tree (``state/circuit-breakers.json``), never paths;
a log is read after a *position* the caller keeps and hands back (the file store's is a byte
offset, the memory store's an offset into its buffer, PostgreSQL's a line's sequence number),
and "has it changed?" is asked with an opaque *change token*, compared only for equality.

The roles: :class:`Documents` (under lock domains), :class:`Logs` (append-only, read after a
position), :class:`Items` (published once, claimed by exactly one), :class:`Locks` (held while a
process runs), :class:`Observation` (a wake-up hint), :class:`LocalCaches` (what this machine keeps
beside the state). A domain class is typed against the roles it uses.

What differs between backends is said by a capability flag (huey's ``blocking``/``priority``), never by
a method that does nothing on some of them: ``claims_in_one_step`` (False: a crash may leave a claimed
item under its waiting name too, and :meth:`TwoStepClaims.drop_twin` removes it), ``keys_need_dirs``
(True: :meth:`KeysNeedDirs.ensure_dir` makes room for items under a key), ``keeps_local_copies``
(True: :meth:`LocalCopies.keep_local` refreshes this machine's copies the hooks read). Each flag is a
``Literal``, so a type checker lets a domain call the method only after asking the flag.
:data:`StateStore` is the union of the three shapes that exist: :class:`loki.storage.store.Store`
(files), :class:`loki.storage.memory.MemoryStore` (memory), :class:`loki.storage.postgres.store.PgStore`.

This module is for type checkers and readers: domain modules import it under ``TYPE_CHECKING``
only (``typing`` costs ~10 ms, which a hook cannot pay).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any, Literal, Protocol

from loki.clock import Clock
from loki.storage.logpos import LogLine
from loki.storage.problems import DoctorReport, Problem
from loki.storage.schema import Registry
from loki.storage.tasks import TaskStore


class StateTxn(Protocol):
    """Reads and staged writes of one lock domain; committed when the ``with`` block ends cleanly."""

    def __enter__(self) -> StateTxn: ...
    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None: ...
    def read(self, rel: str) -> Any:
        """The current document (validated; its empty form when absent)."""
    def write(self, rel: str, doc: Any, *, changed: Iterable[Any] | None = ...) -> None:
        """Stage ``doc``; ``changed`` are the records that changed (only they are validated)."""
    def append(self, rel: str, records: Iterable[Any]) -> None:
        """Stage records appended to a log of this domain, committed with the documents."""
    def commit(self) -> None:
        """Commit what is staged now, keeping the lock (a log line written after it, under the lock)."""


class HeldLock(Protocol):
    """A lock a process keeps while it runs (the signal consumer's): ``acquire`` raises
    :class:`loki.errors.LockTimeout` when another holder has it past the timeout."""

    @property
    def held(self) -> bool: ...
    def confirm(self) -> bool:
        """Whether the lock is still ours, asked now (``held`` may answer from a recent check)."""
        ...
    def acquire(self) -> object: ...
    def release(self) -> None: ...


class Observer(Protocol):
    """What :meth:`StateStore.observe` returns: a wake-up source until ``stop()``."""

    kind: str
    """``native`` (watchdog: inotify ...), ``notify`` (PostgreSQL's LISTEN/NOTIFY), ``memory``."""
    def stop(self) -> None: ...


class MemoryRules(Protocol):
    """Error memory's rules for reading its log (:mod:`loki.memory.patterns`), handed to a store that keeps
    the search itself (:meth:`StateStore.memory_search`): storage sits below error memory and does not import it."""

    @property
    def COLUMNS(self) -> tuple[str, ...]: ...
    @property
    def SKIPPED_KEPT(self) -> int: ...
    def query_words(self, query: str, limit: int) -> builtins.list[str]: ...
    def read_line(self, schemas: Registry, raw: bytes) -> tuple[dict[str, Any] | None, str | None]: ...
    def error_fields(self, record: dict[str, Any], line: int) -> dict[str, Any]: ...
    def refs_text(self, file_references: str) -> str: ...
    def with_resolution(self, text: str, resolution: str) -> str: ...
    def hit(self, row: dict[str, Any], best: dict[str, Any] | None) -> dict[str, Any]: ...


class MemorySearch(Protocol):
    """Error memory's search (docs/memory.md): the SQLite cache beside the log
    (:class:`loki.memory.index.MemoryIndex`), or a store's own (PostgreSQL's tsvector tables)."""

    warnings: builtins.list[str]
    def sync(self) -> dict[str, Any]: ...
    def rebuild(self, reason: str) -> dict[str, Any]: ...
    def search(self, query: str, *, limit: int = ..., error_class: str | None = ..., with_resolution: bool = ...,
               highlight: tuple[str, str] = ...) -> builtins.list[dict[str, Any]]: ...
    def stats(self, *, top: int = ...) -> dict[str, Any]: ...
    def resolution_records(self) -> Iterator[dict[str, Any]]: ...
    def close(self) -> None: ...


class Tree(Protocol):
    """What every role shares: which tree, its clock, schemas and settings."""

    clock: Clock
    schemas: Registry
    notes: list[str]
    @property
    def where(self) -> str:
        """Where the state lives, for people (messages, ``status``, the live view): files: the ``.loki/``
        directory; memory: ``:memory:``; PostgreSQL: the database without its password, and the schema.
        Never a path to open: that is :attr:`local_root`."""
    @property
    def local_root(self) -> str | None:
        """This machine's ``.loki/`` directory (the file tree; on PostgreSQL the tree whose config names the
        database, where the hooks' local caches live), or None when there is none (memory; a database
        opened by URL alone). What ``loki work`` exports as ``LOKI_ROOT``."""
    @property
    def backend(self) -> str:
        """``files``, ``memory`` or ``postgresql``: what ``status``, ``validate`` and ``doctor`` say they are on."""

    @property
    def lock_timeout(self) -> float: ...
    @property
    def max_file_bytes(self) -> int:
        """The largest document or published item the store reads (and so writes)."""

    @property
    def config(self) -> dict[str, Any]: ...
    def setting(self, section: str, key: str, default: Any) -> Any: ...
    def now_ts(self) -> str: ...


class Documents(Tree, Protocol):
    """Documents under lock domains, read without the lock, written in a transaction of their domain."""

    def transaction(self, lock: str) -> StateTxn: ...
    def read(self, rel: str) -> Any:
        """A document without the lock (writes are atomic, so a reader never sees half of one)."""
    def snapshot(self, rels: Iterable[str]) -> dict[str, Any]:
        """A consistent read of several documents of one domain without its lock."""
    def exists(self, rel: str) -> bool: ...
    def read_text(self, rel: str) -> str | None: ...
    def read_bytes(self, rel: str, *, limit: int | None = ...) -> bytes | None:
        """An item's bytes (None: absent), refused over ``limit`` (:attr:`max_file_bytes` unless given)."""
    def write_text(self, rel: str, text: str) -> None: ...
    def remove(self, rel: str) -> bool:
        """Delete a derived item (a hint, an index); True if it existed."""
    def list(self, rel_dir: str) -> list[str]:
        """The names under ``rel_dir``, sorted ([] when there are none)."""
    def change_token(self, rel: str) -> Hashable | None:
        """A change token: equal tokens, the item has not changed in between (None: it does not exist)."""
    def entry(self, rel: str) -> dict[str, Any] | None:
        """What is at ``rel``: ``{"name", "kind", "bytes", "mtime_ns"}`` (kind: file, symlink, directory,
        other), None when nothing is."""
    def scan(self, rel_dir: str) -> builtins.list[dict[str, Any]]:
        """:meth:`entry` for every name under ``rel_dir`` ([] when there are none); unsorted."""


class Logs(Tree, Protocol):
    """Append-only logs, read after a position the reader keeps."""

    def append_lines(self, rel: str, records: Iterable[Any], *, lock: bool = ...) -> int:
        """Append JSON lines under the log's lock (``lock=False``: the caller holds it)."""
    def append_text(self, rel: str, lines: Iterable[str], *, lock: bool = ..., read_whole: bool = ...) -> int:
        """Append plain text lines (a text log, a Markdown file read back whole with ``read_whole``)."""
    def rewrite_lines(self, rel: str, records: Iterable[Any]) -> int:
        """Replace a log with ``records`` (compaction; the caller holds the log's lock)."""
    def log_end(self, rel: str) -> Any:
        """The position after the last line of a log now (a follower starting "from now" keeps it)."""
    def log_valid(self, rel: str, position: Any) -> bool:
        """False if the log no longer reaches ``position`` (replaced or truncated by hand): start over."""
    def read_after(self, rel: str, position: Any, limit: int = ..., *, whole: bool = ...,
                   final: bool = ...) -> tuple[builtins.list[LogLine], Any]:
        """The complete lines after ``position`` (None: the log's start), about ``limit`` bytes of them,
        and the position after the last one. A line is never split (one longer than ``limit`` comes
        whole with ``whole``, else without its data); a last line without its newline is not returned
        until it is complete, unless ``final`` (the caller holds the log's lock: it is torn)."""
    def read_line(self, rel: str, position: Any) -> bytes:
        """The line starting at ``position`` (one :meth:`read_after` returned)."""
    def read_tail(self, rel: str, limit: int) -> builtins.list[bytes]:
        """The complete lines within roughly the last ``limit`` bytes of a log, oldest first."""
    def log_windows(self, rel: str, position: Any, window: int) -> tuple[bytes, bytes]:
        """The first and last ``window`` bytes before ``position``: if they change, the log was rewritten."""
    def log_size(self, rel: str) -> int:
        """The log's size in bytes (a measure for reports, never a position)."""
    def log_bytes_after(self, rel: str, position: Any) -> int:
        """How many bytes of the log come after ``position`` (a backlog, for reports)."""


class Items(Tree, Protocol):
    """Published items (signals, escalations): created once under a free name, claimed by exactly one."""

    def create_unique(self, rel_dir: str, name: str, data: bytes, *, suffix: str = ...,
                      separator: str = ..., mtime_ns: int | None = ..., state_file: bool = ...) -> str:
        """Publish if absent: ``name``, else ``name-2``, ``name-3`` ...; returns the key it got.
        ``state_file=False``: not bounded by the state-file limit (an archive of a compacted log)."""
    def claim_into(self, rel: str, rel_dir: str, entry: str) -> bool:
        """Move a published item to ``rel_dir/entry`` so that exactly one claimer gets it (False: gone)."""
    def finish(self, rel: str, target_dir: str | None) -> None:
        """A claimed item is done: delete it, or move it into ``target_dir`` (quarantine, archive)."""


class Locks(Protocol):
    """Locks a process holds while it runs (one signal consumer per tree)."""

    def lock(self, rel: str, timeout: float) -> HeldLock:
        """A lock (not yet taken) that a process holds while it runs: one signal consumer per tree."""
    def lock_holder(self, rel: str) -> dict[str, Any] | None:
        """Who holds the lock ``rel`` now (pid, command, host, since), or None."""


class Observation(Protocol):
    def observe(self, rel_dir: str, wake: Callable[[], None]) -> Observer:
        """Call ``wake`` (from another thread) whenever something may have been published under
        ``rel_dir``: a hint that wakes a waiting watcher at once, never the only way to notice one
        (files: a watchdog observer; PostgreSQL: LISTEN on the directory's channel, any machine)."""


class LocalCaches(Protocol):
    """Caches beside the state: error memory's search index."""

    def index_database(self, rel: str, side_files: Iterable[str] = ...) -> str:
        """What ``sqlite3.connect`` opens for a cache ``rel`` (a checked path; ``:memory:`` in memory)."""

    def memory_search(self, rules: MemoryRules) -> MemorySearch | None:
        """Error memory's search when the store keeps it itself (PostgreSQL: tsvector, shared by every
        machine), reading the log by ``rules`` (error memory's own, handed in); None: error memory keeps its
        SQLite cache beside the log (:meth:`index_database`)."""


# -- capabilities: a flag, and the method only where the flag says it is needed ----------------------------


class OneStepClaims(Protocol):
    @property
    def claims_in_one_step(self) -> Literal[True]:
        """A claim is one step (a row's UPDATE, a dictionary's pop): no crash leaves a twin."""


class TwoStepClaims(Protocol):
    @property
    def claims_in_one_step(self) -> Literal[False]:
        """A claim is a link then an unlink: a crash between them leaves the item under both names."""
    def drop_twin(self, claimed_rel: str, waiting_rel: str) -> None:
        """After a crash mid-claim: drop the waiting name of an item already claimed."""


class FlatKeys(Protocol):
    @property
    def keys_need_dirs(self) -> Literal[False]:
        """A key is a name: nothing to make before items are written under it."""


class KeysNeedDirs(Protocol):
    @property
    def keys_need_dirs(self) -> Literal[True]:
        """A key is a path: its directory is made (refusing links) before items are written under it."""
    def ensure_dir(self, rel_dir: str) -> str:
        """Make room for items under ``rel_dir`` (the directory, refusing links); returns its path."""


class NoLocalCopies(Protocol):
    @property
    def keeps_local_copies(self) -> Literal[False]:
        """The hooks' hot path reads the state itself (files), or there is nothing local (memory)."""


class LocalCopies(Protocol):
    @property
    def keeps_local_copies(self) -> Literal[True]:
        """The state is elsewhere; the hooks' hot path reads this machine's copies under ``.loki/cache/``."""
    def keep_local(self, rels: Iterable[str] = ..., dirs: Iterable[str] = ...) -> builtins.list[str]:
        """Refresh this machine's copies of documents the hooks' hot path reads from local files."""


class Administration(Protocol):
    """``validate`` and ``doctor``: each backend checks its own state (files and journals, rows, memory)."""

    def validate_state(self) -> builtins.list[Problem]:
        """Every problem the backend finds in its state (files: the tree; PostgreSQL: the rows; memory: the
        checks across records, since every write was validated); [] when it is valid."""
    def doctor_state(self, *, repair: bool = ...) -> DoctorReport:
        """What :meth:`validate_state` finds, plus what the backend finishes or sweeps (files: journals,
        temp files; ``repair``: set broken files aside)."""
    def stored_records(self, states: builtins.list[str]) -> dict[str, builtins.list[Any]]:
        """Each state's task records as they are stored, read without repairing anything (files: the bytes
        as they are, not finishing an interrupted change, which is doctor's to do)."""


class CommonState(Documents, Logs, Items, Locks, Observation, LocalCaches, Administration, Protocol):
    """Every role, and the queue's task store: what every backend is, whatever its capabilities."""

    def tasks(self) -> TaskStore: ...


class FileState(CommonState, TwoStepClaims, KeysNeedDirs, NoLocalCopies, Protocol):
    """The shape of a store on files (:class:`loki.storage.store.Store`)."""


class MemoryState(CommonState, OneStepClaims, FlatKeys, NoLocalCopies, Protocol):
    """The shape of a store in memory (:class:`loki.storage.memory.MemoryStore`)."""


class DatabaseState(CommonState, OneStepClaims, FlatKeys, LocalCopies, Protocol):
    """The shape of a store in a database (:class:`loki.storage.postgres.store.PgStore`)."""


StateStore = FileState | MemoryState | DatabaseState
"""One tree's state, as the opener returns it: one of the three shapes, told apart by the capability flags."""
