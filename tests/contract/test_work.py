"""``loki work`` as a library (:mod:`loki.work`): the loop, its placeholders, the lease renewer, failures.

The agent's command is a real process (``sh -c``, ``python -c``). Time is injected: the ManualClock moves
when the loop would wait (``sleep``) or the renewer would (``heartbeat_wait``), and commands that must
outlive a few renewals block on a FIFO the test writes to, so nothing here sleeps.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loki.breakers.breakers import Breakers
from loki.breakers.runner import CommandNotFound
from loki.clock import ManualClock
from loki.errors import Conflict, InvalidArgument, LockTimeout, NothingToDo, UsageError
from loki.queue.queue import Queue
from loki.storage.store import Store
from loki.work import placeholders
from loki.work.failure import TAIL_CHARS, describe
from loki.work.heartbeat import Heartbeat, renew_interval
from loki.work.loop import Summary, Worker, WorkOptions
from loki.work.outlook import POLL_SECONDS, outlook
from loki.work.scratch import MAX_RESULT_BYTES

PY = sys.executable
SECRET = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


@pytest.fixture
def store(backend_store: Any) -> Any:
    return backend_store


class Captured:
    def __init__(self) -> None:
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.notes: list[str] = []


class FakeSleep:
    """Records each wait of the loop and moves the clock by it instead of sleeping; ``then`` runs after."""

    def __init__(self, clock: ManualClock, then: Callable[[int], None] | None = None) -> None:
        self.calls: list[float] = []
        self.clock = clock
        self.then = then

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)
        self.clock.advance(seconds)
        if self.then is not None:
            self.then(len(self.calls))


def work(store: Any, command: list[str], *, captured: Captured | None = None, **options: Any) -> Summary:
    worker = make_worker(store, command, captured=captured, **options)
    return worker.run_unguarded()


def make_worker(store: Any, command: list[str], *, captured: Captured | None = None,
                sleep: Callable[[float], None] | None = None,
                heartbeat_wait: Callable[[float, threading.Event], bool] | None = None, **options: Any) -> Worker:
    seen = captured or Captured()
    options.setdefault("agent", "eng-001")
    return Worker(store, WorkOptions(command=command, **options), sleep=sleep, heartbeat_wait=heartbeat_wait,
                  stdout=seen.stdout.extend, stderr=seen.stderr.extend, notify=seen.notes.append)


def show(store: Any, task_id: str) -> dict[str, Any]:
    return Queue(store).show(task_id)


# -- the loop --------------------------------------------------------------------------------------


def test_each_task_runs_with_its_values_in_the_environment_and_arguments(store: Any, tmp_path: Path) -> None:
    queue = Queue(store)
    queue.add("Write the login endpoint", task_id="t1", type="feature", priority="high", labels=["auth", "api"],
              payload={"ticket": 42}, description="POST /login")
    seen = tmp_path / "seen.json"
    script = ("import json, os, sys; "
              "env = {k: v for k, v in os.environ.items() if k.startswith('LOKI_')}; "
              "task = json.load(open(env['LOKI_TASK_FILE'])); "
              f"json.dump({{'argv': sys.argv[1:], 'env': env, 'task': task}}, open({str(seen)!r}, 'w')); "
              "json.dump({'commit': '4f2a9c1'}, open(env['LOKI_RESULT_FILE'], 'w')); print('did', sys.argv[1])")
    captured = Captured()
    summary = work(store, [PY, "-c", script, "{id}", "{title}", "{type}", "{priority}", "{labels}", "{payload}",
                           "{attempt}", "{agent}", "{description}", "{{id}}", '{"json": {"stays": 1}}'],
                   captured=captured)
    assert (summary.exit_code, summary.stopped, summary.count("completed")) == (0, "nothing_ready", 1)
    got = json.loads(seen.read_text())
    assert got["argv"] == ["t1", "Write the login endpoint", "feature", "high", "auth,api", '{"ticket":42}', "1",
                           "eng-001", "POST /login", "{id}", '{"json": {"stays": 1}}']
    env = got["env"]
    assert {k: env[k] for k in ("LOKI_TASK_ID", "LOKI_TASK_TITLE", "LOKI_TASK_TYPE", "LOKI_TASK_PRIORITY",
                                "LOKI_TASK_ATTEMPT", "LOKI_AGENT")} == {
        "LOKI_TASK_ID": "t1", "LOKI_TASK_TITLE": "Write the login endpoint", "LOKI_TASK_TYPE": "feature",
        "LOKI_TASK_PRIORITY": "high", "LOKI_TASK_ATTEMPT": "1", "LOKI_AGENT": "eng-001"}
    assert got["task"]["id"] == "t1" and got["task"]["claim_token"] == env["LOKI_TASK_TOKEN"]
    assert got["task"]["claimed_by"] == "eng-001"
    assert not os.path.exists(env["LOKI_TASK_FILE"])  # the scratch directory is removed afterwards
    assert captured.stdout == b"did t1\n"  # the command's output passes through
    done = show(store, "t1")
    assert done["state"] == "completed"
    result = done["task"]["result"]
    assert result["exit_code"] == 0 and result["runs"] == 1 and result["data"] == {"commit": "4f2a9c1"}
    assert result["duration_seconds"] >= 0 and result["heartbeats"] == 0


@pytest.mark.files("LOKI_ROOT names the tree on disk")
def test_nested_loki_commands_find_the_same_tree(store: Store, tmp_path: Path) -> None:
    Queue(store).add("t", task_id="t1")
    out = tmp_path / "root"
    work(store, ["sh", "-c", f'printf %s "$LOKI_ROOT" > {out}'])
    assert out.read_text() == str(store.root)


@pytest.mark.files("the serve token is this machine's tree's")
def test_a_tree_whose_hooks_go_to_loki_serve_gives_the_agent_its_token(store: Store, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`hooks install --via http`: the agent's HTTP hooks send LOKI_SERVE_TOKEN (and LOKI_AGENT): loki work sets it,
    whatever its own environment holds; with command hooks it adds nothing."""
    from loki.resident import files

    monkeypatch.setenv(files.TOKEN_ENV, "not-this-trees")
    out = tmp_path / "env"
    Queue(store).add("t", task_id="t1")
    work(store, ["sh", "-c", f'printf %s "${{LOKI_SERVE_TOKEN-unset}} $LOKI_AGENT" > {out}'])
    assert out.read_text() == "not-this-trees eng-001"  # command hooks: loki work's own environment, unchanged
    files.set_hooks_mode(str(store.root), "http")
    token = files.token(str(store.root))
    Queue(store).add("t", task_id="t2")
    work(store, ["sh", "-c", f'printf %s "${{LOKI_SERVE_TOKEN-unset}} $LOKI_AGENT" > {out}'])
    assert out.read_text() == f"{token} eng-001"


