"""An agent on PostgreSQL that claims and completes tasks until the pending queue is empty.

usage: python -m tests.procs.pg_claim_worker DATABASE_URL AGENT
Prints "claimed <id> <token>" after each complete. A claim that finds every ready task held by other
claimers at that instant (SKIP LOCKED) is tried again: only an empty pending queue ends the loop.
"""

from __future__ import annotations

import sys

from loki.errors import NothingToDo
from loki.queue.queue import Queue
from loki.storage.postgres.store import PgStore


def main() -> None:
    url, agent = sys.argv[1], sys.argv[2]
    queue = Queue(PgStore.open(url, validate_all=False))
    while True:
        try:
            task = queue.claim(agent)
        except NothingToDo as exc:
            if "being claimed or changed by another process" in exc.message:
                continue
            return
        queue.complete(task["id"], agent, token=task["claim_token"], result={"by": agent})
        sys.stdout.write(f"claimed {task['id']} {task['claim_token']}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
