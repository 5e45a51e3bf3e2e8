"""The meter in ``loki work`` (docs/spend.md), on every backend: the usage an agent reports is kept in the task,
one entry per claim, recorded with the claim's outcome; a refused figure is said in one line and not stored."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from loki.errors import InvalidArgument
from loki.queue.queue import Queue
from tests.contract.test_work import Captured, work

PY = sys.executable
CLAUDE = {"type": "result", "subtype": "success", "total_cost_usd": 0.25,
          "usage": {"input_tokens": 10, "output_tokens": 200, "cache_read_input_tokens": 30000,
                    "cache_creation_input_tokens": 400},
          "modelUsage": {"claude-sonnet-4-5": {"outputTokens": 200, "costUSD": 0.25}}}


@pytest.fixture
def store(backend_store: Any) -> Any:
    return backend_store


def printing(doc: object, exit_code: int = 0) -> list[str]:
    """A command that prints ``doc`` as one line on stdout, as ``claude -p --output-format json`` does."""
    return [PY, "-c", f"import sys; print('working'); print({json.dumps(doc)!r}); sys.exit({exit_code})"]


def test_a_completed_attempt_keeps_what_the_agent_reported_and_stdout_passes_unchanged(store: Any) -> None:
    Queue(store).add("t", task_id="t1")
    captured = Captured()
    summary = work(store, printing(CLAUDE), captured=captured)
    assert summary.count("completed") == 1
    assert captured.stdout == b"working\n" + json.dumps(CLAUDE).encode() + b"\n"
    task = Queue(store).show("t1")["task"]
    assert task["usage"] == [{"input_tokens": 10, "output_tokens": 200, "cache_read_tokens": 30000,
                              "cache_creation_tokens": 400, "source": "claude", "model": "claude-sonnet-4-5",
                              "usd": 0.25, "usd_source": "agent", "attempt": 1, "agent": "eng-001",
                              "at": task["completed_at"], "outcome": "completed"}]
    assert summary.runs[0].usage is not None and summary.runs[0].usage["usd"] == 0.25
    assert summary.to_json()["tasks"][0]["usage"]["cache_read_tokens"] == 30000


def test_each_claim_is_counted_once_a_failure_and_its_retry_two_entries(store: Any) -> None:
    queue = Queue(store)
    queue.add("t", task_id="t1", max_attempts=3)
    work(store, printing(CLAUDE, exit_code=1), max_tasks=1)
    store.clock.advance(3600)
    work(store, printing(CLAUDE), max_tasks=1)
    task = queue.show("t1")["task"]
    assert [(e["attempt"], e["outcome"], e["usd"]) for e in task["usage"]] == [(1, "failed", 0.25),
                                                                                (2, "completed", 0.25)]


def test_the_result_files_usage_is_the_attempts_for_any_other_agent(store: Any) -> None:
    Queue(store).add("t", task_id="t1")
    script = ("import json, os; json.dump({'usage': {'input_tokens': 7, 'output_tokens': 3, "
              "'model': 'claude-haiku-4-5'}}, open(os.environ['LOKI_RESULT_FILE'], 'w'))")
    work(store, [PY, "-c", script])
    entry = Queue(store).show("t1")["task"]["usage"][0]
    assert entry["source"] == "result_file" and entry["input_tokens"] == 7 and entry["usd_source"] == "prices"
    assert entry["usd"] == pytest.approx((7 * 1.0 + 3 * 5.0) / 1e6)


def test_a_lying_cost_is_said_once_and_nothing_is_stored(store: Any) -> None:
    Queue(store).add("t", task_id="t1")
    captured = Captured()
    summary = work(store, printing({**CLAUDE, "total_cost_usd": "0.25 USD"}), captured=captured)
    assert summary.count("completed") == 1  # the work is done; only its figure is refused
    said = [note for note in captured.notes if note.startswith("usage of t1")]
    assert said == ["usage of t1 not recorded from stdout's Claude Code result: total_cost_usd must be a number "
                    "of dollars (got '0.25 USD')"]
    assert "usage" not in Queue(store).show("t1")["task"]


def test_no_report_no_entry(store: Any) -> None:
    Queue(store).add("t", task_id="t1")
    summary = work(store, [PY, "-c", "print('{\"not\": \"usage\"}')"])
    assert summary.runs[0].usage is None and "usage" not in Queue(store).show("t1")["task"]


def test_the_queue_refuses_a_bad_usage_entry_and_changes_nothing(store: Any) -> None:
    queue = Queue(store)
    queue.add("t", task_id="t1")
    claimed = queue.claim("a")
    bad = {"input_tokens": -1, "output_tokens": 0, "cache_read_tokens": 0, "cache_creation_tokens": 0,
           "source": "claude"}
    for call in (lambda: queue.complete("t1", "a", token=claimed["claim_token"], usage=bad),
                 lambda: queue.fail("t1", "a", error="x", token=claimed["claim_token"], usage=bad),
                 lambda: queue.release("t1", "a", token=claimed["claim_token"], usage=bad)):
        with pytest.raises(InvalidArgument, match=r"usage\.input_tokens must be from 0"):
            call()
    assert queue.show("t1")["state"] == "in-progress"


def test_a_repeated_completion_adds_no_second_entry(store: Any) -> None:
    queue = Queue(store)
    queue.add("t", task_id="t1")
    claimed = queue.claim("a")
    usage = {"input_tokens": 1, "output_tokens": 2, "cache_read_tokens": 3, "cache_creation_tokens": 0,
             "source": "result_file", "usd": 0.01, "usd_source": "agent"}
    queue.complete("t1", "a", token=claimed["claim_token"], usage=usage)
    queue.complete("t1", "a", token=claimed["claim_token"], usage=usage)  # its answer was lost: a repeat
    assert len(queue.show("t1")["task"]["usage"]) == 1


def test_a_released_claim_keeps_what_it_spent(store: Any) -> None:
    queue = Queue(store)
    queue.add("t", task_id="t1")
    claimed = queue.claim("a")
    usage = {"input_tokens": 1, "output_tokens": 2, "cache_read_tokens": 0, "cache_creation_tokens": 0,
             "source": "codex", "usd": None}
    queue.release("t1", "a", token=claimed["claim_token"], usage=usage)
    shown = queue.show("t1")
    assert shown["state"] == "pending" and shown["task"]["usage"][0]["outcome"] == "released"


def test_max_task_usd_is_passed_to_claude_code_and_a_failure_that_spent_it_is_class_budget(
        store: Any, tmp_path: Any) -> None:
    claude = tmp_path / "claude"  # stands in for Claude Code: records its arguments, spends over the cap
    seen = tmp_path / "args"
    claude.write_text(f"#!/bin/sh\necho \"$@\" > {seen}\necho '{json.dumps({**CLAUDE, 'total_cost_usd': 0.6})}'\n"
                      "exit 1\n")
    claude.chmod(0o755)
    Queue(store).add("t", task_id="t1")
    summary = work(store, [str(claude), "-p", "Do {id}"], max_task_usd=0.5)
    assert seen.read_text().split() == ["-p", "Do", "t1", "--max-budget-usd", "0.5"]
    run = summary.runs[0]
    assert (run.outcome, run.error_class, run.error) == ("failed", "budget",
                                                         "exit 1 (budget): spent $0.6000, --max-task-usd is $0.5")
    task = Queue(store).show("t1")["task"]
    assert task["attempts"][0]["error_message"] == "exit 1 (budget): spent $0.6000, --max-task-usd is $0.5"
    assert task["usage"][0]["usd"] == 0.6


def test_claude_codes_own_cap_result_is_a_failure_of_class_budget_with_its_usage(store: Any, tmp_path: Any) -> None:
    """Claude Code stopped by a --max-budget-usd the command line gave it (not --max-task-usd): its
    ``error_max_budget_usd`` result makes the attempt class ``budget``, with the tokens its modelUsage kept."""
    from tests.spend.test_meter import CLAUDE_CAPPED

    claude = tmp_path / "claude"
    claude.write_text(f"#!/bin/sh\necho '{json.dumps(CLAUDE_CAPPED)}'\nexit 1\n")
    claude.chmod(0o755)
    Queue(store).add("t", task_id="t1")
    run = work(store, [str(claude), "-p", "Do {id}", "--max-budget-usd", "0.0001"]).runs[0]
    headline = ("exit 1 (budget): Claude Code stopped at its cap: Reached maximum budget ($0.0001); "
                "spent $0.0173")
    assert (run.outcome, run.error_class, run.error) == ("failed", "budget", headline)
    task = Queue(store).show("t1")["task"]
    assert task["attempts"][0]["error_message"] == headline
    [usage] = task["usage"]
    assert (usage["input_tokens"], usage["cache_read_tokens"], usage["usd"], usage["outcome"]) == (
        37, 52000, 0.017268, "failed")


@pytest.mark.parametrize(("program", "expected"), [
    ("claude", True), ("/usr/bin/claude", True), ("/x/@anthropic-ai/claude-code/bin/claude.exe", True),
    ("CLAUDE.EXE", True), ("claude-wrapper", False), ("codex", False), ("/opt/claude/bin/python", False)])
def test_what_counts_as_claude_code_for_max_task_usd(program: str, expected: bool) -> None:
    from loki.work.loop import is_claude

    assert is_claude(program) is expected


def test_max_task_usd_is_not_passed_to_other_commands(store: Any) -> None:
    Queue(store).add("t", task_id="t1")
    summary = work(store, [PY, "-c", "import sys; print(sys.argv[1:])", "x"], max_task_usd=0.5)
    assert summary.count("completed") == 1


@pytest.mark.parametrize(("options", "match"), [({"max_task_usd": 0}, "invalid --max-task-usd 0"),
                                                ({"max_task_usd": -1.0}, "invalid --max-task-usd"),
                                                ({"reserve_usd": float("nan")}, "invalid --reserve"),
                                                ({"reserve_usd": -2.0}, "invalid --reserve")])
def test_bad_spend_options_are_usage_errors(options: dict[str, Any], match: str) -> None:
    from loki.work.loop import WorkOptions

    with pytest.raises(InvalidArgument, match=match):
        WorkOptions(agent="a", command=["true"], **options)


def test_loki_work_stops_between_tasks_when_a_budget_is_spent(store: Any) -> None:
    from loki.spend.budgets import Budgets

    Budgets(store).set("team", usd=0.5, per="day")
    for n in range(1, 5):
        Queue(store).add(f"t{n}", task_id=f"t{n}")
    summary = work(store, printing(CLAUDE))  # 0.25 a task: the third claim is refused
    assert (summary.exit_code, summary.stopped, summary.count("completed")) == (75, "budget", 2)
    assert summary.reason.startswith("budget team (team) spent: $0.5000 of $0.50 this day; it refills at ")
    assert Queue(store).show("t3")["state"] == "pending"


def test_a_completion_refused_mid_loop_still_releases_with_what_the_attempt_spent(store: Any) -> None:
    """A person adds checks to the held task while its command runs (``queue edit --verify --force``): the
    loop's completion is refused (Unverified), the loop releases the task and stops; the usage of the
    attempt is kept with the release, not lost."""
    from loki.queue.edits import edit
    from tests.contract.test_work import make_worker

    queue = Queue(store)
    queue.add("t", task_id="t1")
    worker = make_worker(store, printing(CLAUDE))
    complete = worker.queue.complete

    def edited_then_complete(*args: Any, **kwargs: Any) -> Any:
        edit(Queue(store), "t1", verify=["false"], force=True, by="lead")  # lands while the claim is held
        return complete(*args, **kwargs)

    worker.queue.complete = edited_then_complete  # type: ignore[method-assign]
    summary = worker.run_unguarded()
    assert summary.exit_code == 1 and summary.runs[0].outcome == "released"
    shown = queue.show("t1")
    assert shown["state"] == "pending"
    assert [(e["outcome"], e["usd"], e["attempt"]) for e in shown["task"]["usage"]] == [("released", 0.25, 1)]
