"""A process that records failures and successes on one breaker, interleaved, as fast as it can.

Used by the concurrency test: several of these at once must not lose a single update.

usage: python -m tests.procs.breaker_worker ROOT NAME FAILURES SUCCESSES
"""

from __future__ import annotations

import sys

from loki.breakers.breakers import Breakers
from loki.storage.store import Store


def main() -> None:
    root, name, failures, successes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    breakers = Breakers(Store(root))
    for index in range(max(failures, successes)):
        if index < failures:
            breakers.record_failure(name, error=f"failure {index}")
        if index < successes:
            breakers.record_success(name)
    sys.stdout.write("done\n")


if __name__ == "__main__":
    main()
