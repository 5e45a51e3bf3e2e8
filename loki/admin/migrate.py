"""Moving a whole team's state from one store to another (``loki migrate``), verified.

Everything is read and written through the two storage interfaces, so any backend moves to any
other: the tasks of every state in their order, the dead-letter queue with its metadata, the
abandoned records, the archive; the documents (breakers, watch state, friction map, strike files,
memory hints, the team's settings); the text documents (CONTINUITY.md, institutional knowledge, the
escalation template); the logs (error memory, outcome and recovery logs, drift reports); the
published items (signals waiting, escalations). Caches are not moved: they are rebuilt from the
truth (the search index of error memory).

Verification: the target is read again after the copy and compared with the source section by
section -- counts, and a SHA-256 digest of every record in canonical JSON (sorted keys) -- and any
difference is an error; the source is read again too, and a difference there (a write that was under
way when the migration began) is an error as well. A target that already holds state (a task, an entry,
an item, a log line, a strike...) is refused before anything is written: a migration never merges two
teams.

What is state comes from the layout (:data:`layout.TREE_STATE`, :func:`layout.is_state_name`): a lock
file (``signals/DRIFT_DETECTED.lock``), a journal or a temp file is never copied. Positions in a log are
each store's own (a byte offset in a file, a line number in a database): the watcher's applied position
in the drift log moves as the number of lines it had applied, and is turned back into the target's.

:func:`migrate_tree` moves a whole tree and switches it, under the marker of loki/storage/moving.py
(docs/postgres.md: what is promised when it is interrupted).
"""

from __future__ import annotations

import hashlib
import json
import os

from loki.errors import InvalidInput, MigrationUnderWay
from loki.storage import jsonio, layout
from loki.storage.layout import QUEUE_STATES
from loki.storage.logpos import every_line
from loki.storage.migrating import clear_files, remove_marker, set_aside_files, write_marker
from loki.storage.store import crashpoint

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    from loki.storage.locks import FileLock
    from loki.storage.state import StateStore

    Section = dict[str, list[Any]]
    """A section of a store's content: key -> records, in the order the store keeps them."""

SINGLE_DOCUMENTS = (layout.BREAKERS, layout.WATCH_STATE, layout.FRICTION_MAP, layout.BUDGETS, layout.LEASES)
DOCUMENT_DIRS = (layout.STRIKES_DIR, layout.MEMORY_HINTS_DIR)
TEXTS = (layout.CONTINUITY, layout.KNOWLEDGE, layout.ESCALATION_TEMPLATE)
ITEM_DIRS = (layout.SIGNALS_DIR, layout.ESCALATIONS_DIR)
SETTINGS_LEFT_BEHIND = ("storage",)
"""Config keys that belong to one machine's tree, not to the team: where its state is."""
MIGRATION_LOCK = "config/migration.lock"
APPLIED_LINES = "drift_applied_lines"
"""In a migration's content, the watch state's ``drift_offset`` (a store's own position) as the number
of drift-log lines before it, which means the same in every store."""


def content(store: StateStore) -> dict[str, Section]:
    """Everything a store holds that a migration moves, section by section."""
    tasks_store = store.tasks()
    view = tasks_store.view([*QUEUE_STATES, "dead-letter", "abandoned"])
    dead = tasks_store.dead_letter_doc()
    archive: Section = {}
    for state, task in tasks_store.archived():
        archive.setdefault(state, []).append(task)
    for tasks in archive.values():  # a set, not a sequence: each store keeps it in its own order
        tasks.sort(key=lambda task: str(task["id"]))
    documents: Section = {}
    for rel in SINGLE_DOCUMENTS:
        doc = store.read(rel)
        if rel == layout.WATCH_STATE and "drift_offset" in doc:
            doc = {**doc}
            doc[APPLIED_LINES] = _lines_before(store, layout.DRIFT_LOG, doc.pop("drift_offset"))
        if doc != _empty(rel):
            documents[rel] = [doc]
    for directory in DOCUMENT_DIRS:
        for name in store.list(directory):
            rel = f"{directory}/{name}"
            if name.endswith(".json") and layout.is_state_name(name):
                data = store.read_bytes(rel)
                if data is not None:
                    documents[rel] = [jsonio.loads_strict(data)]
    settings = {k: v for k, v in store.read(layout.CONFIG).items() if k not in SETTINGS_LEFT_BEHIND}
    texts: Section = {}
    for rel in TEXTS:
        text = store.read_text(rel)
        if text is not None:
            texts[rel] = [text]
    logs: Section = {}
    items: Section = {}
    for rel in _logs(store):
        lines = list(_log_lines(store, rel))
        if lines:
            logs[rel] = lines
    for directory in ITEM_DIRS:
        for name in store.list(directory):
            rel = f"{directory}/{name}"
            if not layout.is_state_name(name) or rel in logs or rel == layout.DRIFT_LOG:
                continue
            data = store.read_bytes(rel)
            if data is not None:
                items[rel] = [data.decode("utf-8", "surrogateescape")]
    return {
        "tasks": {state: view[state] for state in QUEUE_STATES if view[state]},
        "dead_letter": {"entries": view["dead-letter"], "metadata": [dead["metadata"]]},
        "abandoned": {"records": view["abandoned"]} if view["abandoned"] else {},
        "archive": archive,
        "documents": documents,
        "settings": {"config": [settings]},
        "texts": texts,
        "logs": logs,
        "items": items,
    }


