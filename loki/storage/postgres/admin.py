"""Administering a tree's database: ``init --database``, ``db upgrade``, ``validate``, ``doctor``.

``init`` against a database is also how a second machine joins a team: an empty schema gets loki's
tables (every migration) and the shipped text documents; a schema that already holds loki's tables
at this loki's version is joined as it is; another application's tables, an older schema (``loki db
upgrade``) or a newer one (upgrade loki) are refused before anything is written -- on the server or
in the local ``.loki/``.

``validate`` re-checks what the store checked when it wrote (a row edited by hand with psql is
caught): every document and task row against its schema, a task's status against its state, the
cross-state invariants the file tree's validate checks (:mod:`loki.storage.tree`), signals and the
error-memory log. ``doctor`` reports the same; a database has no temp files or journals to finish,
and nothing is moved aside: a broken row is reported for a human to fix.
"""

from __future__ import annotations

import os

from loki.errors import InvalidInput, LokiError
from loki.storage import jsonio, layout
from loki.storage.checks import (
    DoctorReport,
    Problem,
    ReferenceValidator,
    check_jsonl,
    check_signal,
    cross_file_problems,
    dead_dependency_problems,
    problem_from,
)
from loki.storage.layout import QUEUE_STATES
from loki.storage.postgres import migrations
from loki.storage.postgres.connect import DatabaseError, check_url, without_password
from loki.storage.postgres.session import Database
from loki.storage.store import Store

OUTCOME_LOG = f"{layout.LOGS_DIR}/signals.jsonl"

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

    from loki.storage.state import StateStore

SEEDED_TEXTS = (layout.ESCALATION_TEMPLATE, layout.CONTINUITY)
"""The text documents a new tree starts with (the escalation template, CONTINUITY.md)."""


def init_database(url: str) -> dict[str, Any]:
    """Make ``url``'s schema a loki schema (or join one); returns what was done. Exit 1 on a refusal."""
    check_url(url, "--database")
    db = Database(url, check_schema=False)
    try:
        conn = db.conn
        have = migrations.version(conn)
        if have is None:
            raise migrations.foreign_error(conn)
        if have and have != migrations.latest():
            migrations.check(conn)  # raises: older (db upgrade) or newer (upgrade loki)
        applied = migrations.upgrade(conn) if have == 0 else []
        schema = db.schema
    finally:
        db.close()
    seeded: list[str] = []
    if applied:
        from loki.storage.postgres.store import PgStore

        store = PgStore.open(url)
        try:
            for rel, content in layout.initial_files().items():
                if rel in SEEDED_TEXTS and isinstance(content, str) and not store.exists(rel):
                    store.write_text(rel, content)
                    seeded.append(rel)
        finally:
            store.close()
    return {"database": without_password(url), "schema": schema, "created": bool(applied),
            "migrations": [f"{number:03d}_{name}" for number, name in applied], "seeded": seeded,
            "schema_version": migrations.latest()}


def upgrade_database(url: str) -> dict[str, Any]:
    """Apply the migrations ``url``'s schema lacks (``loki db upgrade``)."""
    db = Database(url, check_schema=False)
    try:
        conn = db.conn
        before = migrations.version(conn)
        if before == 0:
            raise DatabaseError(f"{db.where} has no loki schema: run `loki init --database URL` first")
        applied = migrations.upgrade(conn)
        return {"database": without_password(url), "schema": db.schema, "from_version": before,
                "schema_version": migrations.latest(),
                "migrations": [f"{number:03d}_{name}" for number, name in applied]}
    finally:
        db.close()


def url_of_tree(root: str | None) -> str:
    """The database of the tree at ``root`` (found like git finds .git); exit 1 on a file tree."""
    from loki.storage.opening import database_url
    from loki.storage.paths import find_root

    found = find_root(root)
    url = database_url(found)
    if not url:
        raise DatabaseError(f"{found} keeps its state in files, not in a database: give --database URL",
                            root=found)
    return url


# -- this machine's tree joins a database -----------------------------------------------------------


def init_database_tree(root: str, url: str) -> dict[str, Any]:
    """This machine's ``.loki/`` keeps its state in the database at ``url`` (created or joined).

    Refused before anything is written, here or on the server: a ``.loki/`` already on another
    database, or one whose files hold state (``loki migrate --to URL`` moves it), and every refusal of
    :func:`loki.storage.postgres.admin.init_database`. The URL is saved without its password.
    """
    check_url(url, "--database")
    saved = without_password(url)
    config_rel = layout.CONFIG
    existing: dict[str, Any] | None = None
    if os.path.isdir(root):
        store = Store(root)
        existing = store.read(config_rel) if store.exists(config_rel) else None
        storage = (existing or {}).get("storage") or {}
        if storage.get("backend") == "postgresql":
            if storage.get("database") != saved:
                raise InvalidInput(f"{root} already keeps its state in {storage.get('database')}; to move it to "
                                   f"{saved}, use `loki migrate --to URL` from a tree on the new database",
                                   file=f"{root}/{config_rel}", pointer="/storage/database")
        else:
            held = _state_in_files(store)
            if held:
                raise InvalidInput(f"{root} keeps state in its files ({held}): move it to the database with "
                                   f"`loki migrate --to {saved}` instead", file=root)
    report = init_database(url)
    wanted = {**(existing or {"version": 1}), "storage": {"backend": "postgresql", "database": saved}}
    written = wanted != existing
    if written:
        os.makedirs(os.path.join(root, "config"), exist_ok=True)
        store = Store(root)
        with store.transaction(config_rel) as txn:
            txn.write(config_rel, wanted)
    return {**report, "root": root, "config_written": written, "password_dropped": saved != url}


