"""One torture worker: random mixed operations on a shared .loki/ until it is killed.

Every operation is written to the worker's op log twice, unbuffered: ``begin`` before it
starts and ``end`` once it returned. A SIGKILL can land anywhere, so the checker treats a
``begin`` without ``end`` as "may or may not have happened" and an ``end`` as "happened".

usage: python -m tests.torture.worker ROOT SEED WORKER OPLOG
"""

from __future__ import annotations

import contextlib
import os
import random
import shlex
import sys

from loki.breakers.breakers import Breakers
from loki.errors import LokiError
from loki.queue.deadletter import DeadLetter
from loki.queue.queue import Queue
from loki.signals import emit as signals
from loki.spend.budgets import Budgets
from loki.spend.budgets import claim as budget_claim
from loki.storage.store import Store
from loki.strikes.strikes import Strikes

BREAKER = "api/torture"
CHECK = shlex.join([sys.executable, "-I", "-S", os.path.join(os.path.dirname(os.path.abspath(__file__)), "check.py")])
"""The declared check (tests/torture/check.py) half the tasks carry: ``loki work`` runs it after the agent."""
LANDINGS = "landings.json"
"""Beside the tree (the harness writes it): the commits a task may land with, ``{"chain": [[commit, branch]],
"doomed": [[commit, branch]]}`` (docs/verify.md, "Landing")."""
LEASE_PATTERNS = ["src/**", "src/a.py", "src/*.py", "**/a.py", "docs/x.md"]
"""All but the last overlap each other: two live exclusive leases of two of them is a violation."""