def _empty(rel: str) -> Any:
    kind = layout.kind_for(rel)
    return kind.empty() if kind is not None else None


def _logs(store: StateStore) -> list[str]:
    """The logs of a tree: error memory, the logs directory, the drift reports (one log)."""
    found = [layout.MEMORY_LOG]
    found += [f"{layout.LOGS_DIR}/{name}" for name in store.list(layout.LOGS_DIR) if layout.is_state_name(name)
              and name.endswith((".jsonl", ".log"))]
    found += [layout.DRIFT_LOG]
    return found


def _is_json_log(rel: str) -> bool:
    return rel.endswith(".jsonl") or rel == layout.DRIFT_LOG


def _lines_before(store: StateStore, rel: str, position: Any) -> int:
    """How many complete lines of a log come before ``position`` (a position of ``store``'s; None:
    the start). A position the log no longer reaches counts as the start, as the watcher reads it."""
    if position is None or not store.log_valid(rel, position):
        return 0
    count, here = 0, None
    while True:
        lines, after = store.read_after(rel, here)
        for line in lines:
            if line.position == position:
                return count
            count += 1
        if not lines or after == position:
            return count
        here = after


def _position_after(store: StateStore, rel: str, count: int) -> Any:
    """``store``'s position after the first ``count`` lines of a log (None for none: the start)."""
    if count <= 0:
        return None
    here: Any = None
    left = count
    while True:
        lines, after = store.read_after(rel, here)
        if not lines:
            return here
        for line in lines:
            if left == 0:
                return line.position
            left -= 1
        if left == 0:
            return after
        here = after


def _log_lines(store: StateStore, rel: str) -> Iterator[Any]:
    """A JSON log's records (parsed: a store may space them its own way), a text log's lines."""
    as_json = _is_json_log(rel)
    for number, raw in every_line(store, rel):
        if not as_json:
            yield raw.decode("utf-8", "surrogateescape")
        elif raw.strip():
            try:
                yield jsonio.loads_strict(raw)
            except jsonio.JsonError as exc:
                raise InvalidInput(f"{rel} line {number}: {exc.reason}; nothing was moved (`loki validate` "
                                   "lists such lines, `loki doctor --repair` sets them aside)", file=rel,
                                   pointer=f"line {number}") from None


def occupied(held: dict[str, Section]) -> list[str]:
    """What a would-be target already holds (empty list: it may receive a migration)."""
    found = []
    for section in ("tasks", "abandoned", "archive", "documents", "logs", "items"):
        count = sum(len(records) for records in held[section].values())
        if count:
            found.append(f"{count} {section}")
    if held["dead_letter"]["entries"]:
        found.append(f"{len(held['dead_letter']['entries'])} dead-letter entries")
    return found


def digest(held: dict[str, Section]) -> dict[str, dict[str, Any]]:
    """Per section: how many records, and a SHA-256 over each record in canonical JSON, in order."""
    report = {}
    for section, keyed in held.items():
        hasher = hashlib.sha256()
        count = 0
        for key in sorted(keyed):
            for record in keyed[key]:
                count += 1
                hasher.update(json.dumps([key, record], sort_keys=True, ensure_ascii=False,
                                         separators=(",", ":")).encode("utf-8", "surrogatepass"))
                hasher.update(b"\n")
        report[section] = {"records": count, "sha256": hasher.hexdigest()}
    return report