def test_a_failure_is_recorded_with_its_class_and_the_output_tail_secrets_redacted(store: Any) -> None:
    Queue(store).add("Rate limit the login endpoint", task_id="t1")
    script = ("echo 'collected 12 items'; echo \"export GITHUB_TOKEN=$TOKEN\"; "
              "echo 'FAILED tests/test_login.py::test_rate_limit - AssertionError: 200 != 429'; "
              "echo '1 failed, 11 passed in 0.42s'; echo 'warning: slow test' >&2; exit 1")
    os.environ["TOKEN"] = SECRET
    try:
        summary = work(store, ["sh", "-c", script])
    finally:
        del os.environ["TOKEN"]
    assert (summary.exit_code, summary.count("failed")) == (1, 1)
    run = summary.runs[0]
    assert (run.state, run.error_type, run.error_class, run.exit_code) == ("pending", "test_failure",
                                                                          "test_failure", 1)
    task = show(store, "t1")["task"]
    attempt = task["attempts"][0]
    assert attempt["error_type"] == "test_failure" and attempt["agent_id"] == "eng-001"
    message = attempt["error_message"]
    assert message.splitlines()[0].startswith("exit 1 (test_failure): FAILED tests/test_login.py::test_rate_limit")
    assert "stderr (last lines):\nwarning: slow test" in message
    assert "1 failed, 11 passed" in message and "collected 12 items" in message
    assert SECRET not in json.dumps(task) and "[REDACTED:" in message
    assert task["available_at"] == "2026-01-25T10:00:05Z"  # the queue's backoff, as for `queue fail`
    assert attempt["approach"].startswith("sh -c ") and "eng-001" not in attempt["approach"]


