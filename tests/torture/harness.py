"""The crash harness: workers run random mixed operations while a killer SIGKILLs them.

Workers cover the queue, the dead-letter review, breakers, strikes (whose third failure writes
an escalation and emits a signal) and signals, while a ``loki watch`` consumes them; all of them
are killed. After each round it runs ``loki doctor --repair``, one ``loki watch --once`` (which
finishes whatever the killed watcher had in hand) and an invariant checker:

* every task id is in exactly one state file, and every task whose ``add`` returned exists;
  no task exists that nobody tried to add;
* every file validates (jsonschema, strict parsing, cross-file checks);
* no journal and no temp file is left after doctor;
* breaker counters never exceed what was recorded (``total_failures`` <= failures attempted,
  >= failures confirmed; the same for successes);
* every emitted signal is either still waiting or in the outcome log exactly once (one whose
  emit did not return may be absent, never twice).

usage: python -m tests.torture.harness [--rounds N] [--workers N] [--seed S] [--root DIR]
Prints rounds, kills, operations and violations (must be 0); exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from loki.storage import layout
from loki.storage.store import Store
from loki.storage.tree import init_tree, validate_tree

REPO = Path(__file__).resolve().parent.parent.parent
TASK_FILES = [layout.queue_file(s) for s in layout.QUEUE_STATES]
BREAKER = "api/torture"


class Harness:
    def __init__(self, root: str, workers: int, seed: int) -> None:
        self.root = root
        self.workers = workers
        self.rng = random.Random(seed)
        self.seed = seed
        self.logs = Path(root).parent / "oplogs"
        self.logs.mkdir(exist_ok=True)
        self.stats = {"rounds": 0, "kills": 0, "operations": 0, "violations": 0}
        self.violations: list[str] = []

    def spawn(self, round_number: int) -> list[subprocess.Popen[bytes]]:
        procs = [subprocess.Popen([sys.executable, "-m", "loki", "--root", self.root, "watch", "--no-tui"],
                                  cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)]
        for n in range(self.workers):
            oplog = self.logs / f"w{n}.log"
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "tests.torture.worker", self.root, str(self.seed * 1000 + round_number * 10 + n),
                 f"r{round_number}w{n}", str(oplog)],
                cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}))
        return procs

    def _ops_done(self) -> int:
        return sum(p.read_bytes().count(b"\nend ") + p.read_bytes().startswith(b"end ")
                   for p in self.logs.glob("*.log"))

    def round(self, round_number: int) -> None:
        before = self._ops_done()
        target = before + self.rng.randint(5, 60)
        procs = self.spawn(round_number)
        deadline = time.monotonic() + 60
        # Kill once the workers have done a random number of operations: a random point in
        # some operation of some worker, without a timed sleep deciding it.
        while self._ops_done() < target and time.monotonic() < deadline:
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(0.002)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                self.stats["kills"] += 1
            else:
                err = proc.stderr.read().decode() if proc.stderr else ""
                self.violation(round_number, f"a worker exited by itself ({proc.returncode}): {err[-500:]}")
        for proc in procs:
            proc.wait(timeout=30)
        self.stats["rounds"] += 1
        self.stats["operations"] = self._ops_done()
        self.check(round_number)

    def violation(self, round_number: int, text: str) -> None:
        self.stats["violations"] += 1
        self.violations.append(f"round {round_number}: {text}")

    def _oplog(self) -> tuple[Counter[tuple[str, str]], Counter[tuple[str, str]]]:
        begun: Counter[tuple[str, str]] = Counter()
        ended: Counter[tuple[str, str]] = Counter()
        for path in self.logs.glob("*.log"):
            for line in path.read_text().splitlines():
                parts = line.split()
                if len(parts) == 3:
                    (begun if parts[0] == "begin" else ended)[(parts[1], parts[2])] += 1
        return begun, ended

    def check(self, round_number: int) -> None:
        doctor = subprocess.run([sys.executable, "-m", "loki", "--root", self.root, "doctor", "--repair", "--json"],
                                cwd=REPO, capture_output=True, text=True)
        if doctor.returncode != 0:
            self.violation(round_number, f"doctor is not healthy: {doctor.stdout[-800:]} {doctor.stderr[-500:]}")
        leftovers = [str(p.relative_to(self.root)) for p in Path(self.root).rglob("*")
                     if p.name.endswith(".tmp") or p.name.endswith(".journal.json")]
        if leftovers:
            self.violation(round_number, f"left after doctor: {leftovers}")
        once = subprocess.run([sys.executable, "-m", "loki", "--root", self.root, "watch", "--once", "--json"],
                              cwd=REPO, capture_output=True, text=True)
        if once.returncode != 0:
            self.violation(round_number, f"watch --once failed ({once.returncode}): {once.stderr[-500:]}")
        store = Store(self.root)
        problems = [str(p) for p in validate_tree(store)]
        if problems:
            self.violation(round_number, f"invalid files: {problems[:5]}")
            return
        begun, ended = self._oplog()
        seen: Counter[str] = Counter()
        for rel in TASK_FILES:
            seen.update(t["id"] for t in store.read(rel)["tasks"])
        for rel in (layout.DEADLETTER, layout.ABANDONED):
            seen.update(e["task_id"] for e in store.read(rel)["tasks"])
        for task_id, count in seen.items():
            if count > 1:
                self.violation(round_number, f"task {task_id} is in {count} files")
            if begun[("add", task_id)] == 0:
                self.violation(round_number, f"task {task_id} exists but nobody added it")
        for (op, task_id), _ in ended.items():
            if op == "add" and task_id not in seen:
                self.violation(round_number, f"task {task_id} was added and is gone")
        self._check_signals(round_number, begun, ended)
        entry = store.read(layout.BREAKERS).get(BREAKER)
        for kind, field in (("breaker-failure", "total_failures"), ("breaker-success", "total_successes")):
            recorded = int((entry or {}).get(field, 0))
            if not ended[(kind, BREAKER)] <= recorded <= begun[(kind, BREAKER)]:
                self.violation(round_number, f"{field} {recorded} outside [{ended[(kind, BREAKER)]}, "
                                             f"{begun[(kind, BREAKER)]}]")


    def _check_signals(self, round_number: int, begun: Counter[tuple[str, str]],
                       ended: Counter[tuple[str, str]]) -> None:
        logged: Counter[str] = Counter()
        log = Path(self.root) / "logs" / "signals.jsonl"
        for line in (log.read_text().splitlines() if log.exists() else []):
            record = json.loads(line)
            message = (record.get("signal") or {}).get("message")
            if isinstance(message, str):
                logged[message] += 1
        waiting: Counter[str] = Counter()
        for path in (Path(self.root) / "signals").rglob("*"):
            if path.is_file() and ".archive" not in path.parts and ".quarantine" not in path.parts:
                text = path.read_text(errors="replace")
                for (op, nonce), _ in begun.items():
                    if op == "signal" and f'"{nonce}"' in text:
                        waiting[nonce] += 1
        for (op, nonce), _ in begun.items():
            if op != "signal":
                continue
            total = logged[nonce] + waiting[nonce]
            if total > 1:
                self.violation(round_number, f"signal {nonce} seen {total} times (log {logged[nonce]}, "
                                             f"waiting {waiting[nonce]})")
            if ended[(op, nonce)] and total == 0:
                self.violation(round_number, f"signal {nonce} was emitted and is gone")


def run(rounds: int, workers: int, seed: int, root: str | None = None) -> dict[str, Any]:
    base = root or tempfile.mkdtemp(prefix="loki-torture-")
    state = os.path.join(base, ".loki")
    init_tree(state)
    harness = Harness(state, workers, seed)
    for round_number in range(rounds):
        harness.round(round_number)
    return {**harness.stats, "violation_details": harness.violations[:20], "root": state}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    parser.add_argument("--root", default=None)
    args = parser.parse_args(argv)
    started = time.monotonic()
    result = run(args.rounds, args.workers, args.seed, args.root)
    result["seconds"] = round(time.monotonic() - started, 1)
    result["seed"] = args.seed
    print(json.dumps(result, indent=2))
    print(f"rounds {result['rounds']}  kills {result['kills']}  operations {result['operations']}  "
          f"violations {result['violations']}  ({result['seconds']} s, seed {args.seed})")
    return 1 if result["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
