"""A ``loki run`` with a short kill grace period, for the test of a command that ignores signals.

usage: python -m tests.procs.run_worker GRACE_SECONDS CMD [ARGS...]
"""

from __future__ import annotations

import sys

from loki.breakers.runner import RetryPolicy, Runner


def main() -> None:
    grace, command = float(sys.argv[1]), sys.argv[2:]
    result = Runner(command, policy=RetryPolicy(retries=0), kill_grace=grace).run()
    sys.exit(result.exit_code)


if __name__ == "__main__":
    main()