@pytest.mark.files("looks for the secret in every file of the tree")
def test_a_secret_the_command_prints_never_reaches_the_tree(store: Store) -> None:
    Queue(store).add("t", task_id="t1", max_attempts=1)
    work(store, ["sh", "-c", f"echo 'Authorization: token {SECRET}'; echo 'password={SECRET}' >&2; exit 3"])
    assert show(store, "t1")["state"] == "dead-letter"
    for path in Path(store.root).rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_a_command_killed_by_a_signal_is_named_by_its_exit_status(store: Any) -> None:
    Queue(store).add("t", task_id="t1")
    summary = work(store, ["sh", "-c", "kill -KILL $$"])
    run = summary.runs[0]
    assert (run.exit_code, run.error_class, run.error_type) == (137, "resource", "other")


def test_nothing_ready_is_exit_3_and_no_task_is_touched(store: Any) -> None:
    summary = work(store, ["true"])
    assert (summary.exit_code, summary.stopped, summary.runs) == (3, "nothing_ready", [])
    assert summary.reason == "nothing to claim: the pending queue is empty"


def test_the_loop_goes_on_to_the_next_task_and_stops_when_nothing_is_ready(store: Any) -> None:
    queue = Queue(store)
    for n in range(3):
        queue.add(f"task {n}", task_id=f"t{n}")
    summary = work(store, ["true"])
    assert [r.task_id for r in summary.runs] == ["t0", "t1", "t2"]
    assert (summary.exit_code, summary.stopped) == (0, "nothing_ready")
    assert {show(store, f"t{n}")["state"] for n in range(3)} == {"completed"}


def test_max_tasks_stops_after_that_many(store: Any) -> None:
    queue = Queue(store)
    for n in range(3):
        queue.add(f"task {n}", task_id=f"t{n}")
    summary = work(store, ["true"], max_tasks=2)
    assert (len(summary.runs), summary.stopped, summary.exit_code) == (2, "max_tasks", 0)
    assert show(store, "t2")["state"] == "pending"


def test_only_the_given_types_are_claimed(store: Any) -> None:
    queue = Queue(store)
    queue.add("a bug", task_id="b1", type="bug")
    queue.add("a doc", task_id="d1", type="docs")
    summary = work(store, ["true"], types=["docs"])
    assert [r.task_id for r in summary.runs] == ["d1"]
    assert show(store, "b1")["state"] == "pending"


@pytest.mark.parametrize("content, reason", [
    (b'{"commit": "a", "commit": "b"}', "duplicate key 'commit'"),
    (b'["not", "an object"]', "expected a JSON object, got an array"),
    (b'{"tests": NaN}', "NaN"),
    (b'{"x": 1} trailing', "invalid JSON"),
    (b'\xef\xbb\xbf{"x": 1}', "byte-order mark"),
    (b'{"x": "\xff"}', "not valid UTF-8"),
    (b"x" * (MAX_RESULT_BYTES + 1), "over the 1048576-byte limit"),
])
def test_a_bad_result_file_is_a_validation_failure_naming_the_file(store: Any, tmp_path: Path, content: bytes,
                                                                   reason: str) -> None:
    Queue(store).add("t", task_id="t1")
    source = tmp_path / "result"
    source.write_bytes(content)
    summary = work(store, ["sh", "-c", f'cp {source} "$LOKI_RESULT_FILE"'])
    assert summary.exit_code == 1
    attempt = show(store, "t1")["task"]["attempts"][0]
    assert attempt["error_type"] == "validation"
    assert attempt["error_message"].startswith("exit 0 (bad_result_file): result file ")
    assert "result.json" in attempt["error_message"] and reason in attempt["error_message"]


def test_a_result_file_that_is_a_fifo_is_refused_without_hanging(store: Any) -> None:
    Queue(store).add("t", task_id="t1")
    summary = work(store, ["sh", "-c", 'mkfifo "$LOKI_RESULT_FILE"'])
    message = show(store, "t1")["task"]["attempts"][0]["error_message"]
    assert summary.exit_code == 1 and "is a FIFO, not a regular file" in message


def test_a_missing_command_is_127_before_anything_is_claimed(store: Any) -> None:
    Queue(store).add("t", task_id="t1")
    with pytest.raises(CommandNotFound) as info:
        work(store, ["no-such-agent-xyz", "{id}"])
    assert info.value.exit_code == 127
    assert show(store, "t1")["task"]["attempts"] == [] and show(store, "t1")["state"] == "pending"


@pytest.mark.files("corrupts a queue file")
def test_a_broken_tree_stops_the_loop_with_lokis_error_and_the_file_is_left_as_it_was(store: Store) -> None:
    Queue(store).add("t", task_id="t1")
    broken = Path(store.root) / "queue" / "in-progress.json"
    summary = work(store, ["sh", "-c", f"printf '{{\"version\": 1, ' > {broken}"])
    assert (summary.stopped, summary.exit_code) == ("error", 1)
    assert "queue/in-progress.json" in summary.reason
    assert broken.read_text() == '{"version": 1, '


