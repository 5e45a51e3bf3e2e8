"""FileLock between threads of one process (loki serve answers hooks in 8 threads): a waiting thread waits on
the process's own lock for the path, woken at the release, instead of polling the flock against the others."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from loki.errors import LockTimeout
from loki.storage.locks import FileLock


def test_a_thread_waits_for_another_threads_lock_and_gets_it_at_the_release(tmp_path: Path) -> None:
    path = str(tmp_path / "state.lock")
    first = FileLock(path, timeout=30).acquire()
    got = threading.Event()
    second = FileLock(path, timeout=30)

    def take() -> None:
        second.acquire()
        got.set()

    waiter = threading.Thread(target=take)
    waiter.start()
    assert not got.wait(0.05)  # held by the first: the second waits
    assert second._queue is first._queue and second._queue.locked()  # one queue per path in this process
    first.release()
    assert got.wait(30)
    waiter.join()
    assert second.held
    second.release()
    assert not second._queue.locked()


def test_a_thread_that_waits_too_long_times_out_naming_the_lock_and_leaves_the_queue_free(tmp_path: Path) -> None:
    path = str(tmp_path / "state.lock")
    holder = FileLock(path, timeout=30).acquire()
    with pytest.raises(LockTimeout, match=r"state\.lock"):
        FileLock(path, timeout=0.01).acquire()
    holder.release()
    again = FileLock(path, timeout=1).acquire()  # the timed-out waiter left nothing held
    again.release()
