"""``validate`` and ``doctor`` of a tree on files (:meth:`loki.storage.store.Store.validate_state`).

``validate`` is the thorough check: strict parsing and the reference validator
(jsonschema) on every file, plus the invariants no single schema can express
(every task id in exactly one state file, each task's status matching its file: :mod:`loki.storage.checks`,
shared with the other backends). ``doctor`` finishes journals, sweeps temp files and, with ``--repair``,
sets broken files aside.

It reads the tree through the store it is given and never imports the store's module at run time (the
store asks it), so the two do not import each other.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from typing import Any

from loki.clock import format_ts
from loki.errors import LockTimeout, LokiError, StateFileError
from loki.storage import jsonio, layout
from loki.storage.atomic import TEMP_SUFFIX, fsync_dir, hard_link_reason
from loki.storage.checks import (
    QUEUE_FILES,
    ReferenceValidator,
    check_jsonl,
    check_signal,
    cross_file_problems,
    dead_dependency_problems,
    is_signal_file,
    problem_from,
)
from loki.storage.locks import in_use
from loki.storage.problems import DoctorReport, Problem

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Protocol

    from loki.storage.state import FileState

    class Store(FileState, Protocol):
        """The file store (:class:`loki.storage.store.Store`) as its administration sees it: the roles, and the
        parts only a tree on disk has. Named here, not imported: the store asks this module, and neither
        imports the other, not even for types."""

        root: str
        """The ``.loki/`` directory itself (what the file store's ``where`` and ``local_root`` both are)."""

        def path(self, rel: str) -> str: ...
        def foreign_stamp(self, rel: str) -> str: ...
        def snapshot(self, rels: Iterable[str], attempts: int = ..., *, wait: bool = ...) -> dict[str, Any]: ...
        def recover(self, lock: str) -> bool: ...
        def detach(self, rel: str) -> bool: ...
        def iter_lines(self, rel: str, chunk: int = ...) -> Iterator[tuple[int, int, bytes]]: ...

STALE_TEMP_SECONDS = 300
_TEMP_NAME = re.compile(r"^\..+\.(\d+)\.[0-9a-f]{8}" + re.escape(TEMP_SUFFIX) + "$")
_QUARANTINE = f"{layout.SIGNALS_DIR}/.quarantine/"
_OUTCOME_LOG = f"{layout.LOGS_DIR}/signals.jsonl"


# -- validate --------------------------------------------------------------------------------------


def _walk(root: str) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under root as (relative path, lstat), not following symlinks."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in sorted(dirnames + filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            yield rel, os.lstat(full)


def validate_tree(store: Store) -> list[Problem]:
    """Every problem in the tree; an empty list means the tree is valid."""
    problems: list[Problem] = []
    reference = ReferenceValidator()
    docs: dict[str, Any] = {}

    def check_document(rel: str, schema_name: str) -> Any:
        try:
            data = store.read_bytes(rel)
        except LokiError as exc:
            problems.append(problem_from(rel, exc))
            return None
        if data is None:
            return None
        try:
            doc = jsonio.loads_strict(data)
        except jsonio.JsonError as exc:
            problems.append(Problem(rel, exc.pointer, exc.reason))
            return None
        found = reference.problems(schema_name, doc)
        problems.extend(Problem(rel, p or "/", m) for p, m in found)
        return None if found else doc

    for rel, st in _walk(store.root):
        if rel.startswith(_QUARANTINE):
            continue  # known bad and isolated by the watcher; why is in logs/signals.jsonl
        if stat.S_ISLNK(st.st_mode):
            problems.append(Problem(rel, "", "is a symbolic link; loki refuses to follow links in .loki/"))
            continue
        if rel.endswith(".lock"):
            if not stat.S_ISREG(st.st_mode):
                problems.append(Problem(rel, "", "lock file is not a regular file"))
            elif st.st_nlink > 1:
                problems.append(Problem(rel, "", f"lock file has {st.st_nlink} hard links; loki refuses to write "
                                        "its holder record through them", whole_file=False))
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        name = rel.rsplit("/", 1)[-1]
        if name.endswith(".journal.json"):
            # Under a held lock it is a commit in flight (gone in milliseconds), not a crash's leftover.
            if not in_use(store.path(layout.lock_of_journal(rel))):
                problems.append(Problem(rel, "", "an unfinished multi-file change; `loki doctor` finishes it"))
            continue
        if _TEMP_NAME.match(name) or ".corrupt." in name:
            continue
        if st.st_nlink > 1 and _hard_link_matters(rel):
            # As a symbolic link: appending to it would write outside .loki/. Not broken, though:
            # doctor --repair gives it its own copy instead of setting it aside (whole_file=False).
            problems.append(Problem(rel, "", hard_link_reason(st.st_nlink), whole_file=False))
            continue
        kind = layout.kind_for(rel)
        if kind is not None:
            doc = check_document(rel, kind.schema)
            if doc is not None:
                docs[rel] = (kind.normalise(doc, rel, lambda: store.foreign_stamp(rel)) if kind.normalise  # noqa: B023
                             else doc)
        elif is_signal_file(rel):
            check_signal(store, rel, problems, reference)
        elif rel == layout.MEMORY_LOG:
            check_jsonl(store, rel, problems, reference, "memory-record.json")
        elif rel.startswith(layout.MEMORY_HINTS_DIR + "/") and rel.endswith(".json"):
            check_document(rel, "memory-hint.json")
        elif rel.startswith(layout.ARCHIVE_DIR + "/") and rel.endswith(".jsonl"):
            check_jsonl(store, rel, problems, reference, "task.json")
        elif rel == _OUTCOME_LOG:
            check_jsonl(store, rel, problems, reference, "signal-outcome.json")
        elif rel.startswith(layout.LOGS_DIR + "/") and rel.endswith(".jsonl"):
            check_jsonl(store, rel, problems, reference, None)
    queue_rels = [*QUEUE_FILES, layout.DEADLETTER, layout.ABANDONED]
    unfinished = (os.path.lexists(store.path(layout.journal_for(layout.QUEUE_LOCK)))
                  and not in_use(store.path(layout.QUEUE_LOCK)))
    if not unfinished and all(rel in docs or not store.exists(rel) for rel in queue_rels):
        # Every queue file checked out on its own: read them again as one consistent snapshot, or a
        # claim committing between two reads would look like a task in two files (or in none).
        # With a journal left by a crash (reported above) the snapshot would take the lock, and
        # taking it finishes the journal: validate only looks, so it skips the cross-file check.
        # (A journal under a held lock is a live commit: the snapshot waits for it, as it should.)
        try:
            docs.update(store.snapshot(queue_rels, wait=True))
        except LockTimeout:
            raise  # not a problem of the tree: nothing was checked across files (exit 5)
        except LokiError as exc:
            problems.append(problem_from(layout.QUEUE_LOCK, exc))
    if not unfinished:  # mid-change, a task may well be in two files: the journal says which one wins
        problems.extend(cross_file_problems(docs))
        problems.extend(dead_dependency_problems(store, docs))
    return problems


def _hard_link_matters(rel: str) -> bool:
    """Whether a second link to ``rel`` is a problem. A signal file is never written in place (it is
    published by ``link()``, claimed by rename and deleted), and copying it could race the consumer's
    claim into a second delivery; the drift log, appended to, is a state file like any other."""
    return not is_signal_file(rel) or layout.signal_type_of_file(rel.rsplit("/", 1)[-1]) == layout.DRIFT_SIGNAL


# -- doctor ----------------------------------------------------------------------------------------


def doctor(store: Store, repair: bool = False) -> DoctorReport:
    """Finish journals, report stale temp files and broken files; with ``repair``, clean up.

    Repair never deletes data: temp files older than 5 minutes, or whose writer process is
    gone, are partial writes that were never published; a corrupt file is moved aside as
    ``<name>.corrupt.<ts>``; a state file with other hard links gets its own copy (the other
    names keep theirs, untouched); a file only too large to read is reported and left alone.
    """
    report = DoctorReport()
    stamp = format_ts(store.clock.now()).replace(":", "")
    for rel, st in list(_walk(store.root)):
        name = rel.rsplit("/", 1)[-1]
        if name.endswith(".journal.json") and stat.S_ISREG(st.st_mode):
            lock = layout.lock_of_journal(rel)
            try:
                if store.recover(lock):
                    report.journals_finished.append(rel)
            except StateFileError:
                if not repair:
                    raise
                # It cannot be finished (unreadable, or a log it appends to was truncated by hand):
                # keep it, out of the way, so the domain works again.
                target = f"{rel}.corrupt.{stamp}"
                _move_aside(store, rel, target)
                report.moved_aside.append({"file": rel, "moved_to": target})
    now = store.clock.now().timestamp()
    for rel, st in _walk(store.root):
        name = rel.rsplit("/", 1)[-1]
        match = _TEMP_NAME.match(name)
        if stat.S_ISREG(st.st_mode) and match:
            report.temp_files.append(rel)
            if repair and (now - st.st_mtime >= STALE_TEMP_SECONDS or not _writer_alive(int(match.group(1)))):
                os.unlink(store.path(rel))
                report.temp_removed.append(rel)
    if repair:
        for rel, st in list(_walk(store.root)):
            name = rel.rsplit("/", 1)[-1]
            if (stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and not rel.endswith(".lock") and _hard_link_matters(rel)
                    and not _TEMP_NAME.match(name) and ".corrupt." not in name and not rel.startswith(_QUARANTINE)):
                with store.transaction(layout.lock_for(rel)):  # no append lands in the old inode meanwhile
                    if store.detach(rel):
                        report.detached.append(rel)
    report.problems = validate_tree(store)
    if repair:
        bad_lines: dict[str, set[int]] = {}
        for problem in report.problems:
            if _line_repairable(problem.file) and problem.pointer.startswith("line "):
                bad_lines.setdefault(problem.file, set()).add(int(problem.pointer.split()[1].split("/")[0]))
        for rel, numbers in sorted(bad_lines.items()):
            report.moved_aside.append(_set_aside_lines(store, rel, numbers, stamp))
        bad_records: dict[str, set[int]] = {}
        for problem in report.problems:
            index = _record_index(problem)
            if index is not None and problem.whole_file:
                bad_records.setdefault(problem.file, set()).add(index)
        for rel in sorted(bad_records):
            moved = _set_aside_records(store, rel, stamp)
            if moved is not None:
                report.moved_aside.append(moved)
            else:
                del bad_records[rel]  # the envelope itself is broken: the whole file goes below
        broken = sorted({p.file for p in report.problems
                         if p.file not in bad_lines and p.file not in bad_records and _movable(store, p)})
        for rel in broken:
            target = f"{rel}.corrupt.{stamp}"
            _move_aside(store, rel, target)
            report.moved_aside.append({"file": rel, "moved_to": target})
        if broken or bad_lines or bad_records:
            report.problems = validate_tree(store)
    return report


def _record_index(problem: Problem) -> int | None:
    """The record a problem is in, for a file of records (``/tasks/3/priority`` -> 3)."""
    kind = layout.kind_for(problem.file)
    if kind is None or kind.records_key is None:
        return None
    parts = problem.pointer.split("/")
    if len(parts) >= 3 and parts[1] == kind.records_key and parts[2].isdigit():
        return int(parts[2])
    return None


def _set_aside_records(store: Store, rel: str, stamp: str) -> dict[str, Any] | None:
    """Move the invalid records of a file of records into ``<file>.corrupt.<ts>`` and keep the rest.

    One bad task must not take the whole queue file (and every good task in it) out of the queue.
    None when the file cannot be split that way (it does not parse, or its envelope is broken).
    """
    kind = layout.kind_for(rel)
    assert kind is not None and kind.records_key is not None
    with store.transaction(layout.lock_for(rel)) as txn:
        data = store.read_bytes(rel)
        try:
            doc = jsonio.loads_strict(data or b"")
        except jsonio.JsonError:
            return None
        if not isinstance(doc, dict) or store.schemas.problems(kind.schema, kind.envelope(doc)):
            return None
        good: list[Any] = []
        bad: list[Any] = []
        for record in kind.records(doc):
            wrapped = {**doc, kind.records_key: [record]}
            (bad if store.schemas.problems(kind.schema, wrapped) else good).append(record)
        directory, name = rel.rsplit("/", 1)
        target = store.create_unique(directory, f"{name}.corrupt.{stamp}",
                                     jsonio.dumps_document({kind.records_key: bad}, kind.records_key),
                                     state_file=False)
        txn.write(rel, {**doc, kind.records_key: good})
    return {"file": rel, "moved_to": target, "records": len(bad)}


def _line_repairable(rel: str) -> bool:
    """Logs whose bad lines can be set aside one by one (the drift log cannot: the watcher keeps a byte
    offset into it, and its bad lines are already logged as rejected)."""
    return rel.endswith(".jsonl") and rel.split("/", 1)[0] in (layout.LOGS_DIR, layout.ARCHIVE_DIR,
                                                                 layout.MEMORY_DIR)


def _set_aside_lines(store: Store, rel: str, numbers: set[int], stamp: str) -> dict[str, Any]:
    """Move a log's bad lines into ``<log>.corrupt.<ts>`` and rewrite the log without them, under its lock."""
    with store.transaction(rel):
        kept: list[Any] = []
        removed: list[bytes] = []
        for number, _, raw in store.iter_lines(rel):
            if number in numbers or not raw.strip():
                if raw.strip():
                    removed.append(raw)
                continue
            try:
                kept.append(jsonio.loads_strict(raw))
            except jsonio.JsonError:
                removed.append(raw)
        directory, name = rel.rsplit("/", 1)
        target = store.create_unique(directory, f"{name}.corrupt.{stamp}", b"\n".join(removed) + b"\n",
                                     state_file=False)
        store.rewrite_lines(rel, kept)
    return {"file": rel, "moved_to": target, "lines": sorted(numbers)}


def _writer_alive(pid: int) -> bool:
    """Whether the process that named a temp file may still be writing it.

    A temp file carries its writer's pid. If no such process exists on this machine the
    write can never be published, so the file may go at once instead of after 5 minutes.
    Unsure (pid reused, no permission to ask) counts as alive.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _movable(store: Store, problem: Problem) -> bool:
    """Only whole files that fail to parse or validate are moved; cross-file conflicts need a human."""
    if not problem.whole_file or problem.file.endswith(".journal.json") or problem.file.endswith(".lock"):
        return False
    if problem.pointer.startswith("line ") and problem.file.endswith("DRIFT_DETECTED"):
        return False  # its bad lines are logged as rejected by the watcher, which keeps an offset into it
    try:
        st = os.lstat(store.path(problem.file))
    except (FileNotFoundError, LokiError):
        return False
    return stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)


def _move_aside(store: Store, rel: str, target: str) -> None:
    """Rename a broken file out of the way under its domain's lock, so no writer is mid-change."""
    from loki.storage.locks import FileLock

    lock = layout.lock_for(rel)
    with FileLock(store.path(lock), store.lock_timeout, lock):
        os.replace(store.path(rel), store.path(target))
        fsync_dir(os.path.dirname(store.path(rel)))