def migrate(source: StateStore, target: StateStore, held: dict[str, Section] | None = None) -> dict[str, Any]:
    """Copy ``source`` into the empty ``target``, then verify it; returns the two digests.

    ``held``: the source's content, when the caller read it already. Verified: the target read back is
    the source as first read, and the source read again is too (a writer that was under way when the
    migration began would otherwise be acknowledged and lost)."""
    held = content(source) if held is None else held
    there = occupied(content(target))
    if there:
        raise InvalidInput(f"the target {target.where} already holds state ({', '.join(there)}): a migration only "
                           "fills an empty one", target=target.where)
    _copy(held, target)
    before = verify(held, target)
    again = digest(content(source))
    changed = [section for section in before if before[section] != again[section]]
    if changed:
        raise MigrationUnderWay(f"{source.where} changed during the migration (in {', '.join(changed)}: a write "
                                "that was already under way when it began); nothing was switched: run `loki "
                                "migrate` again", sections=changed)
    return {"source": source.where, "target": target.where, "sections": before}


def verify(held: dict[str, Section], target: StateStore) -> dict[str, dict[str, Any]]:
    """The target read back must be ``held``, section by section; returns the digest."""
    before, after = digest(held), digest(content(target))
    differing = [section for section in before if before[section] != after[section]]
    if differing:
        raise InvalidInput(f"the copy in {target.where} differs from the source in {', '.join(differing)}: "
                           "the source is unchanged; do not switch to the target", sections=differing)
    return before


def _copy(held: dict[str, Section], target: StateStore) -> None:
    settings = held["settings"]["config"][0]
    with target.transaction(layout.CONFIG) as txn:
        current = txn.read(layout.CONFIG)
        kept = {k: v for k, v in current.items() if k in SETTINGS_LEFT_BEHIND}
        txn.write(layout.CONFIG, {**settings, **kept})
    crashpoint("migrate-copied")
    with target.tasks().transaction() as unit:
        for state, tasks in held["tasks"].items():
            for task in tasks:
                unit.put(state, task)
        for entry in held["dead_letter"]["entries"]:
            unit.dead_letter(entry)
        unit.dead_letter_metadata().update(held["dead_letter"]["metadata"][0])
        unit.update_dead_letter()
        for record in held["abandoned"].get("records", []):
            unit.put_abandoned(record)
        for state, tasks in held["archive"].items():
            unit.archive(state, tasks)
    crashpoint("migrate-copied")
    for rel, lines in held["logs"].items():  # before the documents: the watch state points into a log
        if _is_json_log(rel):
            target.append_lines(rel, lines)
        else:
            target.append_text(rel, lines)
        crashpoint("migrate-copied")
    for rel, (doc,) in held["documents"].items():
        if rel == layout.WATCH_STATE and APPLIED_LINES in doc:
            doc = {**doc}
            doc["drift_offset"] = _position_after(target, layout.DRIFT_LOG, doc.pop(APPLIED_LINES))
        with target.transaction(rel) as txn:
            txn.write(rel, doc)
        crashpoint("migrate-copied")
    for rel, (text,) in held["texts"].items():
        target.write_text(rel, text)
        crashpoint("migrate-copied")
    for rel, (data,) in held["items"].items():
        directory, name = rel.rsplit("/", 1)
        if target.keys_need_dirs:
            target.ensure_dir(directory)
        got = target.create_unique(directory, name, data.encode("utf-8", "surrogateescape"))
        if got != rel:
            raise InvalidInput(f"{target.where}: {rel} arrived as {got}", file=rel)
        crashpoint("migrate-copied")


# -- a tree moves -------------------------------------------------------------------------------------


def migrate_tree(root: str | None, to: str) -> dict[str, Any]:
    """Move the tree at ``root`` to ``to`` (a PostgreSQL URL, or ``files``: this ``.loki/``), verified,
    then point the tree at it; finish or roll back an interrupted one first.

    The steps, each durable before the next (docs/postgres.md, "Moving a team"):

    1. the marker (loki/storage/moving.py) is written: from now on every other command on this tree is
       refused with exit 5, and a writer already inside a lock domain of the files finishes before the
       source is read (every lock is taken once);
    2. the source is read, the target checked empty, filled and read back; the source is read again.
       On PostgreSQL all of it is one transaction, committed only when everything compared equal (a
       kill leaves the database as it was); into the files, the marker says ``copying`` first, and a
       re-run clears what an interrupted copy left before copying again;
    3. the marker says ``switching``: the target is now the truth. The files' old state is set aside
       under ``.loki/migrated-<time>/`` (never deleted) one entry at a time, the config names the target,
       and the marker is removed. A re-run at this step finishes it.

    Any error before step 3 rolls the copy back and removes the marker: the tree stays on its source.
    A database's rows stay where they are after a move to the files (other machines may use them).
    """
    from loki.storage.paths import find_root

    found = find_root(root)
    if to == "files":
        wanted = "files"
    else:
        from loki.storage.postgres.connect import check_url, without_password

        check_url(to, "--to")
        wanted = without_password(to)
    lock = _one_migration(found)
    try:
        return _resume_or_move(found, to, wanted)
    finally:
        lock.release()


