"""The checks every backend's ``validate`` and ``doctor`` share: a problem, the reference validator, a signal,
a log, and the cross-record invariants of the queue (a task in two states, a status that does not match its
state, a task waiting on one that can never finish).

The file tree's administration (:mod:`loki.storage.tree`) and the database's (:mod:`loki.storage.postgres.admin`)
both use these; neither imports the other's private names for them.
"""

from __future__ import annotations

from typing import Any

from loki.config import setting
from loki.errors import FileTooLarge, LokiError, StateFileError
from loki.storage import jsonio, layout
from loki.storage.logpos import every_line
from loki.storage.problems import Problem
from loki.storage.schema import pointer, registry

TYPE_CHECKING = False
if TYPE_CHECKING:
    from loki.storage.state import StateStore

QUEUE_FILES = [layout.queue_file(s) for s in layout.QUEUE_STATES]

class ReferenceValidator:
    """jsonschema over loki's schemas, built once per validate run."""

    def __init__(self) -> None:
        from jsonschema import Draft202012Validator
        from referencing import Registry, Resource

        raw = registry().all_raw()
        resources = [(uri, Resource.from_contents(doc)) for uri, doc in raw.items()]
        self._registry = Registry().with_resources(resources)
        self._cls = Draft202012Validator
        self._validators: dict[str, Any] = {}

    def problems(self, schema_name: str, doc: Any) -> list[tuple[str, str]]:
        validator = self._validators.get(schema_name)
        if validator is None:
            validator = self._cls(registry().raw(schema_name), registry=self._registry)
            self._validators[schema_name] = validator
        from loki.text.redact import redact  # jsonschema quotes the refused value, which may be a secret

        found = []
        for error in (leaf for top in validator.iter_errors(doc) for leaf in branch_errors(top)):
            message = redact(error.message)
            message = message if len(message) <= 200 else message[:197] + "..."
            found.append((pointer(str(p) for p in error.absolute_path), message))
        return found


def branch_errors(error: Any) -> list[Any]:
    """An anyOf/oneOf failure as every problem of the branch the value was meant for.

    As in the fast validator (loki/storage/schema.py): a branch whose very type does not fit ranks after
    one that fails deeper inside, then the branch with fewer problems wins -- and *all* of its
    problems are reported, so `validate` counts what a reading command's "(and N more problems)"
    counts. A failure that matched more than one branch (oneOf) has no branch errors: it stays.
    """
    if not error.context:
        return [error]
    branches: dict[Any, list[Any]] = {}
    for sub in error.context:
        branches.setdefault(sub.relative_schema_path[0] if sub.relative_schema_path else None, []).append(sub)
    ranked = []
    for subs in branches.values():
        leaves = [leaf for sub in subs for leaf in branch_errors(sub)]
        # A branch whose very type does not fit, or that refuses the value's own keys (Loki Mode's
        # queue file has no "version"), is not the branch the value was meant for.
        wrong_type = any(sub.validator in ("type", "additionalProperties") and not sub.relative_path for sub in subs)
        ranked.append(((1 if wrong_type else 0, len(leaves)), leaves))
    return min(ranked, key=lambda item: item[0])[1]


def is_signal_file(rel: str) -> bool:
    """An unconsumed signal, or one being processed; quarantined ones are known to be bad."""
    parts = rel.split("/")
    if parts[0] != layout.SIGNALS_DIR or parts[-1].startswith("."):
        return False
    return len(parts) == 2 or (len(parts) == 3 and parts[1] == ".processing")


def problem_from(rel: str, exc: LokiError) -> Problem:
    if isinstance(exc, FileTooLarge):
        # Too big to read is not broken: it may hold every live task of the queue, so repair must not
        # set it aside (whole_file=False keeps doctor --repair's hands off it); a human splits it.
        return Problem(exc.path, exc.pointer, f"{exc.reason}; loki cannot use it until it is made smaller by hand "
                       "(`loki doctor --repair` leaves it where it is: it may hold live records)", whole_file=False)
    if isinstance(exc, StateFileError):
        return Problem(exc.path, exc.pointer, exc.reason)
    return Problem(rel, "", exc.message)


def check_signal(store: StateStore, rel: str, problems: list[Problem], reference: ReferenceValidator) -> None:
    name = rel.rsplit("/", 1)[-1]
    signal_type = layout.signal_type_of_file(name)
    schema_name = layout.signal_schema_for(signal_type)
    if signal_type == layout.DRIFT_SIGNAL:
        check_jsonl(store, rel, problems, reference, schema_name)
        return
    if layout.signal_left_for_others(name, tuple(setting(store.config, "signals", "leave_for_others"))):
        return  # another tool's signal (docs/signals.md): its content is that tool's business
    data = None
    try:
        data = store.read_bytes(rel)
        doc = jsonio.loads_strict(data or b"")
    except jsonio.JsonError as exc:
        # An empty or plain-text file is a signal whose text is its message (Loki Mode's idiom).
        if layout.signal_text_of(data or b"") is None:
            problems.append(Problem(rel, exc.pointer, exc.reason))
        return
    except LokiError as exc:
        problems.append(problem_from(rel, exc))
        return
    problems.extend(Problem(rel, p or "/", m) for p, m in reference.problems(schema_name, doc))


