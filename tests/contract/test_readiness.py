"""One readiness rule, asked everywhere it is asked (issue 24, review §5.2 defect 1).

Each case puts one task in a state that is not ready (deferred, backing off, held, a dependency not
done, a dead dependency, an open breaker), then asks every place that answers "is it ready?":
``Queue.ready`` (``loki queue ready``), its reasons (``ready --explain``), ``Queue.claim``, the
SessionStart briefing and ``loki work --until-empty``; on the files, in memory and on PostgreSQL
(tests/conftest.py: ``backend``). The CLI is asked the same on the two backends that have a tree.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from loki.breakers.breakers import Breakers
from loki.clock import ManualClock
from loki.errors import NothingToDo
from loki.hooks import handlers
from loki.queue.queue import Queue
from loki.storage import layout
from loki.storage.store import Store
from loki.work.loop import Worker, WorkOptions
from tests.conftest import postgres_store
from tests.helpers import cli, loki_proc, put_tasks, task

NOW = "2026-01-25T10:00:00Z"
LATER = "2026-01-27T10:00:00Z"


@dataclass(frozen=True)
class Case:
    name: str
    arrange: Callable[[Queue], None]
    reasons: tuple[str, ...]
    """``ready --explain``'s reasons for task ``t`` (empty: ``t`` is not pending at all)."""
    waits: bool
    """Does ``--until-empty`` wait for it (it may become ready without a human)?"""


def _deferred(queue: Queue) -> None:
    queue.add("deferred", task_id="t")
    queue.defer("t", until=LATER, by="lead", reason="after the release")


def _backing_off(queue: Queue) -> None:
    queue.add("backing off", task_id="t")
    claimed = queue.claim("b")
    queue.fail("t", "b", token=claimed["claim_token"], error="boom", error_type="other", approach="first try")


def _held_in_place(queue: Queue) -> None:
    # Loki Mode's own agents claim a task where it lies, in pending.json, with a lease.
    put_tasks(queue.store, "pending", [task("t", claimed_by="loki-mode-1", claimed_at=NOW,
                                            lease_until="2026-01-25T11:00:00Z")])


def _held_by_another_agent(queue: Queue) -> None:
    queue.add("held", task_id="t")
    queue.claim("b", task_id="t")


def _dependency_not_done(queue: Queue) -> None:
    queue.add("first", task_id="d")
    queue.add("second", task_id="t", depends_on=["d"])
    queue.claim("b", task_id="d")


def _dead_dependency(queue: Queue) -> None:
    queue.add("first", task_id="d")
    queue.add("second", task_id="t", depends_on=["d"])
    queue.cancel("d", reason="dropped", by="lead")


def _breaker_open(queue: Queue) -> None:
    queue.add("call the api", task_id="t", type="api")
    Breakers(queue.store).trip("api")


NOT_READY = [
    Case("deferred", _deferred, ("deferred",), waits=True),
    Case("backing off", _backing_off, ("backoff",), waits=True),
    Case("held in pending.json (Loki Mode)", _held_in_place, ("claimed_in_place",), waits=False),
    Case("held by another agent", _held_by_another_agent, (), waits=True),
    Case("dependency not done", _dependency_not_done, ("dependency",), waits=True),
    Case("dead dependency", _dead_dependency, ("never",), waits=False),
    Case("breaker open", _breaker_open, ("breaker",), waits=True),
]


@pytest.fixture
def queue(backend_store: Any) -> Queue:
    return Queue(backend_store)


def briefing_queue_line(store: Any) -> str:
    answer = handlers.briefing(store, {"hook_event_name": "SessionStart", "source": "startup"})
    assert answer is not None
    text = str(answer["hookSpecificOutput"]["additionalContext"])
    return next(line for line in text.splitlines() if line.startswith("- Queue:"))


def until_empty(store: Any) -> tuple[str, list[str], int]:
    """``loki work --until-empty`` for agent ``a``: why it stopped, what it ran, how often it waited.
    Its first wait stops it (as SIGTERM would): a wait is the answer, the test need not sit it out."""
    waits: list[float] = []
    worker: Worker

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        worker.request_stop(signal.SIGTERM)

    worker = Worker(store, WorkOptions(command=["true"], agent="a", until_empty=True), sleep=sleep,
                    stdout=lambda _: None, stderr=lambda _: None, notify=lambda _: None)
    summary = worker.run_unguarded()
    return summary.stopped, [run.task_id for run in summary.runs], len(waits)


