"""Keeping the hot queue files small: completed and cancelled tasks rotate into ``archive/``.

When ``completed.json`` (or ``cancelled.json``) holds more than
``queue.completed_hot_limit`` tasks, the oldest are moved, in the same journaled
change, into ``archive/<state>-YYYY-MM.jsonl`` (by the month they finished), down to
90 % of the limit so a busy queue does not rotate on every completion. Nothing is
dropped; ``loki queue show`` still finds an archived task.
"""

from __future__ import annotations

import os

from loki import jsonio, layout

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    from loki.store import Store, Transaction

ROTATED_STATES = ("completed", "cancelled")


def _finished_at(task: dict[str, Any]) -> str:
    return str(task.get("completed_at") or task.get("updated_at") or task["created_at"])


def rotate(txn: Transaction, state: str, tasks: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """Stage the archive appends for the oldest ``tasks`` beyond ``limit``; return the tasks to keep."""
    if len(tasks) <= limit:
        return tasks
    target = limit - limit // 10
    excess = len(tasks) - target
    oldest = set(sorted(range(len(tasks)), key=lambda i: (_finished_at(tasks[i]), i))[:excess])
    by_month: dict[str, list[dict[str, Any]]] = {}
    for index in sorted(oldest):
        task = tasks[index]
        by_month.setdefault(_finished_at(task)[:7], []).append(task)
    for month, moved in sorted(by_month.items()):
        txn.append(layout.archive_file(state, month), moved)
    return [task for index, task in enumerate(tasks) if index not in oldest]


def archive_files(store: Store) -> list[str]:
    """Archive files, newest month first."""
    try:
        names = os.listdir(store.path(layout.ARCHIVE_DIR))
    except FileNotFoundError:
        return []
    files = [n for n in names if n.endswith(".jsonl") and n.split("-", 1)[0] in ROTATED_STATES]
    return [f"{layout.ARCHIVE_DIR}/{n}" for n in sorted(files, key=lambda n: n.split("-", 1)[1], reverse=True)]


def iter_archived(store: Store, needle: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """(state, task) for archived tasks, streamed (a month of archive may be large); with ``needle``,
    only lines containing it are parsed."""
    raw_needle = needle.encode("utf-8") if needle is not None else None
    for rel in archive_files(store):
        state = rel.rsplit("/", 1)[-1].split("-", 1)[0]
        for _, _, line in store.iter_lines(rel):
            if not line.strip() or (raw_needle is not None and raw_needle not in line):
                continue
            try:
                task = jsonio.loads_strict(line)
            except jsonio.JsonError:
                continue  # a torn line from a crash; `loki validate` reports it
            if isinstance(task, dict) and "id" in task:
                yield state, task


def find(store: Store, task_id: str) -> tuple[str, dict[str, Any]] | None:
    needle = jsonio.dumps_compact({"id": task_id})[1:-1]  # '"id":"task-1"', as the writer spells it
    for state, task in iter_archived(store, needle):
        if task["id"] == task_id:
            return state, task
    return None


def find_by_key(store: Store, key: str) -> tuple[str, dict[str, Any]] | None:
    needle = jsonio.dumps_compact({"idempotency_key": key})[1:-1]
    for state, task in iter_archived(store, needle):
        if task.get("idempotency_key") == key:
            return state, task
    return None
