"""The file state store: ``.loki/`` on this machine's disk (docs/design.md §3, docs/storage.md).

Domain modules (queue, dead-letter, breakers, signals, strikes) never open a state
file. They ask for a transaction over a lock domain::

    with store.transaction(layout.QUEUE_LOCK) as txn:
        pending = txn.read("queue/pending.json")
        ...
        txn.write("queue/pending.json", pending, changed=[task])

and the store does the rest:

* takes the permanent lock file with a timeout (exit 5 naming the holder);
* first finishes a redo journal left by a process that died mid-commit;
* reads inside the lock, refusing symlinks, non-regular files and oversized files;
* trusts a file only if its digest equals the one loki recorded when it wrote it,
  and otherwise parses it strictly and validates it in full before use;
* on commit validates what changed, writes each file by temp + fsync + rename + fsync
  of the directory, and when more than one file changes writes a redo journal
  first, so that ``kill -9`` at any instant leaves every record in exactly one file.

A file that fails to parse or validate is never written: the transaction raises
:class:`StateFileError` naming the file, the JSON pointer and the reason.

It implements :mod:`loki.storage.state`'s roles as files; :mod:`loki.storage.memory` and
:mod:`loki.storage.postgres` implement the same ones (the capability flags below say where they differ).
"""

from __future__ import annotations

import builtins
import errno
import hashlib
import os
import stat
from datetime import datetime, timezone

from loki.clock import Clock, default_clock, format_ts
from loki.errors import (
    FileTooLarge,
    InvalidInput,
    LokiError,
    SchemaViolation,
    StateFileError,
    describe_os_error,
    os_error_hint,
)
from loki.storage import jsonio, layout
from loki.storage.atomic import TEMP_SUFFIX as TEMP_SUFFIX
from loki.storage.atomic import fsync_dir as fsync_dir
from loki.storage.atomic import hard_link_reason as hard_link_reason
from loki.storage.locks import DEFAULT_TIMEOUT, FileLock, current_holder, describe_holder, in_use, read_lock_record
from loki.storage.logpos import LogReads
from loki.storage.paths import check_relpath
from loki.storage.schema import Registry, registry
from loki.wording import plural

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from typing import Any, Literal

    from loki.storage.filetasks import FileTasks
    from loki.storage.observer import DirectoryObserver
    from loki.storage.problems import DoctorReport, Problem
    from loki.storage.state import MemoryRules

DEFAULT_MAX_FILE_BYTES = 64 * 1024 * 1024
JOURNAL_VERSION = 1


_crashpoints_passed = 0


