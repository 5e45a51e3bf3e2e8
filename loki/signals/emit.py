"""Signals: files that one agent drops in ``signals/`` and the watcher consumes.

Reference: 001 Troubleshooting, Signal Processing; docs/design.md §4. This module is the
emitting and inspecting side: a signal is validated against its type's schema, written
to a temp file and published under its type's name without ever overwriting an
unconsumed signal (a second ``HUMAN_REVIEW_NEEDED`` becomes ``HUMAN_REVIEW_NEEDED.2``).
``DRIFT_DETECTED`` is appended to its JSON-lines log under a lock instead.

Consumption (claim, apply, log, delete) is :mod:`loki.watch.consumer`; the rules are
:mod:`loki.watch.rules`. ``loki signal emit`` runs on this module alone, so it imports neither
typing nor anything heavy.

Where signals live::

    signals/NAME[.n]           waiting to be consumed
    signals/DRIFT_DETECTED     the drift log (JSON lines; the watcher keeps its offset)
    signals/.processing/ID     claimed by the consumer (ID = NAME[.n].<stamp>-<hex>, unique)
    signals/.quarantine/ID     malformed files, with the reason in logs/signals.jsonl
    signals/.archive/ID        signals of unknown types: logged and kept
"""

from __future__ import annotations

import time

from loki.errors import InvalidArgument, InvalidFields, LokiError, NotFound
from loki.signals import types as signaltypes
from loki.storage import jsonio, layout

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from loki.storage.state import StateStore as Store


SIGNAL_NAME = signaltypes.SIGNAL_NAME
DRIFT_LOG = f"{layout.SIGNALS_DIR}/{signaltypes.DRIFT}"
PROCESSING_DIR = f"{layout.SIGNALS_DIR}/.processing"
QUARANTINE_DIR = f"{layout.SIGNALS_DIR}/.quarantine"
ARCHIVE_DIR = f"{layout.SIGNALS_DIR}/.archive"
PLACES = {"waiting": layout.SIGNALS_DIR, "processing": PROCESSING_DIR, "quarantined": QUARANTINE_DIR,
          "archived": ARCHIVE_DIR}
_DRIFT_FILES = (signaltypes.DRIFT, signaltypes.DRIFT + ".lock")
MAX_SIGNAL_BYTES = 1 << 20
"""A signal file larger than this is quarantined unread (signals are small JSON objects)."""


def signal_name(signal_type: str, subject: str | None = None) -> str:
    """The file name a signal is published under: ``FEATURE_READY`` + ``auth`` -> ``FEATURE_READY_auth``."""
    if subject is not None:
        if signaltypes.SUBJECT_PATTERN.fullmatch(subject) is None:
            raise InvalidArgument(f"invalid subject {subject!r}: letters, digits, '_' and '-', at most 100",
                                  field="subject")
        prefix = signal_type if signal_type.endswith("_") else signal_type + "_"
        if prefix not in signaltypes.SUBJECT_PREFIXES:
            raise InvalidArgument(f"{signal_type} takes no subject; subjects go with "
                                  f"{', '.join(p.rstrip('_') for p in signaltypes.SUBJECT_PREFIXES)}", field="subject")
        name = prefix + subject
    else:
        name = signal_type
    if not signaltypes.is_signal_name(name):
        raise InvalidArgument(f"invalid signal type {name!r}: UPPER_CASE letters, digits and '_' (a subject may follow "
                              "as _name)", field="type")
    for prefix in signaltypes.SUBJECT_PREFIXES:
        if name + "_" == prefix:
            raise InvalidArgument(f"{name} needs a subject: {name}_<name> or --subject NAME", field="subject")
    return name


