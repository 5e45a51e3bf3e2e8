"""``validate`` and ``doctor`` of a tree's database (:meth:`loki.storage.postgres.store.PgStore.validate_state`).

``validate`` re-checks what the store checked when it wrote (a row edited by hand with psql is caught):
every document and task row against its schema, a task's status against its state, the checks across
records every backend shares (:mod:`loki.storage.checks`), signals and the error-memory log. ``doctor``
reports the same; a database has no temp files or journals to finish, and nothing is moved aside: a broken
row is reported for a human to fix. Apart from :mod:`.admin` (init, upgrade), which opens stores, so that the
store asks this module without the two importing each other.
"""

from __future__ import annotations

from loki.errors import LokiError
from loki.storage import jsonio, layout
from loki.storage.checks import ReferenceValidator, check_jsonl, check_signal, problem_from, state_problems
from loki.storage.layout import QUEUE_STATES
from loki.storage.postgres.queries import query
from loki.storage.problems import DoctorReport, Problem

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

    from loki.storage.postgres.shape import PgState as PgStore

OUTCOME_LOG = f"{layout.LOGS_DIR}/signals.jsonl"


# -- validate and doctor -----------------------------------------------------------------------------

DOCUMENTS = (layout.BREAKERS, layout.WATCH_STATE, layout.FRICTION_MAP, layout.CONFIG, layout.BUDGETS, layout.LEASES)
"""The single documents a tree keeps (the strike files and memory hints are listed, see validate)."""


def validate(store: PgStore) -> list[Problem]:
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
    for (log,) in store.rows(query("log_names")):
        # The logs the file tree's validate reads line by line (a signal log is a signal, above).
        if log == layout.MEMORY_LOG:
            check_jsonl(store, log, problems, reference, "memory-record.json")
        elif log == OUTCOME_LOG:
            check_jsonl(store, log, problems, reference, "signal-outcome.json")
        elif log.startswith(layout.LOGS_DIR + "/") and log.endswith(".jsonl"):
            check_jsonl(store, log, problems, reference, None)
    view = _checked_rows(store, reference, problems)
    cross = state_problems(store, view)
    problems.extend(Problem(_rows(p.file), p.pointer, p.message, whole_file=False) for p in cross)
    return problems


def _checked_rows(store: PgStore, reference: ReferenceValidator, problems: list[Problem]) -> dict[str, list[Any]]:
    """Every row of the task store checked as a read checks it (against jsonschema, the reference), and its
    derived columns against its record; the hot rows that pass, by state, for the checks across states.
    A row that fails is reported by name and left out: reading it through the store would stop at it."""
    from loki.storage.postgres import tasks as pgtasks

    view: dict[str, list[Any]] = {state: [] for state in (*QUEUE_STATES, "dead-letter", "abandoned")}
    for task_id, state, archived, doc, columns in pgtasks.every_row(store):
        where = pgtasks.row_name(task_id, state)
        found = pgtasks.row_problems(reference, task_id, state, columns["priority_rank"], doc)
        if not found:
            found = pgtasks.column_problems(state, doc, columns)
        if found:
            problems.extend(Problem(where, pointer, message) for pointer, message in found)
        elif not archived:
            view[state].append(doc)
    for (value,) in store.rows(query("dead_letter_metadata")):
        problems.extend(Problem(pgtasks.METADATA, pointer, message)
                        for pointer, message in pgtasks.metadata_problems(reference, value))
    return view


def _rows(rel: str) -> str:
    """A queue file's name as the rows it stands for on PostgreSQL (``tasks[pending]``)."""
    name = rel.rsplit("/", 1)[-1].removesuffix(".json")
    return f"tasks[{name}]"


def doctor(store: PgStore, repair: bool = False) -> DoctorReport:
    """The problems validate finds. There is nothing to finish or sweep: a database commits whole."""
    return DoctorReport(problems=validate(store))
