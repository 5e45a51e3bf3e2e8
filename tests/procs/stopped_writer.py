"""A writer that stops itself in the middle of a commit, holding the lock, with its journal written.

It runs ``loki queue claim`` through the library; when the commit reaches the crash point
``between-files`` (the journal is written, one file replaced, the other not yet), it prints
``stopped`` on stdout and sends itself SIGSTOP, as a debugger or a suspended laptop would stop
it. After SIGCONT it finishes the commit and prints the claimed task's id.

usage: python -m tests.procs.stopped_writer ROOT
"""

from __future__ import annotations

import os
import signal
import sys

import loki.storage.store
from loki.queue.queue import Queue
from loki.storage.store import Store


def main() -> None:
    def stop_here(name: str) -> None:
        if name == "between-files":
            sys.stdout.write("stopped\n")
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGSTOP)

    loki.storage.store.crashpoint = stop_here
    task = Queue(Store(sys.argv[1])).claim("stopped-agent")
    sys.stdout.write(f"{task['id']}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