def _one_migration(found: str) -> FileLock:
    """The lock only ``loki migrate`` takes, for its whole run: two at once on one tree would each take
    the other's copy for an interrupted one of their own. Not waited for (exit 5, naming the holder)."""
    from loki.errors import LockTimeout
    from loki.storage.locks import FileLock

    os.makedirs(os.path.join(found, "config"), exist_ok=True)
    lock = FileLock(os.path.join(found, *MIGRATION_LOCK.split("/")), 0, MIGRATION_LOCK)
    try:
        return lock.acquire()
    except LockTimeout as exc:
        raise MigrationUnderWay(f"another `loki migrate` is running on {found}: {exc.message}",
                                lock=MIGRATION_LOCK) from None


def _resume_or_move(found: str, to: str, wanted: str) -> dict[str, Any]:
    from loki.storage.moving import marker, refusal

    unfinished = marker(found)
    if unfinished is not None and unfinished.get("step") != "switching" and _is_source(found, wanted):
        return _roll_back(found, unfinished)
    if unfinished is not None and unfinished.get("target") != wanted:
        raise refusal(found, unfinished)  # finish the migration that began first: it names its command
    if unfinished is not None and unfinished.get("step") == "switching":
        return _switch(found, unfinished, finished_now=True)
    return _move(found, to, wanted, unfinished)


def _is_source(found: str, wanted: str) -> bool:
    """Whether ``wanted`` is where the tree's config says its state is now."""
    from loki.storage.opening import database_url

    url = database_url(found)
    if url is None:
        return wanted == "files"
    from loki.storage.postgres.connect import without_password

    return wanted == without_password(url)


def _roll_back(found: str, unfinished: dict[str, Any]) -> dict[str, Any]:
    """``loki migrate --to <where the state is>`` after an interrupted migration that had not switched:
    give up the copy and stay on the source. A files copy is removed; a database copy is rolled back by
    the server unless the killed run had committed it, which the report says."""

    left = None
    if unfinished.get("target") == "files":
        if unfinished.get("step") == "copying":
            clear_files(found)
    elif isinstance(unfinished.get("target"), str):
        left = str(unfinished["target"])
    remove_marker(found)
    return {"rolled_back": True, "target": unfinished.get("target"), "database_may_hold_copy": left}


def _move(found: str, to: str, wanted: str, unfinished: dict[str, Any] | None) -> dict[str, Any]:
    from loki.storage.opening import database_url, open_found

    if unfinished is None:  # a re-run has been through these checks: the config still names the source
        url = database_url(found)
        if to == "files" and url is None:
            raise InvalidInput(f"{found} already keeps its state in files", root=found)
        if to != "files" and url is not None:
            from loki.storage.postgres.connect import without_password

            if without_password(to) == without_password(url):
                raise InvalidInput(f"{found} is already on {without_password(to)}", root=found)
    source = open_found(found, guarded=False)
    named = source.where
    if source.backend != "files":
        from loki.storage.postgres.connect import without_password

        named = without_password(database_url(found) or "")
    mark = {"version": 1, "target": wanted, "source": named, "step": "holding", "pid": os.getpid(),
            "started_at": (unfinished or {}).get("started_at") or source.now_ts(),
            "set_aside": (unfinished or {}).get("set_aside")}
    if source.backend == "files" and not mark["set_aside"]:
        mark["set_aside"] = _unused_name(found, "migrated-" + str(mark["started_at"]).replace(":", "").replace("-", ""))
    if unfinished is None or unfinished.get("step") == "holding":
        write_marker(found, mark)
    else:
        mark = unfinished
    crashpoint("migrate-marked")
    try:
        if source.backend == "files":
            _drain_writers(found, source.lock_timeout)
        held = content(source)
        report = _copy_to_database(source, to, held, found, unfinished) if to != "files" else \
            _copy_to_files(source, held, found, mark)
    except BaseException:
        # Not a kill (that leaves the marker for a re-run): the copy was rolled back, the source is live.
        remove_marker(found)
        raise
    mark = {**mark, "step": "switching"}
    write_marker(found, mark)
    crashpoint("migrate-switching")
    return _switch(found, mark, finished_now=False, report=report)


def _unused_name(found: str, name: str) -> str:
    """``name``, or ``name-2``, ``name-3``...: the first no earlier move left under the tree. The time names the
    set-aside directory to the second, so a move to a database, back, and to a database again within one second
    chose the first move's directory, still full, and could not set its files aside there. Chosen once, with the
    marker: a re-run after a kill reads it back from there."""
    candidate, number = name, 1
    while os.path.lexists(os.path.join(found, candidate)):
        number += 1
        candidate = f"{name}-{number}"
    return candidate


