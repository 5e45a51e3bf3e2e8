"""A `complete` repeated with the claim's token after its answer was lost is a no-op on every backend (issue 22):
the queue recognises it (loki/queue/queue.py, ``_completed_by_this_claim``), and `loki work` relies on that
alone for a complete whose acknowledgement a dropped connection took (loki/work/loop.py). Through the CLI on
files: tests/test_clock_bounds.py::test_a_complete_repeated_with_the_same_token_is_a_no_op."""

from __future__ import annotations

from typing import Any

import pytest

from loki.errors import Conflict
from loki.queue.queue import Queue


def test_a_repeated_complete_with_the_claims_token_returns_the_completed_task_unchanged(backend_store: Any) -> None:
    queue = Queue(backend_store)
    queue.add("t", task_id="t1")
    claim = queue.claim("a")
    first = queue.complete("t1", "a", token=claim["claim_token"], result={"ok": 1})
    again = queue.complete("t1", "a", token=claim["claim_token"], result={"ok": 2})
    assert again["status"] == "completed" and again["result"] == {"ok": 1} == first["result"]
    assert again["completed_at"] == first["completed_at"]
    assert [e["event"] for e in queue.show("t1")["task"]["history"]].count("completed") == 1
    with pytest.raises(Conflict, match="is completed, not in progress"):
        queue.complete("t1", "a", token="another-claim")
    with pytest.raises(Conflict, match="is completed, not in progress"):
        queue.complete("t1", "b", token=claim["claim_token"])
    with pytest.raises(Conflict, match="is completed, not in progress"):
        queue.complete("t1", "a")  # without the token nothing says it is the same completion

