"""The ``.loki/`` tree: which files exist, what kind each is, and what an empty one holds.

One table maps a state path to its :class:`FileKind`: the schema of the whole file,
where its records are (so a write validates only the records it changed), and its
empty content. The store consults it for every read and write.
"""

from __future__ import annotations

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

QUEUE_STATES = ("pending", "in-progress", "landing", "blocked", "completed", "failed", "cancelled")
"""Queue files that hold tasks (``queue/<state>.json``)."""

QUEUE_DIR = "queue"
QUEUE_LOCK = "queue/.lock"
DEADLETTER = "queue/dead-letter.json"
ABANDONED = "queue/abandoned.json"
BREAKERS = "state/circuit-breakers.json"
SPEND = "queue/spend.json"
"""Running totals of the tasks' usage by hour and day (loki/tasks/totals.py): in the queue's domain, so each
entry and its total are one unit of work. Absent until a budget needs it."""
BUDGETS = "state/budgets.json"
"""Budgets (docs/spend.md): budget name -> budget. Absent until the first ``loki budget set``."""
WATCH_STATE = "state/watch.json"
FRICTION_MAP = "state/friction-map.json"
LEASES = "state/path-leases.json"
"""Path leases: who holds which files, and the ended ones (docs/leases.md)."""
KNOWLEDGE = "institutional-knowledge.md"
CONFIG = "config/loki.json"
CONTINUITY = "CONTINUITY.md"
STRIKES_DIR = "state/errors"
SIGNALS_DIR = "signals"
ESCALATIONS_DIR = "escalations"
ARCHIVE_DIR = "archive"
LOGS_DIR = "logs"
MEMORY_DIR = "memory"
MEMORY_LOG = f"{MEMORY_DIR}/errors.jsonl"
"""Error memory: every captured failure and resolution, append-only (the truth; docs/memory.md)."""
MEMORY_INDEX = f"{MEMORY_DIR}/errors.db"
"""The SQLite FTS5 search index over MEMORY_LOG: a cache, rebuilt from the log whenever in doubt."""
MEMORY_HINTS_DIR = f"{MEMORY_DIR}/hints"
"""One small file per resolved command prefix, read lock-free by the PreToolUse hook."""
LOCAL_CACHE_DIR = "cache"
"""On a tree whose state is in a database: this machine's copies of what the hooks' hot path reads
(strike state, prefix hints, the settings), refreshed by the hooks that connect (docs/postgres.md)."""
TEMPLATES_DIR = "templates"
ESCALATION_TEMPLATE = f"{TEMPLATES_DIR}/escalation.md"
DRIFT_LOG = f"{SIGNALS_DIR}/DRIFT_DETECTED"
"""Drift reports: the one signal that is an append-only log, not a file per signal (docs/signals.md)."""
MIGRATION_MARKER = "config/migration.json"
"""Written first and removed last by ``loki migrate``: every other command is held out while it exists
(loki/storage/moving.py)."""

TREE_STATE = ("queue", "state", "signals", "escalations", "memory", "logs", "archive", TEMPLATES_DIR,
              CONTINUITY, KNOWLEDGE)
"""What a file tree's state is made of: what ``loki migrate`` sets aside after a move to a database and
clears before a move back (``config/`` stays: it says where the state is; ``cache/`` is this machine's)."""

NOT_STATE_SUFFIXES = (".lock", ".journal.json", ".tmp")
"""Entries beside the state that are not state: permanent lock files (``signals/DRIFT_DETECTED.lock``),
redo journals of a commit in flight, temp files of a write in flight."""


def is_state_name(name: str) -> bool:
    """Whether a directory entry of the tree holds state a migration moves (not a lock, a journal, a temp
    file, a hidden entry such as ``.processing/``, or a file ``doctor --repair`` set aside)."""
    return not name.startswith(".") and not name.endswith(NOT_STATE_SUFFIXES) and ".corrupt." not in name

