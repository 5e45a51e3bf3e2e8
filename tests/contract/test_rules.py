"""The rule table (loki/watch/rules.py): each signal type's effect, and applying a signal twice changes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loki.clock import ManualClock
from loki.queue.escalations import escalate, list_escalations
from loki.queue.queue import Queue
from loki.signals import types as signaltypes
from loki.storage import layout
from loki.storage.store import Store
from loki.watch import rules
from tests.helpers import store_problems, tree_problems


@pytest.fixture
def store(backend_store: Store) -> Store:
    """Every test here runs on the files and on the memory store (tests/conftest.py: backend)."""
    return backend_store


NOW = "2026-01-25T10:00:00Z"


def sig(name: str, n: int = 1, **body: Any) -> rules.Signal:
    return rules.Signal(f"{name}.20260125T100000Z-{n:08x}", name, {"timestamp": NOW, **body})


def where(store: Store, task_id: str) -> tuple[str, dict[str, Any]]:
    found = Queue(store).show(task_id)
    return found["state"], found["task"]


def twice(store: Store, signal: rules.Signal) -> dict[str, Any]:
    """Apply, then apply again (a consumer retrying after a crash): the second must be a no-op."""
    first = rules.apply(store, signal)
    snapshot = {rel: store.read_bytes(rel) for rel in (*[layout.queue_file(s) for s in layout.QUEUE_STATES],
                                                       layout.DEADLETTER, layout.FRICTION_MAP)}
    second = rules.apply(store, signal)
    assert second["outcome"] in ("already_applied", "skipped", "logged", "archived"), second
    if first["outcome"] == "applied":
        assert second["outcome"] == "already_applied", second
    assert {rel: store.read_bytes(rel) for rel in snapshot} == snapshot
    return first


@pytest.fixture
def queue(store: Store) -> Queue:
    q = Queue(store)
    for task_id in ("t1", "t2", "t3"):
        q.add(f"task {task_id}", task_id=task_id)
    return q


def test_every_reference_type_has_a_rule_and_unknown_types_are_archived() -> None:
    names = {r.to_json()["signal"] for r in rules.RULES}
    for base in [*signaltypes.FIXED_TYPES, *signaltypes.SUBJECT_PREFIXES]:
        assert (base + "x" if base.endswith("_") else base) in names
    assert rules.rule_for("SOMETHING_ELSE").name == "archive"
    assert rules.rule_for("TESTS_PASSED_auth").name == "complete_task"
    assert rules.rule_for("TESTS_PASSED_").name == "archive"  # no subject: not the prefix type


# -- HUMAN_REVIEW_NEEDED -------------------------------------------------------------------------


def test_review_needed_blocks_the_task_with_a_24h_deadline_from_the_signal_time(store: Store, queue: Queue) -> None:
    queue.claim("agent-1")
    signal = sig("HUMAN_REVIEW_NEEDED", reason="security_decision", task_id="t1", timestamp="2026-01-25T09:00:00Z")
    result = twice(store, signal)
    assert result["outcome"] == "applied" and result["state_change"] == {"from": "in-progress", "to": "blocked"}
    state, task = where(store, "t1")
    assert state == "blocked" and task["claimed_by"] is None
    assert task["blocked"] == {"reason": "human review needed: security_decision", "since": NOW,
                               "deadline": "2026-01-26T09:00:00Z", "signal": "HUMAN_REVIEW_NEEDED",
                               "previous_status": "in-progress"}
    assert signal.marker in task["notes"][-1]["text"] and "agent-1" in task["notes"][-1]["text"]
    assert store_problems(store) == []


def test_review_needed_after_escalate_is_idempotent(store: Store, queue: Queue) -> None:
    escalate(store, "t1", "security_decision")
    before = where(store, "t1")[1]["blocked"]
    result = rules.apply(store, sig("HUMAN_REVIEW_NEEDED", reason="security_decision", task_id="t1",
                                    escalation="x.md"))
    assert result["outcome"] == "already_applied" and "already waits for a human until" in result["detail"]
    assert where(store, "t1")[1]["blocked"] == before


def test_review_needed_on_a_paused_task_adds_the_deadline(store: Store, queue: Queue) -> None:
    rules.apply(store, sig("BEHAVIOR_CHANGE_RISK", task_id="t1"))
    assert where(store, "t1")[1]["blocked"]["deadline"] is None
    result = twice(store, sig("HUMAN_REVIEW_NEEDED", 2, reason="r", task_id="t1"))
    assert result["outcome"] == "applied"
    assert where(store, "t1")[1]["blocked"]["deadline"] == "2026-01-26T10:00:00Z"


@pytest.mark.parametrize(("body", "expected"), [
    ({"reason": "r"}, "logged"),                                   # no task: a human is asked, nothing blocked
    ({"reason": "r", "task_id": "t1", "blocking": False}, "logged"),
    ({"reason": "r", "task_id": "nope"}, "applied"),               # unknown task: kept as an open escalation
])
def test_review_needed_without_a_task_to_block(store: Store, queue: Queue, body: dict[str, Any],
                                               expected: str) -> None:
    assert rules.apply(store, sig("HUMAN_REVIEW_NEEDED", **body))["outcome"] == expected
    assert where(store, "t1")[0] == "pending"


def test_review_needed_on_a_completed_task_is_skipped(store: Store, queue: Queue) -> None:
    task = queue.claim("a")
    queue.complete(task["id"], "a")
    result = rules.apply(store, sig("HUMAN_REVIEW_NEEDED", reason="r", task_id=task["id"]))
    assert result["outcome"] == "skipped" and "completed" in result["detail"]


# -- HUMAN_APPROVED --------------------------------------------------------------------------------


@pytest.mark.parametrize(("decision", "state"), [("approve", "pending"), ("clarify", "pending"),
                                                 ("cancel", "cancelled")])
def test_human_approved_resolves_the_blocked_task(store: Store, queue: Queue, decision: str, state: str) -> None:
    escalate(store, "t1", "security_decision")
    signal = sig("HUMAN_APPROVED", task_id="t1", decision=decision, note="use staging", approver="alice")
    result = twice(store, signal)
    assert result["outcome"] == "applied" and result["detail"] == f"{decision}: t1 -> {state}"
    found_state, task = where(store, "t1")
    assert found_state == state and "blocked" not in task
    assert "use staging" in task["notes"][-1]["text"] and signal.marker in task["notes"][-1]["text"]
    assert task["notes"][-1]["author"] == "alice"
    assert list_escalations(store, open_only=True) == []


def test_human_approved_for_a_task_not_waiting_is_skipped(store: Store, queue: Queue) -> None:
    result = rules.apply(store, sig("HUMAN_APPROVED", task_id="t1", decision="approve"))
    assert result["outcome"] == "skipped" and "not waiting" in result["detail"]
    assert rules.apply(store, sig("HUMAN_APPROVED", task_id="ghost", decision="approve"))["outcome"] == "skipped"


# -- TESTS_PASSED_x / TESTS_FAILED_x ---------------------------------------------------------------------


def test_tests_passed_completes_the_task_whoever_holds_it(store: Store, queue: Queue) -> None:
    task = queue.claim("eng-1")
    signal = sig("TESTS_PASSED_auth", task_id=task["id"], summary="42 passed", passed=42, agent="qa-1")
    result = twice(store, signal)
    assert result["outcome"] == "applied" and "held by eng-1" in result["detail"]
    state, done = where(store, task["id"])
    assert state == "completed" and done["claimed_by"] is None and done["completed_at"] == NOW
    assert done["result"] == {"signal": signal.id, "type": "TESTS_PASSED_auth", "summary": "42 passed", "passed": 42}
    assert store_problems(store) == []


def test_tests_passed_for_a_pending_task_completes_it_and_other_states_are_skipped(store: Store,
                                                                                 queue: Queue) -> None:
    assert rules.apply(store, sig("TESTS_PASSED_a", task_id="t2"))["outcome"] == "applied"
    queue.cancel("t3")
    assert rules.apply(store, sig("TESTS_PASSED_a", 2, task_id="t3"))["outcome"] == "skipped"
    assert rules.apply(store, sig("TESTS_PASSED_a", 3))["outcome"] == "logged"  # names no task


def test_tests_failed_records_an_attempt_with_backoff(store: Store, queue: Queue) -> None:
    task = queue.claim("eng-1")
    signal = sig("TESTS_FAILED_auth", task_id=task["id"], error="3 tests failed: test_login", agent="qa-1")
    result = twice(store, signal)
    assert result["outcome"] == "applied" and "retry at 2026-01-25T10:00:05Z" in result["detail"]
    state, failed = where(store, task["id"])
    assert state == "pending" and failed["available_at"] == "2026-01-25T10:00:05Z"
    assert [(a["error_type"], a["error_message"], a["agent_id"], a["approach"]) for a in failed["attempts"]] == [
        ("test_failure", "3 tests failed: test_login", "qa-1", "(reported by tests)")]


def test_tests_failed_at_max_attempts_dead_letters(store: Store, clock: ManualClock) -> None:
    queue = Queue(store)
    queue.add("flaky", task_id="f1", max_attempts=1)
    queue.claim("eng-1")
    result = twice(store, sig("TESTS_FAILED_api", task_id="f1", error="boom"))
    assert result["state_change"] == {"from": "in-progress", "to": "dead-letter"}
    assert where(store, "f1")[0] == "dead-letter"


def test_tests_failed_on_a_task_not_in_progress_is_skipped(store: Store, queue: Queue) -> None:
    result = rules.apply(store, sig("TESTS_FAILED_api", task_id="t1", error="boom"))
    assert result["outcome"] == "skipped" and "in-progress" in result["detail"]
    assert where(store, "t1")[1]["attempts"] == []


# -- healing signals ------------------------------------------------------------------------------------


def test_friction_goes_to_the_friction_map_and_is_never_unclassified(store: Store) -> None:
    body = {"friction_id": "friction-042", "location": "src/billing/invoice.py:234",
            "behavior": "Sleep 2s before committing transaction", "agent": "eng-001-healer"}
    twice(store, sig("FRICTION_DETECTED", **body, classification="unknown"))
    twice(store, sig("FRICTION_DETECTED", 2, **body, classification="intentional"))
    twice(store, sig("FRICTION_DETECTED", 3, **{**body, "agent": "other"}, classification="unknown"))
    doc = store.read(layout.FRICTION_MAP)
    [entry] = doc["frictions"]
    assert entry["classification"] == "intentional" and entry["reports"] == 3
    assert entry["agents"] == ["eng-001-healer", "other"] and len(entry["signals"]) == 3
    assert store_problems(store) == []


@pytest.mark.files("looks at or edits the files themselves")
@pytest.mark.files("looks at or edits the files themselves")
def test_institutional_knowledge_is_appended_once(store: Store) -> None:
    signal = sig("INSTITUTIONAL_KNOWLEDGE_FOUND", knowledge="Invoices close at 23:00 UTC: the batch job relies on it",
                 location="src/billing/close.py:10", agent="archaeologist")
    twice(store, signal)
    twice(store, sig("INSTITUTIONAL_KNOWLEDGE_FOUND", 2, knowledge="Second fact"))
    text = (Path(store.root) / layout.KNOWLEDGE).read_text()
    assert text.startswith("# Institutional knowledge")
    assert text.count("Invoices close at 23:00 UTC") == 1 and text.count("Second fact") == 1
    assert text.index("Invoices") < text.index(f"<!-- loki-signal {signal.id} -->") < text.index("Second fact")


@pytest.mark.files("looks at or edits the files themselves")
@pytest.mark.files("looks at or edits the files themselves")
def test_a_knowledge_section_cut_by_a_crash_is_written_again_whole(store: Store) -> None:
    signal = sig("INSTITUTIONAL_KNOWLEDGE_FOUND", knowledge="the whole fact")
    path = Path(store.root) / layout.KNOWLEDGE
    path.write_text("# Institutional knowledge\n\n## 2026 - x\n\nthe who")  # torn: no marker yet
    assert rules.apply(store, signal)["outcome"] == "applied"
    assert path.read_text().count(f"<!-- loki-signal {signal.id} -->") == 1


def test_behavior_change_risk_pauses_the_task(store: Store, queue: Queue) -> None:
    result = twice(store, sig("BEHAVIOR_CHANGE_RISK", task_id="t1", message="changes rounding"))
    assert result["outcome"] == "applied"
    state, task = where(store, "t1")
    assert state == "blocked" and task["blocked"]["deadline"] is None
    assert task["blocked"]["signal"] == "BEHAVIOR_CHANGE_RISK" and "rounding" in task["blocked"]["reason"]


@pytest.mark.files("looks at or edits the files themselves")
def test_legacy_risk_warns_unless_strict(store: Store, queue: Queue, root: Path) -> None:
    assert rules.apply(store, sig("LEGACY_COMPATIBILITY_RISK", task_id="t1"))["outcome"] == "logged"
    assert where(store, "t1")[0] == "pending"
    (root / "config" / "loki.json").write_text(json.dumps({"version": 1, "signals": {"legacy_strict_mode": True}}))
    strict = Store(root, clock=store.clock)
    assert rules.apply(strict, sig("LEGACY_COMPATIBILITY_RISK", 2, task_id="t1"))["outcome"] == "applied"
    assert where(strict, "t1")[0] == "blocked"


@pytest.mark.parametrize("name", ["FEATURE_READY_auth", "MERGE_REQUESTED_main", "DOCS_NEEDED", "BLOG_POST_QUEUED",
                                  "PLAN_APPROVED", "HEALING_PHASE_COMPLETE"])
def test_workflow_signals_are_logged(store: Store, queue: Queue, name: str) -> None:
    assert rules.apply(store, sig(name, task_id="t1"))["outcome"] == "logged"
    assert where(store, "t1")[0] == "pending"


def test_unknown_types_are_archived(store: Store) -> None:
    result = rules.apply(store, sig("DEPLOY_FINISHED", env="prod"))
    assert result == {"rule": "archive", "outcome": "archived",
                      "detail": "unknown type DEPLOY_FINISHED: logged and kept in signals/.archive/"}


# -- DRIFT_DETECTED ---------------------------------------------------------------------------------------


def drift(offset: int, task_id: str = "t1", severity: str = "medium", **body: Any) -> rules.Signal:
    return rules.Signal(f"DRIFT_DETECTED@{offset}", "DRIFT_DETECTED",
                        {"timestamp": NOW, "task_id": task_id, "severity": severity,
                         "detected_drift": f"drift at {offset}", **body})


@pytest.mark.files("looks at or edits the files themselves")
def test_first_drift_warns_second_escalates_third_consolidates(store: Store, queue: Queue, root: Path) -> None:
    state: dict[str, Any] = {}
    first = rules.apply_drift(store, drift(0), state)
    assert first["outcome"] == "logged" and "warning" in first["detail"]
    assert where(store, "t1")[0] == "pending"
    second = rules.apply_drift(store, drift(100), state)
    assert second["outcome"] == "applied" and "escalated" in second["detail"]
    blocked_state, task = where(store, "t1")
    assert blocked_state == "blocked" and task["blocked"]["deadline"] == "2026-01-26T10:00:00Z"
    assert [e["task_id"] for e in list_escalations(store)] == ["t1"]
    assert (root / "signals" / "HUMAN_REVIEW_NEEDED").exists()
    third = rules.apply_drift(store, drift(200, "t2"), state)
    assert "consolidated into CONTINUITY.md" in third["detail"]
    assert state["drift_counts"] == {"t1": 2, "t2": 1} and state["drift_total"] == 3
    assert state["drift_unconsolidated"] == [] and state["drift_consolidations"] == 1
    continuity = (root / "CONTINUITY.md").read_text()
    assert "## Drift consolidation" in continuity and continuity.count("drift at ") == 3
    assert tree_problems(root) == []


@pytest.mark.files("looks at or edits the files themselves")
def test_a_drift_applied_again_from_the_same_counters_changes_nothing(store: Store, queue: Queue,
                                                                       root: Path) -> None:
    state: dict[str, Any] = {"drift_counts": {"t1": 1}, "drift_total": 2,
                             "drift_unconsolidated": [{"id": "a", "task_id": "x", "severity": "low"},
                                                      {"id": "b", "task_id": "t1", "severity": "low"}]}
    saved = json.loads(json.dumps(state))
    rules.apply_drift(store, drift(300), state)  # 2nd on t1 (escalate) and 3rd accumulated (consolidate)
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.name.endswith(".lock")}
    again = rules.apply_drift(store, drift(300), saved)  # the consumer died before saving the counters
    assert again["outcome"] == "already_applied", again
    assert saved == state
    after = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.name.endswith(".lock")}
    assert after == before
    assert len(list_escalations(store)) == 1


@pytest.mark.parametrize("severity", ["high", "critical"])
def test_high_severity_drift_pauses_the_task(store: Store, queue: Queue, severity: str) -> None:
    queue.claim("eng-1")
    result = rules.apply_drift(store, drift(0, severity=severity), {})
    assert result["outcome"] == "applied"
    state, task = where(store, "t1")
    assert state == "blocked" and task["blocked"]["signal"] == "DRIFT_DETECTED"
    assert task["blocked"]["previous_status"] == "in-progress" and task["blocked"]["deadline"] is None


def test_drift_on_an_unknown_task_only_counts(store: Store) -> None:
    state: dict[str, Any] = {}
    rules.apply_drift(store, drift(0, "ghost"), state)
    second = rules.apply_drift(store, drift(10, "ghost"), state)
    assert "no such task" in second["detail"] and state["drift_counts"] == {"ghost": 2}


def test_the_rule_table_in_docs_signals_md_is_the_one_in_the_code() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "signals.md").read_text()
    table = text.split("| signal | rule | effect |\n|---|---|---|\n", 1)[1].split("\n\n", 1)[0]
    documented = table.splitlines()
    expected = [f"| `{r['signal']}` | {r['rule']} | {r['effect']} |" for r in rules.table()]
    assert documented == expected