def parse_assignments(items: Iterable[str]) -> dict[str, Any]:
    """``key=value`` (a string) and ``key:=JSON`` (any JSON value), as httpie spells them.

    ``passed:=42`` is the number 42, ``blocking:=false`` a boolean, ``note=42`` the string "42":
    the spelling says the type, so a value is never guessed.
    """
    fields: dict[str, Any] = {}
    for item in items:
        equals = item.find("=")
        if equals <= 0 or (equals == 1 and item[0] == ":"):
            raise InvalidArgument(f"{item!r}: expected key=value (a string) or key:=JSON", field="fields")
        if item[equals - 1] == ":":
            key, raw = item[: equals - 1], item[equals + 1:]
            try:
                value: Any = jsonio.loads_strict(raw, max_depth=jsonio.INPUT_DEPTH)
            except jsonio.JsonError as exc:
                raise InvalidArgument(f"{key}:= {exc.reason}", field=key) from None
        else:
            key, value = item[:equals], item[equals + 1:]
        if not key.isidentifier():
            raise InvalidArgument(f"{item!r}: field names are letters, digits and '_'", field="fields")
        if key in fields:
            raise InvalidArgument(f"field {key!r} given twice", field=key)
        fields[key] = value
    return fields


def fields_from(data: str | None, assignments: Iterable[str]) -> dict[str, Any]:
    """The fields of ``loki signal emit``: ``--data`` (a JSON object), then ``key=value`` items."""
    fields: dict[str, Any] = {}
    if data is not None:
        try:
            parsed = jsonio.loads_strict(data, max_depth=jsonio.INPUT_DEPTH)
        except jsonio.JsonError as exc:
            raise InvalidArgument(f"--data: {exc.reason}", field="data") from None
        if not isinstance(parsed, dict):
            raise InvalidArgument(f"--data: expected a JSON object, got {type(parsed).__name__}", field="data")
        fields.update(parsed)
    for key, value in parse_assignments(assignments).items():
        if key in fields:
            raise InvalidArgument(f"field {key!r} is both in --data and given as {key}=...", field=key)
        fields[key] = value
    return fields


