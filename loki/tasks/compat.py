"""Reading Loki Mode's own files: one reader of foreign task shapes.

Loki Mode's runtime (``autonomy/run.sh``) and its tests write the queue files as a bare
JSON array or as ``{"tasks": [...]}``, with tasks in several shapes: camelCase with a
numeric priority (its task-queue reference), snake_case imports of a PRD, GitHub issues,
BMAD or OpenSpec (string priorities, ``status``, ``source``...), its in-progress iteration
record. loki reads every one of them in place (an existing tree keeps working) and as
input to ``loki queue add --from-file``, through :func:`import_task`; the first write
stores loki's format.

Nothing is dropped: a field with a loki counterpart is mapped when the value survives
unchanged; every other field (and any whose value had to change, such as a numeric
priority) is kept under ``payload.loki_mode``. docs/loki-mode-compat.md has the table.
"""

from __future__ import annotations

from loki.clock import add_seconds, format_ts, parse_ts
from loki.tasks.record import DEFAULT_MAX_ATTEMPTS, DEFAULT_TYPE, PRIORITIES, make_task

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

RUNTIME_HOLDER = "loki-mode"
"""Holder of an in-progress task that names none (run.sh's iteration record): Loki Mode's runner."""

IMPORTED_TOKEN = "imported"
DEFAULT_TIMEOUT = 3600
"""Loki Mode's claim timeout when a task gives none (its task schema's ``timeout``)."""

# Loki Mode field -> the loki field that holds it unchanged (when it does; see _lossless).
_COUNTERPART = {
    "title": "title", "description": "description", "type": "type", "priority": "priority",
    "dependencies": "dependencies", "dependsOn": "dependencies", "depends_on": "dependencies",
    "labels": "labels", "tags": "labels", "createdAt": "created_at", "created_at": "created_at",
    "claimedBy": "claimed_by", "claimedAt": "claimed_at", "lastError": "last_error", "last_error": "last_error",
    "completedAt": "completed_at", "completed_at": "completed_at", "result": "result", "notes": "notes",
    "attempts": "attempts", "idempotencyKey": "idempotency_key", "idempotency_key": "idempotency_key",
    "status": "status",
}
KNOWN_FIELDS = frozenset(_COUNTERPART) | {"timeout", "retries", "maxRetries", "backoffSeconds", "startedAt",
                                          "updatedAt", "updated_at", "movedToDLQ", "payload", "id"}
"""Loki Mode's task fields loki reads (the rest of a foreign task is kept as it is, under ``payload.loki_mode``)."""
_ATTEMPT_KEYS = frozenset({"attempt_number", "timestamp", "agent_id", "approach", "error_type", "error_message"})
_ERROR_TYPES = frozenset({"test_failure", "timeout", "dependency", "validation", "other"})


def is_loki_task(raw: Any, keys: frozenset[str]) -> bool:
    """A task already in loki's format (every key loki's, the required ones present).

    loki's keys (``keys``) are the task schema's properties, handed in by the caller (storage reads the
    schema; this module sits below it): a field added to the schema (``budget_start``) is loki's at once,
    and never taken for a foreign one to tuck under ``payload.loki_mode``.
    """
    if not (isinstance(raw, dict) and {"id", "title", "status", "attempts", "max_attempts"} <= raw.keys()):
        return False
    return raw.keys() <= keys


def priority_from(value: Any) -> str:
    """loki's priority for a Loki Mode one: ``high|medium|low`` kept, a number 1-10 (higher is more urgent)."""
    if isinstance(value, str):
        lowered = value.lower()
        if lowered in PRIORITIES:
            return lowered
        if lowered in ("critical", "urgent"):
            return "high"
        try:
            value = float(lowered)
        except ValueError:
            return "medium"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "high" if value >= 7 else "medium" if value >= 4 else "low"
    return "medium"


def _timestamp(value: Any) -> str | None:
    if isinstance(value, str):
        try:
            return format_ts(parse_ts(value))
        except ValueError:
            return None
    return None


def _strings(value: Any) -> list[str] | None:
    return [str(v) for v in value] if isinstance(value, list) else None


def _is_note(value: Any) -> bool:
    return (isinstance(value, dict) and isinstance(value.get("text"), str) and _timestamp(value.get("timestamp"))
            == value.get("timestamp") and value.keys() <= {"timestamp", "text", "author"}
            and isinstance(value.get("author", ""), str))