# -- --until-empty ---------------------------------------------------------------------------------


def test_until_empty_waits_out_a_backoff_and_runs_the_task_again(store: Any, clock: ManualClock) -> None:
    Queue(store).add("flaky", task_id="t1")
    sleep = FakeSleep(clock)
    worker = make_worker(store, ["sh", "-c", '[ "$LOKI_TASK_ATTEMPT" != 1 ]'], until_empty=True, sleep=sleep)
    summary = worker.run_unguarded()
    assert [r.outcome for r in summary.runs] == ["failed", "completed"]
    assert sleep.calls == [5.0]  # the queue's first backoff, waited on the injected clock
    assert (summary.stopped, summary.exit_code) == ("empty", 0)  # the task completed in the end


def test_a_stop_request_while_waiting_for_a_backoff_ends_the_wait_and_the_loop(store: Any, clock: ManualClock) -> None:
    Queue(store).add("flaky", task_id="t1")
    worker: list[Worker] = []
    sleep = FakeSleep(clock, then=lambda calls: worker[0].request_stop(signal.SIGTERM))
    worker.append(make_worker(store, ["false"], until_empty=True, sleep=sleep))
    summary = worker[0].run_unguarded()
    assert (summary.exit_code, summary.stopped, len(sleep.calls)) == (143, "signal", 1)
    assert [r.outcome for r in summary.runs] == ["failed"]  # not claimed again once stopped


def test_until_empty_with_nothing_at_all_is_exit_0(store: Any) -> None:
    summary = work(store, ["true"], until_empty=True)
    assert (summary.stopped, summary.exit_code, summary.runs) == ("empty", 0, [])


def test_until_empty_waits_for_a_dependency_another_agent_holds(store: Any, clock: ManualClock) -> None:
    queue = Queue(store)
    queue.add("schema", task_id="dep")
    queue.add("endpoint", task_id="t1", depends_on=["dep"])
    held = queue.claim("eng-002")

    def other_agent_finishes(calls: int) -> None:
        queue.complete("dep", "eng-002", token=held["claim_token"])

    sleep = FakeSleep(clock, then=other_agent_finishes)
    summary = make_worker(store, ["true"], until_empty=True, sleep=sleep).run_unguarded()
    assert sleep.calls == [POLL_SECONDS]
    assert [r.task_id for r in summary.runs] == ["t1"] and summary.exit_code == 0


def test_outlook_counts_only_what_may_become_ready_without_a_human(store: Any, clock: ManualClock) -> None:
    queue = Queue(store)
    queue.add("backing off", task_id="b1", max_attempts=3)
    queue.fail("b1", "x", error="boom", token=queue.claim("x")["claim_token"])  # back at 10:00:05
    queue.add("held elsewhere", task_id="h1")
    queue.claim("x", lease_seconds=60)
    queue.add("waits on h1", task_id="w1", depends_on=["h1"])
    queue.add("waits on w1", task_id="w2", depends_on=["w1"])
    queue.add("other type", task_id="o1", type="docs", depends_on=["h1"])
    ahead = outlook(queue, (), clock.now())
    assert (ahead.waiting, ahead.next_at) == (5, "2026-01-25T10:00:05Z")  # h1 (held), b1, w1, w2, o1
    assert ahead.wait_seconds(clock.now()) == 5.0
    # An agent of type "docs" runs only o1; "general" tasks are not its to wait for.
    assert outlook(queue, ("docs",), clock.now()).waiting == 1


def test_outlook_does_not_wait_for_a_task_whose_dependency_needs_a_human(store: Any, clock: ManualClock) -> None:
    queue = Queue(store)
    queue.add("dead", task_id="d1", max_attempts=1)
    queue.fail("d1", "x", error="boom", token=queue.claim("x")["claim_token"])
    queue.add("waits on a dead-letter task", task_id="w1", depends_on=["d1"])
    queue.add("docs nobody here runs", task_id="o1", type="docs")
    queue.add("waits on docs", task_id="w2", depends_on=["o1"])
    assert outlook(queue, ("general",), clock.now()).waiting == 0
    summary = work(store, ["true"], until_empty=True, types=["general"])
    assert (summary.stopped, summary.exit_code, summary.runs) == ("empty", 0, [])


# -- the lease while the command runs (injected time) ----------------------------------------------


