"""Moving a whole team's state from one store to another (``loki migrate``), verified.

Everything is read and written through the two storage interfaces, so any backend moves to any
other: the tasks of every state in their order, the dead-letter queue with its metadata, the
abandoned records, the archive; the documents (breakers, watch state, friction map, strike files,
memory hints, the team's settings); the text documents (CONTINUITY.md, institutional knowledge, the
escalation template); the logs (error memory, outcome and recovery logs, drift reports); the
published items (signals waiting, escalations). Caches are not moved: they are rebuilt from the
truth (the search index of error memory).

Verification: both sides are read again after the copy and compared section by section -- counts,
and a SHA-256 digest of every record in canonical JSON (sorted keys) -- and any difference is an
error. A target that already holds state (a task, an entry, an item, a log line, a strike...) is
refused before anything is written: a migration never merges two teams.
"""

from __future__ import annotations

import hashlib
import json

from loki.errors import InvalidInput
from loki.storage import jsonio, layout
from loki.storage.layout import QUEUE_STATES
from loki.storage.logpos import every_line

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    from loki.storage.state import StateStore

    Section = dict[str, list[Any]]
    """A section of a store's content: key -> records, in the order the store keeps them."""

SINGLE_DOCUMENTS = (layout.BREAKERS, layout.WATCH_STATE, layout.FRICTION_MAP)
DOCUMENT_DIRS = (layout.STRIKES_DIR, layout.MEMORY_HINTS_DIR)
TEXTS = (layout.CONTINUITY, layout.KNOWLEDGE, layout.ESCALATION_TEMPLATE)
ITEM_DIRS = (layout.SIGNALS_DIR, layout.ESCALATIONS_DIR)
SETTINGS_LEFT_BEHIND = ("storage",)
"""Config keys that belong to one machine's tree, not to the team: where its state is."""



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
        if doc != _empty(rel):
            documents[rel] = [doc]
    for directory in DOCUMENT_DIRS:
        for name in store.list(directory):
            rel = f"{directory}/{name}"
            if name.endswith(".json") and not name.startswith("."):
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
            if name.startswith(".") or rel in logs or _is_drift(rel):
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


def _is_drift(rel: str) -> bool:
    from loki.signals import types as signaltypes

    return rel.startswith(layout.SIGNALS_DIR + "/") and signaltypes.type_of_file(rel.rsplit("/", 1)[-1]) == \
        signaltypes.DRIFT


def _logs(store: StateStore) -> list[str]:
    """The logs of a tree: error memory, the logs directory, drift reports (a log per signal name)."""
    found = [layout.MEMORY_LOG]
    found += [f"{layout.LOGS_DIR}/{name}" for name in store.list(layout.LOGS_DIR) if not name.startswith(".")
              and name.endswith((".jsonl", ".log"))]
    found += [f"{layout.SIGNALS_DIR}/{name}" for name in store.list(layout.SIGNALS_DIR)
              if not name.startswith(".") and _is_drift(f"{layout.SIGNALS_DIR}/{name}")]
    return found


def _log_lines(store: StateStore, rel: str) -> Iterator[Any]:
    """A JSON log's records (parsed: a store may space them its own way), a text log's lines."""
    as_json = rel.endswith(".jsonl") or _is_drift(rel)
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


def migrate(source: StateStore, target: StateStore) -> dict[str, Any]:
    """Copy ``source`` into the empty ``target``, then verify it; returns the two digests."""
    held = content(source)
    there = occupied(content(target))
    if there:
        raise InvalidInput(f"the target {target.root} already holds state ({', '.join(there)}): a migration only "
                           "fills an empty one", target=target.root)
    _copy(held, target)
    before, after = digest(held), digest(content(target))
    differing = [section for section in before if before[section] != after[section]]
    if differing:
        raise InvalidInput(f"the copy in {target.root} differs from {source.root} in {', '.join(differing)}: "
                           "the source is unchanged; do not switch to the target", sections=differing)
    return {"source": source.root, "target": target.root, "sections": before}


def _copy(held: dict[str, Section], target: StateStore) -> None:
    settings = held["settings"]["config"][0]
    with target.transaction(layout.CONFIG) as txn:
        current = txn.read(layout.CONFIG)
        kept = {k: v for k, v in current.items() if k in SETTINGS_LEFT_BEHIND}
        txn.write(layout.CONFIG, {**settings, **kept})
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
    for rel, (doc,) in held["documents"].items():
        with target.transaction(rel) as txn:
            txn.write(rel, doc)
    for rel, (text,) in held["texts"].items():
        target.write_text(rel, text)
    for rel, lines in held["logs"].items():
        if rel.endswith(".jsonl") or _is_drift(rel):
            target.append_lines(rel, lines)
        else:
            target.append_text(rel, lines)
    for rel, (data,) in held["items"].items():
        directory, name = rel.rsplit("/", 1)
        target.ensure_dir(directory)
        got = target.create_unique(directory, name, data.encode("utf-8", "surrogateescape"))
        if got != rel:
            raise InvalidInput(f"{target.root}: {rel} arrived as {got}", file=rel)


# -- a tree moves -------------------------------------------------------------------------------------

FILE_STATE = ("queue", "state", "signals", "escalations", "memory", "logs", "archive", "templates",
              layout.CONTINUITY, layout.KNOWLEDGE)
"""What a file tree's state is made of (set aside after it moved to a database; config/ stays)."""


def migrate_tree(root: str | None, to: str) -> dict[str, Any]:
    """Move the tree at ``root`` to ``to`` (a PostgreSQL URL, or ``files``: this ``.loki/``), verified,
    then point the tree at it. The source is left as it was until the copy is verified; a file tree's
    old state is then set aside under ``.loki/migrated-<time>/`` (never deleted), a database's rows
    stay where they are (other machines may still use them)."""
    import os

    from loki.storage.opening import database_url, open_store
    from loki.storage.paths import find_root
    from loki.storage.store import Store

    found = find_root(root)
    source = open_store(found)
    if to == "files":
        if database_url(found) is None:
            raise InvalidInput(f"{found} already keeps its state in files", root=found)
        from loki.storage.tree import init_tree

        init_tree(found)
        target: StateStore = Store(found)
        report = migrate(source, target)
        _point_config(found, None)
        return {**report, "backend": "files", "set_aside": None}
    from loki.storage.postgres.admin import init_database
    from loki.storage.postgres.connect import check_url, without_password
    from loki.storage.postgres.store import PgStore

    check_url(to, "--to")
    if source.backend == "postgresql" and without_password(to) == without_password(database_url(found) or ""):
        raise InvalidInput(f"{found} is already on {without_password(to)}", root=found)
    init_database(to)
    pg = PgStore.open(to, root=found)
    try:
        report = migrate(source, pg)
    finally:
        pg.close()
    set_aside = None
    if source.backend == "files":
        stamp = source.now_ts().replace(":", "").replace("-", "")
        set_aside = os.path.join(found, f"migrated-{stamp}")
        os.makedirs(set_aside)
        for name in FILE_STATE:
            path = os.path.join(found, name)
            if os.path.lexists(path):
                os.rename(path, os.path.join(set_aside, name))
    _point_config(found, without_password(to))
    return {**report, "backend": "postgresql", "set_aside": set_aside}


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