DIRECTORIES = (
    "config",
    QUEUE_DIR,
    "state",
    STRIKES_DIR,
    SIGNALS_DIR,
    ESCALATIONS_DIR,
    MEMORY_DIR,
    LOGS_DIR,
    ARCHIVE_DIR,
    TEMPLATES_DIR,
)


def queue_file(state: str) -> str:
    return f"{QUEUE_DIR}/{state}.json"


class FileKind:
    """What a JSON state file holds and how to check it cheaply.

    A plain class, not a dataclass: ``dataclasses`` costs ~18 ms of import here.
    """

    __slots__ = ("empty", "name", "normalise", "record_schema", "records_are_values", "records_key", "schema")

    def __init__(
        self,
        name: str,
        schema: str,
        empty: Callable[[], Any],
        records_key: str | None = None,
        record_schema: str | None = None,
        *,
        records_are_values: bool = False,
        normalise: Callable[[Any, str, Callable[[], str]], Any] | None = None,
    ) -> None:
        self.name = name
        self.schema = schema
        self.empty = empty
        self.records_key = records_key
        """Key of the record list inside the document ("tasks"), when there is one."""
        self.record_schema = record_schema
        self.records_are_values = records_are_values
        """The document is a mapping name -> record (circuit breakers)."""
        self.normalise = normalise
        """Turn an accepted on-disk shape into the canonical one (Loki Mode's shapes into loki's).

        Called as ``normalise(doc, rel, stamp)``; ``stamp()`` is the time that stands in for one a
        foreign record does not give (docs/loki-mode-compat.md): stable between reads."""

    def envelope(self, doc: Any) -> Any:
        """The document with its records taken out, for a cheap check of everything else."""
        if self.records_are_values:
            return {}
        if self.records_key is not None and isinstance(doc, dict) and self.records_key in doc:
            return {**doc, self.records_key: []}
        return doc

    def record_pointer(self, doc: Any, record: Any) -> str:
        """Where ``record`` sits in ``doc``, as a JSON pointer prefix (only computed on an error, for every
        backend's message naming the record that broke its schema)."""
        from loki.storage.schema import pointer

        if self.records_are_values and isinstance(doc, dict):
            for key, value in doc.items():
                if value is record:
                    return pointer([key])
        elif self.records_key is not None:
            for index, value in enumerate(self.records(doc)):
                if value is record:
                    return pointer([self.records_key, str(index)])
        return ""

    def records(self, doc: Any) -> list[Any]:
        if self.records_are_values:
            return list(doc.values()) if isinstance(doc, dict) else []
        if self.records_key is not None and isinstance(doc, dict):
            value = doc.get(self.records_key)
            return value if isinstance(value, list) else []
        return []


_task_keys: frozenset[str] | None = None


def task_keys() -> frozenset[str]:
    """loki's task keys: the task schema's properties, read once. Handed to ``loki.tasks.compat``, which
    sits below storage and so cannot read the schema itself."""
    global _task_keys
    if _task_keys is None:
        from loki.storage.schema import registry

        _task_keys = frozenset(registry().raw("task.json")["properties"])
    return _task_keys


def _normalise_queue(doc: Any, rel: str, stamp: Callable[[], str]) -> Any:
    from loki.tasks import compat

    keys = task_keys()
    if compat.is_foreign_queue(doc, keys):
        tasks = compat.tasks_of(doc) or []
        state = rel.rsplit("/", 1)[-1][: -len(".json")]
        return {"version": 1, "tasks": compat.import_tasks(tasks, stamp(), keys, status=state)}
    return doc


def _normalise_deadletter(doc: Any, rel: str, stamp: Callable[[], str]) -> Any:
    from loki.tasks import compat

    keys = task_keys()
    return compat.import_deadletter(doc, stamp(), keys) if compat.is_foreign_deadletter(doc, keys) else doc


def _empty_queue() -> dict[str, Any]:
    return {"version": 1, "tasks": []}


def _empty_deadletter() -> dict[str, Any]:
    return {"tasks": [], "metadata": {"last_reviewed": None, "total_abandoned": 0, "total_recovered": 0}}


