"""The crash harness: workers run random mixed operations while a killer SIGKILLs them.

Workers cover the queue, the dead-letter review, breakers, path leases, strikes (whose third failure writes
an escalation and emits a signal) and signals, while a ``loki watch`` consumes them; all of them
are killed. After each round it runs ``loki doctor --repair``, one ``loki watch --once`` (which
finishes whatever the killed watcher had in hand) and an invariant checker:

* every task id is in exactly one state file, and every task whose ``add`` returned exists;
  no task exists that nobody tried to add;
* every file validates (jsonschema, strict parsing, cross-file checks);
* no journal and no temp file is left after doctor;
* breaker counters never exceed what was recorded (``total_failures`` <= failures attempted,
  >= failures confirmed; the same for successes);
* no two live exclusive path leases of different workers overlap, and every lease was asked for;
* every emitted signal is either still waiting or in the outcome log exactly once (one whose
  emit did not return may be absent, never twice);
* landing (docs/verify.md): the tree's directory is a git repository whose ``main`` the harness moves along
  a chain of commits between rounds, and whose ``doomed/N`` branches it deletes; workers complete tasks
  that must land with those commits and resolve them (``land_check``) beside the watcher's tick. No task
  moves to completed twice, every task that landed has its commit on ``main``, every task in landing has
  its record, and a task sent back from landing names a commit of a deleted branch.

``loki work`` agents run beside the workers (``--work N`` per round, each with a short lease), their
command tests/torture/agent.py, whose side effects count what really ran; they are killed as well, at
random, often while their command runs. Then:

* no task was run by two live agents at once (the agent notices it through an flock);
* no command outlives its killed ``loki work`` (the guard takes it down);
* every task ``loki work`` completed has the side effect of the run that completed it (its token);
* a run whose work was done but not recorded as a completion is the last run of an agent that was killed
  (or its task was cancelled under it): a live agent never loses a finished task, so no task is run again
  except after its agent died.

With ``--serve`` a ``loki serve`` runs on the tree each round, with a client sending it hook requests and board
actions (tests/torture/httpworker.py); it is SIGKILLed with the rest, and the same invariants must hold (the
next round's server must start: its lock went with the killed one).

usage: python -m tests.torture.harness [--rounds N] [--workers N] [--work N] [--seed S] [--root DIR] [--serve]
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
from tests import forkstart
from tests.helpers import process_gone

REPO = Path(__file__).resolve().parent.parent.parent
AGENT = [sys.executable, "-I", "-S", str(Path(__file__).resolve().parent / "agent.py")]
AGENT_WAIT = 3.0
"""Seconds a round may wait for the loki work agents' runs once the workers' operations are done."""
SERVE_WAIT = 10.0
"""Seconds a round may wait for the server's client to have requests answered (--serve)."""
TASK_FILES = [layout.queue_file(s) for s in layout.QUEUE_STATES]
BREAKER = "api/torture"


