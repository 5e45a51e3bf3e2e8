"""A process that moves tasks between queue files forever, one transaction at a time.

Used by the crash tests: it prints ``ok`` after every commit so the test can kill it
at a random point of a random transaction.

usage: python -m tests.procs.txn_worker ROOT SEED
"""

from __future__ import annotations

import random
import sys

from loki.storage import layout
from loki.storage.store import Store

STATES = ("pending", "in-progress", "completed")


def main() -> None:
    root, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    store = Store(root)
    while True:
        source, target = rng.sample(STATES, 2)
        with store.transaction(layout.QUEUE_LOCK) as txn:
            src = txn.read(layout.queue_file(source))
            dst = txn.read(layout.queue_file(target))
            if src["tasks"]:
                moved = src["tasks"].pop(rng.randrange(len(src["tasks"])))
                moved["status"] = target
                dst["tasks"].append(moved)
                txn.write(layout.queue_file(source), src, changed=[])
                txn.write(layout.queue_file(target), dst, changed=[moved])
                if rng.random() < 0.3:  # sometimes a third file joins the transaction
                    other = txn.read(layout.queue_file("blocked"))
                    txn.write(layout.queue_file("blocked"), other, changed=[])
        sys.stdout.write("ok\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