def _state_in_files(store: Store) -> str:
    """What state a file tree holds (tasks, entries, signals, escalations, memory), '' when none."""
    view = store.tasks().view([*layout.QUEUE_STATES, "dead-letter", "abandoned"])
    parts = [f"{len(items)} {state}" for state, items in view.items() if items]
    for directory in (layout.SIGNALS_DIR, layout.ESCALATIONS_DIR):
        names = [n for n in store.list(directory) if not n.startswith(".")]
        if names:
            parts.append(f"{len(names)} in {directory}/")
    if store.log_size(layout.MEMORY_LOG):
        parts.append("error memory")
    return ", ".join(parts)


# -- validate and doctor -----------------------------------------------------------------------------

DOCUMENTS = (layout.BREAKERS, layout.WATCH_STATE, layout.FRICTION_MAP, layout.CONFIG)
"""The single documents a tree keeps (the strike files and memory hints are listed, see validate)."""


def validate(store: StateStore) -> list[Problem]:
    """Every problem in the database's rows; an empty list means it is valid."""
    problems: list[Problem] = []
    reference = ReferenceValidator()

    def check_document(rel: str, schema_name: str) -> None:
        try:
            data = store.read_bytes(rel)
            if data is None:
                return
            doc = jsonio.loads_strict(data)
        except jsonio.JsonError as exc:
            problems.append(Problem(rel, exc.pointer, exc.reason))
            return
        except LokiError as exc:
            problems.append(problem_from(rel, exc))
            return
        problems.extend(Problem(rel, p or "/", m) for p, m in reference.problems(schema_name, doc))

    for rel in DOCUMENTS:
        kind = layout.kind_for(rel)
        if kind is not None:
            check_document(rel, kind.schema)
    for directory, schema_name in ((layout.STRIKES_DIR, None), (layout.MEMORY_HINTS_DIR, "memory-hint.json")):
        for name in store.list(directory):
            rel = f"{directory}/{name}"
            kind = layout.kind_for(rel)
            chosen = kind.schema if kind is not None else schema_name
            if chosen is not None:
                check_document(rel, chosen)
    for name in store.list(layout.SIGNALS_DIR):
        if not name.startswith("."):
            check_signal(store, f"{layout.SIGNALS_DIR}/{name}", problems, reference)
    for (log,) in store.rows("SELECT name FROM loki_logs ORDER BY name"):  # type: ignore[attr-defined]
        # The logs the file tree's validate reads line by line (a signal log is a signal, above).
        if log == layout.MEMORY_LOG:
            check_jsonl(store, log, problems, reference, "memory-record.json")
        elif log == OUTCOME_LOG:
            check_jsonl(store, log, problems, reference, "signal-outcome.json")
        elif log.startswith(layout.LOGS_DIR + "/") and log.endswith(".jsonl"):
            check_jsonl(store, log, problems, reference, None)
    view = _checked_rows(store, reference, problems)
    docs: dict[str, Any] = {layout.queue_file(state): {"tasks": view[state]} for state in QUEUE_STATES}
    docs[layout.DEADLETTER] = {"tasks": view["dead-letter"]}
    docs[layout.ABANDONED] = {"tasks": view["abandoned"]}
    cross = cross_file_problems(docs) + dead_dependency_problems(store, docs)
    problems.extend(Problem(_rows(p.file), p.pointer, p.message, whole_file=False) for p in cross)
    return problems


def _checked_rows(store: StateStore, reference: ReferenceValidator, problems: list[Problem]) -> dict[str, list[Any]]:
    """Every row of the task store checked as a read checks it (against jsonschema, the reference), and its
    derived columns against its record; the hot rows that pass, by state, for the checks across states.
    A row that fails is reported by name and left out: reading it through the store would stop at it."""
    from loki.storage.postgres import tasks as pgtasks

    view: dict[str, list[Any]] = {state: [] for state in (*QUEUE_STATES, "dead-letter", "abandoned")}
    for task_id, state, archived, doc, columns in pgtasks.every_row(store):  # type: ignore[arg-type]
        where = pgtasks.row_name(task_id, state)
        found = pgtasks.row_problems(reference, task_id, state, columns["priority_rank"], doc)
        if not found:
            found = pgtasks.column_problems(state, doc, columns)
        if found:
            problems.extend(Problem(where, pointer, message) for pointer, message in found)
        elif not archived:
            view[state].append(doc)
    for (value,) in store.rows("SELECT value FROM loki_queue_meta WHERE key = 'dead-letter'"):  # type: ignore[attr-defined]
        problems.extend(Problem(pgtasks.METADATA, pointer, message)
                        for pointer, message in pgtasks.metadata_problems(reference, value))
    return view


def _rows(rel: str) -> str:
    """A queue file's name as the rows it stands for on PostgreSQL (``tasks[pending]``)."""
    name = rel.rsplit("/", 1)[-1].removesuffix(".json")
    return f"tasks[{name}]"


def doctor(store: StateStore, repair: bool = False) -> DoctorReport:
    """The problems validate finds. There is nothing to finish or sweep: a database commits whole."""
    return DoctorReport(problems=validate(store))
