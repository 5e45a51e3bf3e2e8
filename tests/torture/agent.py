"""The agent ``loki work`` runs in the crash tests: its side effects are how completions are counted.

usage: python -I -S tests/torture/agent.py SIDE_LOG LOCK_DIR [FAIL_EVERY [SLOW_EVERY]]

Run by ``loki work`` for one task (LOKI_TASK_ID, LOKI_TASK_TOKEN, LOKI_AGENT, LOKI_RESULT_FILE in its
environment). It appends to SIDE_LOG, one line per event, unbuffered (a SIGKILL can cut the last one):

* ``start TASK TOKEN AGENT PID`` when it begins;
* ``overlap TASK TOKEN AGENT`` if another run of the same task is alive at the same moment (it holds
  ``LOCK_DIR/TASK.lock``, an flock the kernel drops when that run dies): the lease failed, the task is
  being run twice at once;
* ``done TASK TOKEN AGENT`` once its work is done, after writing ``{"run": TOKEN}`` as its result (not
  under a key named "token": loki redacts what such a key holds): the side effect that must happen once per
  completion.

With FAIL_EVERY=N, a run whose token's hash is divisible by N fails instead (exit 1, an assertion
message), so the crash tests also see failures, backoffs and dead-letters. With SLOW_EVERY=M, a run
whose hash leaves 1 divided by M works for a minute first: longer than any round, so its ``loki work``
is killed while it runs, and a command that outlived it would still be there to be found. Only the
standard library: ``-S`` keeps its start-up to ~10 ms.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
import zlib


def append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    side_log, lock_dir = argv[1], argv[2]
    fail_every = int(argv[3]) if len(argv) > 3 else 0
    slow_every = int(argv[4]) if len(argv) > 4 else 0
    task, token, agent = os.environ["LOKI_TASK_ID"], os.environ["LOKI_TASK_TOKEN"], os.environ["LOKI_AGENT"]
    lock = os.open(os.path.join(lock_dir, f"{task}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        append(side_log, f"overlap {task} {token} {agent}")
        return 3
    append(side_log, f"start {task} {token} {agent} {os.getpid()}")
    if slow_every and zlib.crc32(token.encode()) % slow_every == 1:
        time.sleep(60)
    if fail_every and zlib.crc32(token.encode()) % fail_every == 0:
        print(f"AssertionError: {task} is flaky (token {token[:8]})", file=sys.stderr)
        return 1
    with open(os.environ["LOKI_RESULT_FILE"], "w") as out:
        json.dump({"run": token}, out)
    append(side_log, f"done {task} {token} {agent}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
