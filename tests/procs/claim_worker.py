"""An agent that claims and completes tasks until nothing is ready, logging each claim.

usage: python -m tests.procs.claim_worker ROOT AGENT [LEASE_SECONDS]
Prints "claimed <id> <token>" after each successful complete.
"""

from __future__ import annotations

import sys

from loki.errors import NothingToDo
from loki.queue.queue import Queue
from loki.storage.store import Store


def main() -> None:
    root, agent = sys.argv[1], sys.argv[2]
    lease = float(sys.argv[3]) if len(sys.argv) > 3 else 3600.0
    queue = Queue(Store(root, validate_all=False))
    while True:
        try:
            task = queue.claim(agent, lease_seconds=lease)
        except NothingToDo:
            return
        queue.complete(task["id"], agent, token=task["claim_token"], result={"by": agent})
        sys.stdout.write(f"claimed {task['id']} {task['claim_token']}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
