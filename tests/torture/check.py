"""The declared check of the crash tests' tasks (docs/verify.md): run by ``loki work`` after the agent's command.

usage: python -I -S tests/torture/check.py   (``loki work`` runs it as a task's ``--verify``)

It appends ``check TASK TOKEN AGENT PID`` to the side log named by LOKI_TORTURE_SIDE_LOG (the harness sets it
on its ``loki work`` agents, whose environment the check inherits), so the harness can find a check that
outlived its killed ``loki work``. By the claim token's hash: one run in three works for a minute (its ``loki
work`` is killed while it runs), one in four fails (exit 1, a test failure), the rest pass. Only the standard
library: ``-S`` keeps its start-up to ~10 ms.
"""

from __future__ import annotations

import os
import sys
import time
import zlib


def digest(token: str) -> int:
    return zlib.crc32(f"check {token}".encode())


def fails(token: str) -> bool:
    """Whether the check of the run with this claim token fails (after its minute, when it is slow too)."""
    return digest(token) % 4 == 0


def main() -> int:
    task, token, agent = os.environ["LOKI_TASK_ID"], os.environ["LOKI_TASK_TOKEN"], os.environ["LOKI_AGENT"]
    side_log = os.environ.get("LOKI_TORTURE_SIDE_LOG")
    if side_log:
        fd = os.open(side_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"check {task} {token} {agent} {os.getpid()}\n".encode())
        finally:
            os.close(fd)
    if digest(token) % 3 == 1:
        time.sleep(60)
    if fails(token):
        print(f"FAILED tests/test_torture.py::test_{task} - the check found the work undone", file=sys.stderr)
        return 1
    print("1 passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
