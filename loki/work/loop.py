"""``loki work``: the agent loop, claim -> run the command -> complete or fail, with the lease kept alive.

What users wrote in shell around ``loki queue claim`` (docs/work.md)::

    loki work --agent eng-001 -- ./agent.sh {id}

For each task: claim it; run the command with the task in its environment (``LOKI_TASK_ID``,
``LOKI_TASK_FILE`` ..., :func:`environment`) and in its arguments (loki/work/placeholders.py), under
the guard (loki/work/launch.py), its output passing through live; renew the lease every third of it
while the command runs (loki/work/heartbeat.py); then

* exit 0: complete the task with ``{"exit_code", "duration_seconds", "heartbeats", "runs"}`` and, when
  the command wrote one, its result file's object under ``"data"`` (loki/work/scratch.py); an unusable
  result file is a ``validation`` failure instead;
* any other exit: record a failed attempt named by the hooks' error classifier, with the tail of the
  output, secrets redacted (loki/work/failure.py); the queue backs off or dead-letters as usual;
* the lease lost while it ran (the task was requeued or cancelled under it): stop the command, record
  nothing (the task is someone else's now);
* SIGINT/SIGTERM: stop the command (its whole process group: the signal, then SIGKILL after a grace
  period), release the task untouched, and stop (exit 130/143);
* ``breaker``: the command runs as ``loki run --breaker`` runs it (loki/breakers/runner.py): the breaker
  checked before each run, failures retried with backoff and rate limits waited out, all under the
  one claim; when the breaker stays open the task is released and the loop stops (exit 75).

Then the next task, until ``max_tasks`` are done or nothing is ready: without ``until_empty`` the loop
stops there (exit 3 if it claimed nothing at all); with it, it waits while something may still become
ready (loki/work/outlook.py) and stops, exit 0, when nothing can.

The exit code (:class:`Summary`): 0 every task it ran completed (at its last run here); 1 some failed
(recorded); 3 nothing was ready; 4 a lease was lost; 75 the breaker stayed open; 128+N stopped by signal N; a loki error
(a lock timeout, a broken file) stops the loop with its own code, after releasing the task in hand.

Time is injected: the clock (the store's) for leases and backoffs, ``sleep`` for waiting on the queue,
``heartbeat_wait`` for the renewer, ``timer`` for durations; nothing here prints (``notify`` gets
progress lines).
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, field

from loki.breakers.runner import RetryPolicy, Runner, resolve
from loki.errors import Conflict, ExitCode, InvalidArgument, InvalidInput, LokiError, NotFound, NothingToDo, UsageError
from loki.queue.landing import commit_exists, current_branch, uncommitted
from loki.queue.queue import Queue
from loki.spend.budgets import BudgetExceeded
from loki.spend.budgets import claim as budget_claim
from loki.spend.meter import Meter, model_in_command
from loki.tasks import verify
from loki.tasks.landing import land_branch
from loki.text.redact import redact
from loki.work import placeholders
from loki.work.checks import CheckResult, Checks
from loki.work.checks import failure as check_failure
from loki.work.failure import Failure, bad_result, describe, not_committed
from loki.work.heartbeat import Heartbeat, renew_interval
from loki.work.launch import GuardedLauncher
from loki.work.outlook import outlook
from loki.work.scratch import BadResultFile, Scratch

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, TypeVar

    T = TypeVar("T")

    from loki.breakers.runner import Writer
    from loki.storage.state import StateStore as Store

NOTHING_READY_EXIT = 3
LEASE_LOST_EXIT = 4
CIRCUIT_OPEN_EXIT = 75
FAILED_EXIT = 1
RECORD_RETRY_SECONDS = 300.0
"""A database restart or failover takes seconds to a minute; five minutes of retries (well inside the
default hour's lease) ride it out, and then the agent stops rather than wait without end."""
RECORD_FIRST_PAUSE = 1.0
RECORD_MAX_PAUSE = 30.0


@dataclass(frozen=True)
class WorkOptions:
    """What ``loki work`` was asked to do; checked on creation (:class:`UsageError`, exit 2)."""

    agent: str
    command: Sequence[str]
    types: Sequence[str] = ()
    max_tasks: int | None = None
    until_empty: bool = False
    breaker: str | None = None
    lease_seconds: float | None = None
    """None: the queue's default (``queue.lease_seconds``, 3600)."""
    retries: int = 5
    """With ``breaker``: the waits ``loki run`` allows after a failure or a refusal."""
    check_timeout_seconds: float | None = None
    """Each declared check's limit (docs/verify.md); None: ``verify.timeout_seconds`` of the settings (600)."""
    record_retry_seconds: float = RECORD_RETRY_SECONDS
    """How long a finished run's outcome is kept and its recording tried again while the store cannot
    be reached (a database restarting, a lock held too long: exit 5)."""
    reserve_usd: float = 0.0
    """Dollars counted against the budgets for every attempt running in a budget's scope, this one included,
    before each claim (docs/spend.md: what bounds the overshoot)."""
    max_task_usd: float | None = None
    """A per-task cap: passed to Claude Code as ``--max-budget-usd``; an attempt that failed having spent
    it is a failure of class ``budget``."""

    def __post_init__(self) -> None:
        from loki.text.textsafe import check_name

        if not self.command:
            raise UsageError("no command given: loki work --agent NAME [OPTIONS] -- CMD [ARGS]...", field="command")
        check_name(self.agent, "agent name")
        for type_ in self.types:
            check_name(type_, "task type")
        if self.max_tasks is not None and (isinstance(self.max_tasks, bool) or not isinstance(self.max_tasks, int)
                                           or self.max_tasks < 1):
            raise InvalidArgument(f"invalid --max-tasks {self.max_tasks!r}: it must be a whole number >= 1",
                                  field="max-tasks")
        if self.breaker is not None:
            from loki.breakers.breakers import check_name as check_breaker

            check_breaker(self.breaker)
        RetryPolicy(retries=self.retries)  # refuses a negative count, naming --retries
        if isinstance(self.record_retry_seconds, bool) or not 0 <= self.record_retry_seconds <= 86400:
            raise InvalidArgument(f"invalid record_retry_seconds {self.record_retry_seconds!r}: it must be a number "
                                  "of seconds from 0 to 86400", field="record_retry_seconds")
        if self.check_timeout_seconds is not None and (isinstance(self.check_timeout_seconds, bool)
                                                       or not 0 < self.check_timeout_seconds <= 86400):
            raise InvalidArgument(f"invalid check timeout {self.check_timeout_seconds!r}: it must be a number of "
                                  "seconds above 0, at most 86400", field="check_timeout_seconds")
        placeholders.check(self.command)
        for name, value in (("reserve", self.reserve_usd), ("max-task-usd", self.max_task_usd)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not 0 <= value <= 1_000_000 or value != value):
                raise InvalidArgument(f"invalid --{name} {value!r}: dollars from 0 to 1,000,000", field=name)
        if self.max_task_usd is not None and self.max_task_usd <= 0:
            raise InvalidArgument(f"invalid --max-task-usd {self.max_task_usd!r}: dollars above 0",
                                  field="max-task-usd")


@dataclass
class TaskRun:
    """What happened to one claimed task."""

    task_id: str
    title: str
    outcome: str = ""
    """``completed``, ``failed``, ``lease_lost``, ``released`` (a signal, or the breaker stayed open),
    ``unrecorded`` (the run ended but the store could not be reached to record it: the task stays held
    until its lease lapses)."""
    state: str | None = None
    """Where the task is now: completed, pending (retry at ``retry_at``), dead-letter, or None (not ours)."""
    exit_code: int | None = None
    duration_seconds: float = 0.0
    heartbeats: int = 0
    runs: int = 0
    retry_at: str | None = None
    error_type: str | None = None
    error_class: str | None = None
    error: str | None = None
    """The failure's first line, or why the lease was lost."""
    checks: list[dict[str, Any]] = field(default_factory=list)
    """The declared checks' evidence (loki/work/checks.py), in the order they ran."""
    usage: dict[str, Any] | None = None
    """What the agent reported spending (loki/spend/meter.py), as recorded in the task; None: nothing."""

    def to_json(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "title": self.title, "outcome": self.outcome, "state": self.state,
                "exit_code": self.exit_code, "duration_seconds": self.duration_seconds,
                "heartbeats": self.heartbeats, "runs": self.runs, "retry_at": self.retry_at,
                "error_type": self.error_type, "error_class": self.error_class, "error": self.error,
                "checks": self.checks, "usage": self.usage}


@dataclass
class Summary:
    """The loop's end: every task it ran, why it stopped, and its exit code."""

    agent: str
    runs: list[TaskRun] = field(default_factory=list)
    stopped: str = ""
    """``max_tasks``, ``nothing_ready``, ``empty`` (--until-empty), ``signal``, ``circuit_open``, ``budget``
    (a spent budget refused the claim: exit 75), ``error``."""
    reason: str = ""
    exit_code: int = 0

    def count(self, outcome: str) -> int:
        return sum(1 for run in self.runs if run.outcome == outcome)

    def tasks_claimed(self) -> int:
        """Distinct tasks claimed (one that failed and was run again counts once; ``claimed`` counts claims)."""
        return len({run.task_id for run in self.runs})

    def to_json(self) -> dict[str, Any]:
        return {"agent": self.agent, "exit_code": self.exit_code, "stopped": self.stopped, "reason": self.reason,
                "claimed": len(self.runs), "tasks_claimed": self.tasks_claimed(),
                "completed": self.count("completed"), "failed": self.count("failed"),
                "lease_lost": self.count("lease_lost"), "released": self.count("released"),
                "unrecorded": self.count("unrecorded"),
                "tasks": [run.to_json() for run in self.runs]}


def environment(values: dict[str, str], local_root: str | None) -> dict[str, str]:
    """The variables the command gets on top of ``loki work``'s own environment; ``local_root``: the
    store's (:attr:`loki.storage.state.StateStore.local_root`), this machine's ``.loki/``."""
    keys = {"LOKI_TASK_ID": "id", "LOKI_TASK_TITLE": "title", "LOKI_TASK_TYPE": "type",
            "LOKI_TASK_PRIORITY": "priority", "LOKI_TASK_ATTEMPT": "attempt", "LOKI_TASK_TOKEN": "token",
            "LOKI_TASK_FILE": "task_file", "LOKI_RESULT_FILE": "result_file", "LOKI_AGENT": "agent"}
    env = {name: placeholders.exec_safe(values[key]) for name, key in keys.items()}
    if local_root is not None:  # the memory store of the tests has no tree
        # Nested `loki` commands (a heartbeat, a signal) find the same tree, whatever --root said; on
        # PostgreSQL that tree's config names the database, so they open the same state.
        env["LOKI_ROOT"] = local_root
        env.update(serve_environment(local_root))
    return env


def serve_environment(local_root: str) -> dict[str, str]:
    """What an agent's HTTP hooks read when the tree's Claude Code hooks go to ``loki serve`` (``loki hooks install
    --via http``): the tree's token (``LOKI_SERVE_TOKEN``, sent in ``X-Loki-Token``; without it every hook request
    is refused and the session runs without the 3-strike protocol). ``LOKI_AGENT``, which the hooks send as
    ``X-Loki-Agent``, is set with the task's variables. Nothing for a tree whose hooks are commands."""
    from loki.resident import files

    if not files.wants_server(local_root):
        return {}
    token = files.token(local_root)  # made by `hooks install --via http`; made now if it went missing
    return {files.TOKEN_ENV: token} if token else {}


class Worker:
    """One ``loki work`` loop over the queue of ``store``."""

    def __init__(
        self,
        store: Store,
        options: WorkOptions,
        *,
        sleep: Callable[[float], None] | None = None,
        heartbeat_wait: Callable[[float, threading.Event], bool] | None = None,
        timer: Callable[[], float] = time.monotonic,
        stdout: Writer | None = None,
        stderr: Writer | None = None,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.options = options
        self.queue = Queue(store)
        self._stop = threading.Event()
        self._injected_sleep = sleep
        self._sleep = sleep or self._stop.wait
        self._heartbeat_wait = heartbeat_wait
        self._timer = timer
        self._stdout = stdout
        self._stderr = stderr
        self._notify = notify or (lambda message: None)
        self._stop_signal: int | None = None
        self._waiting_said = ""
        self._runner: Runner | None = None
        self._checks: Checks | None = None
        self._breakers: Any = None
        if options.breaker is not None:
            from loki.breakers.breakers import Breakers

            self._breakers = Breakers(store)
        self._prices = _price_table(store)  # a bad spend.prices stops here, before anything is claimed
        self._meter: Meter | None = None
        self._metrics: Any = None
        from loki.metrics.endpoint import configured

        endpoint = configured()
        if endpoint is not None:  # only then is OpenTelemetry imported (docs/metrics.md)
            from loki.metrics.otel import Metrics

            self._metrics = Metrics(store, endpoint, self._notify)

    # -- public --------------------------------------------------------------------------------

    def run(self) -> Summary:
        """Work until done; SIGINT/SIGTERM (in the main thread) stop it as :meth:`request_stop` does."""
        from loki.stopsignals import stop_requests

        with stop_requests(self.request_stop):
            return self.run_unguarded()

    def run_unguarded(self) -> Summary:
        """:meth:`run` without installing signal handlers (the caller forwards them, or stops it itself)."""
        if not placeholders.uses_any(self.options.command[0]):
            resolve(list(self.options.command))  # 127/126 before anything is claimed
        launcher = GuardedLauncher()
        try:
            return self._loop(launcher)
        finally:
            launcher.close()
            if self._metrics is not None:
                self._metrics.shutdown()

    def request_stop(self, signum: int) -> None:
        """What SIGINT/SIGTERM do: stop the command in hand, release its task, claim nothing more."""
        if self._stop_signal is None:
            self._stop_signal = signum
        self._stop.set()
        runner = self._runner
        if runner is not None:
            runner.request_stop(signum)
        checks = self._checks
        if checks is not None:
            checks.request_stop(signum)

    def stopped(self) -> bool:
        """Has SIGINT/SIGTERM (or :meth:`request_stop`) asked the loop to stop?"""
        return self._stop_signal is not None

    # -- the loop ------------------------------------------------------------------------------

    def _loop(self, launcher: GuardedLauncher) -> Summary:
        summary = Summary(self.options.agent)
        limit = self.options.max_tasks
        while True:
            signum = self._stop_signal
            if signum is not None:
                return _finish(summary, "signal", 128 + signum, f"stopped by {_name(signum)}")
            if limit is not None and len(summary.runs) >= limit:
                return _finish(summary, "max_tasks", _tasks_exit(summary), f"{limit} task(s) done (--max-tasks)")
            try:
                task = budget_claim(self.queue, self.options.agent, types=self.options.types,
                                    lease_seconds=self.options.lease_seconds, reserve=self.options.reserve_usd)
            except BudgetExceeded as exc:  # between tasks: nothing in hand, nothing to release
                return _finish(summary, "budget", CIRCUIT_OPEN_EXIT, exc.message)
            except NothingToDo as exc:
                if self._wait_for_more(exc):
                    continue
                if self.options.until_empty:
                    return _finish(summary, "empty", _tasks_exit(summary), "nothing left that may become ready")
                code = _tasks_exit(summary) if summary.runs else NOTHING_READY_EXIT
                return _finish(summary, "nothing_ready", code, exc.message)
            except LokiError as exc:
                return _finish(summary, "error", exc.exit_code, exc.message)
            self._waiting_said = ""
            if self._metrics is not None:
                self._metrics.claimed(self.options.agent, task)
            run = TaskRun(task["id"], task["title"])
            summary.runs.append(run)
            try:
                self._work_on(task, run, launcher)
            except _Unrecorded as exc:
                # Not released: a finished run released would be done again at once. Its lease lapses and
                # the task is requeued then, as when the agent dies.
                return _finish(summary, "error", exc.error.exit_code, exc.message)
            except LokiError as exc:
                with suppress(LokiError):  # if even that fails, the lease lapses and the task is requeued
                    self._release(task, run, run.usage)  # what the attempt spent is kept all the same
                return _finish(summary, "error", exc.exit_code, exc.message)
            if run.outcome == "released":
                if self.stopped():
                    continue  # the loop's head reports the signal
                return _finish(summary, "circuit_open", CIRCUIT_OPEN_EXIT, run.error or "circuit open")

    def _wait_for_more(self, nothing: NothingToDo) -> bool:
        """With ``--until-empty``, wait while something may still become ready (True: claim again)."""
        if not self.options.until_empty:
            return False
        ahead = outlook(self.queue, self.options.types, self.store.clock.now())
        if ahead.waiting == 0:
            return False
        seconds = ahead.wait_seconds(self.store.clock.now())
        from loki.clock import format_ts

        now = format_ts(self.store.clock.now())
        if ahead.next_at is None:
            until = f"(looking again every {seconds:g}s)"
        else:  # the time of day, and the date too when it is not today's (a deferral to next week)
            day = "" if ahead.next_at[:10] == now[:10] else f"{ahead.next_at[:10]} "
            until = f"until {day}{ahead.next_at[11:19]} UTC"
        message = (f"{nothing.message}; waiting {until} (--until-empty: {ahead.waiting} may become ready: "
                   f"{ahead.describe()})")
        if message != self._waiting_said:  # once per thing waited for, not at every look
            self._notify(message)
            self._waiting_said = message
        self._sleep(seconds)
        return True

    def _work_on(self, task: dict[str, Any], run: TaskRun, launcher: GuardedLauncher) -> None:
        if self.stopped():  # the signal came while claiming
            self._release(task, run)
            return
        lease = self._lease_of(task)
        interval = renew_interval(lease)
        self._notify(f"claimed {task['id']} ({task['title']}): lease {lease:g}s, renewed every {interval:g}s")
        scratch = Scratch(task)
        try:
            values = placeholders.values(task, agent=self.options.agent, task_file=scratch.task_file,
                                         result_file=scratch.result_file)
            command = placeholders.expand(self.options.command, values)
            if self.options.max_task_usd is not None and is_claude(command[0]):
                command = [*command, "--max-budget-usd", f"{self.options.max_task_usd:g}"]
            launcher.env = {**os.environ, **environment(values, self.store.local_root)}
            meter = self._meter = Meter(self._prices, command_model=model_in_command(command))
            runner = self._runner_for(command, launcher)
            heartbeat = Heartbeat(lambda: self.queue.heartbeat(task["id"], self.options.agent,
                                                               token=task["claim_token"], lease_seconds=lease),
                                  interval, on_lost=self._on_lease_lost, wait=self._heartbeat_wait)
            started = self._timer()
            self._runner = runner
            heartbeat.start()
            wanted = verify.checks_for(task, self.store.config)
            checked: list[CheckResult] | None = None
            try:
                result = runner.run_unguarded()
                ended = self._timer()
                self._runner = None
                # Stopped by a signal, the run's own exit says whether the work got done.
                run.exit_code = result.attempts[-1].exit_code if result.attempts else result.exit_code
                if wanted and run.exit_code == 0 and result.outcome == "succeeded" and heartbeat.lost is None \
                        and not self.stopped():
                    checked = self._run_checks(wanted, launcher)  # the lease renewed meanwhile
            finally:
                self._runner = None
                self._checks = None
                heartbeat.stop()  # before anything is recorded: no renewal may land after it
                meter.finish()
            run.duration_seconds = round(ended - started, 3)  # the command's; each check has its own
            run.heartbeats = heartbeat.renewals
            run.runs = len(result.attempts)
            if checked is not None:
                # what is printed (--json) says what the queue keeps: the command's secrets redacted
                run.checks = [{**item.evidence(), "command": redact(item.command)} for item in checked]
            self._record(task, run, result.outcome, runner, scratch, heartbeat.lost, wanted, checked)
        finally:
            scratch.remove()

    def _run_checks(self, wanted: list[str], launcher: GuardedLauncher) -> list[CheckResult]:
        timeout = self.options.check_timeout_seconds or verify.timeout_seconds(self.store.config)
        checks = Checks(launcher, timeout=timeout, timer=self._timer)
        self._checks = checks
        if self.stopped():  # the signal came between the command's exit and here
            checks.request_stop(self._stop_signal or signal.SIGTERM)
        self._notify(f"running {plural_checks(len(wanted))} of the task: {', '.join(wanted)}")
        return checks.run(wanted)

    def _runner_for(self, command: list[str], launcher: GuardedLauncher) -> Runner:
        policy = RetryPolicy(retries=self.options.retries if self.options.breaker else 0)
        return Runner(command, policy=policy, breakers=self._breakers, breaker=self.options.breaker,
                      clock=self.store.clock, sleep=self._injected_sleep,
                      # The meter reads a copy of stdout; what the terminal gets is unchanged.
                      stdout=self._metered_stdout(), stderr=self._stderr,
                      # One run without a breaker: the runner's retry lines would only repeat the failure.
                      notify=self._notify if self.options.breaker else None,
                      launch=launcher)

    def _metered_stdout(self) -> Writer:
        from loki.breakers.runner import stream_writer

        write = self._stdout or stream_writer(sys.stdout)
        return self._meter.tee(write) if self._meter is not None else write

    def _usage(self, run: TaskRun, data: object) -> dict[str, Any] | None:
        """The claim's usage from the meter (and the result file's ``data``), its refusals said once each."""
        meter = self._meter
        if meter is None:
            return None
        entry = meter.entry(data)
        for problem in meter.problems:
            self._notify(f"usage of {run.task_id} not recorded from {problem}")
        meter.problems.clear()
        run.usage = entry
        return entry

    def _over_cap(self, run: TaskRun, usage: dict[str, Any] | None) -> Failure | None:
        """A failed attempt that spent ``--max-task-usd``, or that the agent itself stopped at its cap (Claude
        Code's ``error_max_budget_usd`` result, whoever passed the ``--max-budget-usd``): class ``budget``."""
        capped = self._meter.capped if self._meter is not None else None
        if capped is not None:
            spent = f"spent ${float(usage['usd']):.4f}" if usage and usage.get("usd") is not None else "spent ?"
            headline = f"exit {run.exit_code} (budget): Claude Code stopped at its cap: {capped}; {spent}"
            return Failure("other", "budget", headline, headline)
        cap = self.options.max_task_usd
        if cap is None or usage is None or usage.get("usd") is None or float(usage["usd"]) < cap:
            return None
        headline = f"exit {run.exit_code} (budget): spent ${float(usage['usd']):.4f}, --max-task-usd is ${cap:g}"
        return Failure("other", "budget", headline, headline)

    def _result_data(self, scratch: Scratch) -> object:
        try:
            return scratch.read_result()
        except BadResultFile:
            return None

    def _lease_of(self, task: dict[str, Any]) -> float:
        """The lease just taken, in seconds (what each renewal extends it by)."""
        if self.options.lease_seconds is not None:
            return float(self.options.lease_seconds)
        from loki.clock import parse_ts

        return (parse_ts(task["lease_until"]) - parse_ts(task["claimed_at"])).total_seconds()

    def _on_lease_lost(self, exc: LokiError) -> None:
        """From the renewer's thread: the task is not ours any more, so its command must not go on."""
        runner = self._runner
        if runner is not None:
            runner.request_stop(signal.SIGTERM)
        checks = self._checks
        if checks is not None:
            checks.request_stop(signal.SIGTERM)

    # -- recording the outcome -------------------------------------------------------------------

    def _record(self, task: dict[str, Any], run: TaskRun, outcome: str, runner: Runner, scratch: Scratch,
                lost: LokiError | None, wanted: list[str], checked: list[CheckResult] | None) -> None:
        if lost is not None:
            self._lost(run, lost)
        elif wanted and (outcome == "succeeded" or (outcome == "interrupted" and run.exit_code == 0)):
            self._verified(task, run, scratch, wanted, checked or [])
        elif outcome == "succeeded" or (outcome == "interrupted" and run.exit_code == 0):
            self._complete(task, run, scratch)  # finished before a signal could stop it: done is done
        elif outcome == "interrupted":
            self._release(task, run, self._usage(run, self._result_data(scratch)))
        elif outcome == "circuit_open":
            self._release(task, run, self._usage(run, self._result_data(scratch)))
            run.error = f"the breaker {self.options.breaker} stayed open"
        else:
            usage = self._usage(run, self._result_data(scratch))
            self._fail(task, run, self._over_cap(run, usage) or describe(run.exit_code or 0, *runner.output_tail()),
                       usage)

    def _verified(self, task: dict[str, Any], run: TaskRun, scratch: Scratch, wanted: list[str],
                  checked: list[CheckResult]) -> None:
        """The command exited 0: complete the task if every check passed; a failed check is a failed
        attempt; checks a signal stopped (or never started) leave the task released, unverified."""
        failed = next((item for item in checked if not item.passed), None)
        if failed is not None and not failed.interrupted:
            self._fail(task, run, check_failure(failed, len(checked), len(wanted)),
                       self._usage(run, self._result_data(scratch)))  # the agent spent it all the same
        elif failed is not None or len(checked) < len(wanted):
            self._release(task, run, self._usage(run, self._result_data(scratch)))
        else:
            self._complete(task, run, scratch, checked)

    def _complete(self, task: dict[str, Any], run: TaskRun, scratch: Scratch,
                  checked: list[CheckResult] | None = None) -> None:
        try:
            data = scratch.read_result()
        except BadResultFile as exc:
            self._fail(task, run, bad_result(exc.message), self._usage(run, None))
            return
        usage = self._usage(run, data)
        result: dict[str, Any] = {"exit_code": 0, "duration_seconds": run.duration_seconds,
                                  "heartbeats": run.heartbeats, "runs": run.runs}
        if data is not None:
            result["data"] = data
        evidence = None if checked is None else [item.evidence() for item in checked]
        head = checked[0].commit if checked else None
        work_branch = None
        target = land_branch(task, self.store.config)
        if target is not None:
            # Before the claim is given up: the commit the task waits for must exist (docs/work.md,
            # "Tasks that must land"); loki pushes nothing, the agent must have committed (and pushed).
            head = head or verify.git_head()
            changed = uncommitted() if head is not None else []
            if head is None or not commit_exists(None, head) or changed:
                self._fail(task, run, not_committed(target, head, changed), usage)
                return
            work_branch = current_branch()
        try:
            self._recording(run, "exit 0", lambda: self.queue.complete(
                task["id"], self.options.agent, token=task["claim_token"], result=result, evidence=evidence,
                head=head, usage=usage, work_branch=work_branch))
        except (Conflict, NotFound) as exc:
            # A repeat of a complete that landed (its answer lost) is not refused: the queue recognises the
            # claim's token on the completed task (Queue.complete) and returns it.
            self._lost(run, exc)
            return
        run.outcome, run.state = "completed", "completed" if target is None else "landing"
        if self._metrics is not None:
            self._metrics.completed(self.options.agent, task, usage)
        passed = f", {plural_checks(len(checked))} passed" if checked else ""
        lands = "" if target is None else f"; waiting to land {str(head)[:12]} on {target}"
        self._notify(f"completed {task['id']} in {run.duration_seconds:g}s (exit 0{passed}){lands}")

    def _fail(self, task: dict[str, Any], run: TaskRun, failure: Failure,
              usage: dict[str, Any] | None = None) -> None:
        # The approach is what was tried: the command (not who ran it: one script run by three agents is
        # one approach, not the "3 distinct approaches" that make the dead-letter review abandon a
        # task), or the approach a person proposed when the task was retried with one.
        approach = redact(task.get("new_approach") or shlex.join(self.options.command))
        try:
            outcome = self._recording(run, f"exit {run.exit_code}", lambda: self.queue.fail(
                task["id"], self.options.agent, token=task["claim_token"], error=failure.message,
                error_type=failure.error_type, approach=approach[:500], usage=usage))
        except (Conflict, NotFound) as exc:
            landed = self._failed_already(task)
            if landed is None:
                self._lost(run, exc)
                return
            outcome = landed
        run.outcome, run.state, run.retry_at = "failed", outcome["state"], outcome["retry_at"]
        run.error_type, run.error_class, run.error = failure.error_type, failure.error_class, failure.headline
        if self._metrics is not None:
            self._metrics.failed(self.options.agent, task, failure.error_class, run.state, usage)
        after = f"retry after {run.retry_at}" if run.retry_at else f"moved to {run.state}"
        self._notify(f"failed {task['id']}: {failure.headline}; {after}")

    def _recording(self, run: TaskRun, ended: str, record: Callable[[], T]) -> T:
        """``record()``, tried again while the store cannot be reached (exit 5: the database restarting or
        failing over, a lock held too long), for up to ``record_retry_seconds``: the run is over and its
        outcome is kept in memory meanwhile. The claim's fencing token makes a repeat safe: it lands only
        while this agent still holds the task. Past the bound, :class:`_Unrecorded`."""
        pause, paused = RECORD_FIRST_PAUSE, 0.0
        started = self._timer()
        while True:
            try:
                return record()
            except LokiError as exc:
                if exc.exit_code != ExitCode.LOCK_TIMEOUT:
                    raise
                spent = max(paused, self._timer() - started)
                # A person who stops the agent (SIGINT/SIGTERM) ends the retries too: the task stays held.
                if spent + pause > self.options.record_retry_seconds or self.stopped():
                    run.outcome, run.state, run.error = "unrecorded", None, exc.message
                    raise _Unrecorded(run.task_id, ended, exc, spent) from None
                self._notify(f"could not record {run.task_id} yet ({ended}): {exc.message}; keeping its result, "
                             f"trying again in {pause:g}s")
                self._sleep(pause)  # the stop event's wait: a signal ends the pause, and the retries with it
                paused += pause
                pause = min(pause * 2, RECORD_MAX_PAUSE)

    def _failed_already(self, task: dict[str, Any]) -> dict[str, Any] | None:
        """After a retried fail was refused: did an earlier try land? Then the task's last attempt is
        this claim's (this agent, the attempt number it was claimed for); its state as ``fail`` returns it."""
        try:
            shown = self.queue.show(task["id"])
        except LokiError:
            return None
        attempts = shown["task"].get("attempts") or []
        number = len(task.get("attempts") or []) + 1
        if not attempts or attempts[-1].get("agent_id") != self.options.agent or \
                attempts[-1].get("attempt_number") != number:
            return None
        pending = shown["state"] == "pending"
        return {"state": shown["state"], "retry_at": shown["task"].get("available_at") if pending else None}

    def _release(self, task: dict[str, Any], run: TaskRun, usage: dict[str, Any] | None = None) -> None:
        try:
            self.queue.release(task["id"], self.options.agent, token=task["claim_token"], usage=usage)
        except (Conflict, NotFound) as exc:
            self._lost(run, exc)
            return
        run.outcome, run.state = "released", "pending"
        if self._metrics is not None:
            self._metrics.spent(self.options.agent, task, usage)
        self._notify(f"released {task['id']} (back to pending, untouched)")

    def _lost(self, run: TaskRun, exc: LokiError) -> None:
        run.outcome, run.state, run.error = "lease_lost", None, exc.message
        self._notify(f"lost {run.task_id}: {exc.message}; nothing recorded")


class _Unrecorded(LokiError):
    """A finished run whose outcome could not be recorded within the bound (the loop stops; the task
    is not released)."""

    def __init__(self, task_id: str, ended: str, error: LokiError, spent: float) -> None:
        super().__init__(f"{task_id} finished ({ended}) but could not be recorded in {spent:.0f}s of retries: "
                         f"{error.message}; it stays held until its lease lapses, then runs again")
        self.error = error
        self.exit_code = error.exit_code


def _price_table(store: Store) -> dict[str, dict[str, float]]:
    from loki.spend.prices import BadPrices, table

    try:
        return table(store.config)
    except BadPrices as exc:
        raise InvalidInput(f"config/loki.json: {exc}", field="spend.prices") from None


def _finish(summary: Summary, stopped: str, exit_code: int, reason: str) -> Summary:
    summary.stopped, summary.exit_code, summary.reason = stopped, exit_code, reason
    return summary


def _tasks_exit(summary: Summary) -> int:
    """The exit code the tasks' outcomes give: a lost lease before a failure before success. A task
    counts by its last run here: one that failed and then completed (``--until-empty``) is done."""
    last = {run.task_id: run.outcome for run in summary.runs}
    if "lease_lost" in last.values():
        return LEASE_LOST_EXIT
    if "failed" in last.values():
        return FAILED_EXIT
    return 0


def plural_checks(count: int) -> str:
    return "1 check" if count == 1 else f"{count} checks"


def _name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def is_claude(program: str) -> bool:
    """Whether ``program`` is Claude Code: ``claude``, or the npm package's own ``bin/claude.exe`` (2.1.330
    installs its binary under that name on every platform)."""
    name = os.path.basename(program).lower()
    return name.removesuffix(".exe") == "claude"
