"""Signal types, their file names and their schemas (reference: Signal Processing).

A signal is a file in ``signals/`` named after its type: ``HUMAN_REVIEW_NEEDED``,
``FEATURE_READY_auth``. A second unconsumed signal of the same name is published
as ``<NAME>.2``, ``<NAME>.3``...; the type is the part before the first ``.``.
``DRIFT_DETECTED`` is the exception: an append-only JSON-lines log.
"""

from __future__ import annotations

import re

DRIFT = "DRIFT_DETECTED"
HUMAN_REVIEW_NEEDED = "HUMAN_REVIEW_NEEDED"
HUMAN_APPROVED = "HUMAN_APPROVED"

# Types whose name carries a subject: FEATURE_READY_auth, MERGE_REQUESTED_main.
SUBJECT_PREFIXES = ("FEATURE_READY_", "TESTS_PASSED_", "TESTS_FAILED_", "MERGE_REQUESTED_")

FIXED_TYPES = (
    DRIFT,
    HUMAN_REVIEW_NEEDED,
    HUMAN_APPROVED,
    "DOCS_NEEDED",
    "BLOG_POST_QUEUED",
    "PLAN_APPROVED",
    "FRICTION_DETECTED",
    "BEHAVIOR_CHANGE_RISK",
    "INSTITUTIONAL_KNOWLEDGE_FOUND",
    "HEALING_PHASE_COMPLETE",
    "LEGACY_COMPATIBILITY_RISK",
)

_SCHEMAS = {
    DRIFT: "signal-drift-detected.json",
    HUMAN_REVIEW_NEEDED: "signal-human-review-needed.json",
    HUMAN_APPROVED: "signal-human-approved.json",
    "FRICTION_DETECTED": "signal-friction-detected.json",
    "INSTITUTIONAL_KNOWLEDGE_FOUND": "signal-institutional-knowledge-found.json",
    "TESTS_PASSED_": "signal-tests-result.json",
    "TESTS_FAILED_": "signal-tests-result.json",
}
GENERIC_SCHEMA = "signal-generic.json"

TYPE_PATTERN = re.compile(r"[A-Z][A-Z0-9_]*(?:_[A-Za-z0-9-]+)?")
SUBJECT_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")


def base_type(signal_type: str) -> str:
    """``TESTS_PASSED_auth`` -> ``TESTS_PASSED_``; fixed and custom types are their own base."""
    for prefix in SUBJECT_PREFIXES:
        if signal_type.startswith(prefix) and len(signal_type) > len(prefix):
            return prefix
    return signal_type


def subject_of(signal_type: str) -> str | None:
    base = base_type(signal_type)
    return signal_type[len(base):] if base != signal_type else None


def schema_for(signal_type: str) -> str:
    return _SCHEMAS.get(base_type(signal_type), GENERIC_SCHEMA)


def type_of_file(name: str) -> str:
    """The signal type a file in ``signals/`` carries: its name up to the first ``.``."""
    return name.split(".", 1)[0]


def is_known(signal_type: str) -> bool:
    return signal_type in FIXED_TYPES or base_type(signal_type) != signal_type
