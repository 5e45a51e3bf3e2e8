"""Signal types, their file names and their schemas (reference: Signal Processing).

A signal is a file in ``signals/`` named after its type: ``HUMAN_REVIEW_NEEDED``,
``FEATURE_READY_auth``. A second unconsumed signal of the same name is published
as ``<NAME>.2``, ``<NAME>.3``...; the type is the part before the first ``.``.
``DRIFT_DETECTED`` is the exception: an append-only JSON-lines log.

This module is on the path of ``loki signal emit`` (run by agents constantly): it
imports nothing but ``re`` and storage/layout.py (which imports nothing at its top).
"""

from __future__ import annotations

import re

# What a signal *file* is (its type from its name, its schema, plain text, another tool's) is the file
# format's, so storage's checks can ask it without importing this module (docs/design.md, "Layers"):
# it lives in storage/layout.py, and the names stay here for the bus and its callers.
from loki.storage import layout

SUBJECT_PREFIXES = layout.SIGNAL_SUBJECT_PREFIXES
"""Types whose name carries a subject: FEATURE_READY_auth, MERGE_REQUESTED_main."""
GENERIC_SCHEMA = layout.GENERIC_SIGNAL_SCHEMA
base_type = layout.signal_base_type
schema_for = layout.signal_schema_for
type_of_file = layout.signal_type_of_file
left_for_others = layout.signal_left_for_others
text_of = layout.signal_text_of

DRIFT = "DRIFT_DETECTED"
HUMAN_REVIEW_NEEDED = "HUMAN_REVIEW_NEEDED"
HUMAN_APPROVED = "HUMAN_APPROVED"
FRICTION = "FRICTION_DETECTED"
KNOWLEDGE = "INSTITUTIONAL_KNOWLEDGE_FOUND"
BEHAVIOR_CHANGE_RISK = "BEHAVIOR_CHANGE_RISK"
LEGACY_RISK = "LEGACY_COMPATIBILITY_RISK"
TESTS_PASSED = "TESTS_PASSED_"
TESTS_FAILED = "TESTS_FAILED_"


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

TYPE_PATTERN = re.compile(r"[A-Z][A-Z0-9_]*(?:_[A-Za-z0-9-]+)?")
SUBJECT_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
# A published name: the type, optionally a subject (FEATURE_READY_auth), at most 128 characters.
SIGNAL_NAME = re.compile(r"[A-Z][A-Z0-9_]*(?:_[A-Za-z0-9][A-Za-z0-9_-]*)?")
MAX_NAME_LENGTH = 128


def subject_of(signal_type: str) -> str | None:
    base = base_type(signal_type)
    return signal_type[len(base):] if base != signal_type else None


def is_signal_name(name: str) -> bool:
    """Whether ``name`` (a type, with its subject if any) can be published as a signal."""
    return len(name) <= MAX_NAME_LENGTH and SIGNAL_NAME.fullmatch(name) is not None


def is_known(signal_type: str) -> bool:
    return signal_type in FIXED_TYPES or base_type(signal_type) != signal_type