class Harness:
    def __init__(self, root: str, workers: int, seed: int, work: int = 0, serve: bool = False) -> None:
        self.root = root
        self.serve = serve
        self.workers = workers
        self.work = work
        self.rng = random.Random(seed)
        self.seed = seed
        self.logs = Path(root).parent / "oplogs"
        self.logs.mkdir(exist_ok=True)
        self.side_log = Path(root).parent / "agent-side-effects.log"
        self.agent_locks = Path(root).parent / "agent-locks"
        self.agent_locks.mkdir(exist_ok=True)
        self.agent_tmp = Path(root).parent / "agent-tmp"  # loki work's scratch directories, killed or not
        self.agent_tmp.mkdir(exist_ok=True)
        self.stats = {"rounds": 0, "kills": 0, "operations": 0, "violations": 0, "work_kills": 0, "work_runs": 0,
                      "work_completed": 0, "work_done_unrecorded": 0, "work_verified": 0, "serve_requests": 0,
                      "serve_refused": 0, "landed": 0, "unlanded": 0, "landing": 0}
        self.violations: list[str] = []
        self._checked_starts = 0
        self._checked_checks = 0
        self.repo = str(Path(root).parent)
        self.landings = make_landings(self.repo)
        self.main_at = 0
        self.deleted: set[str] = set()

    def spawn_agents(self, round_number: int) -> list[subprocess.Popen[bytes]]:
        """``loki work`` agents: a 6 s lease (renewed every 2 s); one run in four fails, one in three is slow."""
        env_path = {"PYTHONPATH": str(REPO)}  # they run in the tree's repository, not in loki's
        return [subprocess.Popen(
            [sys.executable, "-m", "loki", "--root", self.root, "work", "--agent", f"r{round_number}k{n}",
             "--lease", "6", "--until-empty", "--json", "--", *AGENT, str(self.side_log), str(self.agent_locks),
             "4", "3"],
            # in the tree's repository (main's HEAD, a clean work tree): a task that must land waits for main there
            cwd=self.repo, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env={**os.environ, **env_path, "PYTHONDONTWRITEBYTECODE": "1", "LOKI_LOCK_TIMEOUT": "30",
                 "TMPDIR": str(self.agent_tmp), "LOKI_TORTURE_SIDE_LOG": str(self.side_log)})
            for n in range(self.work)]

    def spawn(self, round_number: int) -> list[Any]:
        # Real processes forked from a warm interpreter (tests/forkstart.py): each round starts 5-7 of them, and a
        # cold start (the interpreter, loki's imports) was most of a short-lived worker's CPU.
        procs = [forkstart.spawn_module("loki", ["--root", self.root, "watch", "--no-tui"], cwd=REPO,
                                           stdout=subprocess.DEVNULL)]
        for n in range(self.workers):
            oplog = self.logs / f"w{n}.log"
            procs.append(forkstart.spawn_module(
                "tests.torture.worker", [self.root, str(self.seed * 1000 + round_number * 10 + n),
                                         f"r{round_number}w{n}", str(oplog)],
                cwd=REPO, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, stdout=subprocess.DEVNULL))
        if self.serve:
            # `loki serve` on the tree, killed with the rest, and a client sending it hook requests and board
            # actions (tests/torture/httpworker.py). A server that cannot start again (its lock, its port) exits
            # by itself: a violation.
            procs.append(forkstart.spawn_module("loki", ["--root", self.root, "serve"], cwd=REPO,
                                                stdout=subprocess.DEVNULL))
            procs.append(forkstart.spawn_module(
                "tests.torture.httpworker", [self.root, str(self.seed * 1000 + round_number), f"r{round_number}h",
                                             str(self.logs / "http.log")], cwd=REPO, stdout=subprocess.DEVNULL))
        return procs

    def _ops_done(self) -> int:
        return sum(p.read_bytes().count(b"\nend ") + p.read_bytes().startswith(b"end ")
                   for p in self.logs.glob("*.log"))

    def _served(self) -> int:
        http_log = self.logs / "http.log"
        return http_log.read_bytes().count(b"end ") if http_log.exists() else 0

    def _agent_runs(self) -> int:
        return sum(1 for line in self._side_effects() if line[0] == "start")

    def move_branches(self) -> None:
        """Between rounds: main fast-forwards along the chain by a random step; sometimes a doomed branch goes."""
        chain, doomed = self.landings["chain"], self.landings["doomed"]
        self.main_at = min(len(chain) - 1, self.main_at + self.rng.randint(0, 3))
        _git(self.repo, "update-ref", "refs/heads/main", chain[self.main_at][0])
        alive = [branch for _, branch in doomed if branch not in self.deleted]
        if alive and self.rng.random() < 0.5:
            branch = self.rng.choice(alive)
            _git(self.repo, "update-ref", "-d", f"refs/heads/{branch}")
            self.deleted.add(branch)

    def round(self, round_number: int) -> None:
        self.move_branches()
        before = self._ops_done()
        target = before + self.rng.randint(5, 60)
        runs_target = self._agent_runs() + (self.rng.randint(0, 3) if self.work else 0)
        procs = self.spawn(round_number)
        agents = self.spawn_agents(round_number)
        deadline = time.monotonic() + 60
        # Kill once the workers have done a random number of operations (and the agents have started a
        # random number of runs, for at most AGENT_WAIT more seconds: an agent may have nothing ready): a
        # random point in some operation of some worker, without a timed sleep deciding it.
        while self._ops_done() < target and time.monotonic() < deadline:
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(0.002)
        deadline = min(deadline, time.monotonic() + AGENT_WAIT)
        while self._agent_runs() < runs_target and time.monotonic() < deadline:
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(0.002)
        if self.serve:  # and the server has answered a random number of requests more (it starts in ~1 s)
            serve_target = self._served() + self.rng.randint(1, 12)
            deadline = time.monotonic() + SERVE_WAIT
            while self._served() < serve_target and time.monotonic() < deadline:
                if any(p.poll() is not None for p in procs):
                    break
                time.sleep(0.002)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                self.stats["kills"] += 1
            else:
                err = proc.stderr.read() if proc.stderr else ""
                self.violation(round_number, f"a worker exited by itself ({proc.returncode}): {err[-500:]}")
        for agent in agents:
            if agent.poll() is None:
                agent.send_signal(signal.SIGKILL)
                self.stats["work_kills"] += 1
        for proc in procs + agents:
            proc.wait(timeout=30)
        for agent in agents:
            self._check_agent_exit(round_number, agent)
        self.stats["rounds"] += 1
        self.stats["operations"] = self._ops_done()
        http_log = self.logs / "http.log"
        if http_log.exists():
            lines = http_log.read_text().splitlines()
            self.stats["serve_requests"] = sum(1 for line in lines if line.startswith("end "))
            self.stats["serve_refused"] = sum(1 for line in lines if line.startswith("refused "))
        self.check(round_number)

    def _check_agent_exit(self, round_number: int, agent: subprocess.Popen[bytes]) -> None:
        """An agent that stopped by itself ran out of work (--until-empty): anything else is a violation."""
        if agent.returncode == -signal.SIGKILL:
            return
        err = agent.stderr.read().decode(errors="replace") if agent.stderr else ""
        lines = err.splitlines()
        try:
            summary = json.loads(lines[-1]) if lines else {}
        except ValueError:
            summary = {}
        if summary.get("stopped") != "empty" or agent.returncode not in (0, 1, 4):
            self.violation(round_number, f"loki work exited by itself ({agent.returncode}): {err[-500:]}")

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
        doctor = _loki(["--root", self.root, "doctor", "--repair", "--json"])
        if doctor.returncode != 0:
            self.violation(round_number, f"doctor is not healthy: {doctor.stdout[-800:]} {doctor.stderr[-500:]}")
        leftovers = [str(p.relative_to(self.root)) for p in Path(self.root).rglob("*")
                     if p.name.endswith(".tmp") or p.name.endswith(".journal.json")]
        if leftovers:
            self.violation(round_number, f"left after doctor: {leftovers}")
        once = _loki(["--root", self.root, "watch", "--once", "--json"])
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
        self._check_usage(round_number, store, begun, ended)
        self._check_agents(round_number, store)
        self._check_leases(round_number, store, begun)
        self._check_landing(round_number, store)
        entry = store.read(layout.BREAKERS).get(BREAKER)
        for kind, field in (("breaker-failure", "total_failures"), ("breaker-success", "total_successes")):
            recorded = int((entry or {}).get(field, 0))
            if not ended[(kind, BREAKER)] <= recorded <= begun[(kind, BREAKER)]:
                self.violation(round_number, f"{field} {recorded} outside [{ended[(kind, BREAKER)]}, "
                                             f"{begun[(kind, BREAKER)]}]")


    def _check_leases(self, round_number: int, store: Store, begun: Counter[tuple[str, str]]) -> None:
        """Path leases: no two live exclusive leases of different workers overlap; every lease was asked for."""
        from loki.leases.leases import PathLeases

        leases = PathLeases(store)
        for pair in leases.conflicts():
            if pair["kind"] == "exclusive":
                self.violation(round_number, f"leases {pair['a']} and {pair['b']} overlap: {pair['patterns']}")
        for lease in leases.live() + leases.history():
            if begun[("lease", lease["agent"])] == 0:
                self.violation(round_number, f"lease {lease['lease_id']} of {lease['agent']} nobody asked for")

    def _check_landing(self, round_number: int, store: Store) -> None:
        """No task completed twice; a landed task's commit is on main; a landing task has its record; a task
        sent back to pending names a commit of a deleted branch."""
        on_main = set(_git(self.repo, "rev-list", "main").split())
        doomed = {commit: branch for commit, branch in self.landings["doomed"]}
        records = [t for rel in TASK_FILES for t in store.read(rel)["tasks"]]
        records += [e["task_data"] for rel in (layout.DEADLETTER, layout.ABANDONED) for e in store.read(rel)["tasks"]]
        self.stats["landed"] = self.stats["unlanded"] = 0
        for task in records:
            events = task.get("history") or []
            done = [e for e in events if e.get("to") == "completed"]
            if len(done) > 1:
                self.violation(round_number, f"task {task['id']} moved to completed {len(done)} times")
            landed = [e for e in events if e.get("event") == "landed"]
            self.stats["landed"] += len(landed)
            landing = task.get("landing")
            if landed and (not isinstance(landing, dict) or landing.get("commit") not in on_main):
                self.violation(round_number, f"task {task['id']} landed with a commit not on main: {landing}")
            if task.get("status") == "landing" and not isinstance(landing, dict):
                self.violation(round_number, f"task {task['id']} is landing without its record")
            for event in events:
                if event.get("event") == "unlanded":
                    self.stats["unlanded"] += 1
                    named = [c for c, b in doomed.items() if c in str(event.get("detail")) and b in self.deleted]
                    if not named:
                        self.violation(round_number, f"task {task['id']} was sent back from landing naming no "
                                                     f"deleted branch's commit: {event.get('detail')}")
        self.stats["landing"] = len(store.read(layout.queue_file("landing"))["tasks"])

    def _side_effects(self) -> list[list[str]]:
        """The agents' side-effect lines; a line a SIGKILL cut short is not one."""
        if not self.side_log.exists():
            return []
        text = self.side_log.read_text(errors="replace")
        whole = text[:text.rfind("\n") + 1]
        return [line.split() for line in whole.splitlines()
                if len(line.split()) == {"start": 5, "done": 4, "overlap": 4, "check": 5}.get(
                    line.split()[0] if line else "", -1)]

    def _check_agents(self, round_number: int, store: Store) -> None:
        if not self.work:
            return
        effects = self._side_effects()
        for line in effects:
            if line[0] == "overlap":
                self.violation(round_number, f"task {line[1]} ran in two live agents at once ({line[3]} found it "
                                             "held): a lease lapsed under a live agent")
        started = [line for line in effects if line[0] == "start"]
        for line in started[self._checked_starts:]:
            if not process_gone(int(line[4]), within=5.0):
                self.violation(round_number, f"the command of {line[3]} (pid {line[4]}, task {line[1]}) outlived "
                                             "its loki work")
        self._checked_starts = len(started)
        checks = [line for line in effects if line[0] == "check"]
        for line in checks[self._checked_checks:]:
            if not process_gone(int(line[4]), within=5.0):
                self.violation(round_number, f"the check of {line[3]} (pid {line[4]}, task {line[1]}) outlived "
                                             "its loki work")
        self._checked_checks = len(checks)
        self._check_verified(round_number, store)
        completions = self._completions(store)
        done = {(line[1], line[2]): line[3] for line in effects if line[0] == "done"}
        for task_id, token in completions.items():
            if (task_id, token) not in done:
                self.violation(round_number, f"task {task_id} was completed by loki work without its run's side "
                                             f"effect (token {token})")
        last_start = {line[3]: (line[1], line[2]) for line in started}
        cancelled = {t["id"] for t in store.read(layout.queue_file("cancelled"))["tasks"]}
        unrecorded = [(key, agent) for key, agent in done.items() if completions.get(key[0]) != key[1]]
        from tests.torture.check import fails

        # A run whose declared check failed did its work and was rightly not completed (a failed attempt).
        failed_checks = {(line[1], line[2]) for line in checks if fails(line[2])}
        for (task_id, token), agent in unrecorded:
            if last_start.get(agent) != (task_id, token) and task_id not in cancelled and \
                    (task_id, token) not in failed_checks:
                self.violation(round_number, f"{agent} finished task {task_id} (token {token}) and went on without "
                                             "recording it")
        self.stats["work_runs"] = len(started)
        self.stats["work_completed"] = len(completions)
        self.stats["work_done_unrecorded"] = sum(1 for key, _ in unrecorded)

    def _check_verified(self, round_number: int, store: Store) -> None:
        """Every completed (or landing) task with checks kept evidence that they all passed, or a person's override."""
        for task in self._done_tasks(store):
            if not task.get("verify"):
                continue
            result = task.get("result")
            verification = result.get("verification") if isinstance(result, dict) else None
            if not isinstance(verification, dict):
                self.violation(round_number, f"task {task['id']} has checks and was completed without evidence")
                continue
            if verification.get("forced_by"):
                continue
            ran = {item.get("command"): item.get("exit_code") for item in verification.get("checks") or []}
            if any(ran.get(check) != 0 for check in task["verify"]):
                self.violation(round_number, f"task {task['id']} was completed with checks that did not pass: {ran}")
        self.stats["work_verified"] = sum(  # completed, or waiting to land: verified either way
            1 for task in self._done_tasks(store)
            if task.get("verify") and isinstance(task.get("result"), dict)
            and (task["result"].get("verification") or {}).get("checks"))

    def _completions(self, store: Store) -> dict[str, str]:
        """task id -> the claim token of the run loki work completed it with (its agent's result); a task
        waiting to land was completed by its run as far as loki work is concerned."""
        found = {}
        for task in self._done_tasks(store):
            data = (task.get("result") or {}).get("data") if isinstance(task.get("result"), dict) else None
            if isinstance(data, dict) and "run" in data:
                found[task["id"]] = data["run"]
        return found

    def _done_tasks(self, store: Store) -> list[dict[str, Any]]:
        return [*store.read(layout.queue_file("completed"))["tasks"],
                *store.read(layout.queue_file("landing"))["tasks"]]

    def _check_usage(self, round_number: int, store: Store, begun: Counter[tuple[str, str]],
                     ended: Counter[tuple[str, str]]) -> None:
        """Each finish's usage entry (its model a nonce) is stored once if the finish returned, at most once if
        it was killed, never twice (docs/spend.md)."""
        from loki.spend.report import entries

        stored: Counter[str] = Counter(str(entry.get("model")) for _task, entry in entries(store))
        for (op, nonce), _ in begun.items():
            if op != "usage":
                continue
            if stored[nonce] > 1:
                self.violation(round_number, f"usage {nonce} stored {stored[nonce]} times")
            if ended[(op, nonce)] and stored[nonce] == 0:
                self.violation(round_number, f"usage {nonce} was recorded and is gone")
        for nonce, count in stored.items():
            if nonce.count("-u") == 1 and begun[("usage", nonce)] == 0:
                self.violation(round_number, f"usage {nonce} stored {count} times but nobody recorded it")
        self._check_totals(round_number, store)

    def _check_totals(self, round_number: int, store: Store) -> None:
        """The running totals the budgets read (queue/spend.json) count exactly the entries the tasks keep: each
        is written in the same unit of work as its entry, so no kill -9 leaves one without the other."""
        from loki.spend.report import entries
        from loki.tasks import totals

        kept = store.tasks().spend_totals()
        if kept is None:
            return  # no budget was set yet: nothing keeps totals
        rebuilt = totals.build(entries(store))
        for section in ("hours", "days"):
            for bucket, counts in kept[section].items():
                fresh = rebuilt[section].get(bucket, {})
                for key in sorted(set(counts) | set(fresh)):
                    have, want = counts.get(key, [0, 0, 0]), fresh.get(key, [0, 0, 0])
                    if have[1:] != want[1:] or abs(have[0] - want[0]) > 1e-6 * max(1, want[2]):
                        self.violation(round_number, f"spend totals {section}/{bucket}/{key} are {have}, the "
                                                     f"tasks' entries sum to {want}")

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



EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def _loki(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``python -m loki ARGV`` from the repository, run to its end: a real process forked warm (tests/forkstart.py)."""
    done = forkstart.run(argv, cwd=str(REPO), timeout=600)
    return subprocess.CompletedProcess(argv, done.returncode, done.stdout.decode(errors="replace"),
                                       done.stderr.decode(errors="replace"))


def _git(repo: str, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True, env=env).stdout


def make_landings(repo: str, chain: int = 10, doomed: int = 6) -> dict[str, list[list[str]]]:
    """A git repository at ``repo`` (the tree's directory): main at a first commit, a chain of commits on
    ``feature`` that main is moved along, and ``doomed/N`` branches of one commit each, some deleted
    unmerged; written to ``landings.json`` for the workers."""
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "start")
    first = _git(repo, "rev-parse", "HEAD").strip()
    found: dict[str, list[list[str]]] = {"chain": [[first, "main"]], "doomed": []}
    parent = first
    for n in range(chain):
        parent = _git(repo, "commit-tree", "-p", parent, "-m", f"chain {n}", EMPTY_TREE).strip()
        found["chain"].append([parent, "feature"])
    _git(repo, "update-ref", "refs/heads/feature", parent)
    for n in range(doomed):
        commit = _git(repo, "commit-tree", "-p", first, "-m", f"doomed {n}",
                      EMPTY_TREE).strip()
        _git(repo, "update-ref", f"refs/heads/doomed/{n}", commit)
        found["doomed"].append([commit, f"doomed/{n}"])
    with open(os.path.join(repo, "landings.json"), "w") as f:
        json.dump(found, f)
    return found


def run(rounds: int, workers: int, seed: int, root: str | None = None, work: int = 2,
        serve: bool = False) -> dict[str, Any]:
    base = root or tempfile.mkdtemp(prefix="loki-torture-")
    state = os.path.join(base, ".loki")
    init_tree(state)
    harness = Harness(state, workers, seed, work, serve)
    for round_number in range(rounds):
        harness.round(round_number)
    return {**harness.stats, "violation_details": harness.violations[:20], "root": state}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--work", type=int, default=2, help="loki work agents per round")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    parser.add_argument("--root", default=None)
    parser.add_argument("--serve", action="store_true", help="add `loki serve` and a client of its hooks and board")
    args = parser.parse_args(argv)
    started = time.monotonic()
    result = run(args.rounds, args.workers, args.seed, args.root, args.work, args.serve)
    result["seconds"] = round(time.monotonic() - started, 1)
    result["seed"] = args.seed
    print(json.dumps(result, indent=2))
    print(f"rounds {result['rounds']}  kills {result['kills']}  operations {result['operations']}  "
          f"loki work: kills {result['work_kills']} runs {result['work_runs']} completed {result['work_completed']} "
          f"(verified by checks {result['work_verified']})  landed {result['landed']} unlanded {result['unlanded']} "
          f"landing {result['landing']}  "
          f"violations {result['violations']}  ({result['seconds']} s, seed {args.seed})")
    return 1 if result["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
