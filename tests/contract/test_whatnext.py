"""Every dead end names the command that moves things on (issue 23, "What next at every dead end").

A dead-letter entry the review leaves, a task that waits on a dead-letter task (directly or two levels
down), and a proposed approach (the next review may be a day away) each say which command a person runs
next: through the library (a ``next`` field) and through the CLI.
"""

from __future__ import annotations

from typing import Any

import pytest

from loki.clock import ManualClock
from loki.queue.deadletter import DeadLetter
from loki.queue.queue import Queue
from loki.storage.store import Store
from tests.helpers import cli


@pytest.fixture
def store(backend_store: Store) -> Store:
    """Every test here runs on the files, the memory store and PostgreSQL (tests/conftest.py: backend)."""
    return backend_store


def dead_letter(store: Store, clock: ManualClock, task_id: str, **add: Any) -> None:
    """One failure with max_attempts 1: the task is in the dead-letter queue, the real way."""
    queue = Queue(store)
    queue.add(task_id, task_id=task_id, max_attempts=1, **add)
    clock.advance(300)
    queue.claim("agent", task_id=task_id)
    assert queue.fail(task_id, "agent", error="boom", approach="a", error_type="test_failure")["state"] == "dead-letter"


def now_env(clock: ManualClock) -> dict[str, str]:
    return {"LOKI_NOW": clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")}


def test_a_left_entry_names_the_commands_that_move_it_on(store: Store, clock: ManualClock) -> None:
    dead_letter(store, clock, "fix-slug")
    decision = DeadLetter(store).review()["decisions"][0]
    assert decision["action"] == "leave"
    for command in ("loki deadletter retry fix-slug", "loki deadletter propose fix-slug --approach",
                    "loki deadletter split fix-slug --title", "loki queue close fix-slug --wont-do"):
        assert command in decision["next"], command


@pytest.mark.files("drives the CLI, which works on a tree of files")
def test_the_review_prints_what_next_for_each_entry_it_leaves(store: Store, clock: ManualClock) -> None:
    dead_letter(store, clock, "fix-slug")
    result = cli(["deadletter", "review"], root=store.root, env=now_env(clock))
    assert result.code == 0, result.stderr
    assert "1 left" in result.stdout
    assert "next: fix-slug: loki deadletter retry fix-slug" in " ".join(result.stdout.split())


def test_an_escalated_entry_left_for_a_human_names_approve(store: Store, clock: ManualClock) -> None:
    dead_letter(store, clock, "rotate-key", labels=["secrets"])
    assert DeadLetter(store).review()["decisions"][0]["action"] == "escalate"
    clock.advance(25 * 3600)
    decision = DeadLetter(store).review()["decisions"][0]
    assert decision["action"] == "leave" and "awaiting a human decision" in decision["reason"]
    assert "loki approve rotate-key --decision approve" in decision["next"]


def test_propose_says_when_the_next_review_is_and_how_to_run_it_now(store: Store, clock: ManualClock) -> None:
    dead_letter(store, clock, "typecheck")
    DeadLetter(store).review()
    clock.advance(3600)
    entry = DeadLetter(store).propose("typecheck", "pin mypy to 1.10")
    assert entry["next_review_after"] == "2026-01-26T10:05:00Z"  # the review ran at 10:05, every 24 h
    assert "loki deadletter review --force" in entry["next"]


def test_propose_before_any_review_says_the_review_is_due(store: Store, clock: ManualClock) -> None:
    dead_letter(store, clock, "typecheck")
    entry = DeadLetter(store).propose("typecheck", "pin mypy to 1.10")
    assert entry["next_review_after"] is None
    assert "loki deadletter review" in entry["next"]


@pytest.mark.files("drives the CLI, which works on a tree of files")
def test_propose_through_the_cli_names_review_force(store: Store, clock: ManualClock) -> None:
    dead_letter(store, clock, "typecheck")
    DeadLetter(store).review()
    clock.advance(3600)
    result = cli(["deadletter", "propose", "typecheck", "--approach", "pin mypy"], root=store.root,
                 env=now_env(clock))
    assert result.code == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "typecheck: the next review retries it with: pin mypy" in out
    assert ("next: the next review, after 2026-01-26T10:05:00Z (in 23h00m), retries it; "
            "`loki deadletter review --force` retries it now") in out
    assert "next_review_after" in cli(["deadletter", "propose", "typecheck", "--approach", "x", "--json"],
                                      root=store.root, env=now_env(clock)).json()


def _chain(store: Store, clock: ManualClock) -> Queue:
    """fix-slug is dead-letter; test-text waits on it; release waits on test-text (two levels down)."""
    dead_letter(store, clock, "fix-slug")
    queue = Queue(store)
    queue.add("test-text", task_id="test-text", depends_on=["fix-slug"])
    queue.add("release", task_id="release", depends_on=["test-text"])
    return queue


def test_ready_explain_names_the_command_for_a_dead_letter_dependency(store: Store, clock: ManualClock) -> None:
    reasons = {t["id"]: t["reasons"] for t in _chain(store, clock).ready()["not_ready"]}
    direct = reasons["test-text"][0]
    assert direct["dependency"] == "fix-slug" and direct["state"] == "dead-letter"
    assert "loki deadletter retry fix-slug" in direct["next"] and "loki deadletter retry fix-slug" in direct["text"]
    behind = reasons["release"][0]
    assert behind["dependency"] == "test-text" and behind["state"] == "pending" and behind["root"] == "fix-slug"
    assert "which waits on 'fix-slug' (dead-letter)" in behind["text"]
    assert "loki deadletter retry fix-slug" in behind["next"]


@pytest.mark.files("drives the CLI, which works on a tree of files")
def test_ready_explain_through_the_cli_names_the_command(store: Store, clock: ManualClock) -> None:
    _chain(store, clock)
    result = cli(["queue", "ready", "--explain"], root=store.root, env={"LOKI_FORCE_TTY": "200", **now_env(clock)})
    assert result.code == 0, result.stderr
    lines = {line.split()[0]: " ".join(line.split()) for line in result.stdout.splitlines() if line.strip()}
    assert "waits on 'fix-slug' (dead-letter): loki deadletter retry fix-slug" in lines["test-text"]
    assert "waits on 'test-text' (pending), which waits on 'fix-slug' (dead-letter)" in lines["release"]
    assert "loki deadletter retry fix-slug" in lines["release"]
    refused = cli(["queue", "claim", "--agent", "a", "--id", "release"], root=store.root, env=now_env(clock))
    assert refused.code == 3 and "loki deadletter retry fix-slug" in refused.stderr