def crashpoint(name: str) -> None:
    """Die here, as ``kill -9`` would, when ``LOKI_CRASHPOINT`` names this point, or when this is the
    ``LOKI_CRASH_AT``-th point the process passes (crash tests only: a harness kills at each in turn)."""
    global _crashpoints_passed
    if os.environ.get("LOKI_CRASHPOINT") == name:
        os._exit(137)
    at = os.environ.get("LOKI_CRASH_AT")
    if at:
        _crashpoints_passed += 1
        if str(_crashpoints_passed) == at:
            os._exit(137)


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def temp_name(path: str) -> str:
    """A unique temp file beside ``path`` (same directory, so the rename is atomic)."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.{os.getpid()}.{os.urandom(4).hex()}{TEMP_SUFFIX}")


def write_temp(path: str, data: bytes) -> str:
    """Write ``data`` to a fresh temp file beside ``path``, flushed and fsynced; return its name."""
    tmp = temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(tmp)
        raise
    os.close(fd)
    return tmp


def atomic_write(path: str, data: bytes, *, sync_dir: bool = True) -> None:
    """Temp file, write, fsync, rename over ``path``, fsync the directory."""
    tmp = write_temp(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    if sync_dir:
        fsync_dir(os.path.dirname(path))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _unlink_quietly(path: str) -> None:
    try:  # noqa: SIM105 - contextlib is an import the hot path does not need
        os.unlink(path)
    except OSError:
        pass


def _os_error(rel: str, exc: OSError, action: str) -> LokiError:
    return StateFileError(rel, f"cannot {action}: {describe_os_error(exc)}", hint=os_error_hint(exc))


class Store(LogReads):
    """A ``.loki/`` directory and the rules for touching it."""

    backend = "files"
    # Capabilities (loki/storage/state.py): a claim is a link then an unlink, a key is a path, and the hooks
    # read these very files (nothing to copy).
    claims_in_one_step: Literal[False] = False
    keys_need_dirs: Literal[True] = True
    keeps_local_copies: Literal[False] = False

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        lock_timeout: float | None = None,
        schemas: Registry | None = None,
        validate_all: bool | None = None,
    ) -> None:
        self.root = os.path.abspath(root)
        """The ``.loki/`` directory this file store reads and writes (the file store's own: every path
        of it is under this one; code that works on any store asks :attr:`where` or :attr:`local_root`)."""
        self.clock = clock or default_clock()
        self.schemas = schemas or registry()
        self._lock_timeout = lock_timeout
        self._config: dict[str, Any] | None = None
        self._checked_dirs: set[str] = set()
        self._tasks: FileTasks | None = None
        self.notes: list[str] = []
        """What a reader should be told about how it read (a commit in flight read from its journal)."""
        self.guarded = True
        """Writes check that no migration is under way and that the tree still keeps its state in its
        files (:meth:`check_writable`); ``loki migrate`` turns it off for the stores it moves with."""
        # Tests set LOKI_VALIDATE_ALL=1: every write is then validated in full, so a domain
        # module that forgets to declare a changed record cannot slip an invalid one through.
        self.validate_all = validate_all if validate_all is not None else bool(os.environ.get("LOKI_VALIDATE_ALL"))

    @classmethod
    def open(cls, root: str | os.PathLike[str] | None = None, **kwargs: Any) -> Store:
        """The file store of the tree at ``root`` (found like git finds ``.git`` when None).

        Refused (exit 1) for a tree whose config keeps the state in a database: this store would read
        and write this machine's files while the team's state is elsewhere. ``loki.open_store`` opens
        either."""
        from loki.storage.backendof import storage_section
        from loki.storage.paths import find_root

        found = find_root(root)
        if storage_section(found) is not None:
            raise InvalidInput(f"{found} keeps its state in a postgresql database ({layout.CONFIG} /storage): "
                               "Store.open opens only a tree's files; open it with loki.open_store(...)",
                               file=layout.CONFIG)
        return cls(found, **kwargs)

    @property
    def where(self) -> str:
        """The ``.loki/`` directory, shown to people (:class:`loki.storage.state.StateStore`)."""
        return self.root

    @property
    def local_root(self) -> str:
        """The ``.loki/`` directory: a file tree is this machine's."""
        return self.root

    # -- paths ---------------------------------------------------------------------------------

    def path(self, rel: str) -> str:
        check_relpath(rel)
        return os.path.join(self.root, *rel.split("/"))

    def exists(self, rel: str) -> bool:
        return os.path.lexists(self.path(rel))

    def ensure_dir(self, rel_dir: str) -> str:
        """Create a directory under the root if needed, refusing symlinked components."""
        path = self.path(rel_dir)
        if rel_dir in self._checked_dirs:
            return path
        current = self.root
        for part in rel_dir.split("/"):
            current = os.path.join(current, part)
            try:
                st = os.lstat(current)
            except FileNotFoundError:
                try:
                    os.mkdir(current, 0o755)
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise _os_error(rel_dir, exc, "create directory") from None
                continue
            if stat.S_ISLNK(st.st_mode):
                raise StateFileError(rel_dir, f"{part!r} is a symbolic link; refusing to follow it out of .loki/")
            if not stat.S_ISDIR(st.st_mode):
                raise StateFileError(rel_dir, f"{part!r} is not a directory")
        self._checked_dirs.add(rel_dir)
        return path

    def _check_parent(self, rel: str) -> None:
        parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
        if parent and parent not in self._checked_dirs:
            current = self.root
            for part in parent.split("/"):
                current = os.path.join(current, part)
                try:
                    st = os.lstat(current)
                except FileNotFoundError:
                    return
                if stat.S_ISLNK(st.st_mode):
                    raise StateFileError(rel, f"directory {part!r} is a symbolic link; refusing to follow it")
            self._checked_dirs.add(parent)

    def check_writable(self, rel: str) -> None:
        """Refuse a write of state while the tree is being migrated, or once it moved to a database
        (loki/storage/moving.py); ``config/`` (where the state is) and ``cache/`` are this machine's."""
        if self.guarded and not rel.startswith(("config/", layout.LOCAL_CACHE_DIR + "/")):
            from loki.storage.moving import check_writable

            check_writable(self.root, "files")

    # -- configuration -------------------------------------------------------------------------

    @property
    def config(self) -> dict[str, Any]:
        """``config/loki.json``, strictly parsed and validated (it is always hand-edited)."""
        if self._config is None:
            self._config = self.read(layout.CONFIG)
        return self._config

    def setting(self, section: str, key: str, default: Any) -> Any:
        from loki.config import setting

        return setting(self.config, section, key, default)

    @property
    def lock_timeout(self) -> float:
        if self._lock_timeout is not None:
            return self._lock_timeout
        from loki.config import lock_timeout_setting

        return lock_timeout_setting(lambda: self.config, DEFAULT_TIMEOUT)

    @property
    def max_file_bytes(self) -> int:
        return DEFAULT_MAX_FILE_BYTES

    def check_size(self, rel: str, size: int) -> None:
        """Refuse to write a state file loki would then refuse to read.

        Every reader refuses a state file over :attr:`max_file_bytes`, so a write that produced
        one would lock every command out of the file (and all its records with it). Called with
        the new content's size before anything touches the disk: nothing changes.
        """
        limit = self.max_file_bytes
        if size > limit:
            raise InvalidInput(f"{rel}: this change would make it {size} bytes, over the {limit}-byte limit for a "
                               "state file (loki refuses to read larger ones); nothing was changed",
                               file=rel, size=size, limit=limit)

    # -- raw file access -----------------------------------------------------------------------

    def _open_regular(self, rel: str, flags: int, action: str, *,
                      writing: bool | None = None) -> tuple[int, os.stat_result] | None:
        """Open a state file without following a link; refuse anything but a regular file.

        Returns (fd, stat), or None when it does not exist (and ``flags`` does not create it).
        The caller closes the descriptor. ``writing`` (default: ``flags`` open it for writing):
        the file is about to be changed in place (an append), so one with other hard links is
        refused as a symbolic link is: writing through it would change a file outside .loki/.
        Replacing a file by rename never writes through a link, so readers need not refuse them.
        """
        self._check_parent(rel)
        try:
            fd = os.open(self.path(rel), flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise StateFileError(rel, "is a symbolic link; loki refuses to follow links out of .loki/") from None
            if exc.errno == errno.EISDIR:
                raise StateFileError(rel, "is a directory, not a file") from None
            raise _os_error(rel, exc, action) from None
        try:
            st = os.fstat(fd)
        except OSError as exc:
            os.close(fd)
            raise _os_error(rel, exc, action) from None
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise StateFileError(rel, "is a directory, not a file" if stat.S_ISDIR(st.st_mode)
                                 else "is not a regular file")
        if writing is None:
            writing = bool(flags & (os.O_WRONLY | os.O_RDWR))
        if writing and st.st_nlink > 1:
            os.close(fd)
            raise StateFileError(rel, hard_link_reason(st.st_nlink))
        return fd, st

    def read_bytes(self, rel: str, *, limit: int | None = None) -> bytes | None:
        """The bytes of a state file, or None if it does not exist. Refuses symlinks and non-files,
        and files over ``limit`` bytes (the state-file limit unless given)."""
        limit = self.max_file_bytes if limit is None else limit
        # O_NONBLOCK: opening a FIFO planted where a file belongs must not hang.
        opened = self._open_regular(rel, os.O_RDONLY | os.O_NONBLOCK, "read")
        if opened is None:
            return None
        fd, st = opened
        try:
            if st.st_size > limit:
                raise FileTooLarge(rel, f"is {st.st_size} bytes, over the {limit}-byte limit for a state file")
            chunks = []
            while True:
                chunk = os.read(fd, max(st.st_size, 1 << 16))
                if not chunk:
                    break
                chunks.append(chunk)
                if sum(len(c) for c in chunks) > limit:
                    raise FileTooLarge(rel, f"is over the {limit}-byte limit for a state file")
            return b"".join(chunks)
        except OSError as exc:
            raise _os_error(rel, exc, "read") from None
        finally:
            os.close(fd)

    def read_from(self, rel: str, offset: int, limit: int = 1 << 20) -> tuple[bytes, int]:
        """Up to ``limit`` bytes of an append-only log from ``offset``, and the log's current size.

        Followers of a log (the watcher's DRIFT_DETECTED offset, a display tailing
        ``logs/signals.jsonl``) read only what is new instead of the whole file. An absent
        log is ``(b"", 0)``. Symlinks and non-regular files are refused as in :meth:`read_bytes`.
        """
        opened = self._open_regular(rel, os.O_RDONLY | os.O_NONBLOCK, "read")
        if opened is None:
            return b"", 0
        fd, st = opened
        try:
            if offset >= st.st_size:
                return b"", st.st_size
            return os.pread(fd, min(limit, st.st_size - offset), offset), st.st_size
        except OSError as exc:
            raise _os_error(rel, exc, "read") from None
        finally:
            os.close(fd)

    def parse(self, rel: str, data: bytes, *, trusted: bool = False) -> Any:
        """Bytes -> validated, normalised document of the kind ``rel`` names."""
        kind = layout.kind_for(rel)
        if trusted:
            doc = jsonio.loads_trusted(data)
        else:
            try:
                doc = jsonio.loads_strict(data)
            except jsonio.JsonError as exc:
                raise StateFileError(rel, exc.reason, exc.pointer) from None
            if kind is not None:
                found = self.schemas.problems(kind.schema, doc)
                if found:
                    pointer, reason = found[0]
                    more = f" (and {plural(len(found) - 1, 'more problem')})" if len(found) > 1 else ""
                    raise StateFileError(rel, reason + more, pointer or "/")
        if kind is not None and kind.normalise is not None:
            converted = kind.normalise(doc, rel, lambda: self.foreign_stamp(rel))
            if converted is not doc:
                # Another tool's shape (Loki Mode's) was turned into loki's: what came out must be a
                # valid loki document before anything uses it.
                found = self.schemas.problems(kind.schema, converted)
                if found:
                    pointer, reason = found[0]
                    raise StateFileError(rel, f"{reason} (after converting it from Loki Mode's format)",
                                         pointer or "/")
            doc = converted
        return doc

    def foreign_stamp(self, rel: str) -> str:
        """The time that stands in for one a record in another tool's shape does not give.

        When the file was last written (a task in it was created, a claim in it taken, no later),
        or the clock's now if that is earlier (a test's ``LOKI_NOW``): stable from one read to
        the next, so a claim without ``claimedAt`` does not get a fresh lease on every read.
        """
        now = self.clock.now()
        try:
            written = datetime.fromtimestamp(os.lstat(self.path(rel)).st_mtime, timezone.utc)
        except OSError:
            return format_ts(now)
        return format_ts(min(written, now))

    def read(self, rel: str, digests: dict[str, Any] | None = None) -> Any:
        """Read one state file without a lock (readers need none: writes are atomic renames).

        ``digests``: the lock record's digests, when the caller already read them.
        """
        data = self.read_bytes(rel)
        kind = layout.kind_for(rel)
        if data is None:
            return kind.empty() if kind is not None else None
        if digests is None:
            digests = self.recorded_digests(layout.lock_for(rel))
        return self.parse(rel, data, trusted=digests.get(rel) == digest(data))

    def recorded_digests(self, lock: str) -> dict[str, Any]:
        """Digests of the files loki last wrote under ``lock`` (a hint; {} when unknown)."""
        recorded = read_lock_record(self.path(lock)).get("digests")
        return recorded if isinstance(recorded, dict) else {}

    def snapshot(self, rels: Iterable[str], attempts: int = 20, *, wait: bool = False) -> dict[str, Any]:
        """A consistent view of several files of one lock domain, without taking the lock.

        Multi-file commits replace files one by one, so a naive reader could see a task
        in two files or in none. Read everything, then check that no file changed and no
        journal appeared meanwhile; retry if so, and finally fall back to the lock.

        A journal under a lock somebody holds is a commit in flight, and its holder may be
        stopped (SIGSTOP, a debugger, a laptop lid) for as long as it likes: rather than wait
        for the lock and time out, the reader takes the state that commit makes, the journal's
        files over the others (the journal is complete once it exists: it is published by
        rename), and says so in :attr:`notes`. ``wait=True`` (``loki validate``, which checks
        the files themselves) waits for the lock instead, and a timeout is exit 5.
        """
        rels = list(rels)
        locks = {layout.lock_for(rel) for rel in rels}
        journals = [self.path(layout.journal_for(lock)) for lock in locks]
        for _ in range(attempts):
            before = [self._stat_key(rel) for rel in rels]
            # Checked after the first stats: a commit that had already replaced a file when they were
            # taken still has its journal on disk now (it is deleted only after the last file).
            if any(os.path.exists(j) for j in journals):
                if wait or not self._journal_in_flight(locks):
                    break  # the lock: wait for the commit, or finish a crash's journal
                docs = self._committed_view(rels, locks)
                if docs is not None:
                    return docs
                continue
            digests = {lock: self.recorded_digests(lock) for lock in locks}
            docs = {rel: self.read(rel, digests[layout.lock_for(rel)]) for rel in rels}
            after = [self._stat_key(rel) for rel in rels]
            if before == after and not any(os.path.exists(j) for j in journals):
                return docs
        # Contended or mid-commit: take the lock(s), in a fixed order, and read inside them.
        txns: dict[str, Transaction] = {}
        try:
            for lock in sorted(locks):
                txns[lock] = Transaction(self, lock)
                txns[lock].begin()
            return {rel: txns[layout.lock_for(rel)].read(rel) for rel in rels}
        finally:
            for txn in txns.values():
                txn.abort()

    def _note(self, text: str) -> None:
        if text not in self.notes:  # a long-lived store (a watcher) reads again and again
            self.notes.append(text)

    def _journal_in_flight(self, locks: set[str]) -> bool:
        """Whether some lock with a journal is held (a commit in flight, not a crash's leftover)."""
        return any(os.path.lexists(self.path(layout.journal_for(lock))) and in_use(self.path(lock))
                   for lock in locks)

    def _committed_view(self, rels: list[str], locks: set[str]) -> dict[str, Any] | None:
        """The files as the journals in flight leave them, read without any lock; None to retry.

        Only for a journal whose lock is held: one left by a crash (lock free) is finished by
        taking the lock, as before. None when a journal came or went meanwhile.
        """
        overlay: dict[str, bytes] = {}
        in_flight: dict[str, tuple[tuple[int, int, int, int] | None, dict[str, Any]]] = {}
        for lock in sorted(locks):
            journal = layout.journal_for(lock)
            key = self._stat_key(journal)
            if key is None:
                continue
            if not in_use(self.path(lock)):
                return None  # a crash's leftover: the lock finishes it (after the retries)
            data = self.read_bytes(journal, limit=self.max_file_bytes * (len(layout.QUEUE_STATES) + 3))
            if data is None:
                return None  # finished meanwhile
            try:
                files = jsonio.loads_strict(data).get("files")
            except (jsonio.JsonError, AttributeError):
                files = None
            if not isinstance(files, dict):
                raise StateFileError(journal, "a commit in flight has a journal that cannot be read; wait for it, "
                                     "or run `loki doctor` once its process is gone")
            for rel, doc in files.items():
                if rel in rels:
                    kind = layout.kind_for(rel)
                    overlay[rel] = jsonio.dumps_document(doc, kind.records_key if kind is not None else None)
            in_flight[lock] = (key, current_holder(self.path(lock)))
        if not in_flight:
            return None
        before = {rel: self._stat_key(rel) for rel in rels if rel not in overlay}
        docs = {rel: self.parse(rel, overlay[rel]) for rel in overlay}
        digests = {lock: self.recorded_digests(lock) for lock in locks}
        docs.update({rel: self.read(rel, digests[layout.lock_for(rel)]) for rel in before})
        # Files outside the journal do not change while its holder holds the lock; if a journal is
        # gone or new, a newer commit may have started: look again.
        if any(self._stat_key(layout.journal_for(lock)) != key for lock, (key, _) in in_flight.items()) or \
                any(self._stat_key(rel) != key for rel, key in before.items()):
            return None
        for lock, (_, holder) in sorted(in_flight.items()):
            self._note(f"{lock} is {describe_holder(holder)}, in the middle of a commit: showing the state "
                       f"that commit makes, from its journal {layout.journal_for(lock)} (written, not yet "
                       "applied to the files)")
        return docs

    def change_token(self, rel: str) -> tuple[int, int, int, int] | None:
        """(inode, size, mtime, ctime) of a state file, None if absent: equal keys, same content.

        Every write replaces the file (a new inode) or appends (a new size), so a reader that
        caches what it parsed (the live view, re-drawn every second) can tell when to re-read.
        """
        return self._stat_key(rel)

    def _stat_key(self, rel: str) -> tuple[int, int, int, int] | None:
        try:
            st = os.lstat(self.path(rel))
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    # -- transactions --------------------------------------------------------------------------

    def transaction(self, lock: str) -> Transaction:
        """A :class:`Transaction` over ``lock``'s domain, used as ``with store.transaction(...) as txn``.

        ``lock`` is a lock file (``layout.QUEUE_LOCK``) or any state file of the domain.
        Entering takes the lock; leaving normally commits the staged writes; leaving by an
        exception writes nothing.
        """
        return Transaction(self, lock if lock.endswith(".lock") else layout.lock_for(lock))

    def recover(self, lock: str) -> bool:
        """Take a domain's lock only to finish a pending journal; True if there was one."""
        txn = Transaction(self, lock)
        try:
            return txn.begin()
        finally:
            txn.abort()

    # -- append-only logs and write-once files -------------------------------------------------

    def append_lines(self, rel: str, records: Iterable[Any], *, lock: bool = True) -> int:
        """Append JSON lines to an append-only log under its lock; return the offset they start at.

        A torn last line (a writer killed mid-append, or an agent's ``cat >>``) is left as it
        is, on its own line: readers skip it with a warning; nothing is ever truncated.
        """
        payload = "".join(jsonio.dumps_compact(r) + "\n" for r in records).encode("utf-8")
        return self.append_bytes(rel, payload, lock=lock)

    def append_text(self, rel: str, lines: Iterable[str], *, lock: bool = True, read_whole: bool = False) -> int:
        """Append plain text lines (``logs/circuit-recovery.log``) under the log's lock.

        ``read_whole``: the file is read back whole (a Markdown file), so it may not outgrow the
        state-file limit: an append that would make it larger is refused (:meth:`check_size`).
        """
        payload = "".join(line.rstrip("\n") + "\n" for line in lines).encode("utf-8")
        return self.append_bytes(rel, payload, lock=lock, read_whole=read_whole)

    def append_bytes(self, rel: str, payload: bytes, *, lock: bool = True, read_whole: bool = False) -> int:
        if not payload:
            return 0
        self.check_writable(rel)
        if "/" in rel:
            self.ensure_dir(rel.rsplit("/", 1)[0])
        holder = FileLock(self.path(rel + ".lock"), self.lock_timeout, rel + ".lock") if lock else None
        if holder is not None:
            holder.acquire()
        try:
            if holder is not None:
                self.check_writable(rel)  # again under the lock: loki migrate takes it once before reading
            return self._append(rel, payload, read_whole)
        finally:
            if holder is not None:
                holder.release()

    def _append(self, rel: str, payload: bytes, read_whole: bool = False) -> int:
        if read_whole:
            self.check_size(rel, len(payload) + 1)  # before O_CREAT could leave an empty new file
        existed = os.path.lexists(self.path(rel))
        opened = self._open_regular(rel, os.O_RDWR | os.O_APPEND | os.O_CREAT, "append to")
        assert opened is not None  # O_CREAT
        fd, st = opened
        if read_whole:
            try:
                self.check_size(rel, st.st_size + len(payload) + 1)  # + the newline a torn line may need
            except InvalidInput:
                os.close(fd)
                raise
        if not existed:  # a new log's name must be as durable as the lines fsynced into it
            fsync_dir(os.path.dirname(self.path(rel)))
        try:
            offset = st.st_size
            if offset > 0 and os.pread(fd, 1, offset - 1) != b"\n":
                payload = b"\n" + payload
                offset += 1
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            return offset
        except OSError as exc:
            raise _os_error(rel, exc, "append to") from None
        finally:
            os.close(fd)

    def create_unique(self, rel_dir: str, name: str, data: bytes, *, suffix: str = "", separator: str = "-",
                      mtime_ns: int | None = None, state_file: bool = True) -> str:
        """Publish a new file ``rel_dir/name`` without ever overwriting one; return its relative path.

        Written to a temp file, fsynced, then hard-linked into place (``link`` fails if the
        name exists, where ``rename`` would overwrite), so a reader sees all of it or nothing.
        A taken name gets ``-2``, ``-3``... (``separator`` + number) before ``suffix``.
        ``mtime_ns``: the file's modification time, set before it is published (the kernel's
        own is only as fine as a clock tick; signals are consumed in mtime order).
        ``state_file=False``: a file loki never reads back as state (a ``.corrupt.`` set-aside),
        which may be larger than a state file may be.
        """
        if state_file:
            self.check_size(f"{rel_dir}/{name}{suffix}", len(data))
        self.check_writable(f"{rel_dir}/{name}")
        directory = self.ensure_dir(rel_dir)
        try:
            tmp = write_temp(os.path.join(directory, name + suffix), data)
            if mtime_ns is not None:
                os.utime(tmp, ns=(mtime_ns, mtime_ns))
        except OSError as exc:
            raise _os_error(f"{rel_dir}/{name}{suffix}", exc, "write") from None
        try:
            for n in range(1, 10_000):
                candidate = name if n == 1 else f"{name}{separator}{n}"
                target = os.path.join(directory, candidate + suffix)
                try:
                    os.link(tmp, target)
                except FileExistsError:
                    continue
                # At once, before the directory fsync: until then the new file has two links, and
                # `loki validate` reports a state file with other hard links.
                _unlink_quietly(tmp)
                fsync_dir(directory)
                return f"{rel_dir}/{candidate}{suffix}"
            raise StateFileError(f"{rel_dir}/{name}{suffix}", "could not find a free name")
        except OSError as exc:
            raise _os_error(f"{rel_dir}/{name}{suffix}", exc, "publish") from None
        finally:
            _unlink_quietly(tmp)

    def write_text(self, rel: str, text: str) -> None:
        """Atomically replace a non-JSON file (CONTINUITY.md, escalation edits)."""
        self.check_writable(rel)
        self._check_parent(rel)
        data = text.encode("utf-8")
        self.check_size(rel, len(data))
        try:
            atomic_write(self.path(rel), data)
        except OSError as exc:
            raise _os_error(rel, exc, "write") from None

    def iter_lines(self, rel: str, chunk: int = 1 << 20) -> Iterator[tuple[int, int, bytes]]:
        """``(line number, byte offset, raw line)`` of every line of a log, read in chunks.

        Logs may outgrow the 64 MiB a state document may have, so they are never read whole.
        A last line without its newline (a torn append) is still yielded.
        """
        offset, line, pending = 0, 0, b""
        while True:
            data, size = self.read_from(rel, offset + len(pending), chunk)
            if not data:
                break
            pending += data
            end = pending.rfind(b"\n")
            if end < 0:
                continue
            position = offset
            for raw in pending[:end].split(b"\n"):
                line += 1
                yield line, position, raw
                position += len(raw) + 1
            offset += end + 1
            pending = pending[end + 1:]
            if offset + len(pending) >= size:
                break
        if pending.strip():
            yield line + 1, offset, pending

    def rewrite_lines(self, rel: str, records: Iterable[Any]) -> int:
        """Atomically replace an append-only log with ``records`` (compaction); return the lines written.

        The caller holds the log's lock (``with store.transaction(rel)``), so no append is lost.
        Records are streamed into the temp file, so a large log is never held in memory as one string.
        """
        self._check_parent(rel)
        path = self.path(rel)
        tmp = temp_name(path)
        count = 0
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            try:
                batch: list[str] = []
                for record in records:
                    batch.append(jsonio.dumps_compact(record) + "\n")
                    count += 1
                    if len(batch) >= 1000:
                        _write_all(fd, "".join(batch).encode("utf-8"))
                        batch = []
                _write_all(fd, "".join(batch).encode("utf-8"))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            fsync_dir(os.path.dirname(path))
        except OSError as exc:
            _unlink_quietly(tmp)
            raise _os_error(rel, exc, "rewrite") from None
        except BaseException:
            _unlink_quietly(tmp)
            raise
        return count

    def detach(self, rel: str) -> bool:
        """Give a state file with other hard links its own copy (same bytes, a new inode); True if it had any.

        The caller holds the file's lock (``with store.transaction(rel)``), so no append is lost.
        The other names keep the old inode and are never written to. Streamed: a log may be large.
        """
        opened = self._open_regular(rel, os.O_RDONLY | os.O_NONBLOCK, "copy")
        if opened is None:
            return False
        fd, st = opened
        path = self.path(rel)
        tmp = temp_name(path)
        try:
            if st.st_nlink <= 1:
                return False
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                          stat.S_IMODE(st.st_mode))
            try:
                while chunk := os.read(fd, 1 << 20):
                    _write_all(out, chunk)
                os.fsync(out)
            finally:
                os.close(out)
            os.replace(tmp, path)
            fsync_dir(os.path.dirname(path))
            return True
        except OSError as exc:
            _unlink_quietly(tmp)
            raise _os_error(rel, exc, "copy") from None
        finally:
            os.close(fd)

    def remove(self, rel: str) -> bool:
        """Delete a state file loki derived and can rebuild (a hint, the search index); True if it existed."""
        self._check_parent(rel)
        path = self.path(rel)
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                raise StateFileError(rel, "is a directory, not a file")
            os.unlink(path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise _os_error(rel, exc, "remove") from None
        fsync_dir(os.path.dirname(path))
        return True

    def read_text(self, rel: str) -> str | None:
        data = self.read_bytes(rel)
        if data is None:
            return None
        try:
            return jsonio.decode_utf8(data)
        except jsonio.JsonError as exc:
            raise StateFileError(rel, exc.reason) from None

    def now_ts(self) -> str:
        return format_ts(self.clock.now())

    def entry(self, rel: str) -> dict[str, Any] | None:
        """What is at ``rel`` without following a link: ``{"name", "kind", "bytes", "mtime_ns"}`` (None: nothing).

        ``kind`` is file, symlink, directory or other: an inspection shows what an agent left
        there, and the readers refuse all but a regular file.
        """
        try:
            st = os.lstat(self.path(rel))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _os_error(rel, exc, "inspect") from None
        return _entry(rel.rsplit("/", 1)[-1], st)

    def scan(self, rel_dir: str) -> list[dict[str, Any]]:
        """:meth:`entry` for every name in a directory ([] when it does not exist); unsorted."""
        try:
            scan = list(os.scandir(self.path(rel_dir)))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise _os_error(rel_dir, exc, "list") from None
        rows = []
        for item in scan:
            try:
                rows.append(_entry(item.name, item.stat(follow_symlinks=False)))
            except FileNotFoundError:  # removed while we looked (a signal consumed)
                continue
        return rows

    def list(self, rel_dir: str) -> list[str]:
        """The names in a directory of the tree, sorted ([] when it does not exist)."""
        path = self.path(rel_dir)
        try:
            return sorted(os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise _os_error(rel_dir, exc, "list") from None

    # -- claiming published items (the signal consumer's protocol) ----------------------------------

    def claim_into(self, rel: str, rel_dir: str, entry: str) -> bool:
        """Move ``rel`` to ``rel_dir/entry`` so that exactly one claimer gets it; False if it is gone.

        A hard link then an unlink, not a rename: watchdog holds every event back for 0.5 s
        behind an unpaired IN_MOVED_FROM (it waits for the matching IN_MOVED_TO), so renaming
        claimed files out of the watched directory would delay the wake-up for every signal
        that follows. A crash between the two leaves the same inode under both names;
        :meth:`drop_twin` removes the waiting name before anything is scanned again.
        (Directories cannot be hard-linked: they are renamed, and quarantined anyway.)
        """
        directory = self.ensure_dir(rel_dir)
        source = self.path(rel)
        target = os.path.join(directory, entry)
        try:
            if stat.S_ISDIR(os.lstat(source).st_mode):
                os.rename(source, target)
            else:
                os.link(source, target, follow_symlinks=False)
                fsync_dir(directory)  # the claim is durable before the waiting name goes
                crashpoint("signal-linked")
                try:
                    os.unlink(source)
                except OSError as exc:
                    if isinstance(exc, FileNotFoundError):
                        raise
                    # The waiting name cannot go (signals/ read-only): take the claim back, so nothing
                    # is left half-claimed for the next consumer to find twice.
                    _unlink_quietly(target)
                    raise _os_error(rel, exc, f"claim it (move it into {rel_dir}/)") from None
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise _os_error(rel, exc, f"claim it (move it into {rel_dir}/)") from None
        fsync_dir(os.path.dirname(source))
        fsync_dir(directory)
        crashpoint("signal-claimed")
        return True

    def drop_twin(self, claimed_rel: str, waiting_rel: str) -> None:
        """After a crash between link and unlink: remove the waiting name of a claimed inode."""
        try:
            claimed = os.lstat(self.path(claimed_rel))
            if claimed.st_nlink < 2 or stat.S_ISDIR(claimed.st_mode):
                return
            waiting = self.path(waiting_rel)
            twin = os.lstat(waiting)
        except FileNotFoundError:
            return
        if (twin.st_dev, twin.st_ino) == (claimed.st_dev, claimed.st_ino):
            try:
                os.unlink(waiting)
            except FileNotFoundError:
                return
            except OSError as exc:
                raise _os_error(waiting_rel, exc, "remove it (it is already claimed)") from None
            fsync_dir(os.path.dirname(waiting))

    def finish(self, rel: str, target_dir: str | None) -> None:
        """A claimed item is done: delete it, or move it into ``target_dir`` (quarantine, archive)."""
        path = self.path(rel)
        try:
            if target_dir is None:
                os.unlink(path)
            else:
                os.rename(path, os.path.join(self.ensure_dir(target_dir), rel.rsplit("/", 1)[-1]))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise _os_error(rel, exc, "remove it" if target_dir is None else f"move it into {target_dir}/") from None

    # -- locks held for a long time (the signal consumer) -----------------------------------------

    def lock(self, rel: str, timeout: float) -> FileLock:
        """A lock on ``rel`` (not yet taken) for a holder that keeps it while it runs."""
        self.ensure_dir(rel.rsplit("/", 1)[0])
        return FileLock(self.path(rel), timeout, rel)

    def lock_holder(self, rel: str) -> dict[str, Any] | None:
        """Who holds the lock ``rel`` now (its record), or None (:func:`loki.storage.locks.holder`)."""
        from loki.storage.locks import holder

        return holder(self.path(rel))

    def observe(self, rel_dir: str, wake: Callable[[], None]) -> DirectoryObserver:
        """A watchdog observer of the directory ``rel_dir`` calling ``wake`` (:mod:`loki.storage.observer`)."""
        from loki.storage.observer import DirectoryObserver

        return DirectoryObserver(self.ensure_dir(rel_dir), wake)

    def memory_search(self, rules: MemoryRules) -> None:
        """None: error memory keeps its SQLite cache beside the log (:meth:`index_database`)."""
        return None

    def index_database(self, rel: str, side_files: Iterable[str] = ()) -> str:
        """Where SQLite keeps a cache ``rel`` (error memory's search index), checked like state.

        SQLite writes the file (and ``side_files``: its WAL and shared memory) in place, so a symbolic
        link or another hard link there is refused, as for any file loki writes through.
        """
        self.ensure_dir(rel.rsplit("/", 1)[0])
        path = self.path(rel)
        for suffix in ("", *side_files):
            try:
                st = os.lstat(path + suffix)
            except OSError:  # absent (SQLite creates it), or unreadable (connect says why)
                continue
            if stat.S_ISLNK(st.st_mode):
                raise StateFileError(rel + suffix, "is a symbolic link; loki refuses to follow links out of .loki/")
            if st.st_nlink > 1:  # SQLite writes it in place
                raise StateFileError(rel + suffix, hard_link_reason(st.st_nlink))
        return path

    # -- administration (loki/storage/treecheck.py does the work) -------------------------------------

    def validate_state(self) -> builtins.list[Problem]:
        from loki.storage.treecheck import validate_tree

        return validate_tree(self)

    def doctor_state(self, *, repair: bool = False) -> DoctorReport:
        from loki.storage.treecheck import doctor

        return doctor(self, repair=repair)

    def stored_records(self, states: builtins.list[str]) -> dict[str, builtins.list[Any]]:
        """The bytes as they are: reading through the store would finish an interrupted change."""
        found: dict[str, builtins.list[Any]] = {}
        for state in states:
            rel = layout.DEADLETTER if state == "dead-letter" else layout.ABANDONED if state == "abandoned" \
                else layout.queue_file(state)
            try:
                doc = jsonio.loads_strict(self.read_bytes(rel) or b"{}")
            except jsonio.JsonError:
                doc = {}  # validate_tree names what is wrong with it
            tasks = doc.get("tasks") if isinstance(doc, dict) else None
            found[state] = tasks if isinstance(tasks, list) else []
        return found

    def tasks(self) -> FileTasks:
        """The queue domain as tasks (:class:`loki.storage.tasks.TaskStore`), on this tree's files."""
        if self._tasks is None:
            from loki.storage.filetasks import FileTasks

            self._tasks = FileTasks(self)
        return self._tasks


def _entry(name: str, st: os.stat_result) -> dict[str, Any]:
    kind = "file" if stat.S_ISREG(st.st_mode) else "symlink" if stat.S_ISLNK(st.st_mode) else \
        "directory" if stat.S_ISDIR(st.st_mode) else "other"
    return {"name": name, "kind": kind, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


class Transaction:
    """Reads and staged writes of one lock domain, committed atomically."""

    def __init__(self, store: Store, lock: str) -> None:
        self.store = store
        self.lock_rel = lock
        self.journal_rel = layout.journal_for(lock)
        self._lock = FileLock(store.path(lock), store.lock_timeout, lock)
        self._docs: dict[str, Any] = {}
        self._digests: dict[str, str] = {}
        self._staged: dict[str, bytes] = {}
        self._appends: dict[str, bytes] = {}
        self._order: list[str] = []
        self.recovered = False

    # lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> Transaction:
        self.begin()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        try:
            if exc_type is None:
                self.commit()
        finally:
            self.abort()

    def begin(self) -> bool:
        """Take the lock; finish a journal if one was left behind. True if one was finished."""
        self.store.check_writable(self.lock_rel)  # before ensure_dir: a moved tree gets no new queue/
        if "/" in self.lock_rel:  # a top-level file's lock (institutional-knowledge.md.lock) needs no directory
            self.store.ensure_dir(self.lock_rel.rsplit("/", 1)[0])
        self._lock.acquire()
        try:
            # Again under the lock: loki migrate takes every lock once after writing its marker, so a
            # unit that passed this check has committed before the migration reads the source.
            self.store.check_writable(self.lock_rel)
            digests = self._lock.record.get("digests")
            self._digests = dict(digests) if isinstance(digests, dict) else {}
            if os.path.lexists(self.store.path(self.journal_rel)):
                self._replay_journal()
                self.recovered = True
        except BaseException:
            self._lock.release()
            raise
        return self.recovered

    def abort(self) -> None:
        self._lock.release()

    # reading ---------------------------------------------------------------------------------

    def read(self, rel: str) -> Any:
        """The current document of ``rel`` (validated; its empty form if the file is absent)."""
        if rel in self._docs:
            return self._docs[rel]
        self._check_domain(rel)
        data = self.store.read_bytes(rel)
        kind = layout.kind_for(rel)
        if data is None:
            doc = kind.empty() if kind is not None else None
        else:
            file_digest = digest(data)
            trusted = self._digests.get(rel) == file_digest
            doc = self.store.parse(rel, data, trusted=trusted)
            if not trusted and not data.lstrip().startswith(b"["):
                # Validated in full just now: remember it, so the next reader need not. (A file in
                # another tool's shape is converted on every read, and checked every time.)
                self._digests[rel] = file_digest
                self._record_digests()
        self._docs[rel] = doc
        return doc

    # writing ---------------------------------------------------------------------------------

    def write(self, rel: str, doc: Any, *, changed: Iterable[Any] | None = None) -> None:
        """Stage the new content of ``rel``. ``changed``: the records this write added or modified.

        With ``changed`` given, the envelope and those records are validated (cheap); without
        it, the whole document is. Content over the state-file size limit is refused here
        (:meth:`Store.check_size`). Nothing touches the disk before commit.
        """
        self._check_domain(rel)
        kind = layout.kind_for(rel)
        if kind is not None:
            self._validate(rel, kind, doc, changed)
        data = jsonio.dumps_document(doc, kind.records_key if kind is not None else None)
        self.store.check_size(rel, len(data))
        if rel not in self._staged:
            self._order.append(rel)
        self._staged[rel] = data
        self._docs[rel] = doc

    def append(self, rel: str, records: Iterable[Any]) -> None:
        """Stage JSON lines to append to a log of this domain (the archive), committed with the rest."""
        self._check_domain(rel)
        data = "".join(jsonio.dumps_compact(r) + "\n" for r in records).encode("utf-8")
        if data:
            if rel not in self._appends and rel not in self._staged:
                self._order.append(rel)
            self._appends[rel] = self._appends.get(rel, b"") + data

    def _validate(self, rel: str, kind: layout.FileKind, doc: Any, changed: Iterable[Any] | None) -> None:
        schemas = self.store.schemas
        if changed is None or kind.record_schema is None or self.store.validate_all:
            schemas.validate(kind.schema, doc, rel)
            return
        schemas.validate(kind.schema, kind.envelope(doc), rel)
        for record in changed:
            found = schemas.problems(kind.record_schema, record)
            if found:
                prefix = kind.record_pointer(doc, record)
                raise SchemaViolation(rel, [(prefix + p, reason) for p, reason in found])

    def commit(self) -> None:
        if not self._staged and not self._appends:
            return
        try:
            if len(self._staged) == 1 and not self._appends:
                rel, data = next(iter(self._staged.items()))
                self.store._check_parent(rel)
                atomic_write(self.store.path(rel), data)
            else:
                appends = {rel: (self._size(rel), data) for rel, data in self._appends.items()}
                self._write_journal(appends)
                crashpoint("journal-written")
                self._apply_appends(appends)
                self._apply(self._staged)
                crashpoint("files-replaced")
                self._finish_journal()
        except OSError as exc:
            raise _os_error(self._order[0], exc, "write") from None
        for rel, data in self._staged.items():
            self._digests[rel] = digest(data)
        self._record_digests()
        self._staged = {}
        self._appends = {}

    def _size(self, rel: str) -> int:
        """A log's size before an append, checked before the journal is written: a log that is a
        symlink, a directory or unreadable must stop the commit now, not every later replay."""
        self.store.ensure_dir(rel.rsplit("/", 1)[0])
        opened = self.store._open_regular(rel, os.O_RDONLY | os.O_NONBLOCK, "append to", writing=True)
        if opened is None:
            return 0
        os.close(opened[0])
        return opened[1].st_size

    # journal ---------------------------------------------------------------------------------

    def _write_journal(self, appends: dict[str, tuple[int, bytes]]) -> None:
        # The journal embeds each file's serialised bytes verbatim, so no second serialisation.
        # An append is recorded with the size the log had before it: replay truncates back to
        # that size and appends again, so replaying twice is harmless.
        staged = [rel for rel in self._order if rel in self._staged]
        appended = {rel: {"offset": offset, "data": data.decode("utf-8")} for rel, (offset, data) in appends.items()}
        parts = [
            b'{"version":%d,"created_at":"%s","appends":' % (JOURNAL_VERSION, self.store.now_ts().encode()),
            jsonio.dumps_compact(appended).encode("utf-8"),
            b',"files":{',
            b",".join(jsonio.dumps_compact(rel).encode() + b":" + self._staged[rel] for rel in staged),
            b"}}\n",
        ]
        atomic_write(self.store.path(self.journal_rel), b"".join(parts))

    def _apply_appends(self, appends: dict[str, tuple[int, bytes]]) -> None:
        for rel, (offset, data) in appends.items():
            self.store.ensure_dir(rel.rsplit("/", 1)[0])
            existed = os.path.lexists(self.store.path(rel))
            opened = self.store._open_regular(rel, os.O_RDWR | os.O_CREAT, "append to")
            assert opened is not None  # O_CREAT
            fd, st = opened
            try:
                if st.st_size < offset:
                    raise StateFileError(rel, f"is {st.st_size} bytes, shorter than the {offset} bytes the journal "
                                         "recorded; it was truncated outside loki (`loki doctor --repair` sets "
                                         "the journal aside)")
                os.ftruncate(fd, offset)
                view = memoryview(data)
                position = offset
                while view:
                    written = os.pwrite(fd, view, position)
                    view = view[written:]
                    position += written
                os.fsync(fd)
            except OSError as exc:
                raise _os_error(rel, exc, "append to") from None
            finally:
                os.close(fd)
            if not existed:  # a new file's name must be as durable as its content
                fsync_dir(os.path.dirname(self.store.path(rel)))

    def _apply(self, files: dict[str, bytes]) -> None:
        for index, (rel, data) in enumerate(files.items()):
            self.store._check_parent(rel)
            tmp = write_temp(self.store.path(rel), data)
            if index == 1:
                crashpoint("between-files")
            os.replace(tmp, self.store.path(rel))
        for directory in {os.path.dirname(self.store.path(rel)) for rel in files}:
            fsync_dir(directory)

    def _finish_journal(self) -> None:
        path = self.store.path(self.journal_rel)
        os.unlink(path)
        # Make the removal durable: a stale journal replayed after later commits would undo them.
        fsync_dir(os.path.dirname(path))

    def _replay_journal(self) -> None:
        try:
            self._replay()
        except OSError as exc:
            raise StateFileError(self.journal_rel, f"cannot finish this unfinished change: {describe_os_error(exc)}; "
                                 "`loki doctor --repair` sets the journal aside") from None

    def _replay(self) -> None:
        rel = self.journal_rel
        # A journal holds every file of the change, so it may be larger than one state file.
        data = self.store.read_bytes(rel, limit=self.store.max_file_bytes * (len(layout.QUEUE_STATES) + 3))
        if data is None:
            return
        try:
            journal = jsonio.loads_strict(data)
        except jsonio.JsonError as exc:
            raise StateFileError(rel, f"unfinished journal cannot be read: {exc.reason}; "
                                 "run `loki doctor` to inspect it") from None
        files = journal.get("files") if isinstance(journal, dict) else None
        if not isinstance(files, dict):
            raise StateFileError(rel, "unfinished journal has no 'files' object", "/files")
        appends: dict[str, tuple[int, bytes]] = {}
        for log_rel, op in (journal.get("appends") or {}).items():
            check_relpath(log_rel)
            self._check_domain(log_rel)
            if not isinstance(op, dict) or not isinstance(op.get("offset"), int) or not isinstance(op.get("data"), str):
                raise StateFileError(rel, "unfinished journal has a malformed append", f"/appends/{log_rel}")
            appends[log_rel] = (op["offset"], op["data"].encode("utf-8"))
        self._apply_appends(appends)
        staged: dict[str, bytes] = {}
        for file_rel, doc in files.items():
            check_relpath(file_rel)
            self._check_domain(file_rel)
            kind = layout.kind_for(file_rel)
            staged[file_rel] = jsonio.dumps_document(doc, kind.records_key if kind is not None else None)
        self._apply(staged)
        self._finish_journal()
        for file_rel, content in staged.items():
            self._digests[file_rel] = digest(content)
        self._record_digests()

    # bookkeeping -----------------------------------------------------------------------------

    def _check_domain(self, rel: str) -> None:
        if layout.lock_for(rel) != self.lock_rel:
            raise LokiError(f"{rel} is not guarded by {self.lock_rel}; it needs its own transaction")

    def _record_digests(self) -> None:
        record = dict(self._lock.record)
        record["digests"] = self._digests
        self._lock.write_record(record)  # a hint: if it cannot be written, the next reader validates

