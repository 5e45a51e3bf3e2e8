"""``loki escalations show|close`` and ``loki approve`` with an escalation's id (a systemic one too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loki.errors import Conflict, InvalidInput, NotFound
from loki.queue.deadletter import DeadLetter
from loki.queue.escalations import escalate, find, show
from loki.queue.queue import Queue
from loki.watch.approvals import approve_any, approve_escalation
from tests.helpers import NOW, cli, snapshot_bytes

ENV = {"LOKI_NOW": NOW}


def _systemic(store: Any) -> str:
    """Three dead-letter entries with one root cause: the review escalates them in one file."""
    queue = Queue(store)
    for n in (1, 2, 3):
        queue.add(f"task {n}", task_id=f"s{n}", max_attempts=1)
        task = queue.claim("a")
        queue.fail(task["id"], "a", error="ConnectionError: db down")
    DeadLetter(store).review(force=True)
    [stem] = [n.removesuffix(".md") for n in store.list("escalations")]
    assert "-systemic-" in stem
    return stem


def test_a_systemic_escalation_shows_its_tasks_and_is_approved_at_once(backend_store: Any) -> None:
    stem = _systemic(backend_store)
    shown = show(backend_store, stem)
    assert shown["systemic"] and shown["open"]
    assert shown["tasks"] == [{"id": f"s{n}", "state": "dead-letter"} for n in (1, 2, 3)]
    assert "## Escalation: Systemic issue across 3 tasks" in shown["text"]
    assert "s1 (task 1): 1 attempt, last" in shown["text"]  # not "1 attempts"
    digest = stem.partition("-")[2]
    assert find(backend_store, digest) == stem  # the systemic id alone names it
    done = approve_any(backend_store, digest, "approve", note="db is back", approver="alice")
    assert done["escalation"] == stem
    assert [a.task_id for a in done["approvals"]] == ["s1", "s2", "s3"]
    assert {Queue(backend_store).show(f"s{n}")["state"] for n in (1, 2, 3)} == {"pending"}
    after = show(backend_store, stem)
    assert not after["open"] and after["resolution"].startswith("approve by alice at")
    with pytest.raises(Conflict, match="escalations close"):
        approve_escalation(backend_store, stem, "approve")  # nothing waits any more


def test_cancelling_a_systemic_escalation_abandons_its_entries(backend_store: Any) -> None:
    stem = _systemic(backend_store)
    approve_any(backend_store, stem, "cancel", note="out of scope")
    assert {Queue(backend_store).show(f"s{n}")["state"] for n in (1, 2, 3)} == {"abandoned"}


def test_an_escalation_is_found_by_its_task_when_unique(backend_store: Any) -> None:
    Queue(backend_store).add("one", task_id="t1")
    escalate(backend_store, "t1", "security_decision")
    [stem] = [n.removesuffix(".md") for n in backend_store.list("escalations")]
    assert find(backend_store, "t1") == stem and find(backend_store, f"{stem}.md") == stem
    with pytest.raises(NotFound, match="no escalation 'nope'"):
        find(backend_store, "nope")


def test_a_strike_escalation_cannot_be_approved(backend_store: Any) -> None:
    from loki.strikes.strikes import Strikes

    strikes = Strikes(backend_store, branch="main")
    for _ in range(3):
        strikes.record_failure("Bash", {"command": "cargo build"}, "bash: cargo: command not found")
    [stem] = [n.removesuffix(".md") for n in backend_store.list("escalations")]
    with pytest.raises(InvalidInput, match="loki errors reset"):
        approve_any(backend_store, stem, "approve")


@pytest.mark.files
def test_escalations_show_for_people_and_scripts(root: Path) -> None:
    cli(["queue", "add", "Rotate the credentials", "--id", "t1"], root=root, env=ENV)
    cli(["escalate", "t1", "--trigger", "security_decision", "--option", "rotate now"], root=root, env=ENV)
    stem = "20260125T100000Z-t1"
    before = snapshot_bytes(root)
    document = cli(["escalations", "show", "t1", "--json"], root=root, env=ENV).json()
    assert document["id"] == stem and document["tasks"] == [{"id": "t1", "state": "blocked"}]
    assert {"id", "file", "task_id", "trigger", "created_at", "title", "open", "resolution", "systemic", "tasks",
            "text"} <= set(document)
    piped = cli(["escalations", "show", stem], root=root, env=ENV)
    assert piped.stdout.splitlines()[0] == f"{stem}: open; tasks: t1 (blocked)"
    assert "## Escalation: Rotate the credentials" in piped.stdout and "<!--" not in piped.stdout
    assert f"loki approve {stem} --decision" in piped.stdout
    drawn = cli(["escalations", "show", stem], root=root, env={**ENV, "LOKI_FORCE_TTY": "80"})
    assert "Rotate the credentials" in drawn.stdout and "## " not in drawn.stdout  # rendered Markdown
    assert snapshot_bytes(root) == before
    missing = cli(["escalations", "show", "nope"], root=root)
    assert missing.code == 1 and "no escalation 'nope'" in missing.stderr


@pytest.mark.files
def test_approve_and_close_take_escalation_ids_on_the_command_line(root: Path) -> None:
    for n in (1, 2, 3):
        cli(["queue", "add", f"task {n}", "--id", f"s{n}", "--max-attempts", "1"], root=root, env=ENV)
        cli(["queue", "claim", "--agent", "a"], root=root, env=ENV)
        cli(["queue", "fail", f"s{n}", "--agent", "a", "--error", "ConnectionError: db down"], root=root, env=ENV)
    cli(["deadletter", "review", "--force"], root=root, env=ENV)
    stem = cli(["escalations", "list", "-q"], root=root).stdout.strip()
    done = cli(["approve", stem, "--decision", "Clarify", "--note", "use the replica", "--json"], root=root, env=ENV)
    assert done.code == 0, done.stderr
    result = done.json()
    assert result["escalation"] == stem and [a["task_id"] for a in result["approvals"]] == ["s1", "s2", "s3"]
    closed = cli(["escalations", "close", stem, "--note", "done"], root=root, env=ENV)
    assert closed.code == 4 and "already resolved" in closed.stderr
    unknown = cli(["approve", "nothing-here", "--decision", "approve"], root=root)
    assert unknown.code == 1 and "no task or escalation 'nothing-here'" in unknown.stderr