def check_jsonl(
    store: StateStore, rel: str, problems: list[Problem], reference: ReferenceValidator, schema_name: str | None
) -> None:
    """Every line of a log parses and, given a schema, validates (read in chunks: logs grow; a torn
    last line is checked too). Through the store's log reads, so it serves every backend."""
    try:
        for number, raw in every_line(store, rel):
            if not raw.strip():
                continue
            try:
                record = jsonio.loads_strict(raw)
            except jsonio.JsonError as exc:
                problems.append(Problem(rel, f"line {number}", exc.reason))
                continue
            if schema_name is not None:
                problems.extend(Problem(rel, f"line {number}{pointer}", message)
                                for pointer, message in reference.problems(schema_name, record))
            if schema_name == "memory-record.json" and b"\\u0000" in raw:
                where = jsonio.nul_pointer(record)
                if where is not None:
                    problems.append(Problem(rel, f"line {number}{where}", jsonio.NUL_REASON, whole_file=False))
    except LokiError as exc:
        problems.append(problem_from(rel, exc))


def state_problems(store: StateStore, view: dict[str, list[Any]]) -> list[Problem]:
    """The checks across records of a task store's states (``view``: each state's records), named as the
    queue files they stand for: a task in two states, a status that does not match its state, a task
    that can never be ready."""
    docs: dict[str, Any] = {layout.queue_file(state): {"tasks": view[state]} for state in layout.QUEUE_STATES}
    docs[layout.DEADLETTER] = {"tasks": view["dead-letter"]}
    docs[layout.ABANDONED] = {"tasks": view["abandoned"]}
    return cross_file_problems(docs) + dead_dependency_problems(store, docs)


def cross_file_problems(docs: dict[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    seen: dict[str, str] = {}

    def note(task_id: str, rel: str, where: str) -> None:
        if task_id in seen:
            problems.append(Problem(rel, where, f"task {task_id!r} is also in {seen[task_id]}", whole_file=False))
        else:
            seen[task_id] = rel

    for rel in QUEUE_FILES:
        doc = docs.get(rel)
        if not doc:
            continue
        state = rel.rsplit("/", 1)[-1][: -len(".json")]
        for index, task in enumerate(doc["tasks"]):
            note(task["id"], rel, f"/tasks/{index}")
            if task.get("status") != state:
                problems.append(Problem(rel, f"/tasks/{index}/status",
                                        f"task {task['id']!r} has status {task.get('status')!r} but is in {rel}",
                                        whole_file=False))
            if state == "landing" and not isinstance(task.get("landing"), dict):
                # what it waits for (docs/verify.md, "Landing"): without it nothing ever completes it
                problems.append(Problem(rel, f"/tasks/{index}", f"task {task['id']!r} is landing but has no "
                                        "`landing` (the commit and branch it waits for)", whole_file=False))
    for rel in (layout.DEADLETTER, layout.ABANDONED):
        doc = docs.get(rel)
        for index, entry in enumerate((doc or {}).get("tasks", [])):
            note(entry["task_id"], rel, f"/tasks/{index}")
    return problems


def dead_dependency_problems(store: StateStore, docs: dict[str, Any]) -> list[Problem]:
    """Pending or blocked tasks that wait on a cancelled or abandoned task, directly or through
    another waiting task: every file is valid, yet they would wait for ever."""
    from loki.tasks.readiness import never_ready

    states: dict[str, str | None] = {}
    for rel in QUEUE_FILES:
        for task in (docs.get(rel) or {}).get("tasks", []):
            states[task["id"]] = rel.rsplit("/", 1)[-1][: -len(".json")]
    for rel, state in ((layout.DEADLETTER, "dead-letter"), (layout.ABANDONED, "abandoned")):
        for entry in (docs.get(rel) or {}).get("tasks", []):
            states[entry["task_id"]] = state

    def state_of(task_id: str) -> str | None:
        if task_id not in states:
            found = store.tasks().find_archived(task_id)
            states[task_id] = found[0] if found is not None else None
        return states[task_id]

    waiting = [t for s in ("pending", "blocked") for t in (docs.get(layout.queue_file(s)) or {}).get("tasks", [])]
    stuck = never_ready(waiting, state_of)
    problems = []
    for state in ("pending", "blocked"):
        rel = layout.queue_file(state)
        for index, task in enumerate((docs.get(rel) or {}).get("tasks", [])):
            info = stuck.get(task["id"])
            if info is not None:
                position = task["dependencies"].index(info["dependency"])
                problems.append(Problem(rel, f"/tasks/{index}/dependencies/{position}",
                                        f"task {task['id']!r} can never be ready: it {info['why']} (retry "
                                        f"{info['root']!r} or cancel {task['id']!r})", whole_file=False))
    return problems
