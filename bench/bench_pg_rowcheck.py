"""What checking every task row read back costs on PostgreSQL (issue 22: no command trusts a row it has not
checked): ``Queue.list_tasks()`` (what ``loki queue list`` does) over 1,000 pending tasks, with the rows
checked (strict JSON, schema, id, priority_rank) and, for comparison, trusted as before (plain
``json.loads``, no check). Best of 7 each.

    python -m bench.bench_pg_rowcheck
"""

from __future__ import annotations

import json
import time

from bench.pg_server import describe, schema_url

TASKS = 1000


def _best(run: object, times: int = 7) -> float:
    assert callable(run)
    found = []
    for _ in range(times):
        start = time.perf_counter()
        run()
        found.append(time.perf_counter() - start)
    return min(found) * 1000


def main() -> None:
    from loki.queue.queue import Queue
    from loki.storage.postgres import session
    from loki.storage.postgres import tasks as pgtasks
    from loki.storage.postgres.store import PgStore

    url = schema_url()
    store = PgStore.open(url)
    Queue(store).add_many([{"title": f"task {i}", "description": "d" * 200, "labels": ["a"]} for i in range(TASKS)])
    store.close()
    store = PgStore.open(url)
    checked = _best(Queue(store).list_tasks)
    store.close()
    # Trusted, as before: the json columns through json.loads, every row unchecked.
    saved = pgtasks.checked, session._strict_loads
    pgtasks.checked = lambda schemas, task_id, state, rank, doc: doc  # type: ignore[assignment]
    session._strict_loads = json.loads
    try:
        store = PgStore.open(url)
        trusted = _best(Queue(store).list_tasks)
        store.close()
    finally:
        pgtasks.checked, session._strict_loads = saved
    print(f"queue list of {TASKS} pending tasks on {describe(url)}: rows checked {checked:.0f} ms, "
          f"trusted {trusted:.0f} ms ({(checked - trusted) / TASKS * 1000:.0f} us a row)")


if __name__ == "__main__":
    main()