def _copy_to_database(source: StateStore, to: str, held: dict[str, Section], found: str,
                      unfinished: dict[str, Any] | None) -> dict[str, Any]:
    """Fill the database in one transaction: committed only when the copy read back, the source read
    again and the database's own validate all agree."""
    from loki.storage.postgres.admin import init_database
    from loki.storage.postgres.store import PgStore

    init_database(to)
    pg = PgStore.open(to, root=found)
    try:
        with pg.db.transaction():
            there = content(pg)
            if occupied(there) and unfinished is not None and digest(there) == digest(held):
                # A killed run committed its copy just before it could say so: the copy is ours.
                report = {"source": source.where, "target": pg.where, "sections": digest(held)}
            else:
                report = migrate(source, pg, held)
                _check_valid(pg)
            crashpoint("migrate-commit")
    finally:
        pg.close()
    return report


def _copy_to_files(source: StateStore, held: dict[str, Section], found: str, mark: dict[str, Any]) -> dict[str, Any]:
    from loki.storage.store import Store
    from loki.storage.tree import init_tree

    if mark.get("step") == "copying":
        clear_files(found)  # what the killed run had copied: the database is still the truth
    target = Store(found)
    target.guarded = False
    init_tree(found)
    there = occupied(content(target))
    if there:
        raise InvalidInput(f"{found} still holds state in its files ({', '.join(there)}), left from before it "
                           f"moved to the database (the set-aside copy is in {found}/migrated-*): move those files "
                           "away, then run `loki migrate --to files` again", root=found)
    mark["step"] = "copying"
    write_marker(found, mark)
    crashpoint("migrate-copying")
    try:
        report = migrate(source, target, held)
        _check_valid(target)
    except BaseException:
        clear_files(found)
        raise
    return report


def _check_valid(target: StateStore) -> None:
    """``loki migrate`` verifies what ``loki validate`` verifies: the target must pass it."""
    from loki.admin.status import validate

    problems = validate(target)
    if problems:
        first = problems[0]
        raise InvalidInput(f"the copy in {target.where} fails `loki validate` ({len(problems)} problem(s); first: "
                           f"{first}): nothing was switched", file=first.file)


def _drain_writers(found: str, timeout: float) -> None:
    """Take every lock of the file tree once: a writer that got one before the marker was written has
    committed when this returns, and one that gets it after sees the marker (Store.check_writable)."""
    from loki.storage.locks import FileLock
    from loki.watch.consumer import CONSUMER_LOCK

    for directory, dirnames, filenames in os.walk(found):
        rel_dir = os.path.relpath(directory, found).replace(os.sep, "/")
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d in layout.TREE_STATE]
        for name in sorted(filenames):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if name.endswith(".lock") and rel != CONSUMER_LOCK:  # the consumer holds its lock for its life
                FileLock(os.path.join(directory, name), timeout, rel).acquire().release()


def _switch(found: str, mark: dict[str, Any], *, finished_now: bool,
            report: dict[str, Any] | None = None) -> dict[str, Any]:
    """Step 3: the target is the truth. Set the files aside (a move to a database), point the config at
    the target, remove the marker; each step durable, each safe to repeat after a kill."""

    target = str(mark.get("target"))
    set_aside = None
    if target != "files" and mark.get("set_aside"):
        set_aside = set_aside_files(found, str(mark["set_aside"]))
    crashpoint("migrate-set-aside")
    _point_config(found, None if target == "files" else target)
    crashpoint("migrate-pointed")
    remove_marker(found)
    if report is None:  # a re-run that only finished the switch: report what the target holds
        from loki.storage.opening import open_found

        live = open_found(found, guarded=False)
        sections = digest(content(live))  # read first: a database's root names its schema once connected
        report = {"source": str(mark.get("source") or "the source"), "target": live.where, "sections": sections}
    return {**report, "backend": "files" if target == "files" else "postgresql", "set_aside": set_aside,
            "finished_interrupted": finished_now}


def _point_config(root: str, database: str | None) -> None:
    """This machine's config names ``database`` (None: the files) and nothing else changes."""
    from loki.storage.store import Store

    local = Store(root)
    with local.transaction(layout.CONFIG) as txn:
        config = dict(txn.read(layout.CONFIG))
        if database is None:
            config.pop("storage", None)
        else:
            config["storage"] = {"backend": "postgresql", "database": database}
        txn.write(layout.CONFIG, config)