@pytest.mark.parametrize("case", NOT_READY, ids=lambda c: c.name)
def test_a_task_that_is_not_ready_is_not_ready_anywhere(queue: Queue, case: Case) -> None:
    case.arrange(queue)
    report = queue.ready()
    assert report["ready"] == []
    reasons = {row["id"]: [r["reason"] for r in row["reasons"]] for row in report["not_ready"]}
    assert tuple(reasons.get("t", ())) == case.reasons
    with pytest.raises(NothingToDo):
        queue.claim("a")
    assert briefing_queue_line(queue.store).startswith("- Queue: 0 ready")
    stopped, ran, waited = until_empty(queue.store)
    assert ran == []
    assert (stopped, waited) == (("signal", 1) if case.waits else ("empty", 0))


def test_a_ready_task_is_ready_everywhere(queue: Queue) -> None:
    queue.add("ready", task_id="t")
    assert [t["id"] for t in queue.ready()["ready"]] == ["t"]
    assert briefing_queue_line(queue.store).startswith("- Queue: 1 ready (`loki queue claim")
    assert until_empty(queue.store) == ("empty", ["t"], 0)


def test_the_briefing_counts_what_ready_counts(queue: Queue) -> None:
    _deferred(queue)
    queue.add("ready one", task_id="r1")
    queue.add("ready two", task_id="r2")
    line = briefing_queue_line(queue.store)
    assert line.startswith("- Queue: 2 ready")
    assert "1 pending but not ready (`loki queue ready --explain` says why)" in line


# -- the same through the CLI, on the backends with a tree (memory has none) ------------------------------


@pytest.fixture(params=["file", "postgres"])
def tree_queue(request: pytest.FixtureRequest, root: Path, clock: ManualClock) -> Queue:
    """The queue of the tree at ``root`` (the memory store has none): on PostgreSQL its config names the
    test's database, so a command run with ``--root`` opens the same state."""
    if request.param == "file":
        return Queue(Store(root, clock=clock))
    store = postgres_store(root, clock)
    request.addfinalizer(store.close)
    (root / layout.CONFIG).write_text(json.dumps(
        {"version": 1, "storage": {"backend": "postgresql", "database": store.db.url}}))
    return Queue(store)


@pytest.mark.parametrize("case", NOT_READY, ids=lambda c: c.name)
def test_the_commands_agree_on_a_task_that_is_not_ready(tree_queue: Queue, root: Path, case: Case) -> None:
    case.arrange(tree_queue)
    tree = root
    env = {"LOKI_NOW": NOW}
    explained = cli(["queue", "ready", "--explain", "--json"], root=tree, env=env)
    assert explained.code == 0, explained.stderr
    report = explained.json()
    assert report["ready"] == []
    reasons = {row["id"]: [r["reason"] for r in row["reasons"]] for row in report["not_ready"]}
    assert tuple(reasons.get("t", ())) == case.reasons
    refused = cli(["queue", "claim", "--agent", "a", "-q"], root=tree, env=env)
    assert refused.code == 3 and refused.stderr.startswith("nothing")


@pytest.mark.slow  # a real hook process per case
@pytest.mark.parametrize("case", NOT_READY, ids=lambda c: c.name)
def test_the_session_start_hook_agrees_on_a_task_that_is_not_ready(tree_queue: Queue, root: Path, case: Case) -> None:
    case.arrange(tree_queue)
    tree = root
    payload = {"session_id": "s1", "cwd": str(tree.parent), "hook_event_name": "SessionStart", "source": "startup"}
    hook = loki_proc(["hook", "session-start"], root=tree, env={"LOKI_NOW": NOW}, input=json.dumps(payload))
    assert hook.code == 0, hook.stderr
    context = json.loads(hook.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "- Queue: 0 ready" in context


def test_until_empty_weighs_a_backoff_as_the_rule_does(queue: Queue) -> None:
    """A retry time further ahead than the longest backoff (a clock since set back wrote it) is not waited
    for by the rule; when its breaker holds the task back, ``--until-empty`` says the breaker, as
    ``ready --explain`` does, not a backoff until that far time."""
    from loki.work.outlook import outlook

    put_tasks(queue.store, "pending", [task("t", type="api", available_at="2027-01-25T10:00:00Z")])
    Breakers(queue.store).trip("api")
    reasons = [r["reason"] for r in queue.ready()["not_ready"][0]["reasons"]]
    assert reasons == ["breaker"]
    ahead = outlook(queue, (), queue.store.clock.now())
    assert ahead.describe() == "1 held back by a breaker"
    assert ahead.next_at is None
