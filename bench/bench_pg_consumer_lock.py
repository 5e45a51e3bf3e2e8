"""What asking the consumer's lock before every signal costs on PostgreSQL (issue 22).

The consumer asks its lock connection (``SELECT 1``) before each signal, so a consumer whose lock
died stops before its next signal instead of finishing its pass while another watcher takes over.
This measures one consuming pass over a backlog of ``DOCS_NEEDED`` signals, in one process, on a
fresh schema, with the check (``should_stop`` = the lock is no longer ours) and without it; the
passes alternate, so a busy machine's load is shared between both. The floor is the pass without the
check: the price is one round trip per signal.
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import median, row, runs
from bench.pgserver import schema_url


def _pass_ms_per_signal(url: str, count: int, check: bool) -> float:
    from loki.clock import ManualClock
    from loki.signals import emit as signals
    from loki.storage.postgres.store import PgStore
    from loki.watch.consumer import Consumer, ConsumerLock

    store = PgStore.open(url, clock=ManualClock("2026-01-25T10:00:00Z"), validate_all=False)
    try:
        for n in range(count):
            signals.emit(store, "DOCS_NEEDED", {"n": n})
        lock = ConsumerLock(store)
        assert lock.try_acquire()
        consumer = Consumer(store)
        consumer.recover()
        should_stop = (lambda: not lock.confirm()) if check else (lambda: False)
        started = time.perf_counter()
        done = consumer.run_pass(should_stop)
        took = time.perf_counter() - started
        assert len(done) == count
        lock.release()
        return took * 1000 / count
    finally:
        store.close()


def run() -> list[dict[str, Any]]:
    first, where = schema_url()
    if first is None:
        return [row("pg consumer: lock asked per signal", 0.0, note=f"skipped: {where}")]
    count = runs(500, 100)
    checked: list[float] = []
    unchecked: list[float] = []
    for _ in range(runs(3, 1)):
        for check, into in ((False, unchecked), (True, checked)):
            url, _ = schema_url()
            assert url is not None
            into.append(_pass_ms_per_signal(url, count, check))
    return [row("pg consumer: one signal, lock asked before it", median(checked),
                floor_name="the same pass, lock not asked", floor_ms=median(unchecked),
                note=f"{count} DOCS_NEEDED per pass, median of {len(checked)} passes each, {where}")]