class Worker:
    def __init__(self, root: str, seed: int, name: str, oplog: str) -> None:
        self.rng = random.Random(seed)
        self.name = name
        self.store = Store(root, validate_all=False, lock_timeout=30)
        self.queue = Queue(self.store)
        self.log_fd = os.open(oplog, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.serial = 0
        self.held: list[tuple[str, str]] = []
        self.leases: list[str] = []
        with open(os.path.join(os.path.dirname(os.path.abspath(root)), LANDINGS)) as f:
            import json

            found = json.load(f)
        self.chain: list[tuple[str, str]] = [tuple(pair) for pair in found["chain"]]
        self.doomed: list[tuple[str, str]] = [tuple(pair) for pair in found["doomed"]]

    def log(self, *words: str) -> None:
        os.write(self.log_fd, (" ".join(words) + "\n").encode())

    def run(self) -> None:
        ops = [(self.add, 5), (self.claim, 5), (self.finish, 6), (self.breaker, 4), (self.maintenance, 2),
               (self.strike, 3), (self.signal, 4), (self.budget, 1), (self.lease, 3), (self.land_check, 2)]
        choices = [op for op, weight in ops for _ in range(weight)]
        while True:
            # Conflicts and nothing-to-do are part of the game; the checker looks at the files.
            with contextlib.suppress(LokiError):
                self.rng.choice(choices)()

    def add(self) -> None:
        self.serial += 1
        task_id = f"{self.name}-{self.serial}"
        self.log("begin", "add", task_id)
        self.queue.add(f"torture task {task_id}", task_id=task_id, max_attempts=self.rng.choice([1, 2, 3]),
                       priority=self.rng.choice(["high", "medium", "low"]),
                       verify=[CHECK] if self.rng.random() < 0.5 else None,
                       land="main" if self.rng.random() < 0.6 else None)
        self.log("end", "add", task_id)

    def land_check(self) -> None:
        """Resolve the landing tasks (what the watcher's tick does too): killed in it as anywhere else."""
        self.queue.land_check()

    def claim(self) -> None:
        # Within the budgets (docs/spend.md): a spent one refuses, writing BUDGET_EXCEEDED and the budgets file.
        task = budget_claim(self.queue, self.name, lease_seconds=self.rng.choice([1, 3600]),
                            reserve=self.rng.choice([0.0, 0.01]))
        self.held.append((task["id"], task["claim_token"]))

    def finish(self) -> None:
        if not self.held:
            return
        task_id, token = self.held.pop(self.rng.randrange(len(self.held)))
        roll = self.rng.random()
        # What the claim spent, its model a nonce: the checker finds each recorded finish's entry exactly once.
        self.serial += 1
        nonce = f"{self.name}-u{self.serial}"
        usage = {"input_tokens": 1, "output_tokens": 1, "cache_read_tokens": 0, "cache_creation_tokens": 0,
                 "source": "result_file", "model": nonce, "usd": 0.01, "usd_source": "agent"}
        self.log("begin", "usage", nonce)
        # its work: on the chain main moves along, or on a branch that may be deleted unmerged
        commit, branch = self.rng.choice(self.chain if self.rng.random() < 0.5 else self.doomed)
        if roll < 0.25:  # refused (and nothing written) when the task has checks; landing when it must land
            self.queue.complete(task_id, self.name, token=token, usage=usage, head=commit, work_branch=branch)
        elif roll < 0.5:
            self.queue.complete(task_id, self.name, token=token, forced_by=self.name, usage=usage)
        elif roll < 0.9:
            self.queue.fail(task_id, self.name, token=token, error=f"error {self.rng.choice('abcdef')}",
                            approach=f"approach {self.rng.randrange(5)}", error_type="test_failure", usage=usage)
        else:
            self.queue.release(task_id, self.name, token=token, usage=usage)
        self.log("end", "usage", nonce)

    def budget(self) -> None:
        """Set or remove a budget (state/budgets.json), generous or nearly spent."""
        budgets = Budgets(self.store)
        # Scoped to this worker: a spent one refuses its claims, never the loki work agents' beside it.
        name = self.rng.choice([self.name, f"{self.name}-tokens"])
        if self.rng.random() < 0.7:
            if name == self.name:
                budgets.set(name, usd=self.rng.choice([0.05, 1000.0]), per="hour", scope=f"agent:{self.name}")
            else:
                budgets.set(name, tokens=self.rng.choice([10, 10**9]), per="day", scope=f"agent:{self.name}")
        else:
            budgets.remove(name)

    def breaker(self) -> None:
        breakers = Breakers(self.store)
        if self.rng.random() < 0.5:
            self.log("begin", "breaker-failure", BREAKER)
            breakers.record_failure(BREAKER, error="torture")
            self.log("end", "breaker-failure", BREAKER)
        else:
            self.log("begin", "breaker-success", BREAKER)
            breakers.record_success(BREAKER)
            self.log("end", "breaker-success", BREAKER)

    def lease(self) -> None:
        """Take an exclusive path lease on one of a few overlapping patterns, or give one back."""
        from loki.leases.leases import PathLeases

        leases = PathLeases(self.store)
        if self.leases and self.rng.random() < 0.5:
            leases.release(self.leases.pop(self.rng.randrange(len(self.leases))), agent=self.name)
            return
        self.log("begin", "lease", self.name)
        lease = leases.acquire([self.rng.choice(LEASE_PATTERNS)], agent=self.name, ttl=self.rng.choice([1, 3600]))
        self.leases.append(lease["lease_id"])
        self.log("end", "lease", lease["lease_id"])

    def strike(self) -> None:
        """A tool call failing, or succeeding, on a shared branch (strikes, escalations, signals)."""
        strikes = Strikes(self.store, branch="torture")
        command = {"command": f"make build-{self.rng.randrange(3)}"}
        if self.rng.random() < 0.75:
            strikes.record_failure("Bash", command, f"make: *** [build] Error {self.rng.randrange(1, 3)}",
                                   session=self.name)
        else:
            strikes.record_success("Bash", command)

    def signal(self) -> None:
        """Emit a signal carrying a nonce the checker can count in the outcome log."""
        self.serial += 1
        nonce = f"{self.name}-s{self.serial}"
        self.log("begin", "signal", nonce)
        signals.emit(self.store, "DOCS_NEEDED", {"message": nonce}, agent=self.name)
        self.log("end", "signal", nonce)

    def maintenance(self) -> None:
        roll = self.rng.random()
        if roll < 0.3:
            self.queue.requeue_stale()
        elif roll < 0.5:
            DeadLetter(self.store).review(force=True)
        elif roll < 0.8:
            pending = self.queue.list_tasks("dead-letter", limit=5)["tasks"]
            if pending:
                self.queue.retry(self.rng.choice(pending)["id"])
        else:
            pending = self.queue.list_tasks("pending", limit=5)["tasks"]
            if pending:
                self.queue.cancel(self.rng.choice(pending)["id"], reason="torture")


if __name__ == "__main__":
    root, seed, name, oplog = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    Worker(root, seed, name, oplog).run()
