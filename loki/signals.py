"""Signals: files that one agent drops in ``signals/`` and the watcher consumes.

Reference: 001 Troubleshooting, Signal Processing; DESIGN.md §4. This module is the
emitting side: a signal is validated against its type's schema, written to a temp
file and published under its type's name without ever overwriting an unconsumed
signal (a second ``HUMAN_REVIEW_NEEDED`` becomes ``HUMAN_REVIEW_NEEDED.2``).
``DRIFT_DETECTED`` is appended to its JSON-lines log under a lock instead.
"""

from __future__ import annotations

import re

from loki import jsonio, layout, signaltypes
from loki.errors import InvalidInput, SchemaViolation

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

    from loki.store import Store


SIGNAL_NAME = re.compile(r"[A-Z][A-Z0-9_]*(?:_[A-Za-z0-9][A-Za-z0-9_-]*)?")
DRIFT_LOG = f"{layout.SIGNALS_DIR}/{signaltypes.DRIFT}"


def signal_name(signal_type: str, subject: str | None = None) -> str:
    """The file name a signal is published under: ``FEATURE_READY`` + ``auth`` -> ``FEATURE_READY_auth``."""
    if subject is not None:
        if signaltypes.SUBJECT_PATTERN.fullmatch(subject) is None:
            raise InvalidInput(f"invalid subject {subject!r}: letters, digits, '_' and '-', at most 100",
                               field="subject")
        prefix = signal_type if signal_type.endswith("_") else signal_type + "_"
        if prefix not in signaltypes.SUBJECT_PREFIXES:
            raise InvalidInput(f"{signal_type} takes no subject; subjects go with "
                               f"{', '.join(p.rstrip('_') for p in signaltypes.SUBJECT_PREFIXES)}", field="subject")
        name = prefix + subject
    else:
        name = signal_type
    if len(name) > 128 or SIGNAL_NAME.fullmatch(name) is None:
        raise InvalidInput(f"invalid signal type {name!r}: UPPER_CASE letters, digits and '_' (a subject may follow "
                           "as _name)", field="type")
    for prefix in signaltypes.SUBJECT_PREFIXES:
        if name + "_" == prefix:
            raise InvalidInput(f"{name} needs a subject: {name}_<name> or --subject NAME", field="subject")
    return name


def emit(
    store: Store,
    signal_type: str,
    fields: dict[str, Any] | None = None,
    *,
    subject: str | None = None,
    task_id: str | None = None,
    severity: str | None = None,
    agent: str | None = None,
) -> dict[str, Any]:
    """Validate and publish one signal. Returns ``{"name", "type", "file", "signal"}``."""
    name = signal_name(signal_type, subject)
    signal: dict[str, Any] = {"timestamp": store.now_ts()}
    for key, value in (("task_id", task_id), ("severity", severity), ("agent", agent)):
        if value is not None:
            signal[key] = value
    if subject is not None:
        signal["subject"] = subject
    signal.update(fields or {})
    found = store.schemas.problems(signaltypes.schema_for(name), signal)
    if found:
        raise SchemaViolation(f"signal {name}", found)
    if name == signaltypes.DRIFT:
        offset = store.append_lines(DRIFT_LOG, [signal])
        return {"name": name, "type": name, "file": DRIFT_LOG, "offset": offset, "signal": signal}
    rel = store.create_unique(layout.SIGNALS_DIR, name, jsonio.dumps_document(signal), separator=".")
    return {"name": rel.rsplit("/", 1)[-1], "type": name, "file": rel, "signal": signal}