def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "go"
    os.mkfifo(path)
    return path


def blocked_on(path: Path) -> list[str]:
    """A command that waits until the test writes to ``path`` (a bug fails the test after 2 minutes
    instead of hanging it: an alarm in the command's own process, which stays in the guard's group)."""
    return [PY, "-c", f"import signal; signal.alarm(120); open({str(path)!r}).read()"]


def release_fifo(path: Path) -> None:
    """Let a command blocked in ``read < fifo`` go on (the open waits for its reader)."""
    fd = os.open(path, os.O_WRONLY)
    os.write(fd, b"go\n")
    os.close(fd)


def test_the_lease_is_renewed_while_the_command_runs_longer_than_it(store: Any, clock: ManualClock,
                                                                     tmp_path: Path) -> None:
    Queue(store).add("a long task", task_id="t1")
    go = fifo(tmp_path)
    waits: list[float] = []

    def heartbeat_wait(seconds: float, stopped: threading.Event) -> bool:
        waits.append(seconds)
        if len(waits) <= 4:  # 4 x 10 s = 40 s, longer than the 30 s lease
            clock.advance(seconds)
            # Another agent's claim requeues expired leases first: this one must still be alive.
            with pytest.raises(NothingToDo):
                Queue(store).claim("eng-002")
            return False
        release_fifo(go)
        return stopped.wait()

    worker = make_worker(store, blocked_on(go), lease_seconds=30, heartbeat_wait=heartbeat_wait)
    summary = worker.run_unguarded()
    assert waits[:4] == [renew_interval(30)] * 4 == [10.0] * 4
    assert (summary.exit_code, summary.runs[0].heartbeats) == (0, 4)
    task = show(store, "t1")["task"]
    assert show(store, "t1")["state"] == "completed" and task["attempts"] == []
    assert task["result"]["heartbeats"] == 4


def test_a_lost_lease_stops_the_command_and_records_nothing(store: Any, clock: ManualClock, tmp_path: Path) -> None:
    Queue(store).add("a long task", task_id="t1")
    go = fifo(tmp_path)
    stolen: list[dict[str, Any]] = []

    def heartbeat_wait(seconds: float, stopped: threading.Event) -> bool:
        if not stolen:
            clock.advance(31)  # past the lease, as when the machine slept: it is requeued (backing off 5 s) ...
            Queue(store).requeue_stale()
            clock.advance(5)
            stolen.append(Queue(store).claim("eng-002"))  # ... and claimed by another agent
            return False
        return stopped.wait()

    summary = make_worker(store, blocked_on(go), lease_seconds=30,
                          heartbeat_wait=heartbeat_wait).run_unguarded()
    run = summary.runs[0]
    assert (summary.exit_code, run.outcome, run.state) == (4, "lease_lost", None)
    assert run.error == "t1 is held by 'eng-002', not 'eng-001'; nothing changed"
    assert run.exit_code == 143  # stopped by SIGTERM, at once
    task = show(store, "t1")["task"]
    assert task["claimed_by"] == "eng-002" and task["claim_token"] == stolen[0]["claim_token"]
    assert [a["error_type"] for a in task["attempts"]] == ["timeout"]  # the requeue's, nothing of ours


def test_a_stop_request_stops_the_command_and_releases_the_task_untouched(store: Any, tmp_path: Path) -> None:
    Queue(store).add("a long task", task_id="t1")
    go = fifo(tmp_path)
    worker: list[Worker] = []

    def heartbeat_wait(seconds: float, stopped: threading.Event) -> bool:
        worker[0].request_stop(signal.SIGTERM)  # what SIGTERM does, from the signal handler
        return stopped.wait()

    worker.append(make_worker(store, blocked_on(go), heartbeat_wait=heartbeat_wait))
    summary = worker[0].run_unguarded()
    assert (summary.exit_code, summary.stopped, summary.runs[0].outcome) == (143, "signal", "released")
    found = show(store, "t1")
    assert found["state"] == "pending" and found["task"]["attempts"] == []
    assert found["task"]["notes"][-1]["text"] == "released by its holder"


def test_a_stop_request_between_tasks_claims_nothing_more(store: Any) -> None:
    queue = Queue(store)
    queue.add("one", task_id="t1")
    queue.add("two", task_id="t2")
    captured = Captured()
    worker = make_worker(store, ["true"], captured=captured)
    original = worker.queue.complete

    def complete_then_signal(*args: Any, **kwargs: Any) -> Any:
        done = original(*args, **kwargs)
        worker.request_stop(signal.SIGINT)
        return done

    worker.queue.complete = complete_then_signal  # type: ignore[method-assign]
    summary = worker.run_unguarded()
    assert (summary.exit_code, [r.task_id for r in summary.runs]) == (130, ["t1"])
    assert show(store, "t2")["state"] == "pending"


