"""Claims tasks whose paths all overlap, over and over, proving each time that it is the only holder.

usage: python -m tests.procs.path_claim_worker ROOT AGENT COUNT MARKER
After each claim it creates MARKER with O_EXCL (another holder at the same time would find it there and print
"VIOLATION"), removes it, and releases the task. Prints "held <id>" for each claim.
"""

from __future__ import annotations

import os
import sys

from loki.errors import NothingToDo
from loki.queue.queue import Queue
from loki.storage.opening import open_store


def main() -> None:
    root, agent, count, marker = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    queue = Queue(open_store(root, validate_all=False))
    held = 0
    while held < count:
        try:
            task = queue.claim(agent, lease_seconds=3600)
        except NothingToDo:
            continue
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            sys.stdout.write(f"VIOLATION {task['id']}\n")
            return
        os.close(fd)
        os.unlink(marker)
        queue.release(task["id"], agent, token=task["claim_token"])
        held += 1
        sys.stdout.write(f"held {task['id']}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
