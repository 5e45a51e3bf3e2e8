"""An agent that takes and gives back an exclusive path lease, over and over, on patterns that all overlap.

usage: python -m tests.procs.lease_worker ROOT AGENT COUNT MARKER
While it holds a lease it creates MARKER with O_EXCL (a second holder at the same time would find it there and
print "VIOLATION"), then removes it and releases the lease. Prints "held L<n>" for each lease it held.
"""

from __future__ import annotations

import os
import random
import sys

from loki.errors import Conflict
from loki.leases.leases import PathLeases
from loki.storage.opening import open_store

PATTERNS = ["src/**", "src/a.py", "src/*.py", "src/a*", "**/a.py", "src", "*/a.py"]


def main() -> None:
    root, agent, count, marker = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    leases = PathLeases(open_store(root, validate_all=False))
    rng = random.Random(agent)
    held = 0
    while held < count:
        try:
            lease = leases.acquire([rng.choice(PATTERNS)], agent=agent, ttl="30m")
        except Conflict:
            continue
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            sys.stdout.write(f"VIOLATION {lease['lease_id']}\n")
            sys.stdout.flush()
            return
        os.write(fd, agent.encode())
        os.close(fd)
        os.unlink(marker)
        leases.release(lease["lease_id"], agent=agent)
        held += 1
        sys.stdout.write(f"held {lease['lease_id']}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
