"""The dead-letter queue, its session-start review, escalations and human decisions."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loki.clock import ManualClock
from loki.errors import InvalidInput, NotFound, StateFileError
from loki.queue.deadletter import DeadLetter
from loki.queue.escalations import escalate, list_escalations, render, resolve
from loki.queue.queue import Queue
from loki.storage import layout
from loki.storage.store import Store
from tests.helpers import cli, loki_proc, snapshot_bytes, state_snapshot, store_problems, tasks_in, tree_problems


@pytest.fixture
def store(backend_store: Store) -> Store:
    """Every test here runs on the files and on the memory store (tests/conftest.py: backend)."""
    return backend_store


def dead_letter(store: Store, clock: ManualClock, task_id: str, *, errors: list[str], approaches: list[str],
                error_types: list[str] | None = None, **add: Any) -> dict[str, Any]:
    """Drive a task through len(errors) failures into the dead-letter queue, the real way."""
    queue = Queue(store)
    queue.add(add.pop("title", task_id), task_id=task_id, max_attempts=len(errors), **add)
    types = error_types or ["test_failure"] * len(errors)
    for error, approach, error_type in zip(errors, approaches, types, strict=True):
        clock.advance(300)
        queue.claim("agent", types=[queue.show(task_id)["task"]["type"]])
        outcome = queue.fail(task_id, "agent", error=error, approach=approach, error_type=error_type)
    assert outcome["state"] == "dead-letter"
    return DeadLetter(store).show(task_id)


def entries(store: Store) -> list[str]:
    return [e["task_id"] for e in store.tasks().dead_letter_doc()["tasks"]]


def abandoned(store: Store) -> dict[str, dict[str, Any]]:
    return {e["task_id"]: e for e in tasks_in(store, "abandoned")}


# -- cadence ------------------------------------------------------------------------------------


def test_second_review_within_24h_changes_nothing_and_force_reviews(store: Store, clock: ManualClock) -> None:
    dead_letter(store, clock, "t1", errors=["boom"], approaches=["a"])
    first = DeadLetter(store).review()
    assert first["skipped"] is False and first["entries"] == 1
    before = state_snapshot(store)
    clock.advance(23 * 3600)
    second = DeadLetter(store).review()
    assert second["skipped"] is True and second["decisions"] == []
    assert state_snapshot(store) == before
    forced = DeadLetter(store).review(force=True)
    assert forced["skipped"] is False
    assert store.tasks().dead_letter_doc()["metadata"]["last_reviewed"] == forced["reviewed_at"]
    clock.advance(24 * 3600)
    assert DeadLetter(store).review()["skipped"] is False


def test_review_interval_is_configurable(make_store: Callable[..., Store], clock: ManualClock) -> None:
    fresh = make_store({"version": 1, "deadletter": {"review_interval_hours": 1}})
    DeadLetter(fresh).review()
    clock.advance(3601)
    assert DeadLetter(fresh).review()["skipped"] is False


# -- retry conditions -------------------------------------------------------------------------------


def test_retry_when_a_dependency_completed_since_the_failure(store: Store, clock: ManualClock) -> None:
    queue = Queue(store)
    queue.add("schema migration", task_id="dep", type="db")
    queue.add("feature", task_id="t1", max_attempts=1, type="eng")
    queue.claim("a", types=["eng"])
    outcome = queue.fail("t1", "a", error="table users has no column email", error_type="dependency",
                         depends_on=["dep"])
    assert outcome["state"] == "dead-letter"
    entry = DeadLetter(store).show("t1")
    assert entry["recovery_strategy"] == "dependency_blocked" and entry["task_data"]["dependencies"] == ["dep"]
    assert DeadLetter(store).review()["decisions"][0]["action"] == "leave"  # dep not done yet
    clock.advance(60)
    queue.complete(queue.claim("a", types=["db"])["id"], "a")
    clock.advance(60)
    result = DeadLetter(store).review(force=True)
    assert result["decisions"] == [{"task_id": "t1", "action": "retry", "reason": "dependency now completed: dep",
                                    "strategy": "dependency_resolved"}]
    shown = queue.show("t1")
    assert shown["state"] == "pending" and shown["task"]["recovery_strategy"] == "dependency_resolved"
    assert len(shown["task"]["attempts"]) == 1  # nothing dropped
    assert store.tasks().dead_letter_doc()["metadata"]["total_recovered"] == 1


def test_a_dependency_complete_all_along_is_not_a_reason_to_retry(store: Store, clock: ManualClock) -> None:
    queue = Queue(store)
    queue.add("dependency", task_id="dep")
    queue.complete(queue.claim("a")["id"], "a")
    dead_letter(store, clock, "t1", errors=["external API down"], approaches=["a"], error_types=["dependency"],
                depends_on=["dep"])
    assert DeadLetter(store).review()["decisions"][0]["action"] == "leave"


def test_retry_when_a_new_approach_was_recorded(store: Store, clock: ManualClock) -> None:
    dead_letter(store, clock, "t1", errors=["e1", "e2"], approaches=["a", "b"])
    DeadLetter(store).propose("t1", "use the vendored client instead")
    result = DeadLetter(store).review()
    assert result["decisions"][0]["action"] == "retry"
    assert result["decisions"][0]["reason"] == "new approach recorded: use the vendored client instead"
    task = Queue(store).show("t1")["task"]
    assert task["recovery_strategy"] == "new_approach"
    # Failure count reset: a fresh budget of the task's own max_attempts, the history kept.
    assert task["max_attempts"] == 2 and task["budget_start"] == 2 and len(task["attempts"]) == 2
    assert "use the vendored client instead" in task["notes"][-1]["text"]


def test_an_approach_already_tried_is_not_new(store: Store, clock: ManualClock) -> None:
    dead_letter(store, clock, "t1", errors=["e1"], approaches=["a"])
    DeadLetter(store).propose("t1", "a")
    assert DeadLetter(store).review()["decisions"][0]["action"] == "leave"


def test_human_review_entries_are_never_retried_automatically(store: Store, clock: ManualClock) -> None:
    dead_letter(store, clock, "t1", errors=["schema mismatch"], approaches=["a"], error_types=["validation"])
    DeadLetter(store).propose("t1", "something new")
    decision = DeadLetter(store).review()["decisions"][0]
    assert decision["action"] == "escalate" and "requires_human_review" in decision["reason"]


# -- abandon criteria -------------------------------------------------------------------------------


def test_abandon_after_10_total_attempts(store: Store, clock: ManualClock) -> None:
    dead_letter(store, clock, "t1", errors=[f"error {n}" for n in range(10)], approaches=["same"] * 10)
    result = DeadLetter(store).review()
    assert result["decisions"][0]["action"] == "abandon"
    record = abandoned(store)["t1"]
    assert record["abandon_reason"].startswith("10 total attempts (>= 10)")
    assert record["recovery_strategy"] == "permanent_abandon" and len(record["attempts"]) == 10
    assert entries(store) == []


def test_abandon_the_same_normalised_error_across_3_approaches(store: Store, clock: ManualClock) -> None:
    errors = ["ConnectionRefusedError: [Errno 111] connect to 10.0.0.7:5432 failed (pid 4121)",
              "ConnectionRefusedError: [Errno 111] connect to 10.0.0.9:5432 failed (pid 5230)",
              "ConnectionRefusedError: [Errno 111] connect to 10.0.0.8:5432 failed (pid 77)"]
    dead_letter(store, clock, "t1", errors=errors, approaches=["retry", "new pool", "other driver"])
    DeadLetter(store).review()
    reason = abandoned(store)["t1"]["abandon_reason"]
    assert reason.startswith("same error across 3 different approaches: connectionrefusederror")


def test_same_error_with_one_approach_is_not_abandoned(store: Store, clock: ManualClock) -> None:
    dead_letter(store, clock, "t1", errors=["boom", "boom", "boom"], approaches=["x", "x", "x"])
    assert DeadLetter(store).review()["decisions"][0]["action"] == "leave"


def test_abandon_when_a_dependency_will_never_complete(store: Store, clock: ManualClock) -> None:
    queue = Queue(store)
    queue.add("dependency", task_id="dep", type="db")
    queue.add("feature", task_id="t1", max_attempts=1, type="eng")
    queue.claim("a", types=["eng"])
    queue.fail("t1", "a", error="needs the migration", error_type="dependency", depends_on=["dep"])
    queue.cancel("dep", reason="dropped")
    DeadLetter(store).review()
    assert abandoned(store)["t1"]["abandon_reason"] == "dependency dep will never complete (was cancelled)"


def test_abandon_keeps_everything_and_the_counts_match(store: Store, clock: ManualClock) -> None:
    entry = dead_letter(store, clock, "t1", errors=["e"] * 10, approaches=[str(n) for n in range(10)],
                        labels=["payments"], description="the description")
    DeadLetter(store).review()
    record = abandoned(store)["t1"]
    kept = record["task_data"]["history"]
    assert kept[:-1] == entry["task_data"]["history"]  # the history travels, and gains the abandonment
    assert kept[-1]["event"] == "abandoned" and kept[-1]["by"] == "loki" and kept[-1]["to"] == "abandoned"
    record["task_data"]["history"] = kept[:-1]
    for key, value in entry.items():
        if key != "recovery_strategy":
            assert record[key] == value  # the whole entry, task_data and every attempt included
    meta = store.tasks().dead_letter_doc()["metadata"]
    assert meta["total_abandoned"] == len(abandoned(store)) == 1
    assert store_problems(store) == []


# -- escalation -------------------------------------------------------------------------------------


def test_security_label_escalates_once(store: Store, clock: ManualClock) -> None:
    dead_letter(store, clock, "t1", errors=["401 Unauthorized"], approaches=["a"], labels=["auth"])
    first = DeadLetter(store).review()
    assert first["decisions"][0]["action"] == "escalate"
    entry = DeadLetter(store).show("t1")
    assert entry["recovery_strategy"] == "requires_human_review" and entry["escalation"]
    assert store.exists(f"escalations/{entry['escalation']}")
    signal = json.loads(store.read_text("signals/HUMAN_REVIEW_NEEDED"))
    assert signal["task_id"] == "t1" and signal["blocking"] is True and signal["reason"].startswith("security")
    again = DeadLetter(store).review(force=True)
    assert again["decisions"][0]["action"] == "leave" and "awaiting a human" in again["decisions"][0]["reason"]
    assert len(list_escalations(store)) == 1


def test_three_entries_with_one_root_cause_get_one_systemic_escalation(store: Store, clock: ManualClock) -> None:
    for n in range(3):
        dead_letter(store, clock, f"t{n}", errors=[f"ImportError: cannot import name 'Client' (line {n})"],
                    approaches=["a"], type="eng")
    dead_letter(store, clock, "other", errors=["KeyError: 'user'"], approaches=["a"], type="eng")
    result = DeadLetter(store).review()
    actions = {d["task_id"]: d["action"] for d in result["decisions"]}
    assert actions == {"t0": "escalate", "t1": "escalate", "t2": "escalate", "other": "leave"}
    files = list_escalations(store)
    assert len(files) == 1 and files[0]["task_id"].startswith("systemic-")
    text = store.read_text(f"escalations/{files[0]['file']}")
    assert all(f"t{n}" in text for n in range(3))
    assert len([n for n in store.list("signals") if n.startswith("HUMAN_REVIEW_NEEDED")]) == 3


@pytest.mark.files("drives the CLI, which works on a tree of files")
def test_review_table_explains_every_decision_through_the_cli(store: Store, clock: ManualClock) -> None:
    dead_letter(store, clock, "t1", errors=["e"] * 10, approaches=["a"] * 10)
    dead_letter(store, clock, "t2", errors=["e"], approaches=["a"], labels=["secrets"])
    result = cli(["deadletter", "review"], root=store.root, env={"LOKI_NOW": "2026-02-01T00:00:00Z"})
    assert result.code == 0, result.stderr
    assert "t1" in result.stdout and "abandon" in result.stdout and "10 total attempts" in result.stdout
    assert "t2" in result.stdout and "escalate" in result.stdout
    assert "1 abandoned, 1 escalated" in result.stdout
    skipped = cli(["deadletter", "review"], root=store.root, env={"LOKI_NOW": "2026-02-01T01:00:00Z"})
    assert skipped.code == 0 and skipped.stdout.count("\n") == 1 and "not due" in skipped.stdout


@pytest.mark.files("drives the CLI, which works on a tree of files")
def test_corrupt_dead_letter_file_is_refused_and_unchanged(store: Store) -> None:
    path = Path(store.path(layout.DEADLETTER))
    path.write_text('{"tasks": [{"task_id": "t1"}], "metadata": {"last_reviewed": null, '
                    '"total_abandoned": 0, "total_recovered": 0}}')
    before = path.read_bytes()
    for args in (["deadletter", "review", "--force"], ["deadletter", "list"], ["deadletter", "abandon", "t1",
                                                                                "--reason", "x"]):
        result = cli(args, root=store.root)
        assert result.code == 1, args
        assert "queue/dead-letter.json at /tasks/0" in result.stderr and "required" in result.stderr
    assert path.read_bytes() == before


# -- manual operations ------------------------------------------------------------------------------


@pytest.mark.files("drives the CLI, which works on a tree of files")
def test_retry_abandon_and_split_through_the_cli(store: Store, clock: ManualClock) -> None:
    for task_id in ("r", "a", "s"):
        dead_letter(store, clock, task_id, errors=["e1", "e2"], approaches=["x", "y"], priority="high")
    retried = cli(["deadletter", "retry", "r", "--approach", "smaller diff", "--reset-count", "--fix-commit",
                   "4f2a9c1", "--json"], root=store.root)
    assert retried.code == 0, retried.stderr
    task = retried.json()["task"]
    assert task["recovery_strategy"] == "fix_committed" and task["fix_commit"] == "4f2a9c1"
    assert task["max_attempts"] == 2 and task["budget_start"] == 2 and len(task["attempts"]) == 2
    gone = cli(["deadletter", "abandon", "a", "--reason", "product dropped the feature"], root=store.root)
    assert gone.code == 0
    assert abandoned(store)["a"]["abandon_reason"] == "human explicitly abandoned: product dropped the feature"
    split = cli(["deadletter", "split", "s", "--title", "Just the parser", "--title", "Just the CLI", "--json"],
                root=store.root)
    assert split.code == 0, split.stderr
    created = split.json()["created"]
    assert [t["split_from"] for t in created] == ["s", "s"] and created[0]["priority"] == "high"
    assert abandoned(store)["s"]["abandon_reason"].startswith("split into simpler task(s): ")
    meta = store.tasks().dead_letter_doc()["metadata"]
    assert meta == {"last_reviewed": None, "total_abandoned": 2, "total_recovered": 1}
    listing = cli(["abandoned", "list", "--json"], root=store.root).json()
    assert {e["task_id"] for e in listing["entries"]} == {"a", "s"}
    assert store_problems(store) == []


@pytest.mark.files("drives the CLI, which works on a tree of files")
def test_operations_on_a_task_not_in_dead_letter(store: Store) -> None:
    Queue(store).add("x", task_id="t1")
    for args in (["deadletter", "show", "t1"], ["deadletter", "retry", "t1"], ["deadletter", "abandon", "t1",
                                                                               "--reason", "r"]):
        result = cli(args, root=store.root)
        assert result.code == 1 and "not in the dead-letter queue" in result.stderr
    assert cli(["deadletter", "retry", "t1", "--fix-commit", "main"], root=store.root).code == 2  # usage


# -- escalate / approve / escalations ---------------------------------------------------------------


@pytest.mark.files("drives the CLI, which works on a tree of files")
def test_escalate_writes_the_reference_format_blocks_the_task_and_emits_the_signal(store: Store) -> None:
    Queue(store).add("Rotate production credentials", task_id="task-099")
    Queue(store).claim("eng-001-infra")
    result = cli(["escalate", "task-099", "--trigger", "security_decision", "--analysis", "needs prod creds",
                  "--option", "A human rotates them (safe, slow)", "--option", "Grant a scoped role (fast)",
                  "--agent", "eng-001-infra", "--json"], root=store.root, env={"LOKI_NOW": "2026-01-25T13:00:00Z"})
    assert result.code == 0, result.stderr
    out = result.json()
    assert out["file"] == "escalations/20260125T130000Z-task-099.md" and out["state"] == "blocked"
    text = store.read_text(out["file"])
    for heading in ("## Escalation: Rotate production credentials", "**Task ID:** task-099", "**Failure Count:** 0",
                    "**Trigger:** security_decision", "### Failure Summary", "### Attempts Log",
                    "### Agent Analysis\nneeds prod creds", "### Recommended Options\n1. A human rotates them",
                    "2. Grant a scoped role (fast)", "### Awaiting\nHuman decision on recovery path."):
        assert heading in text
    task = Queue(store).show("task-099")
    assert task["state"] == "blocked" and task["task"]["claimed_by"] is None
    assert task["task"]["blocked"]["deadline"] == "2026-01-26T13:00:00Z"
    signal = json.loads(store.read_text("signals/HUMAN_REVIEW_NEEDED"))
    assert {"timestamp", "reason", "task_id", "context", "severity", "agent", "blocking",
            "alternatives_considered"} <= set(signal)
    assert signal["alternatives_considered"] == ["A human rotates them (safe, slow)", "Grant a scoped role (fast)"]
    assert store_problems(store) == []


def test_two_escalations_of_one_task_in_the_same_second_do_not_overwrite(store: Store) -> None:
    Queue(store).add("x", task_id="t1")
    first = escalate(store, "t1", "first reason")
    second = escalate(store, "t1", "second reason")
    assert first["file"] != second["file"]
    assert "first reason" in store.read_text(first["file"])
    assert "second reason" in store.read_text(second["file"])
    assert second["file"].endswith("-t1-2.md")


def test_escalating_a_dead_letter_entry_keeps_it_there(store: Store, clock: ManualClock) -> None:
    dead_letter(store, clock, "t1", errors=["e"], approaches=["a"])
    result = escalate(store, "t1", "unclear spec")
    assert result["state"] == "dead-letter"
    entry = DeadLetter(store).show("t1")
    assert entry["recovery_strategy"] == "requires_human_review"
    assert "**Failure Count:** 1" in store.read_text(result["file"])


@pytest.mark.files("drives the CLI, which works on a tree of files")
def test_approve_emits_human_approved_and_applies_it_when_no_watcher_runs(store: Store) -> None:
    Queue(store).add("x", task_id="t1")
    escalate(store, "t1", "why")
    result = cli(["approve", "t1", "--decision", "approve", "--note", "go ahead", "--approver", "alice", "--json"],
                 root=store.root)
    assert result.code == 0, result.stderr
    out = result.json()
    assert out["applied_now"] is True and out["outcome"]["outcome"] == "applied"
    assert out["outcome"]["signal"] == {"timestamp": out["outcome"]["signal"]["timestamp"], "task_id": "t1",
                                        "decision": "approve", "approver": "alice", "note": "go ahead"}
    assert Queue(store).show("t1")["state"] == "pending"
    assert not [n for n in store.list("signals") if n.startswith("HUMAN_APPROVED")]
    bad = cli(["approve", "t1", "--decision", "maybe"], root=store.root)
    assert bad.code == 2 and "--decision must be one of approve, cancel, clarify" in bad.stderr
    strike = cli(["approve", "strike-0123abcd", "--decision", "approve"], root=store.root)
    assert strike.code == 1 and "loki errors reset" in strike.stderr


@pytest.mark.parametrize(("decision", "state"), [("approve", "pending"), ("clarify", "pending"),
                                                 ("cancel", "cancelled")])
def test_resolve_a_blocked_task(store: Store, decision: str, state: str) -> None:
    Queue(store).add("x", task_id="t1")
    file_rel = escalate(store, "t1", "why")["file"]
    outcome = resolve(store, "t1", decision, note="because", approver="alice")
    assert outcome["applied"] is True and outcome["outcome"] == state
    shown = Queue(store).show("t1")
    assert shown["state"] == state and "blocked" not in shown["task"]
    assert "because" in shown["task"]["notes"][-1]["text"]
    assert f"{decision} by alice" in store.read_text(file_rel)
    assert list_escalations(store, open_only=True) == []
    again = resolve(store, "t1", decision)
    assert again["applied"] is False  # applying twice is harmless


def test_resolve_a_dead_letter_entry(store: Store, clock: ManualClock) -> None:
    dead_letter(store, clock, "t1", errors=["e"], approaches=["a"])
    dead_letter(store, clock, "t2", errors=["e"], approaches=["a"])
    assert resolve(store, "t1", "approve")["outcome"] == "pending"
    assert resolve(store, "t2", "cancel", note="not worth it")["outcome"] == "abandoned"
    meta = store.tasks().dead_letter_doc()["metadata"]
    assert meta["total_recovered"] == 1 and meta["total_abandoned"] == 1
    assert abandoned(store)["t2"]["abandon_reason"] == "human explicitly abandoned: not worth it"


@pytest.mark.files("drives the CLI, which works on a tree of files")
def test_escalations_list_open(store: Store) -> None:
    Queue(store).add("x", task_id="t1")
    Queue(store).add("y", task_id="t2")
    escalate(store, "t1", "why 1")
    escalate(store, "t2", "why 2")
    resolve(store, "t1", "approve")
    result = cli(["escalations", "list", "--open", "--json"], root=store.root).json()
    assert [e["task_id"] for e in result["escalations"]] == ["t2"]
    assert cli(["escalations", "list", "--json"], root=store.root).json()["total"] == 2


# -- the template --------------------------------------------------------------------------------------


@pytest.mark.files("looks at or edits the files themselves")
def test_init_copies_the_template_and_the_tree_copy_wins(store: Store) -> None:
    own = Path(store.path(layout.ESCALATION_TEMPLATE))
    assert own.is_file()
    own.write_text("# {task_id} needs you: {trigger}\n")
    Queue(store).add("x", task_id="t1")
    result = escalate(store, "t1", "custom")
    assert store.read_text(result["file"]).endswith("# t1 needs you: custom\n")


@pytest.mark.files("drives the CLI, which works on a tree of files")
def test_unknown_placeholder_is_an_error_naming_it(store: Store) -> None:
    Path(store.path(layout.ESCALATION_TEMPLATE)).write_text("## {task_title}\nowner: {owner}\n")
    Queue(store).add("x", task_id="t1")
    before = state_snapshot(store)
    result = cli(["escalate", "t1", "--trigger", "why"], root=store.root)
    assert result.code == 1
    assert ".loki/templates/escalation.md line 2: unknown placeholder {owner}" in result.stderr
    assert state_snapshot(store) == before
    with pytest.raises(InvalidInput, match=r"unknown placeholder \{x\}"):
        render("{x}", {}, "t.md")


@pytest.mark.files("a symbolic link is a thing of the file tree")
def test_a_symlinked_template_is_refused_as_validate_refuses_it(store: Store, tmp_path: Path) -> None:
    # The tree's template is state like any other: read through the store, a link out of .loki/ is
    # refused (exit 1, naming it), as `loki validate` reports it, and its target is never read.
    outside = tmp_path / "outside.md"
    outside.write_text("# {task_id}: SECRET OUTSIDE TEXT\n")
    own = Path(store.path(layout.ESCALATION_TEMPLATE))
    own.unlink()
    own.symlink_to(outside)
    Queue(store).add("x", task_id="t1")
    before = state_snapshot(store)
    with pytest.raises(StateFileError, match="symbolic link") as info:
        escalate(store, "t1", "why")
    assert info.value.path == layout.ESCALATION_TEMPLATE
    result = cli(["escalate", "t1", "--trigger", "why"], root=store.root)
    assert result.code == 1 and "templates/escalation.md" in result.stderr and "symbolic link" in result.stderr
    assert state_snapshot(store) == before and list_escalations(store) == []
    assert Queue(store).show("t1")["state"] == "pending"


def test_escalating_an_unknown_task(store: Store) -> None:
    with pytest.raises(NotFound):
        escalate(store, "ghost", "why")


@pytest.mark.files("drives the CLI, which works on a tree of files")
def test_escalating_a_completed_task_is_refused_and_writes_no_file(store: Store) -> None:
    queue = Queue(store)
    queue.add("x", task_id="t1")
    queue.complete(queue.claim("a")["id"], "a")
    before = state_snapshot(store)
    result = cli(["escalate", "t1", "--trigger", "why"], root=store.root)
    assert result.code == 4 and "t1 is completed" in result.stderr
    assert state_snapshot(store) == before and list_escalations(store) == []


def test_re_escalating_a_blocked_task_keeps_where_it_came_from(store: Store) -> None:
    Queue(store).add("x", task_id="t1")
    Queue(store).claim("a")
    escalate(store, "t1", "first")
    escalate(store, "t1", "second")
    assert Queue(store).show("t1")["task"]["blocked"]["previous_status"] == "in-progress"


@pytest.mark.files("looks at or edits the files themselves")
def test_entries_without_an_error_message_are_not_one_root_cause(store: Store, clock: ManualClock) -> None:
    # Older or hand-made entries may carry an empty message: that is no evidence of a shared cause.
    for n in range(3):
        dead_letter(store, clock, f"t{n}", errors=["boom"], approaches=["a"])
    doc = store.tasks().dead_letter_doc()
    for entry in doc["tasks"]:
        entry["attempts"][0]["error_message"] = ""
    Path(store.path(layout.DEADLETTER)).write_text(json.dumps(doc))
    actions = {d["action"] for d in DeadLetter(store).review()["decisions"]}
    assert actions == {"leave"} and list_escalations(store) == []


@pytest.mark.files("drives the CLI, which works on a tree of files")
def test_approve_refuses_a_task_that_is_not_waiting_for_a_human(store: Store) -> None:
    Queue(store).add("x", task_id="t1")
    before = state_snapshot(store)
    pending = cli(["approve", "t1", "--decision", "approve"], root=store.root)
    assert pending.code == 4 and "t1 is pending, not waiting for a human decision" in pending.stderr
    unknown = cli(["approve", "nope", "--decision", "cancel"], root=store.root)
    assert unknown.code == 1 and "no task or escalation 'nope'" in unknown.stderr
    assert state_snapshot(store) == before  # no signal emitted


# -- attempt budgets after a human decision or a reset ----------------------------------------------


def at(minutes: int) -> dict[str, str]:
    """LOKI_NOW ``minutes`` after 10:00 (every backoff is over by the next minute)."""
    return {"LOKI_NOW": f"2026-01-25T{10 + minutes // 60:02d}:{minutes % 60:02d}:00Z"}


def fail_once(root: Path, minute: int) -> str:
    assert cli(["queue", "claim", "--agent", "a"], root=root, env=at(minute)).code == 0
    result = cli(["queue", "fail", "t1", "--agent", "a", "--error", "boom"], root=root, env=at(minute))
    assert result.code == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.parametrize("decision", ["approve", "clarify"])
def test_a_human_approval_of_a_dead_letter_task_starts_a_fresh_budget(root: Path, decision: str) -> None:
    assert cli(["queue", "add", "x", "--id", "t1", "--max-attempts", "2"], root=root, env=at(0)).code == 0
    fail_once(root, 1)
    assert "moved to the dead-letter queue" in fail_once(root, 2)
    approved = cli(["approve", "t1", "--decision", decision, "--note", "try again"], root=root, env=at(3))
    assert approved.code == 0, approved.stderr
    # The history stays; the budget counts the attempts since the approval.
    assert fail_once(root, 4).startswith("t1: attempt 1 of 2 failed (after 2 earlier attempts); retry after ")
    assert fail_once(root, 5).startswith("t1: attempt 2 of 2 failed (after 2 earlier attempts); moved to the "
                                         "dead-letter queue")
    entry = cli(["deadletter", "show", "t1", "--json"], root=root).json()
    assert [a["attempt_number"] for a in entry["attempts"]] == [1, 2, 3, 4]
    assert entry["task_data"]["max_attempts"] == 2 and entry["task_data"]["budget_start"] == 2
    assert tree_problems(root) == []


def test_a_human_approval_of_a_blocked_task_starts_a_fresh_budget(root: Path) -> None:
    assert cli(["queue", "add", "x", "--id", "t1", "--max-attempts", "2"], root=root, env=at(0)).code == 0
    fail_once(root, 1)
    assert cli(["escalate", "t1", "--trigger", "unclear"], root=root, env=at(2)).code == 0
    assert cli(["approve", "t1", "--decision", "approve"], root=root, env=at(3)).code == 0
    assert fail_once(root, 4).startswith("t1: attempt 1 of 2 failed (after 1 earlier attempt); retry after ")


def test_retry_reset_count_resets_the_count_and_says_so(root: Path) -> None:
    assert cli(["queue", "add", "x", "--id", "t1", "--max-attempts", "1"], root=root, env=at(0)).code == 0
    fail_once(root, 1)
    kept = cli(["deadletter", "retry", "t1"], root=root, env=at(2))
    assert kept.code == 0
    assert kept.stdout.strip() == ("t1: back to pending (manual_retry); 1 attempt kept and counted: the next failure "
                                   "dead-letters it again (max 1; --reset-count for a fresh budget)")
    assert "moved to the dead-letter queue" in fail_once(root, 3)
    reset = cli(["deadletter", "retry", "t1", "--reset-count"], root=root, env=at(4))
    assert reset.code == 0
    assert reset.stdout.strip() == ("t1: back to pending (manual_retry); 2 attempts kept, count reset: 1 attempt "
                                    "allowed before the dead-letter queue")
    shown = cli(["queue", "show", "t1", "--json"], root=root).json()["task"]
    assert shown["max_attempts"] == 1 and shown["budget_start"] == 2  # the maximum is not raised
    assert "moved to the dead-letter queue" in fail_once(root, 5)


# -- closing escalations --------------------------------------------------------------------------------


@pytest.mark.files("drives the CLI, which works on a tree of files")
def test_approve_resolves_every_open_escalation_of_the_task(store: Store) -> None:
    Queue(store).add("x", task_id="t1")
    Queue(store).add("y", task_id="t2")
    older = escalate(store, "t1", "first reason")["file"]
    newer = escalate(store, "t1", "second reason")["file"]
    other = escalate(store, "t2", "unrelated")["file"]
    assert cli(["approve", "t1", "--decision", "approve", "--approver", "alice"], root=store.root).code == 0
    for rel in (older, newer):
        assert "### Resolution\napprove by alice at " in store.read_text(rel)
    assert [e["file"] for e in list_escalations(store, open_only=True)] == [other.rsplit("/", 1)[-1]]


@pytest.mark.files("drives the CLI, which works on a tree of files")
def test_an_older_escalation_can_be_closed_by_id_and_leaves_the_briefing(store: Store, project: Path) -> None:
    Queue(store).add("x", task_id="t1")
    older = escalate(store, "t1", "first reason")["file"]
    escalate(store, "t1", "second reason")
    escalation_id = Path(older).stem
    listed = cli(["escalations", "list", "--json"], root=store.root).json()["escalations"]
    assert listed[0]["id"] == escalation_id and listed[0]["resolution"] is None
    assert escalation_id in cli(["escalations", "list"], root=store.root).stdout
    closed = cli(["escalations", "close", escalation_id, "--note", "superseded by the second one", "--by", "bob"],
                 root=store.root, env={"LOKI_NOW": "2026-01-25T11:00:00Z"})
    assert closed.code == 0, closed.stderr
    assert f"closed {escalation_id}" in closed.stdout and "t1 is still blocked" in closed.stdout
    text = store.read_text(older)
    assert text.endswith("### Resolution\nclosed by bob at 2026-01-25T11:00:00Z: superseded by the second one\n")
    row = next(e for e in cli(["escalations", "list", "--json"], root=store.root).json()["escalations"]
               if e["id"] == escalation_id)
    assert row["open"] is False
    assert row["resolution"] == "closed by bob at 2026-01-25T11:00:00Z: superseded by the second one"
    assert Queue(store).show("t1")["state"] == "blocked"  # closing a file decides nothing about the task
    start = {"session_id": "s1", "hook_event_name": "SessionStart", "source": "startup", "cwd": str(project)}
    briefing = loki_proc(["hook", "session-start"], root=store.root, input=json.dumps(start),
                         env={"LOKI_NOW": "2026-01-25T11:00:00Z"})
    assert briefing.code == 0, briefing.stderr
    context = briefing.json()["hookSpecificOutput"]["additionalContext"]
    assert "1 open escalation " in context and f"{escalation_id}.md" not in context
    again = cli(["escalations", "close", escalation_id, "--note", "again"], root=store.root)
    assert again.code == 4 and "already resolved" in again.stderr
    before = state_snapshot(store)
    unknown = cli(["escalations", "close", "20260101T000000Z-nope", "--note", "x"], root=store.root)
    assert unknown.code == 1 and "no escalation '20260101T000000Z-nope'" in unknown.stderr
    empty = cli(["escalations", "close", escalation_id, "--note", " "], root=store.root)
    assert empty.code == 2 and "--note" in empty.stderr  # the command line alone shows it: a usage error
    assert state_snapshot(store) == before


# -- what approve reports ---------------------------------------------------------------------------------


@pytest.mark.files("drives the CLI, which works on a tree of files")
def test_approve_says_when_applying_the_decision_failed(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from loki.errors import StateFileError
    from loki.queue import escalations

    Queue(store).add("x", task_id="t1")
    escalate(store, "t1", "why")

    def broken(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise StateFileError("queue/blocked.json", "disk on fire")

    monkeypatch.setattr(escalations, "resolve", broken)
    result = cli(["approve", "t1", "--decision", "approve"], root=store.root)
    assert result.code == 1
    assert "the running watcher applies it" not in result.stdout + result.stderr
    assert "approve for t1 was recorded as signal HUMAN_APPROVED but applying it failed: queue/blocked.json: disk " \
           "on fire" in result.stderr
    assert "kept in signals/.processing/" in result.stderr and "loki watch --once" in result.stderr
    as_json = cli(["approve", "t1", "--decision", "approve", "--json"], root=store.root)
    assert as_json.code == 1 and json.loads(as_json.stderr)["applied_now"] is False
    monkeypatch.undo()
    retried = cli(["watch", "--once"], root=store.root)  # the kept signals are applied by the next consumer
    assert retried.code == 0, retried.stderr
    assert Queue(store).show("t1")["state"] == "pending"


@pytest.mark.files("compares the bytes of the tree before and after a refusal")
def test_approve_is_a_library_call_the_cli_only_prints(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from loki.errors import Conflict, LokiError, StateFileError
    from loki.queue import escalations
    from loki.watch.approvals import approve
    from loki.watch.consumer import ConsumerLock

    queue = Queue(store)
    for task_id in ("t1", "t2", "t3"):
        queue.add("x", task_id=task_id)
        escalate(store, task_id, "why")
    queue.add("y", task_id="t4")
    before = snapshot_bytes(store.root)
    with pytest.raises(InvalidInput, match="loki errors reset"):
        approve(store, "strike-0123abcd", "approve")
    with pytest.raises(InvalidInput, match="must be one of approve, cancel, clarify"):
        approve(store, "t1", "Approve")  # exact in the library; the CLI lower-cases what people type
    with pytest.raises(NotFound):
        approve(store, "ghost", "approve")
    with pytest.raises(Conflict, match="t4 is pending, not waiting for a human decision"):
        approve(store, "t4", "cancel")
    assert snapshot_bytes(store.root) == before  # refused: nothing emitted, nothing written

    done = approve(store, "t1", "approve", note="go ahead", approver="alice")
    assert (done.applied_now, done.consumer, done.approver, done.outcome and done.outcome["outcome"]) == \
        (True, None, "alice", "applied")
    assert queue.show("t1")["state"] == "pending"

    lock = ConsumerLock(store)
    assert lock.try_acquire()
    try:
        waiting = approve(store, "t2", "cancel", approver="bob")
    finally:
        lock.release()
    assert (waiting.applied_now, waiting.outcome) == (False, None) and waiting.consumer is not None
    assert waiting.to_json()["signal"] == waiting.signal and queue.show("t2")["state"] == "blocked"

    def broken(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise StateFileError("queue/blocked.json", "disk on fire")

    monkeypatch.setattr(escalations, "resolve", broken)
    with pytest.raises(LokiError, match="applying it failed") as failed:
        approve(store, "t3", "approve")
    assert failed.value.to_json()["applied_now"] is False


@pytest.mark.files("drives the CLI, which works on a tree of files")
def test_approve_with_a_watcher_running_says_which_applies_it(store: Store) -> None:
    from loki.watch.consumer import ConsumerLock

    Queue(store).add("x", task_id="t1")
    escalate(store, "t1", "why")
    lock = ConsumerLock(store)
    assert lock.try_acquire()
    try:
        result = cli(["approve", "t1", "--decision", "approve"], root=store.root)
    finally:
        lock.release()
    assert result.code == 0
    assert result.stdout.startswith("approve for t1 recorded as signal HUMAN_APPROVED; the running watcher (pid ")
    assert Queue(store).show("t1")["state"] == "blocked"
