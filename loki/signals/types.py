"""Signal types, their file names and their schemas (reference: Signal Processing).

A signal is a file in ``signals/`` named after its type: ``HUMAN_REVIEW_NEEDED``,
``FEATURE_READY_auth``. A second unconsumed signal of the same name is published
as ``<NAME>.2``, ``<NAME>.3``...; the type is the part before the first ``.``.
``DRIFT_DETECTED`` is the exception: an append-only JSON-lines log.

This module is on the path of ``loki signal emit`` (run by agents constantly): it
imports nothing but ``re``.
"""

from __future__ import annotations

import re

DRIFT = "DRIFT_DETECTED"
HUMAN_REVIEW_NEEDED = "HUMAN_REVIEW_NEEDED"
HUMAN_APPROVED = "HUMAN_APPROVED"
FRICTION = "FRICTION_DETECTED"
KNOWLEDGE = "INSTITUTIONAL_KNOWLEDGE_FOUND"
BEHAVIOR_CHANGE_RISK = "BEHAVIOR_CHANGE_RISK"
LEGACY_RISK = "LEGACY_COMPATIBILITY_RISK"
TESTS_PASSED = "TESTS_PASSED_"
TESTS_FAILED = "TESTS_FAILED_"

# Types whose name carries a subject: FEATURE_READY_auth, MERGE_REQUESTED_main.
SUBJECT_PREFIXES = ("FEATURE_READY_", TESTS_PASSED, TESTS_FAILED, "MERGE_REQUESTED_")

FIXED_TYPES = (
    DRIFT,
    HUMAN_REVIEW_NEEDED,
    HUMAN_APPROVED,
    "DOCS_NEEDED",
    "BLOG_POST_QUEUED",
    "PLAN_APPROVED",
    FRICTION,
    BEHAVIOR_CHANGE_RISK,
    KNOWLEDGE,
    "HEALING_PHASE_COMPLETE",
    LEGACY_RISK,
)

# What each reference signal is for (the reference's "Purpose" column), for `loki signal types`.
PURPOSES = {
    DRIFT: "agent actions diverge from the task's goal (append-only log)",
    HUMAN_REVIEW_NEEDED: "escalate to a human when autonomous action is inappropriate",
    HUMAN_APPROVED: "a human's decision on a task waiting for one",
    "FEATURE_READY_": "feature ready for testing",
    TESTS_PASSED: "tests green for a feature",
    TESTS_FAILED: "tests failed for a feature",
    "MERGE_REQUESTED_": "request a merge to main",
    "DOCS_NEEDED": "documentation required",
    "BLOG_POST_QUEUED": "significant change for the blog",
    "PLAN_APPROVED": "a human approved the plan (plan-first mode)",
    FRICTION: "new friction point found during archaeology",
    BEHAVIOR_CHANGE_RISK: "a code change may alter legacy behaviour",
    KNOWLEDGE: "tribal knowledge extracted from code",
    "HEALING_PHASE_COMPLETE": "a component completed a healing phase",
    LEGACY_RISK: "breaking change to a legacy API detected",
}

_SCHEMAS = {
    DRIFT: "signal-drift-detected.json",
    HUMAN_REVIEW_NEEDED: "signal-human-review-needed.json",
    HUMAN_APPROVED: "signal-human-approved.json",
    FRICTION: "signal-friction-detected.json",
    KNOWLEDGE: "signal-institutional-knowledge-found.json",
    TESTS_PASSED: "signal-tests-result.json",
    TESTS_FAILED: "signal-tests-result.json",
}
GENERIC_SCHEMA = "signal-generic.json"

TYPE_PATTERN = re.compile(r"[A-Z][A-Z0-9_]*(?:_[A-Za-z0-9-]+)?")
SUBJECT_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
# A published name: the type, optionally a subject (FEATURE_READY_auth), at most 128 characters.
SIGNAL_NAME = re.compile(r"[A-Z][A-Z0-9_]*(?:_[A-Za-z0-9][A-Za-z0-9_-]*)?")
MAX_NAME_LENGTH = 128


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


def is_signal_name(name: str) -> bool:
    """Whether ``name`` (a type, with its subject if any) can be published as a signal."""
    return len(name) <= MAX_NAME_LENGTH and SIGNAL_NAME.fullmatch(name) is not None


def is_known(signal_type: str) -> bool:
    return signal_type in FIXED_TYPES or base_type(signal_type) != signal_type


def left_for_others(name: str, patterns: list[str] | tuple[str, ...]) -> bool:
    """Whether the signal file ``name`` is one another tool waits for (``signals.leave_for_others``).

    Its type (the name up to the first ``.``: ``MERGE_REQUESTED_auth.ack`` -> ``MERGE_REQUESTED_auth``)
    equals a pattern, or starts with a pattern ending in ``*`` without it (``SPAWN_QUEUED_*``).
    """
    signal_type = type_of_file(name)
    for pattern in patterns:
        if pattern.endswith("*"):
            if signal_type.startswith(pattern[:-1]):
                return True
        elif signal_type == pattern:
            return True
    return False


def text_of(data: bytes) -> str | None:
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
