"""The lease renewer ``loki work`` runs beside the agent's command.

A claim's lease is what tells the team a task is being worked on: if it lapses, the next claim (or the
watcher's tick) requeues the task with a ``timeout`` attempt and someone else runs it. So while the
command runs, a thread renews the lease every third of its length (:data:`RENEW_FRACTION`): a renewal
that fails (a lock held too long, a file being repaired) is tried again a third later, and the lease
still holds. Only the holder can renew, and only the claim it holds (the token): when a renewal is
refused with a conflict or a not-found, the task is no longer this agent's (its lease lapsed while the
machine slept, a human cancelled it), and the renewer stops and says so through ``on_lost``.

The lease lapses when ``loki work`` dies (SIGKILL, a crash, a power cut): nothing renews it, and the
guard (loki/work/guard.py) stops the command too.

Waiting is injected: ``wait(seconds, stopped)`` returns True when the renewer should stop; ``stopped``
is the event :meth:`Heartbeat.stop` sets. The default waits on that event for ``seconds``; tests pass a
waiter that moves a ManualClock instead (and blocks on ``stopped`` once they have seen enough), so no
test sleeps.
"""

from __future__ import annotations

import threading

from loki.errors import Conflict, LokiError, NotFound

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable

RENEW_FRACTION = 1 / 3
"""Renew when a third of the lease has passed: two renewals in a row may fail before it lapses."""


def renew_interval(lease_seconds: float) -> float:
    """Seconds between two renewals of a lease of ``lease_seconds``."""
    return lease_seconds * RENEW_FRACTION


class Heartbeat:
    """Call ``renew()`` every ``interval`` seconds until stopped or the lease is lost."""

    def __init__(self, renew: Callable[[], object], interval: float, *,
                 wait: Callable[[float, threading.Event], bool] | None = None,
                 on_lost: Callable[[LokiError], None] | None = None) -> None:
        if not interval > 0:
            raise ValueError(f"a heartbeat interval must be positive, got {interval!r}")
        self._renew = renew
        self.interval = interval
        self._stopped = threading.Event()
        self._wait = wait or _wait_for_stop
        self._on_lost = on_lost or (lambda exc: None)
        self._thread: threading.Thread | None = None
        self.renewals = 0
        """Renewals that succeeded."""
        self.failures: list[str] = []
        """Why renewals failed and were retried (a lock timeout, a broken file), oldest first."""
        self.lost: LokiError | None = None
        """The refusal that ended it: the task is no longer held (None while it is)."""

    def run(self) -> None:
        """The renewer's loop (what :meth:`start` runs in a thread): wait, renew, until told to stop."""
        while not self._stopped.is_set():
            if self._wait(self.interval, self._stopped) or self._stopped.is_set():
                return
            try:
                self._renew()
            except (Conflict, NotFound) as exc:
                self.lost = exc
                self._stopped.set()
                self._on_lost(exc)
                return
            except LokiError as exc:  # a lock timeout, a broken file: the lease still runs, try again
                self.failures.append(exc.message)
            except Exception as exc:  # a dead renewer would let the lease lapse under a live agent
                self.failures.append(f"{type(exc).__name__}: {exc}")
            else:
                self.renewals += 1

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="loki-work-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing and wait for a renewal in flight to finish (so none lands after a complete)."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def _wait_for_stop(seconds: float, stopped: threading.Event) -> bool:
    return stopped.wait(seconds)
