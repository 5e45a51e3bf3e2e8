"""The compiled schema validator (loki/storage/schema.py) in process.

Every write of a state file is validated; with ``LOKI_VALIDATE_ALL`` (the test suite, and the memory
store always) the whole document is. Three rows, each against a floor measured in the same run: a
hand-written walk that visits every value of the same document and does nothing else, which any
validator written in Python has to do at least.

* a realistic 1,000-task queue file, valid (what a full-validation write pays);
* one task, valid (what a write that validates only the records it changed pays, per record);
* one task with two bad fields (the error path: the problems, their pointers and messages).
"""

from __future__ import annotations

import json
from typing import Any

from bench.common import median, row, runs, time_call
from loki.storage.schema import registry
from loki.tasks.record import make_task


def _task(n: int) -> dict[str, Any]:
    task = make_task(task_id=f"task-{n:05d}", title=f"Implement feature {n}", now="2026-01-25T10:00:00Z",
                     description="Add the endpoint, its tests and its docs. " * 3, labels=["api"],
                     priority=("high", "medium", "low")[n % 3], payload={"spec": f"specs/openapi.yaml#/paths/{n}"},
                     dependencies=[f"task-{n - 1:05d}"] if n % 4 == 1 else [])
    task["history"] = [{"at": "2026-01-25T10:00:00Z", "event": "added", "to": "pending"}]
    if n % 5 == 2:
        task["attempts"] = [{"attempt_number": 1, "timestamp": "2026-01-25T10:00:00Z", "agent_id": "eng-001",
                             "approach": "first try", "error_type": "test_failure", "error_message": "2 failed"}]
    return task


def _walk(value: Any) -> None:
    """The floor: visit every value of a document, check nothing."""
    if isinstance(value, dict):
        for item in value.values():
            _walk(item)
    elif isinstance(value, list):
        for item in value:
            _walk(item)


def _times(fn: Any, repeat: int, per_call: int) -> float:
    """Median milliseconds of one call, timed in batches of ``per_call`` so that a microsecond call is measurable."""
    def batch() -> None:
        for _ in range(per_call):
            fn()

    return median(time_call(batch, repeat=repeat)) / per_call


def run() -> list[dict[str, Any]]:
    schemas = registry()
    queue = {"version": 1, "tasks": [_task(n) for n in range(1000)]}
    one = _task(7)
    bad = {**one, "priority": "whenever", "max_attempts": -1}
    assert schemas.problems("queue-file.json", queue) == [] and schemas.problems("task.json", one) == []
    assert len(schemas.problems("task.json", bad)) == 2
    repeat = runs(30)
    rows = []
    for label, name, doc, per_call, note in (
        ("schema: validate a 1,000-task queue file", "queue-file.json", queue, 1, "a full-validation write"),
        ("schema: validate one task", "task.json", one, 200, "a write that validates the records it changed"),
        ("schema: problems of a task with 2 bad fields", "task.json", bad, 200, "the error path: pointers, messages"),
    ):
        # Interleave loki and its floor so machine noise hits both alike.
        loki: list[float] = []
        floor: list[float] = []
        for _ in range(3):
            floor.append(_times(lambda doc=doc: _walk(doc), repeat, per_call))
            loki.append(_times(lambda name=name, doc=doc: schemas.problems(name, doc), repeat, per_call))
        rows.append(row(label, median(loki), floor_name="walk every value", floor_ms=median(floor), note=note))
    return rows


if __name__ == "__main__":
    for r in run():
        print(json.dumps(r))
