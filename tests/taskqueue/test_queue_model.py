"""Model-based test of the queue (hypothesis stateful testing).

Random sequences of add / claim / claim --id / heartbeat / complete / fail / release /
requeue-stale / cancel / retry / dead-letter review / edit / close / defer / time passing run
against the real queue and against a small in-memory model written straight from the
specification. After every step the ``.loki/`` tree must equal the model (which file each task is
in, its attempts, its holder, its claim token, its priority and dependencies, its deferral), every
file must validate, and the invariants of a person's changes hold: the dependencies stay acyclic,
a held task's lease and token change only through its holder or ``--force``, and each task's
history records every state it went through, in order.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from loki.clock import ManualClock, add_seconds, format_ts, parse_ts
from loki.errors import Conflict, InvalidArgument, InvalidInput, NothingToDo
from loki.queue.deadletter import DeadLetter
from loki.queue.queue import Queue
from loki.storage import layout
from loki.storage.store import Store
from loki.storage.tree import init_tree, validate_tree

pytestmark = pytest.mark.slow  # a hypothesis state machine against a model: ~6 s (make test-fast skips it)

AGENTS = ("a1", "a2", "a3")
PRIORITIES = ("high", "medium", "low")
RANK = {p: n for n, p in enumerate(PRIORITIES)}
LEASE = 60
MAX_ATTEMPTS = 3
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo")


class ModelTask:
    def __init__(self, task_id: str, priority: str, deps: list[str], created: str, serial: int) -> None:
        self.id = task_id
        self.priority = priority
        self.deps = deps
        self.created = created
        self.serial = serial
        self.state = "pending"
        self.attempts = 0
        self.holder: str | None = None
        self.lease_until: str | None = None
        self.token: str | None = None
        self.available_at = created
        self.max_attempts = MAX_ATTEMPTS
        self.deferred_until: str | None = None
        self.transitions = ["pending"]
        """Every state the task went through, in order: what its history must record."""

    def move(self, state: str) -> None:
        self.state = state
        self.transitions.append(state)


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="loki-model-")
        root = f"{self.tmp}/.loki"
        init_tree(root)
        self.clock = ManualClock("2026-01-25T10:00:00Z")
        self.store = Store(root, clock=self.clock, validate_all=False)
        self.queue = Queue(self.store)
        self.tasks: dict[str, ModelTask] = {}
        self.pending_order: list[str] = []  # the order of pending.json, which breaks FIFO ties
        self.in_progress_order: list[str] = []  # expired leases are requeued in this order
        self.counter = 0
        self.word = 0

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- helpers -------------------------------------------------------------------------------------

    def now(self) -> str:
        return format_ts(self.clock.now())

    def _leave_in_progress(self, task: ModelTask) -> None:
        if task.state == "in-progress":
            self.in_progress_order.remove(task.id)

    def _to_pending(self, task: ModelTask, available_at: str) -> None:
        task.move("pending")
        task.holder = None
        task.lease_until = None
        task.token = None
        task.available_at = available_at
        self.pending_order.append(task.id)

    def _leave_pending(self, task: ModelTask) -> None:
        self.pending_order.remove(task.id)

    def _record_failure(self, task: ModelTask) -> None:
        self._leave_in_progress(task)
        task.state = "failing"
        task.attempts += 1
        task.holder = None
        task.lease_until = None
        task.token = None
        if task.attempts >= task.max_attempts:
            task.move("dead-letter")
        else:
            delay = min(5 * 2 ** (task.attempts - 1), 300)
            self._to_pending(task, format_ts(add_seconds(self.clock.now(), delay)))

    def _expire_leases(self) -> None:
        for task in [self.tasks[i] for i in self.in_progress_order]:
            if task.lease_until is not None and parse_ts(task.lease_until) < self.clock.now():
                self._record_failure(task)

    def _ready(self, task: ModelTask) -> bool:
        return (task.state == "pending" and parse_ts(task.available_at) <= self.clock.now()
                and (task.deferred_until is None or parse_ts(task.deferred_until) <= self.clock.now())
                and all(self.tasks[d].state == "completed" for d in task.deps))

    def _error(self) -> str:
        self.word += 1
        return f"{WORDS[self.word % len(WORDS)]} failed in {WORDS[(self.word // len(WORDS)) % len(WORDS)]}"

    # -- rules -----------------------------------------------------------------------------------------

    def _never_ready(self) -> set[str]:
        """Pending tasks that wait, directly or through each other, on a cancelled or abandoned task."""
        stuck: set[str] = set()
        changed = True
        while changed:
            changed = False
            for task in self.tasks.values():
                if task.state == "pending" and task.id not in stuck and any(
                        self.tasks[d].state in ("cancelled", "abandoned") or d in stuck for d in task.deps):
                    stuck.add(task.id)
                    changed = True
        return stuck

    @rule(priority=st.sampled_from(PRIORITIES), dep_picks=st.lists(st.integers(0, 50), max_size=2))
    def add(self, priority: str, dep_picks: list[int]) -> None:
        existing = sorted(self.tasks)
        deps = sorted({existing[p % len(existing)] for p in dep_picks}) if existing else []
        stuck = self._never_ready()
        if any(self.tasks[d].state in ("cancelled", "abandoned") or d in stuck for d in deps):
            with pytest.raises(InvalidInput, match="it would never be ready"):
                self.queue.add("refused", task_id="refused", depends_on=deps)
            return
        self.counter += 1
        task_id = f"t{self.counter:03d}"
        self.queue.add(f"task {self.counter}", task_id=task_id, priority=priority, depends_on=deps,
                       max_attempts=MAX_ATTEMPTS)
        self.tasks[task_id] = ModelTask(task_id, priority, deps, self.now(), self.counter)
        self.pending_order.append(task_id)

    @rule(agent=st.sampled_from(AGENTS))
    def claim(self, agent: str) -> None:
        self._expire_leases()
        ready = [self.tasks[i] for i in self.pending_order if self._ready(self.tasks[i])]
        expected = min(ready, key=lambda t: (RANK[t.priority], t.created, self.pending_order.index(t.id)),
                       default=None)
        try:
            got = self.queue.claim(agent, lease_seconds=LEASE)
        except NothingToDo:
            assert expected is None
            return
        assert expected is not None and got["id"] == expected.id
        self._take(expected, agent, got)

    def _take(self, task: ModelTask, agent: str, got: dict[str, Any]) -> None:
        self._leave_pending(task)
        self.in_progress_order.append(task.id)
        task.move("in-progress")
        task.holder = agent
        task.lease_until = format_ts(add_seconds(self.clock.now(), LEASE))
        task.token = got["claim_token"]

    @rule(pick=st.integers(0, 99), agent=st.sampled_from(AGENTS))
    def claim_by_id(self, pick: int, agent: str) -> None:
        if not self.tasks:
            return
        before = copy.deepcopy((self.tasks, self.pending_order, self.in_progress_order))
        self._expire_leases()
        task = self.tasks[sorted(self.tasks)[pick % len(self.tasks)]]
        try:
            got = self.queue.claim(agent, task_id=task.id, lease_seconds=LEASE)
        except NothingToDo:
            assert task.state == "pending" and not self._ready(task), f"{task.id} is ready but was refused"
            return
        except Conflict:
            assert task.state != "pending", f"{task.id} is pending but claim --id was a conflict"
            # A refusal changes nothing ("nothing changed", Queue._chosen): the expired leases the claim's
            # unit requeued are rolled back with it, and requeued by the next claim or requeue-stale.
            self.tasks, self.pending_order, self.in_progress_order = before
            return
        assert self._ready(task), f"{task.id} was claimed by id but is not ready"
        self._take(task, agent, got)

    def _holder_call(self, pick: int, agent_pick: int, call: Any) -> ModelTask | None:
        """Run ``call(task_id, agent)`` on some task; check that only its holder succeeds."""
        if not self.tasks:
            return None
        task = self.tasks[sorted(self.tasks)[pick % len(self.tasks)]]
        agent = AGENTS[agent_pick % len(AGENTS)]
        is_holder = task.state == "in-progress" and task.holder == agent
        try:
            call(task.id, agent)
        except Conflict:
            assert not is_holder, f"{agent} holds {task.id} but was refused"
            return None
        assert is_holder, f"{agent} does not hold {task.id} ({task.state}, {task.holder}) but succeeded"
        return task

    @rule(pick=st.integers(0, 99), agent_pick=st.integers(0, 2))
    def complete(self, pick: int, agent_pick: int) -> None:
        task = self._holder_call(pick, agent_pick, lambda i, a: self.queue.complete(i, a))
        if task is not None:
            self._leave_in_progress(task)
            task.move("completed")
            # the token of the claim that completed it stays: a retried complete with it is recognised
            task.holder, task.lease_until = None, None

    @rule(pick=st.integers(0, 99), agent_pick=st.integers(0, 2))
    def fail(self, pick: int, agent_pick: int) -> None:
        error = self._error()
        task = self._holder_call(pick, agent_pick, lambda i, a: self.queue.fail(
            i, a, error=error, error_type="test_failure", approach=f"approach {self.word}"))
        if task is not None:
            self._record_failure(task)

    @rule(pick=st.integers(0, 99), agent_pick=st.integers(0, 2))
    def release(self, pick: int, agent_pick: int) -> None:
        task = self._holder_call(pick, agent_pick, lambda i, a: self.queue.release(i, a))
        if task is not None:
            self._leave_in_progress(task)
            self._to_pending(task, task.available_at)

    @rule(pick=st.integers(0, 99), agent_pick=st.integers(0, 2))
    def heartbeat(self, pick: int, agent_pick: int) -> None:
        task = self._holder_call(pick, agent_pick, lambda i, a: self.queue.heartbeat(i, a, lease_seconds=LEASE))
        if task is not None:
            task.lease_until = format_ts(add_seconds(self.clock.now(), LEASE))

    @rule(seconds=st.sampled_from([1, 5, 30, 61, 300]))
    def time_passes(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @rule()
    def requeue_stale(self) -> None:
        self.queue.requeue_stale()
        self._expire_leases()

    @rule(pick=st.integers(0, 99), force=st.booleans())
    def cancel(self, pick: int, force: bool) -> None:
        if not self.tasks:
            return
        task = self.tasks[sorted(self.tasks)[pick % len(self.tasks)]]
        try:
            self.queue.cancel(task.id, force=force, by="human")
        except Conflict:
            assert task.state not in ("pending", "blocked", "failed")
            assert task.state != "in-progress" or not force
            return
        assert task.state in ("pending", "blocked", "failed") or (task.state == "in-progress" and force)
        self._finish(task, "cancelled")

    def _finish(self, task: ModelTask, state: str) -> None:
        if task.state == "pending":
            self._leave_pending(task)
        self._leave_in_progress(task)
        task.move(state)
        task.holder, task.lease_until, task.token = None, None, None

    @rule(pick=st.integers(0, 99))
    def retry(self, pick: int) -> None:
        if not self.tasks:
            return
        task = self.tasks[sorted(self.tasks)[pick % len(self.tasks)]]
        try:
            self.queue.retry(task.id)
        except Conflict:
            assert task.state not in ("failed", "cancelled", "dead-letter")
            return
        assert task.state in ("failed", "cancelled", "dead-letter")
        self._to_pending(task, self.now())

    @precondition(lambda self: any(t.state == "dead-letter" for t in self.tasks.values()))
    @rule()
    def review(self) -> None:
        DeadLetter(self.store).review(force=True)
        # With distinct errors and approaches, no labels and no discovered dependencies, the only
        # decision the protocol can take here is the attempts criterion.
        for task in self.tasks.values():
            if task.state == "dead-letter" and task.attempts >= 10:
                task.move("abandoned")

    # -- a person's changes ----------------------------------------------------------------------------

    def _reaches(self, start: str, target: str) -> bool:
        """Does ``start`` wait on ``target``, through tasks that may still run (abandoned ones end a path)?"""
        seen, stack = set(), [start]
        while stack:
            node = stack.pop()
            if node == target:
                return True
            if node in seen or self.tasks[node].state == "abandoned":
                continue
            seen.add(node)
            stack.extend(self.tasks[node].deps)
        return False

    @rule(pick=st.integers(0, 99), priority=st.sampled_from(PRIORITIES), dep_pick=st.none() | st.integers(0, 99),
          force=st.booleans())
    def edit(self, pick: int, priority: str, dep_pick: int | None, force: bool) -> None:
        if not self.tasks:
            return
        task = self.tasks[sorted(self.tasks)[pick % len(self.tasks)]]
        dep = None if dep_pick is None else sorted(self.tasks)[dep_pick % len(self.tasks)]
        adding = [dep] if dep is not None and dep not in task.deps else []
        refused: type[Exception] | None = None
        if task.state not in ("pending", "in-progress", "blocked", "failed", "dead-letter") or (
                task.state == "in-progress" and not force):
            refused = Conflict
        elif adding and dep == task.id:
            refused = InvalidArgument
        elif adding and (self.tasks[dep].state in ("cancelled", "abandoned") or dep in self._never_ready()
                         or self._reaches(dep, task.id)):
            refused = InvalidInput
        try:
            self.queue.edit(task.id, priority=priority, add_dependencies=adding, by="human", force=force)
        except (Conflict, InvalidArgument, InvalidInput) as error:
            assert refused is not None and isinstance(error, refused), f"{task.id}: {error}"
            return
        assert refused is None, f"{task.id} ({task.state}) edited; expected {refused}"
        task.priority = priority
        task.deps.extend(adding)

    @rule(pick=st.integers(0, 99), wont_do=st.booleans(), force=st.booleans())
    def close(self, pick: int, wont_do: bool, force: bool) -> None:
        if not self.tasks:
            return
        task = self.tasks[sorted(self.tasks)[pick % len(self.tasks)]]
        allowed = task.state in ("pending", "blocked", "failed", "dead-letter") or (
            task.state == "in-progress" and force)
        try:
            self.queue.close(task.id, reason="a person decided", wont_do=wont_do, by="human", force=force)
        except Conflict:
            assert not allowed, f"{task.id} ({task.state}) could be closed"
            return
        assert allowed, f"{task.id} ({task.state}) was closed"
        self._finish(task, ("abandoned" if task.state == "dead-letter" else "cancelled") if wont_do else "completed")

    @rule(pick=st.integers(0, 99), seconds=st.sampled_from([0, 30, 600]), force=st.booleans())
    def defer(self, pick: int, seconds: int, force: bool) -> None:
        if not self.tasks:
            return
        task = self.tasks[sorted(self.tasks)[pick % len(self.tasks)]]
        allowed = task.state == "pending" or (task.state == "in-progress" and force)
        try:
            self.queue.defer(task.id, until=f"{seconds}s" if seconds else "now", by="human", force=force)
        except Conflict:
            assert not allowed, f"{task.id} ({task.state}) could be deferred"
            return
        assert allowed, f"{task.id} ({task.state}) was deferred"
        if task.state == "in-progress":
            self._leave_in_progress(task)
            self._to_pending(task, task.available_at)
        task.deferred_until = format_ts(add_seconds(self.clock.now(), seconds)) if seconds else None

    # -- the invariants ----------------------------------------------------------------------------------

    @invariant()
    def dependencies_stay_acyclic(self) -> None:
        # among the tasks that may still run (an abandoned task never will: a path through it binds nothing)
        for task_id, task in self.tasks.items():
            if task.state != "abandoned":
                assert not any(self._reaches(dep, task_id) for dep in task.deps), f"a dependency cycle via {task_id}"

    @invariant()
    def tree_equals_model(self) -> None:
        store = self.store
        where: dict[str, tuple[str, dict[str, Any]]] = {}
        for state in layout.QUEUE_STATES:
            for task in store.read(layout.queue_file(state))["tasks"]:
                assert task["id"] not in where, f"{task['id']} is in two files"
                assert task["status"] == state
                where[task["id"]] = (state, task)
        for state, rel in (("dead-letter", layout.DEADLETTER), ("abandoned", layout.ABANDONED)):
            for entry in store.read(rel)["tasks"]:
                assert entry["task_id"] not in where, f"{entry['task_id']} is in two files"
                assert entry["failure_count"] == len(entry["attempts"])
                where[entry["task_id"]] = (state, entry["task_data"])
        assert set(where) == set(self.tasks), "a task was lost or invented"
        for task_id, model in self.tasks.items():
            state, task = where[task_id]
            assert state == model.state, f"{task_id}: file says {state}, model says {model.state}"
            assert len(task["attempts"]) == model.attempts, task_id
            assert task["claimed_by"] == model.holder, task_id
            # a held task's lease and token change only through its holder, or a person's --force
            assert task["lease_until"] == model.lease_until, task_id
            assert task["claim_token"] == model.token, task_id
            assert (task["priority"], task["dependencies"]) == (model.priority, model.deps), task_id
            assert (task.get("deferred") or {}).get("until") == model.deferred_until, task_id
            # the history is complete: every state the task went through, in order
            recorded = [e["to"] for e in task["history"] if e.get("to")]
            assert recorded == model.transitions, f"{task_id}: history {recorded}, model {model.transitions}"
            if state == "pending":
                assert task["available_at"] == model.available_at, task_id
        pending = [t["id"] for t in store.read(layout.queue_file("pending"))["tasks"]]
        assert pending == self.pending_order
        in_progress = [t["id"] for t in store.read(layout.queue_file("in-progress"))["tasks"]]
        assert in_progress == self.in_progress_order
        for rel in [layout.queue_file(s) for s in layout.QUEUE_STATES] + [layout.DEADLETTER, layout.ABANDONED]:
            data = store.read_bytes(rel)
            assert data is not None
            assert store.schemas.problems(layout.kind_for(rel).schema, store.parse(rel, data)) == []  # type: ignore[union-attr]

    def check_whole_tree(self) -> None:
        # Every file is valid; the only problems are the tasks the model also knows can never be ready.
        problems = validate_tree(self.store)
        assert all("can never be ready" in p.message for p in problems), [str(p) for p in problems]
        assert {p.message.split("'")[1] for p in problems} == self._never_ready()


QueueMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("LOKI_MODEL_EXAMPLES", "60")), stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestQueueModel = QueueMachine.TestCase


def test_a_long_random_run_validates_with_the_reference_validator() -> None:
    machine = QueueMachine()
    try:
        rng = __import__("random").Random(7)
        for _ in range(300):
            choice = rng.randrange(11)
            if choice == 0 or not machine.tasks:
                machine.add(rng.choice(PRIORITIES), [rng.randrange(50)] if rng.random() < 0.3 else [])
            elif choice == 1:
                machine.claim(rng.choice(AGENTS))
            elif choice == 2:
                machine.fail(rng.randrange(99), rng.randrange(3))
            elif choice == 3:
                machine.complete(rng.randrange(99), rng.randrange(3))
            elif choice == 4:
                machine.time_passes(rng.choice([1, 5, 30, 61, 300]))
            elif choice == 5:
                machine.retry(rng.randrange(99))
            elif choice == 6:
                machine.requeue_stale()
            elif choice == 7:
                machine.edit(rng.randrange(99), rng.choice(PRIORITIES),
                             rng.randrange(99) if rng.random() < 0.5 else None, rng.random() < 0.3)
            elif choice == 8:
                machine.close(rng.randrange(99), rng.random() < 0.5, rng.random() < 0.3)
            elif choice == 9:
                machine.defer(rng.randrange(99), rng.choice([0, 30, 600]), rng.random() < 0.3)
            else:
                machine.claim_by_id(rng.randrange(99), rng.choice(AGENTS))
            machine.tree_equals_model()
        machine.check_whole_tree()
    finally:
        machine.teardown()