# -- the breaker -----------------------------------------------------------------------------------


def test_with_an_open_breaker_the_task_is_released_and_the_loop_stops_with_75(store: Any) -> None:
    Queue(store).add("t", task_id="t1")
    Breakers(store).trip("api/claude")
    summary = work(store, ["true"], breaker="api/claude", retries=0)
    assert (summary.exit_code, summary.stopped, summary.runs[0].outcome) == (75, "circuit_open", "released")
    assert show(store, "t1")["state"] == "pending" and show(store, "t1")["task"]["attempts"] == []


def test_with_a_breaker_a_rate_limited_run_is_retried_within_the_claim(store: Any, clock: ManualClock,
                                                                        tmp_path: Path) -> None:
    Queue(store).add("t", task_id="t1")
    marker = tmp_path / "ran-once"
    script = f"[ -e {marker} ] && exit 0; touch {marker}; echo 'HTTP/1.1 429 Too Many Requests' >&2; exit 1"
    sleep = FakeSleep(clock)
    summary = make_worker(store, ["sh", "-c", script], breaker="api/claude", sleep=sleep).run_unguarded()
    assert summary.exit_code == 0 and summary.runs[0].runs == 2
    assert len(sleep.calls) == 1  # one backoff, inside the one claim
    assert show(store, "t1")["task"]["result"]["runs"] == 2 and show(store, "t1")["task"]["attempts"] == []
    breaker = Breakers(store).status("api/claude").entry
    assert (breaker["total_failures"], breaker["total_successes"]) == (1, 1)


# -- options ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("options, message", [
    ({"command": []}, "no command given"),
    ({"command": ["claude", "-p", "{titel}"]}, "unknown placeholder {titel}"),
    ({"max_tasks": 0}, "invalid --max-tasks 0"),
    ({"max_tasks": -2}, "invalid --max-tasks -2"),
    ({"max_tasks": True}, "invalid --max-tasks True"),
    ({"agent": "a\x1bb"}, "agent name"),
    ({"retries": -1}, "--retries"),
])
def test_bad_options_are_usage_errors(options: dict[str, Any], message: str) -> None:
    options = {"agent": "eng-001", "command": ["true"], **options}
    with pytest.raises(UsageError, match=message.replace("{", r"\{").replace("}", r"\}")) as info:
        WorkOptions(**options)
    assert info.value.exit_code == 2


# -- placeholders ----------------------------------------------------------------------------------


def test_placeholders_are_replaced_whole_and_braces_that_are_not_placeholders_stay() -> None:
    given = dict.fromkeys(placeholders.PLACEHOLDERS, "")
    given.update(id="t1", title="a b; rm -rf /", payload='{"n":1}')
    assert placeholders.expand(["{id}", "do {title}", "{{id}}", "{}", "${HOME}", '{"a": {"b": 1}}', "{payload}"],
                               given) == ["t1", "do a b; rm -rf /", "{id}", "{}", "${HOME}", '{"a": {"b": 1}}',
                                          '{"n":1}']


def test_an_unknown_placeholder_names_itself_and_the_known_ones() -> None:
    with pytest.raises(UsageError) as info:
        placeholders.check(["claude", "-p", "Fix {Title}"])
    assert "unknown placeholder {Title} in the command's argument 3" in info.value.message
    assert "{title}" in info.value.message and "{{Title}}" in info.value.message
    placeholders.check(["{{Title}}", "{}", '{"a": 1}'])  # escaped, empty, JSON: fine


def test_nul_in_a_value_cannot_reach_exec() -> None:
    given = dict.fromkeys(placeholders.PLACEHOLDERS, "")
    given["title"] = "a\x00b"
    assert placeholders.expand(["{title}"], given) == ["a\ufffdb"]


# -- the lease renewer -----------------------------------------------------------------------------


def scripted_waits(count: int, clock: ManualClock | None = None) -> Callable[[float, threading.Event], bool]:
    """A waiter that lets ``count`` renewals happen (moving ``clock`` by each interval), then stops."""
    calls: list[float] = []

    def wait(seconds: float, stopped: threading.Event) -> bool:
        calls.append(seconds)
        if clock is not None:
            clock.advance(seconds)
        return len(calls) > count

    return wait


