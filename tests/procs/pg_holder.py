"""Hold a unit of work open on PostgreSQL until told to finish it (the no-waiting tests' other process).

usage: python -m tests.procs.pg_holder DATABASE_URL MODE [TASK_ID]
  claim    claim as agent "holder", and stop inside the claim unit once the task is taken (its row locked)
  requeue  claim as agent "holder", stopping inside the claim unit right after it requeued expired leases
  unit ID  open an ordinary unit (the queue's lock) that looks task ID up (its row locked)
Prints "holding <what> <backend pid>" when it stops, waits for a line on stdin, finishes the unit, prints
"done <result>". Synchronised by that pipe only: no sleeps.
"""

from __future__ import annotations

import sys
from typing import Any

from loki.errors import NothingToDo
from loki.queue.queue import Queue
from loki.storage.postgres.store import PgStore


def _stop(what: str, store: PgStore) -> None:
    sys.stdout.write(f"holding {what} {store.db.conn.info.backend_pid}\n")
    sys.stdout.flush()
    sys.stdin.readline()


def main() -> None:
    url, mode = sys.argv[1], sys.argv[2]
    store = PgStore.open(url)
    queue = Queue(store)
    if mode == "unit":
        with store.tasks().transaction() as unit:
            found = unit.find(sys.argv[3])
            _stop(sys.argv[3], store)
        print(f"done {found[0] if found else None}", flush=True)
        return
    if mode == "claim":
        take = Queue._take

        def taking(self: Queue, unit: Any, best: dict[str, Any], *args: Any) -> None:
            take(self, unit, best, *args)
            _stop(best["id"], store)

        Queue._take = taking  # type: ignore[method-assign]
    else:
        requeue = Queue._requeue_expired

        def requeueing(self: Queue, unit: Any, now: Any, lease_now: Any, outcome: Any = None) -> Any:
            outcome = outcome if outcome is not None else {"requeued": [], "dead_lettered": []}
            base = requeue(self, unit, now, lease_now, outcome)
            _stop(",".join(outcome["requeued"]), store)
            return base

        Queue._requeue_expired = requeueing  # type: ignore[method-assign]
    try:
        print(f"done {queue.claim('holder')['id']}", flush=True)
    except NothingToDo:
        print("done nothing", flush=True)


if __name__ == "__main__":
    main()
