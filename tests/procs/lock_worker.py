"""Takes the queue lock N times and records when it was inside (monotonic ns, system-wide).

Inside the lock it does a deliberately racy read-increment-write of a plain counter
file: any overlap of two holders would lose an increment.

usage: python -m tests.procs.lock_worker LOCKFILE COUNTER N OUT
"""

from __future__ import annotations

import sys
import time

from loki.storage.locks import FileLock


def main() -> None:
    lock_path, counter, rounds, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    intervals = []
    for _ in range(rounds):
        with FileLock(lock_path, timeout=60):
            entered = time.monotonic_ns()
            with open(counter) as f:
                value = int(f.read() or 0)
            with open(counter, "w") as f:
                f.write(str(value + 1))
            left = time.monotonic_ns()
        intervals.append(f"{entered} {left}\n")
    with open(out, "w") as f:
        f.writelines(intervals)


if __name__ == "__main__":
    main()