QUEUE_KIND = FileKind("queue", "queue-file.json", _empty_queue, "tasks", "task.json", normalise=_normalise_queue)
DEADLETTER_KIND = FileKind("dead-letter", "deadletter-file.json", _empty_deadletter, "tasks", "deadletter-entry.json",
                           normalise=_normalise_deadletter)
ABANDONED_KIND = FileKind("abandoned", "abandoned-file.json", _empty_queue, "tasks", None)
BREAKERS_KIND = FileKind("circuit-breakers", "circuit-breakers-file.json", dict, None, "circuit-breaker.json",
                         records_are_values=True)
BUDGETS_KIND = FileKind("budgets", "budgets-file.json", dict, None, "budget.json", records_are_values=True)
STRIKES_KIND = FileKind("strikes", "strikes-file.json", lambda: None)
SPEND_KIND = FileKind("spend", "spend-file.json", lambda: None)  # absent: None (the totals are then built)
WATCH_KIND = FileKind("watch-state", "watch-state.json", lambda: {"version": 1})
FRICTION_KIND = FileKind("friction-map", "friction-map.json", lambda: {"version": 1, "frictions": []}, "frictions")
LEASES_KIND = FileKind("path-leases", "path-leases-file.json",
                       lambda: {"version": 1, "next_id": 1, "leases": [], "history": []}, "leases", "path-lease.json")
CONFIG_KIND = FileKind("config", "config.json", lambda: {"version": 1})


def kind_for(rel: str) -> FileKind | None:
    """The kind of a JSON state file, or None for files loki does not parse as one document."""
    if rel == DEADLETTER:
        return DEADLETTER_KIND
    if rel == ABANDONED:
        return ABANDONED_KIND
    if rel == SPEND:
        return SPEND_KIND
    if rel.startswith(QUEUE_DIR + "/") and rel.endswith(".json") and rel.count("/") == 1:
        state = rel[len(QUEUE_DIR) + 1 : -len(".json")]
        return QUEUE_KIND if state in QUEUE_STATES else None
    if rel == BREAKERS:
        return BREAKERS_KIND
    if rel == BUDGETS:
        return BUDGETS_KIND
    if rel == WATCH_STATE:
        return WATCH_KIND
    if rel == FRICTION_MAP:
        return FRICTION_KIND
    if rel == CONFIG:
        return CONFIG_KIND
    if rel == LEASES:
        return LEASES_KIND
    if rel.startswith(STRIKES_DIR + "/") and rel.endswith(".json") and rel.count("/") == 2:
        return STRIKES_KIND
    return None


def archive_file(kind: str, month: str) -> str:
    """``archive/completed-2026-01.jsonl``: rotated-out tasks of one state and month."""
    return f"{ARCHIVE_DIR}/{kind}-{month}.jsonl"


def lock_for(rel: str) -> str:
    """The permanent lock file that guards ``rel``.

    One lock for all queue files and the archive they rotate into (a rotation moves
    tasks between them in one journaled change); ``<file>.lock`` for everything else.
    """
    if rel.startswith(QUEUE_DIR + "/") or rel.startswith(ARCHIVE_DIR + "/"):
        return QUEUE_LOCK
    return rel + ".lock"


def journal_for(lock: str) -> str:
    """Where the redo journal of a lock domain lives (beside its lock)."""
    directory = lock.rsplit("/", 1)[0]
    return f"{directory}/.journal.json" if lock.endswith("/.lock") else lock[: -len(".lock")] + ".journal.json"


def lock_of_journal(journal: str) -> str:
    """The lock whose domain a journal belongs to (the inverse of :func:`journal_for`)."""
    directory, _, name = journal.rpartition("/")
    if name == ".journal.json":
        return f"{directory}/.lock"
    return journal[: -len(".journal.json")] + ".lock"


def _shipped_template() -> str:
    import os

    from loki.storage.paths import resource_dir

    with open(os.path.join(resource_dir("templates"), "escalation.md"), encoding="utf-8") as f:
        return f.read()


