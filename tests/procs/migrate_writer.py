"""An agent that keeps writing while ``loki migrate`` runs: adds a task, claims one and completes it,
through a store opened for each command (as the CLI opens one) and through a store held open from
before the migration (as ``loki work`` holds one). Every answer goes to LOG, one line per write:
``added ID`` / ``completed ID`` when acknowledged, ``refused add|claim|complete ID EXIT`` when not.

It prints ``ready`` after its first acknowledged write, and stops once it has been refused and then
acknowledged again three times in a row (the migration ended), or after 100,000 rounds.

usage: python -m tests.procs.migrate_writer ROOT LOG
"""

from __future__ import annotations

import sys

from loki.errors import LokiError
from loki.queue.queue import Queue
from loki.storage.opening import open_store


def main() -> None:
    root, log_path = sys.argv[1], sys.argv[2]
    held = Queue(open_store(root))
    refused_once = False
    acknowledged_after = 0
    with open(log_path, "w", encoding="utf-8") as log:
        for n in range(100_000):
            for name, opened in (("fresh", None), ("held", held)):
                task_id = f"w-{name}-{n}"
                step = "add"
                try:
                    queue = opened or Queue(open_store(root))
                    queue.add(f"written during the migration {n}", task_id=task_id, priority="high")
                    log.write(f"added {task_id}\n")
                    step = "claim"
                    claimed = queue.claim(f"writer-{name}", task_id=task_id)
                    step = "complete"
                    queue.complete(claimed["id"], f"writer-{name}", token=claimed["claim_token"])
                    log.write(f"completed {task_id}\n")
                    if opened is None and refused_once:
                        acknowledged_after += 1
                except LokiError as exc:
                    log.write(f"refused {step} {task_id} {exc.exit_code}\n")
                    if opened is None:
                        refused_once = True
                        acknowledged_after = 0
                log.flush()
            if n == 0:
                print("ready", flush=True)
            if acknowledged_after >= 3:
                break


if __name__ == "__main__":
    main()
