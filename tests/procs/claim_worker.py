"""An agent that claims and completes tasks until nothing is ready, logging each claim.

usage: python -m tests.procs.claim_worker ROOT AGENT [LEASE_SECONDS]
Prints "claimed <id> <token>" after each successful complete.
"""

from __future__ import annotations

import sys

from loki.errors import Conflict, NothingToDo
from loki.queue.queue import Queue
from loki.storage.opening import open_store
from loki.storage.postgres.connect import DatabaseUnavailable


def main() -> None:
    root, agent = sys.argv[1], sys.argv[2]
    lease = float(sys.argv[3]) if len(sys.argv) > 3 else 3600.0
    queue = Queue(open_store(root, validate_all=False))  # a file tree, or one on PostgreSQL
    while True:
        try:
            task = queue.claim(agent, lease_seconds=lease)
        except NothingToDo:
            return
        except DatabaseUnavailable:  # the server restarted under this unit: nothing of it was applied
            sys.stdout.write("unavailable\n")
            continue
        try:
            queue.complete(task["id"], agent, token=task["claim_token"], result={"by": agent})
        except DatabaseUnavailable:
            # Whether the commit landed is unknown: ask again. Completed already: done; still ours: complete.
            sys.stdout.write("unavailable\n")
            if not finish_after_outage(queue, task, agent):
                continue
        sys.stdout.write(f"claimed {task['id']} {task['claim_token']}\n")
        sys.stdout.flush()


def finish_after_outage(queue: Queue, task: dict[str, object], agent: str) -> bool:
    """After a lost connection during complete: True if the task ended up completed by us."""
    while True:
        try:
            queue.complete(str(task["id"]), agent, token=str(task["claim_token"]), result={"by": agent})
            return True
        except DatabaseUnavailable:
            continue
        except Conflict:
            shown = queue.show(str(task["id"]))
            return bool(shown.get("state") == "completed" and shown.get("task", {}).get("claimed_by") == agent)


if __name__ == "__main__":
    main()