def build(
    store: Store,
    signal_type: str,
    fields: dict[str, Any] | None = None,
    *,
    subject: str | None = None,
    task_id: str | None = None,
    severity: str | None = None,
    agent: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """``(name, signal)``: the published name and the validated document (nothing is written).

    The fields are redacted (:func:`loki.text.redact.redact_obj`): a reason or context quoting a command or
    an error must not carry its secrets into ``signals/``, the outcome log or the effects.
    """
    from loki.text.redact import redact_obj

    fields = redact_obj(fields) if fields else fields
    name = signal_name(signal_type, subject)
    if agent is not None:
        from loki.text.textsafe import check_name

        check_name(agent, "agent name")
    signal: dict[str, Any] = {"timestamp": store.now_ts()}
    for key, value in (("task_id", task_id), ("severity", severity), ("agent", agent)):
        if value is not None:
            signal[key] = value
    if subject is not None:
        signal["subject"] = subject
    signal.update(fields or {})
    found = store.schemas.problems(signaltypes.schema_for(name), signal)
    if found:
        error = InvalidFields(f"signal {name}", found)
        error.message += f" (`loki signal fields {name}` lists the fields it takes)"
        raise error
    return name, signal


def emit(
    store: Store,
    signal_type: str,
    fields: dict[str, Any] | None = None,
    *,
    subject: str | None = None,
    task_id: str | None = None,
    severity: str | None = None,
    agent: str | None = None,
    known_task: bool = False,
) -> dict[str, Any]:
    """Validate and publish one signal. Returns ``{"name", "type", "file", "path", "signal"}``: ``file`` is its key
    in the store (``signals/NAME``), ``path`` the file under ``.loki/`` that holds it on a file tree and None on a
    database tree, where no file does (say ``loki signal show NAME`` instead: issue 23).

    ``known_task``: refuse a ``task_id`` that names no task (:class:`~loki.errors.NotFound`, exit 1, nothing
    published), as ``loki approve`` does; ``loki signal emit`` asks for it. loki's own emitters name tasks
    they just read.
    """
    name, signal = build(store, signal_type, fields, subject=subject, task_id=task_id, severity=severity,
                         agent=agent)
    named = signal.get("task_id")
    if known_task and isinstance(named, str) and not task_exists(store, named):
        raise NotFound(f"no task {named!r}: a signal about a task must name one that exists (`loki queue list "
                       "--state all`); nothing was emitted", task_id=named)
    on_files = store.backend == "files"
    if name == signaltypes.DRIFT:
        offset = store.append_lines(DRIFT_LOG, [signal])
        return {"name": name, "type": name, "file": DRIFT_LOG, "path": DRIFT_LOG if on_files else None,
                "offset": offset, "signal": signal}
    # Signals are consumed oldest first by mtime, and two emitted within one clock tick would tie
    # (then HUMAN_APPROVED could be applied before the HUMAN_REVIEW_NEEDED it answers).
    rel = store.create_unique(layout.SIGNALS_DIR, name, jsonio.dumps_document(signal), separator=".",
                              mtime_ns=time.time_ns())
    return {"name": rel.rsplit("/", 1)[-1], "type": name, "file": rel, "path": rel if on_files else None,
            "signal": signal}


def task_exists(store: Store, task_id: str) -> bool:
    """Whether any state holds ``task_id``: the queue files, dead-letter, abandoned or the archive."""
    tasks = store.tasks()
    view = tasks.view([*layout.QUEUE_STATES, "dead-letter", "abandoned"])
    for state, records in view.items():
        key = "task_id" if state in ("dead-letter", "abandoned") else "id"
        if any(record.get(key) == task_id for record in records):
            return True
    return tasks.find_archived(task_id) is not None


_OPTION_FIELDS = {"task_id": "--task", "severity": "--severity", "agent": "--agent", "subject": "--subject"}
"""Fields ``loki signal emit`` sets from an option rather than ``key=value``."""


def fields(store: Store, signal_type: str) -> dict[str, Any]:
    """The fields a signal of ``signal_type`` takes, from its schema: ``{"type", "schema", "fields": [{"name",
    "required", "type", "enum", "option", "set_by_loki"}]}`` in the schema's order, required ones first.

    ``option`` names the ``signal emit`` option that sets it (``--task`` for ``task_id``), ``set_by_loki``
    marks the timestamp loki writes itself. Raises :class:`~loki.errors.InvalidArgument` for a type that
    cannot be a signal's.
    """
    name = signal_name(signal_type)
    schema_name = signaltypes.schema_for(name)
    schema = store.schemas.raw(schema_name)
    required = list(schema.get("required", []))
    rows = []
    for key, spec in schema.get("properties", {}).items():
        spec = _resolve(store, spec)
        rows.append({"name": key, "required": key in required, "type": _type_text(spec),
                     "enum": spec.get("enum"), "option": _OPTION_FIELDS.get(key),
                     "set_by_loki": key == "timestamp"})
    rows.sort(key=lambda row: not row["required"])
    return {"type": name, "schema": schema_name, "known": signaltypes.is_known(name),
            "open": schema.get("additionalProperties", True) is not False, "fields": rows}


def _resolve(store: Store, spec: dict[str, Any]) -> dict[str, Any]:
    """A property's schema with a ``$ref`` into common.json followed (the definitions it shares)."""
    ref = spec.get("$ref")
    if isinstance(ref, str) and "#/$defs/" in ref:
        document, _, definition = ref.partition("#/$defs/")
        resolved = store.schemas.raw(document).get("$defs", {}).get(definition)
        if isinstance(resolved, dict):
            return {**resolved, **{k: v for k, v in spec.items() if k != "$ref"}}
    return spec


def _type_text(spec: dict[str, Any]) -> str:
    if "enum" in spec:
        return "one of " + ", ".join(str(v) for v in spec["enum"])
    kind = spec.get("type", "any")
    text = " or ".join(kind) if isinstance(kind, list) else str(kind)
    return {"string": "text"}.get(text, text)


# -- inspecting ------------------------------------------------------------------------------------


def is_signal_entry(name: str) -> bool:
    """Whether a directory entry of ``signals/`` is a signal waiting to be consumed.

    Hidden names are loki's (temp files, ``.processing/``...); the drift log is followed by
    offset, not consumed, and its lock file is permanent. Any other ``DRIFT_DETECTED.x`` file
    is consumed -- and quarantined: drift is only ever a line in the log.
    """
    return not name.startswith(".") and name not in _DRIFT_FILES


def original_name(entry_id: str) -> str:
    """``HUMAN_REVIEW_NEEDED.2.20260125T100000Z-1a2b3c4d`` -> ``HUMAN_REVIEW_NEEDED.2``."""
    return entry_id.rsplit(".", 1)[0] if "." in entry_id else entry_id


def entries(store: Store, place: str = "waiting") -> list[dict[str, Any]]:
    """The files in one place (waiting, processing, quarantined, archived), oldest first."""
    rows = []
    for item in store.scan(PLACES[place]):
        if place == "waiting" and not is_signal_entry(item["name"]):
            continue
        if place != "waiting" and item["name"].startswith("."):
            continue
        name = item["name"] if place == "waiting" else original_name(item["name"])
        rows.append({"id": item["name"], "name": name, "type": signaltypes.type_of_file(name), "place": place,
                     "kind": item["kind"], "bytes": item["bytes"], "mtime_ns": item["mtime_ns"]})
    rows.sort(key=lambda r: (r["mtime_ns"], r["id"]))
    return rows


def drift_backlog(store: Store) -> dict[str, Any]:
    """Size of the drift log and how much of it the watcher has applied."""
    size = store.log_size(DRIFT_LOG)
    pending = store.log_bytes_after(DRIFT_LOG, store.read(layout.WATCH_STATE).get("drift_offset"))
    return {"file": DRIFT_LOG, "bytes": size, "applied_bytes": size - pending, "pending_bytes": pending}


def list_signals(store: Store, *, places: Iterable[str] = ("waiting", "processing", "quarantined")) -> dict[str, Any]:
    rows = [row for place in places for row in entries(store, place)]
    return {"total": len(rows), "signals": rows, "drift": drift_backlog(store)}


def show(store: Store, name: str) -> dict[str, Any]:
    """A signal wherever it is (waiting, processing, quarantined, archived) and its logged outcomes.

    ``name`` is a file name (``HUMAN_REVIEW_NEEDED.2``) or an id from the outcome log.
    """
    from loki.signals import outcomes

    if not name or "/" in name or name.startswith(".") or "\x00" in name:
        raise InvalidArgument(f"invalid signal name {name!r}", field="name")
    found: dict[str, Any] | None = None
    for place, rel_dir in PLACES.items():
        rel = f"{rel_dir}/{name}"
        item = store.entry(rel)
        if item is None:
            continue
        found = {"id": name, "name": name if place == "waiting" else original_name(name), "place": place, "file": rel}
        if item["kind"] == "file" and item["bytes"] <= MAX_SIGNAL_BYTES:
            try:
                found["signal"] = jsonio.loads_strict(store.read_bytes(rel) or b"")
            except jsonio.JsonError as exc:  # shown, not raised: this is an inspection
                found["error"] = exc.reason
            except LokiError as exc:
                found["error"] = exc.message
        else:
            found["error"] = "not a regular file" if item["kind"] != "file" else "too large to show"
        break
    logged = [r for r in outcomes.tail(store) if name in (r.get("id"), r.get("name"))]
    if found is None and not logged:
        raise NotFound(f"no signal {name!r} waiting, in processing, quarantined, archived or in the recent log",
                       name=name)
    result = found or {"id": logged[-1].get("id"), "name": logged[-1].get("name"), "place": "consumed"}
    result["outcomes"] = logged
    if "signal" not in result and logged and isinstance(logged[-1].get("signal"), dict):
        result["signal"] = logged[-1]["signal"]
    result["type"] = signaltypes.type_of_file(str(result.get("name") or name))
    return result
