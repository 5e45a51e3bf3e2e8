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