def _is_attempt(value: Any) -> bool:
    return (isinstance(value, dict) and value.keys() == _ATTEMPT_KEYS and value["error_type"] in _ERROR_TYPES
            and isinstance(value["attempt_number"], int) and not isinstance(value["attempt_number"], bool)
            and value["attempt_number"] >= 1 and _timestamp(value["timestamp"]) == value["timestamp"]
            and all(isinstance(value[k], str) for k in ("agent_id", "approach", "error_message")))


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def import_task(raw: dict[str, Any], stamp: str, keys: frozenset[str], status: str = "pending") -> dict[str, Any]:
    """One foreign task -> one loki task (a loki task is returned unchanged).

    ``stamp`` stands in for a time the task does not give (``createdAt``, ``claimedAt``): the
    caller passes one that does not move between reads (in place: when the file was last
    written, or now if that is later).
    """
    if is_loki_task(raw, keys):
        return raw
    raw_payload = raw.get("payload")
    payload = dict(raw_payload) if isinstance(raw_payload, dict) else {}
    raw_type = raw.get("type")
    type_ = raw_type if isinstance(raw_type, str) and 0 < len(raw_type) <= 100 else DEFAULT_TYPE
    task_id = str(raw["id"])
    raw_title = raw.get("title")
    title = raw_title if isinstance(raw_title, str) and raw_title.strip() else (
        payload.get("title") or payload.get("action") or f"{type_} {task_id}")
    description = next((d for d in (raw.get("description"), payload.get("description")) if isinstance(d, str)), "")
    from loki.text.redact import redact, redact_obj

    # A task imported from an issue tracker, a PRD or another tool is free text loki stores and shows: its
    # secrets go like those of `queue add` (docs/storage.md, "Secrets"); redaction runs before the cut.
    title, description, payload = redact(str(title)), redact(description), redact_obj(payload)
    created = _timestamp(raw.get("createdAt", raw.get("created_at"))) or stamp
    deps = _strings(raw.get("dependencies") or raw.get("dependsOn") or raw.get("depends_on")) or []
    labels = [redact(label) for label in (_strings(raw.get("labels") or raw.get("tags")) or [])
              if 0 < len(label) <= 100]
    task = make_task(
        task_id=task_id,
        title=str(title)[:500],
        now=created,
        description=description,
        type=type_,
        priority=priority_from(raw.get("priority")),
        dependencies=deps,
        labels=labels,
        payload=payload,
        idempotency_key=next((raw[k] for k in ("idempotency_key", "idempotencyKey") if isinstance(raw.get(k), str)),
                             None),
        status=status,
    )
    for key in ("lastError", "last_error"):
        if isinstance(raw.get(key), str):
            # An error as a tool printed it: loki writes it from now on, so it is redacted like
            # every attempt's error (docs/storage.md, "Secrets").
            task["last_error"] = redact(raw[key])
    if "result" in raw:
        task["result"] = raw["result"]
    completed = _timestamp(raw.get("completedAt", raw.get("completed_at")))
    if completed is not None and status in ("completed", "cancelled", "failed"):
        task["completed_at"] = completed
    notes = raw.get("notes")
    if isinstance(notes, list) and all(_is_note(n) for n in notes):
        task["notes"] = [dict(n) for n in notes]
    attempts = raw.get("attempts")
    if isinstance(attempts, list) and all(_is_attempt(a) for a in attempts):
        task["attempts"] = [dict(a) for a in attempts]
    # Loki Mode dead-letters when ``retries`` reaches ``maxRetries`` (its handle_failure), so a
    # task has ``maxRetries - retries`` failures left: loki gives it exactly those, no more.
    max_retries, retries = _count(raw.get("maxRetries")), _count(raw.get("retries")) or 0
    left = max(1, max_retries - retries) if max_retries is not None else DEFAULT_MAX_ATTEMPTS
    task["max_attempts"] = min(len(task["attempts"]) + left, 1000)
    _import_claim(raw, task, stamp, status)
    extra = {k: v for k, v in raw.items() if k != "id" and not _lossless(k, v, task, raw_payload)}
    if extra:
        task["payload"]["loki_mode"] = redact_obj(extra)  # what did not map: as free as the rest
    return task


def _import_claim(raw: dict[str, Any], task: dict[str, Any], stamp: str, status: str) -> None:
    """A claim Loki Mode recorded, as loki's claim (only in pending and in-progress: elsewhere it is history).

    In ``pending.json`` it is the reference's flock claim (the task stays in pending, claimed);
    in ``in-progress.json`` a task naming no holder is held by Loki Mode's runner itself
    (run.sh's iteration record) and has no lease: loki never requeues it.
    """
    holder = raw.get("claimedBy")
    named = isinstance(holder, str) and bool(holder)
    if status not in ("pending", "in-progress") or not (named or status == "in-progress"):
        return
    claimed_at = _timestamp(raw.get("claimedAt")) or _timestamp(raw.get("startedAt")) or stamp
    task["claimed_at"] = claimed_at
    task["claim_token"] = IMPORTED_TOKEN
    if named:
        timeout = raw.get("timeout")
        seconds = float(timeout) if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) \
            and timeout > 0 else float(DEFAULT_TIMEOUT)
        task["claimed_by"] = holder
        task["lease_until"] = format_ts(add_seconds(parse_ts(claimed_at), min(seconds, 366 * 86400.0)))
    else:
        task["claimed_by"] = RUNTIME_HOLDER