def test_the_renewer_renews_at_each_interval_until_told_to_stop(clock: ManualClock) -> None:
    renewed: list[str] = []
    beat = Heartbeat(lambda: renewed.append(clock.now().isoformat()), 20.0, wait=scripted_waits(3, clock))
    beat.run()
    assert renewed == ["2026-01-25T10:00:20+00:00", "2026-01-25T10:00:40+00:00", "2026-01-25T10:01:00+00:00"]
    assert (beat.renewals, beat.lost, beat.failures) == (3, None, [])


def test_a_refused_renewal_ends_it_and_says_the_lease_is_lost() -> None:
    lost: list[str] = []

    def renew() -> None:
        raise Conflict("lease lost: t1 was requeued")

    beat = Heartbeat(renew, 1.0, wait=scripted_waits(5), on_lost=lambda exc: lost.append(exc.message))
    beat.run()
    assert lost == ["lease lost: t1 was requeued"] and beat.renewals == 0


def test_a_failed_renewal_is_tried_again_at_the_next_interval() -> None:
    outcomes: list[Exception | None] = [LockTimeout("queue/.lock is held"), None]

    def renew() -> None:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    beat = Heartbeat(renew, 1.0, wait=scripted_waits(2))
    beat.run()
    assert (beat.renewals, beat.failures, beat.lost) == (1, ["queue/.lock is held"], None)


def test_stop_ends_a_renewer_thread_that_waits() -> None:
    beat = Heartbeat(lambda: None, 3600.0)
    beat.start()
    beat.stop()  # returns at once: the default waiter wakes on the stop event
    assert beat.renewals == 0


def test_a_renewal_interval_is_a_third_of_the_lease() -> None:
    assert renew_interval(3600) == 1200 and renew_interval(3) == 1
    with pytest.raises(ValueError):
        Heartbeat(lambda: None, 0)


# -- what a failure says ---------------------------------------------------------------------------


def test_describe_names_the_class_and_keeps_only_the_tail() -> None:
    noise = "".join(f"line {n}\n" for n in range(2000))
    failure = describe(2, (noise + "src/main.rs:3:5: error: expected `;`, found `}`\n").encode(), b"")
    assert failure.error_class == "compile_error" and failure.error_type == "other"
    assert failure.headline.startswith("exit 2 (compile_error): ")
    stdout_part = failure.message.split("stdout (last lines):\n", 1)[1]
    assert len(stdout_part) <= TAIL_CHARS + 3 and stdout_part.endswith("expected `;`, found `}`")
    assert "line 0\n" not in failure.message


def test_describe_without_output_uses_the_exit_status() -> None:
    failure = describe(124, b"", b"")
    assert (failure.error_class, failure.error_type, failure.message) == ("timeout", "timeout",
                                                                          "exit 124 (timeout): exited with code 124")


def test_invalid_argument_is_what_a_bad_max_tasks_raises() -> None:
    with pytest.raises(InvalidArgument):
        WorkOptions(agent="a", command=["true"], max_tasks=0)


def test_a_renewal_that_crashes_is_retried_not_the_end_of_the_renewer() -> None:
    outcomes: list[Exception | None] = [OSError("disk went away"), None]

    def renew() -> None:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    beat = Heartbeat(renew, 1.0, wait=scripted_waits(2))
    beat.run()
    assert (beat.renewals, beat.failures) == (1, ["OSError: disk went away"])


@given(st.lists(st.text(max_size=40), max_size=6))
def test_arguments_without_placeholders_pass_through_unchanged(args: list[str]) -> None:
    """Text with no ``{name}`` (nor an escaped ``{{name}}``) is never touched: JSON, ``${HOME}``, ``{}``."""
    if any(placeholders.uses_any(arg) or re.search(r"\{\{[A-Za-z_]\w*\}\}", arg) for arg in args):
        return
    placeholders.check(args)
    assert placeholders.expand(args, dict.fromkeys(placeholders.PLACEHOLDERS, "VALUE")) == args


# -- the guard -------------------------------------------------------------------------------------


def run_guarded(command: list[str]) -> subprocess.CompletedProcess[bytes]:
    from loki.work.launch import GUARD, GUARD_PYTHON

    watch, alive = os.pipe()
    try:
        return subprocess.run([*GUARD_PYTHON, GUARD, str(watch), "--", *command], pass_fds=(watch,),
                              capture_output=True, start_new_session=True, timeout=60)
    finally:
        os.close(watch)
        os.close(alive)