def initial_files() -> dict[str, Any]:
    """Every file ``loki init`` creates, with its initial content (text for non-JSON files)."""
    files: dict[str, Any] = {queue_file(state): _empty_queue() for state in QUEUE_STATES}
    files[DEADLETTER] = _empty_deadletter()
    files[ABANDONED] = _empty_queue()
    files[BREAKERS] = {}
    files[CONFIG] = {"version": 1}
    files[ESCALATION_TEMPLATE] = _shipped_template()
    files[CONTINUITY] = (
        "# CONTINUITY\n\n"
        "Working memory shared by the agents on this repository. loki appends drift\n"
        "consolidations here; agents read it first thing every turn.\n"
    )
    return files


# -- signal files ------------------------------------------------------------------------------------
# A signal is a file in signals/ named after its type (docs/signals.md). What such a file is, read from its
# name, belongs to the file format: storage's checks (tree.py) ask it here, and loki/signals/types.py, the
# bus's vocabulary, re-exports it under its own names. The type names are spelt out (the bus's constants
# are the same strings; tests/architecture/test_layers.py checks they agree).

DRIFT_SIGNAL = "DRIFT_DETECTED"
"""The one signal that is an append-only JSON-lines log rather than a file per signal."""
# Types whose name carries a subject: FEATURE_READY_auth, MERGE_REQUESTED_main.
SIGNAL_SUBJECT_PREFIXES = ("FEATURE_READY_", "TESTS_PASSED_", "TESTS_FAILED_", "MERGE_REQUESTED_")
SIGNAL_SCHEMAS = {
    DRIFT_SIGNAL: "signal-drift-detected.json",
    "HUMAN_REVIEW_NEEDED": "signal-human-review-needed.json",
    "HUMAN_APPROVED": "signal-human-approved.json",
    "FRICTION_DETECTED": "signal-friction-detected.json",
    "INSTITUTIONAL_KNOWLEDGE_FOUND": "signal-institutional-knowledge-found.json",
    "TESTS_PASSED_": "signal-tests-result.json",
    "TESTS_FAILED_": "signal-tests-result.json",
}
GENERIC_SIGNAL_SCHEMA = "signal-generic.json"


def signal_base_type(signal_type: str) -> str:
    """``TESTS_PASSED_auth`` -> ``TESTS_PASSED_``; fixed and custom types are their own base."""
    for prefix in SIGNAL_SUBJECT_PREFIXES:
        if signal_type.startswith(prefix) and len(signal_type) > len(prefix):
            return prefix
    return signal_type


def signal_schema_for(signal_type: str) -> str:
    return SIGNAL_SCHEMAS.get(signal_base_type(signal_type), GENERIC_SIGNAL_SCHEMA)


def signal_type_of_file(name: str) -> str:
    """The signal type a file in ``signals/`` carries: its name up to the first ``.``."""
    return name.split(".", 1)[0]


def signal_left_for_others(name: str, patterns: list[str] | tuple[str, ...]) -> bool:
    """Whether the signal file ``name`` is one another tool waits for (``signals.leave_for_others``).

    Its type (the name up to the first ``.``: ``MERGE_REQUESTED_auth.ack`` -> ``MERGE_REQUESTED_auth``)
    equals a pattern, or starts with a pattern ending in ``*`` without it (``SPAWN_QUEUED_*``).
    """
    signal_type = signal_type_of_file(name)
    for pattern in patterns:
        if pattern.endswith("*"):
            if signal_type.startswith(pattern[:-1]):
                return True
        elif signal_type == pattern:
            return True
    return False


def signal_text_of(data: bytes) -> str | None:
    """The text of a signal file that is not JSON (``touch X``, ``echo text > X``: Loki Mode's idiom), or None.

    None when it is not text (invalid UTF-8, control characters other than tab and line ends) or
    when it is evidently meant to be JSON (it starts with ``{`` or ``[``): a half-written or broken
    JSON file is quarantined, never read as a message.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if text.lstrip().startswith(("{", "[")) or any((ord(c) < 32 and c not in "\t\n\r") or ord(c) == 127
                                                    for c in text):
        return None
    return text.strip()