def _lossless(key: str, value: Any, task: dict[str, Any], raw_payload: Any) -> bool:
    """Whether ``key: value`` can be read back unchanged from the loki field it maps to."""
    if key == "payload":
        return isinstance(raw_payload, dict) and "loki_mode" not in raw_payload
    counterpart = _COUNTERPART.get(key)
    if counterpart is None:
        return False
    mapped = task.get(counterpart)
    if counterpart == "status":
        return bool(value == mapped)
    if counterpart in ("last_error", "title", "description") and isinstance(value, str):
        from loki.text.redact import redact

        # Mapped redacted: the secret it held is gone on purpose, not to be kept in clear beside it.
        return bool(redact(value) == mapped)
    if counterpart == "labels" and isinstance(value, list):
        from loki.text.redact import redact_obj

        return bool(redact_obj(value) == mapped)
    if value is None:
        # A null Loki Mode field means "none" (claimedBy, lastError, completedAt...): so does loki's null.
        return mapped is None or mapped == [] or (counterpart == "claimed_by" and mapped == RUNTIME_HOLDER)
    return bool(value == mapped)


def import_tasks(raws: list[Any], stamp: str, keys: frozenset[str], status: str = "pending") -> list[dict[str, Any]]:
    return [import_task(raw, stamp, keys, status) for raw in raws]


def tasks_of(doc: Any) -> list[Any] | None:
    """The task list of a foreign queue document (a bare array or ``{"tasks": [...]}``), else None."""
    if isinstance(doc, list):
        return doc
    tasks = doc.get("tasks") if isinstance(doc, dict) and "version" not in doc else None
    if isinstance(tasks, list):
        return tasks
    return None


def is_foreign_queue(doc: Any, keys: frozenset[str]) -> bool:
    """A queue document loki did not write: a bare array, or ``{"tasks": [...]}`` holding a foreign task."""
    if isinstance(doc, list):
        return True
    tasks = tasks_of(doc)
    return tasks is not None and not all(is_loki_task(t, keys) for t in tasks)


# -- the dead-letter queue ----------------------------------------------------------------------------

_ENTRY_KEYS = frozenset({"task_id", "original_queue", "failure_count", "first_failure", "last_failure",
                         "error_summary", "attempts", "recovery_strategy", "task_data"})


def empty_deadletter_metadata() -> dict[str, Any]:
    return {"last_reviewed": None, "total_abandoned": 0, "total_recovered": 0}


def is_foreign_deadletter(doc: Any, keys: frozenset[str]) -> bool:
    """A dead-letter file loki did not write: ``[]`` (run.sh's init), no ``metadata`` (its tests),
    a Loki Mode task as an entry, or an entry whose ``task_data`` is the reference's four fields."""
    if isinstance(doc, list) or (isinstance(doc, dict) and "metadata" not in doc):
        return True
    entries = doc.get("tasks") if isinstance(doc, dict) else None
    return isinstance(entries, list) and not all(
        isinstance(e, dict) and e.keys() >= _ENTRY_KEYS and is_loki_task(e.get("task_data"), keys) for e in entries)


def import_deadletter(doc: Any, stamp: str, keys: frozenset[str]) -> dict[str, Any]:
    """A dead-letter document in any shape Loki Mode writes -> loki's (the reference's) shape."""
    entries = doc if isinstance(doc, list) else doc.get("tasks", [])
    metadata = doc.get("metadata") if isinstance(doc, dict) and isinstance(doc.get("metadata"), dict) else None
    out: dict[str, Any] = {"tasks": [import_entry(e, stamp, keys) for e in entries],
                           "metadata": metadata if metadata is not None else empty_deadletter_metadata()}
    if isinstance(doc, dict) and "version" in doc:
        out = {"version": doc["version"], **out}
    return out


def import_entry(raw: dict[str, Any], stamp: str, keys: frozenset[str]) -> dict[str, Any]:
    """One dead-letter entry: the reference's entry (its ``task_data`` made a whole loki task, its
    id the entry's ``task_id``), or a Loki Mode task moved there as it is (its tests do)."""
    if "task_id" in raw and isinstance(raw.get("task_data"), dict):
        entry = dict(raw)
        data = raw["task_data"]
        if not is_loki_task(data, keys):
            entry["task_data"] = _dead_task({**data, "id": data.get("id", raw["task_id"])},
                                            _timestamp(raw.get("first_failure")) or stamp, keys)
        return entry
    task = _dead_task(raw, stamp, keys)
    when = _timestamp(raw.get("movedToDLQ")) or _timestamp(raw.get("updatedAt")) or stamp
    failures = _count(raw.get("retries")) or 0
    error = task.get("last_error") or ""
    return {
        "task_id": task["id"],
        "original_queue": "in-progress",
        "failure_count": failures,
        "first_failure": min(task["created_at"], when),
        "last_failure": when,
        "error_summary": error or f"{failures} failed attempts (Loki Mode recorded no attempt details)",
        "attempts": [],
        "recovery_strategy": "retry_with_simpler_approach",
        "task_data": task,
    }


def _dead_task(raw: dict[str, Any], stamp: str, keys: frozenset[str]) -> dict[str, Any]:
    # Imported as a state that holds no claim (a claim Loki Mode left is history: kept in loki_mode),
    # then given the status loki's own entries carry: the task failed while in progress.
    task = import_task(raw, stamp, keys, "dead-letter")
    task["status"] = "in-progress"
    return task