def test_the_guard_leaves_as_its_command_left() -> None:
    assert run_guarded(["sh", "-c", "echo out; echo err >&2; exit 7"]).returncode == 7
    done = run_guarded(["sh", "-c", "echo out; echo err >&2"])
    assert (done.returncode, done.stdout, done.stderr) == (0, b"out\n", b"err\n")
    assert run_guarded(["sh", "-c", "kill -TERM $$"]).returncode == -signal.SIGTERM
    assert run_guarded(["sh", "-c", "kill -KILL $$"]).returncode == -signal.SIGKILL
    missing = run_guarded(["no-such-agent-xyz"])
    assert missing.returncode == 127 and b"no-such-agent-xyz" in missing.stderr


def test_the_guard_gives_the_command_default_signal_dispositions() -> None:
    # SIGINT and SIGPIPE are ignored in the guard (and Python ignores SIGPIPE): not in the command.
    done = run_guarded(["sh", "-c", "grep -E 'SigIgn' /proc/$$/status"])
    assert int(done.stdout.split()[1], 16) & ((1 << (signal.SIGINT - 1)) | (1 << (signal.SIGPIPE - 1))) == 0


# Where a stop signal can reach the group while the guard starts its command: the guard's fork is wrapped to
# send it (no timing involved). Before the fix the guard ignored the signal and its child had not yet reset it,
# so the command ran unstopped: loki work's lost-lease SIGTERM ended as a SIGKILL 10 s later (exit 137).
SIGNAL_DURING_THE_FORK = {
    "before the fork": "os.killpg(0, signal.SIGTERM)\npid = real_fork()",
    "in the child, before its exec": "pid = real_fork()\nif pid == 0:\n    os.killpg(0, signal.SIGTERM)",
    "in the guard, after the fork": "pid = real_fork()\nif pid != 0:\n    os.killpg(0, signal.SIGTERM)",
}


@pytest.mark.parametrize("moment", list(SIGNAL_DURING_THE_FORK))
def test_a_stop_signal_sent_while_the_guard_starts_its_command_stops_the_command(moment: str) -> None:
    from loki.work.launch import GUARD, GUARD_PYTHON

    send = SIGNAL_DURING_THE_FORK[moment].replace("\n", "\n    ")
    guard_with_a_signalling_fork = (
        "import os, signal, sys\n"
        f"sys.path.insert(0, {os.path.dirname(GUARD)!r})\n"
        "import guard\n"
        "real_fork = os.fork\n"
        "def fork():\n"
        f"    {send}\n"
        "    return pid\n"
        "os.fork = fork\n"
        "guard.main(sys.argv)\n")
    watch, alive = os.pipe()
    try:
        done = subprocess.run([*GUARD_PYTHON, "-c", guard_with_a_signalling_fork, str(watch), "--", "sh", "-c",
                               "echo ran"], pass_fds=(watch,), capture_output=True, start_new_session=True,
                              timeout=60)
    finally:
        os.close(watch)
        os.close(alive)
    assert (done.returncode, done.stdout) == (-signal.SIGTERM, b""), done.stderr  # stopped before it ran


def test_the_command_starts_with_no_signal_blocked() -> None:
    # The guard holds stop signals while it starts the command: the command must not inherit that.
    done = run_guarded(["grep", "SigBlk", "/proc/self/status"])  # not a shell's $$: sh blocks signals as it waits
    assert int(done.stdout.split()[1], 16) == 0, done.stdout


def test_the_guard_started_without_a_group_of_its_own_never_kills_its_callers() -> None:
    """Defensive: killing "its" group when its loki work dies must not take down whoever started it."""
    from loki.work.launch import GUARD, GUARD_PYTHON

    caller = ("import os, subprocess, sys\n"
              "watch, alive = os.pipe()\n"
              f"guard = subprocess.Popen({[*GUARD_PYTHON, GUARD]!r} + [str(watch), '--', 'sleep', '60'], "
              "pass_fds=(watch,))\n"
              "os.close(alive)\n"  # as if its loki work died: the guard kills its group
              "guard.wait()\n"
              "print('the caller survived', guard.returncode, flush=True)\n")
    done = subprocess.run([PY, "-c", caller], capture_output=True, text=True, timeout=60, start_new_session=True)
    assert done.stdout == f"the caller survived {-signal.SIGKILL}\n", done.stderr
