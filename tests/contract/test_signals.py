"""Emitting and inspecting signals (loki/signals/emit.py): names, schemas, never overwriting, the drift log."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from loki.errors import InvalidInput, NotFound, SchemaViolation
from loki.signals import emit as signals
from loki.signals import types as signaltypes
from loki.storage.store import Store


@pytest.fixture
def store(backend_store: Store) -> Store:
    """Every test here runs on the files and on the memory store (tests/conftest.py: backend)."""
    return backend_store


EVERY_REFERENCE_SIGNAL = [
    ("DRIFT_DETECTED", None, {"task_id": "task-042", "severity": "medium", "detected_drift": "refactoring the db",
                              "planned_action": "auth", "original_goal": "login", "drift_distance": 2}),
    ("HUMAN_REVIEW_NEEDED", None, {"reason": "security_decision", "task_id": "task-099", "blocking": True,
                                   "alternatives_considered": ["staging creds (rejected)"]}),
    ("HUMAN_APPROVED", None, {"task_id": "task-099", "decision": "approve"}),
    ("FEATURE_READY", "auth", {}),
    ("TESTS_PASSED", "auth", {"task_id": "task-1", "passed": 42}),
    ("TESTS_FAILED", "auth", {"task_id": "task-1", "error": "3 failed"}),
    ("MERGE_REQUESTED", "main", {}),
    ("DOCS_NEEDED", None, {"message": "document the auth flow"}),
    ("BLOG_POST_QUEUED", None, {}),
    ("PLAN_APPROVED", None, {}),
    ("FRICTION_DETECTED", None, {"friction_id": "friction-042", "location": "src/billing/invoice.py:234",
                                 "behavior": "Sleep 2s before committing", "classification": "unknown"}),
    ("BEHAVIOR_CHANGE_RISK", None, {}),
    ("INSTITUTIONAL_KNOWLEDGE_FOUND", None, {"knowledge": "invoices close at 23:00 UTC"}),
    ("HEALING_PHASE_COMPLETE", None, {}),
    ("LEGACY_COMPATIBILITY_RISK", None, {}),
]


@pytest.mark.files("looks at or edits the files themselves")
@pytest.mark.files("looks at or edits the files themselves")
@pytest.mark.parametrize(("signal_type", "subject", "fields"), EVERY_REFERENCE_SIGNAL)
def test_every_reference_signal_is_emitted_valid(store: Store, signal_type: str, subject: str | None,
                                                 fields: dict[str, object]) -> None:
    result = signals.emit(store, signal_type, fields, subject=subject)
    expected_name = signal_type + (f"_{subject}" if subject else "")
    assert result["type"] == expected_name
    if signal_type == "DRIFT_DETECTED":
        line = (Path(store.root) / "signals" / "DRIFT_DETECTED").read_text().splitlines()[-1]
        assert json.loads(line) == result["signal"]
    else:
        on_disk = json.loads((Path(store.root) / result["file"]).read_text())
        assert on_disk == result["signal"]
        assert on_disk["timestamp"] == "2026-01-25T10:00:00Z"
    assert store.schemas.problems(signaltypes.schema_for(expected_name), result["signal"]) == []


@pytest.mark.parametrize(("signal_type", "fields", "pointer"), [
    ("DRIFT_DETECTED", {"task_id": "t1", "severity": "medium"}, "/"),           # detected_drift missing
    ("DRIFT_DETECTED", {"task_id": "t1", "severity": "urgent", "detected_drift": "x"}, "/severity"),
    ("HUMAN_REVIEW_NEEDED", {"task_id": "t1"}, "/"),                              # reason missing
    ("HUMAN_APPROVED", {"task_id": "t1", "decision": "maybe"}, "/decision"),
    ("FRICTION_DETECTED", {"friction_id": "f1", "location": "a.py:1"}, "/"),    # behavior missing
    ("TESTS_PASSED_auth", {"passed": -1}, "/passed"),
    ("DOCS_NEEDED", {"task_id": "../etc"}, "/task_id"),
])
def test_a_signal_that_breaks_its_schema_is_refused_and_nothing_is_written(
        store: Store, signal_type: str, fields: dict[str, object], pointer: str) -> None:
    with pytest.raises(SchemaViolation) as caught:
        signals.emit(store, signal_type, fields)
    assert caught.value.details["pointer"] in (pointer, "")
    assert store.list("signals") == []


@pytest.mark.files("looks at or edits the files themselves")
@pytest.mark.files("looks at or edits the files themselves")
def test_a_second_unconsumed_signal_of_the_same_name_never_overwrites_the_first(store: Store) -> None:
    names = [signals.emit(store, "HUMAN_REVIEW_NEEDED", {"reason": f"r{n}"})["name"] for n in range(3)]
    assert names == ["HUMAN_REVIEW_NEEDED", "HUMAN_REVIEW_NEEDED.2", "HUMAN_REVIEW_NEEDED.3"]
    directory = Path(store.root) / "signals"
    assert [json.loads((directory / n).read_text())["reason"] for n in names] == ["r0", "r1", "r2"]
    assert signaltypes.type_of_file(names[2]) == "HUMAN_REVIEW_NEEDED"
    # Consumed (deleted): the plain name is free again.
    (directory / "HUMAN_REVIEW_NEEDED").unlink()
    assert signals.emit(store, "HUMAN_REVIEW_NEEDED", {"reason": "r3"})["name"] == "HUMAN_REVIEW_NEEDED"


@pytest.mark.files("looks at or edits the files themselves")
@pytest.mark.files("looks at or edits the files themselves")
def test_emit_leaves_no_temp_file_behind(store: Store) -> None:
    signals.emit(store, "DOCS_NEEDED")
    assert os.listdir(Path(store.root) / "signals") == ["DOCS_NEEDED"]


@pytest.mark.files("looks at or edits the files themselves")
@pytest.mark.files("looks at or edits the files themselves")
def test_drift_is_appended_as_one_line_per_signal_under_a_lock(store: Store) -> None:
    first = signals.emit(store, "DRIFT_DETECTED", {"detected_drift": "a"}, task_id="t1", severity="low")
    second = signals.emit(store, "DRIFT_DETECTED", {"detected_drift": "b"}, task_id="t1", severity="low")
    log = (Path(store.root) / "signals" / "DRIFT_DETECTED").read_bytes()
    assert first["offset"] == 0 and second["offset"] == log.index(b"\n") + 1
    assert [json.loads(line)["detected_drift"] for line in log.splitlines()] == ["a", "b"]
    assert (Path(store.root) / "signals" / "DRIFT_DETECTED.lock").exists()


@pytest.mark.parametrize(("signal_type", "subject", "message"), [
    ("hello", None, "invalid signal type"),
    ("TESTS_PASSED", None, "needs a subject"),
    ("DOCS_NEEDED", "auth", "takes no subject"),
    ("FEATURE_READY", "../x", "invalid subject"),
    ("A" * 129, None, "invalid signal type"),
    ("X.2", None, "invalid signal type"),
])
def test_bad_names_are_refused(store: Store, signal_type: str, subject: str | None, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        signals.emit(store, signal_type, subject=subject)


def test_custom_types_use_the_generic_schema(store: Store) -> None:
    result = signals.emit(store, "DEPLOY_FINISHED", {"env": "staging"}, severity="low", agent="ops")
    assert result["name"] == "DEPLOY_FINISHED"
    assert signaltypes.schema_for("DEPLOY_FINISHED") == signaltypes.GENERIC_SCHEMA
    assert not signaltypes.is_known("DEPLOY_FINISHED") and signaltypes.is_known("TESTS_PASSED_api")


def test_key_value_fields_are_strings_and_colon_equals_is_json() -> None:
    assert signals.parse_assignments(["note=42", "passed:=42", "blocking:=false", "tags:=[\"a\"]", "eq=a=b"]) == {
        "note": "42", "passed": 42, "blocking": False, "tags": ["a"], "eq": "a=b"}
    for bad in (["novalue"], ["=x"], [":=1"], ["a:=nope"], ["a b=1"], ["a=1", "a=2"]):
        with pytest.raises(InvalidInput):
            signals.parse_assignments(bad)


def test_data_and_fields_merge_but_never_silently_override() -> None:
    assert signals.fields_from('{"a": 1}', ["b=2"]) == {"a": 1, "b": "2"}
    with pytest.raises(InvalidInput, match="both"):
        signals.fields_from('{"a": 1}', ["a=2"])
    with pytest.raises(InvalidInput, match="JSON object"):
        signals.fields_from("[1]", [])
    with pytest.raises(InvalidInput, match="--data"):
        signals.fields_from("{nope", [])


@pytest.mark.files("looks at or edits the files themselves")
@pytest.mark.files("looks at or edits the files themselves")
def test_list_shows_waiting_processing_and_quarantined_oldest_first(store: Store) -> None:
    root = Path(store.root)
    signals.emit(store, "DOCS_NEEDED")
    signals.emit(store, "FEATURE_READY_auth")
    os.utime(root / "signals" / "FEATURE_READY_auth", (1, 1))
    (root / "signals" / ".processing").mkdir()
    (root / "signals" / ".processing" / "PLAN_APPROVED.20260125T100000Z-0000abcd").write_text("{}")
    (root / "signals" / ".quarantine").mkdir()
    (root / "signals" / ".quarantine" / "BAD.20260125T100000Z-0000abcd").write_text("{")
    signals.emit(store, "DRIFT_DETECTED", {"detected_drift": "x"}, task_id="t1", severity="low")
    listing = signals.list_signals(store)
    assert [(r["place"], r["name"]) for r in listing["signals"]] == [
        ("waiting", "FEATURE_READY_auth"), ("waiting", "DOCS_NEEDED"), ("processing", "PLAN_APPROVED"),
        ("quarantined", "BAD")]
    assert listing["drift"]["pending_bytes"] == listing["drift"]["bytes"] > 0


def test_show_finds_a_waiting_signal_and_refuses_paths(store: Store) -> None:
    signals.emit(store, "DOCS_NEEDED", {"message": "hi"})
    shown = signals.show(store, "DOCS_NEEDED")
    assert shown["place"] == "waiting" and shown["signal"]["message"] == "hi" and shown["outcomes"] == []
    with pytest.raises(NotFound):
        signals.show(store, "NOPE")
    for bad in ("../x", ".processing", "a/b"):
        with pytest.raises(InvalidInput):
            signals.show(store, bad)
