"""``loki watch``: the loop that consumes signals, runs the periodic tick, and feeds the live view.

One watcher consumes (it holds ``state/watch.consumer.lock`` for its whole life); any
other is display-only: it follows ``logs/signals.jsonl`` and the tick's ``logs/events.jsonl``
and tries to take over once a second, so killing the consumer never leaves signals unattended for long.

How a signal is noticed: the store's observer of ``signals/`` wakes the loop
(:meth:`observe`: on the files a watchdog observer, inotify on Linux; on PostgreSQL
LISTEN/NOTIFY, which a signal published on any machine triggers), but it is only a
hint -- the loop also rescans every ``watch.rescan_seconds``, so an overflowed inotify
queue, a network filesystem, a listener reconnecting or a missing observer
(``watch.observer: polling``) delays signals and loses none.

A consumer whose lock is lost while it runs (on PostgreSQL, its lock connection died:
the server has freed the lock for another watcher) stops before its next signal -- the
lock is asked before each one (:meth:`ConsumerLock.confirm`), not once a cycle -- and
becomes display-only. The watcher taking over starts with ``recover()``; the one signal
the old consumer had in hand is applied once all the same, as every rule finds its own
marker under the lock of what it changes.

Nothing a cycle meets ends the loop: a dropped connection, a server restart or a
failover makes the cycle fail (one ``warning`` in the feed, saying what failed and that
it carries on, and an ``info`` when a cycle works again); the next cycle reconnects
(the store's bounded retries), takes the lock again when it is free, and consumes.

The loop is driven from outside for tests and cron: :meth:`Watcher.step` does one
cycle (``loki watch --once`` is ``start`` + one cycle with the tick forced + ``close``;
there a failed cycle raises, for the exit code) and
the timer that schedules rescans and ticks is injectable.

The live loop (:meth:`Watcher.run`) also reports what other processes did
(:mod:`loki.watch.activity`: breaker changes, strikes, escalations, dead-letter reviews run
elsewhere), through the same ``on_event`` as its own events; a happening two sources report
(the tick's HALF_OPEN and the breaker's own log line) is reported once. A stop request (SIGINT,
SIGTERM -- the CLI installs the handlers) is honoured between two signals: the one in
hand is finished, logged and deleted first.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque

from loki.config import setting
from loki.signals import outcomes
from loki.storage import layout
from loki.watch.activity import Activity, identity
from loki.watch.consumer import Consumer, ConsumerLock, consumer_status
from loki.watch.ticks import EVENTS_LOG, Tick

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from loki.storage.state import StateStore as Store

OBSERVERS = ("auto", "native", "polling")
RECENT = 50
SEEN = 256
"""Happenings remembered to report each once (:func:`loki.watch.activity.identity`)."""


class Watcher:
    """One ``loki watch``: consumer if it gets the lock, display-only otherwise."""

    def __init__(self, store: Store, *, on_event: Callable[[dict[str, Any]], None] | None = None,
                 observer: str | None = None, timer: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.on_event = on_event or (lambda event: None)
        self._timer = timer
        self.rescan_seconds = max(0.01, float(setting(store.config, "watch", "rescan_seconds")))
        self.tick_seconds = float(setting(store.config, "watch", "tick_seconds"))
        self.observer_mode = observer or str(setting(store.config, "watch", "observer"))
        if self.observer_mode not in OBSERVERS:
            from loki.errors import InvalidArgument

            raise InvalidArgument(f"--observer must be one of {', '.join(OBSERVERS)} (got {self.observer_mode!r})",
                                  field="observer")
        self.lock = ConsumerLock(store)
        self.consumer: Consumer | None = None
        self.tick = Tick(store)
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT)
        self.observer: str = "none"
        """What wakes the loop: "native" (inotify...), "notify" (PostgreSQL), "memory", or "polling"
        (the rescan timer alone)."""
        self.holder: dict[str, Any] | None = None
        self._observer: Any = None
        self._follower: outcomes.Follower | None = None
        self._tick_follower: outcomes.Follower | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._next_tick = 0.0
        self._next_takeover = 0.0
        self._started = False
        self._observe = True
        self._captured: list[dict[str, Any]] | None = None
        self.activity: Activity | None = None
        self._lease_tokens: tuple[Any, Any] | None = None
        self._next_lease_copy = 0.0
        """What other processes do (breakers, strikes, escalations, reviews), once :meth:`follow_activity`."""
        self._seen: dict[Any, None] = {}
        self._trouble: str | None = None
        """What made the last cycle fail (a lost database, say), until a cycle works again."""
        self._lock_gone = False

    # -- lifecycle ---------------------------------------------------------------------------------

    @property
    def consuming(self) -> bool:
        return self.consumer is not None

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def start(self, *, observe: bool = True) -> bool:
        """Take the consumer lock if free (and finish a crashed consumer's work); True if consuming.

        ``observe``: start the file observer (a one-pass run has nothing to wait for).
        """
        self._started = True
        self._observe = observe
        if self.lock.try_acquire():
            self._become_consumer()
        else:
            self.holder = consumer_status(self.store)
            self._follower = outcomes.Follower(self.store)
            self._tick_follower = outcomes.Follower(self.store, log=EVENTS_LOG)
            self._next_takeover = self._timer() + self.rescan_seconds
            self._emit({"event": "started", "consuming": False, "holder": self.holder,
                        "detail": f"display-only: {describe_holder(self.holder)} is consuming signals"})
        return self.consuming

    def _become_consumer(self) -> None:
        consumer = Consumer(self.store, on_event=self._emit)
        consumer.update_state({"consumer": {"pid": os.getpid(), "host": os.uname().nodename,
                                            "started_at": self.store.now_ts()}})
        if self._observe:
            # Before the first scan: a signal published in between is then either seen by the
            # scan or announced by the observer.
            self._start_observer()
        self.consumer = consumer
        self.holder = None
        self._follower = None
        self._tick_follower = None
        how = f" (observer: {self.observer})" if self._observe else ""
        self._emit({"event": "started", "consuming": True, "observer": self.observer,
                    "detail": f"consuming signals in {self.store.where}{how}"})
        consumer.recover()
        self._next_tick = self._timer()

    def follow_activity(self) -> None:
        """From now on, each cycle also reports what other processes did (:mod:`loki.watch.activity`)."""
        if self.activity is None:
            self.activity = Activity(self.store)
            try:
                self.activity.start()
            except Exception as exc:  # the database away at that instant: poll() starts it once it answers
                self._cycle_failed(exc)

    def stop(self) -> None:
        """Ask the loop to end after the signal in hand (safe from a signal handler or a thread)."""
        self._stop.set()
        self._wake.set()

    def wake(self) -> None:
        """End the current wait now (a key was pressed; safe from a thread)."""
        self._wake.set()

    def close(self) -> None:
        self._stop_observer()
        if self.consumer is not None:
            try:
                self.consumer.save()
                self.consumer.update_state({"consumer": None})
            except Exception as exc:
                # Stopped while the database is away: only the processed counter and the consumer's record
                # are not saved (`loki status` asks the lock, which the server frees with the connection).
                self._emit_error(exc, "saving the watch state", retry=False)
            finally:
                self.lock.release()
                self.consumer = None
        if self._started:
            self._started = False
            self._emit({"event": "stopped", "detail": "watcher stopped"})

    # -- one cycle ---------------------------------------------------------------------------------

    def step(self, *, force_tick: bool = False) -> int:
        """Consume what is waiting and tick if due. Returns how many signals were handled.

        A cycle that fails (the database went away mid-cycle: a restart, a failover, a cut connection)
        is said once in the feed and tried again at the next cycle; it never ends the watcher.
        """
        try:
            handled = self._cycle(force_tick)
        except Exception as exc:
            self._cycle_failed(exc)
            return 0
        if self._trouble is not None:
            self._trouble = None
            self._emit({"event": "info", "timestamp": self._now_ts(), "detail": "working again: "
                        + ("consuming signals" if self.consuming else "display-only")})
        return handled

    def _cycle(self, force_tick: bool) -> int:
        if self.consumer is not None and not self.lock.held:
            self._lost_lock()
        if self.consumer is None:
            self._display_only_step()
        handled = 0
        if self.consumer is not None:
            self._lock_gone = False
            try:
                handled = len(self.consumer.run_pass(self._should_stop_consuming))
            except Exception as exc:  # never let one bad pass end the watcher; the next pass retries
                self._emit_error(exc, "consuming")
            if self._lock_gone:
                self._lost_lock()
            elif (force_tick or self._timer() >= self._next_tick) and not self._stop.is_set():
                self.run_tick()
        if self.activity is not None:
            for event in self.activity.poll():
                self._emit(event)
        self.refresh_lease_copy()
        return handled

    def refresh_lease_copy(self) -> bool:
        """On a database tree, keep this machine's copy of the path holders fresh (the PreToolUse hook reads
        it and never connects: docs/leases.md): rewritten when the leases or the in-progress tasks changed
        (their change tokens, one cheap query each), and every ``tick_seconds`` besides, so its time says
        how fresh it is. Returns whether it was written."""
        if not self.store.keeps_local_copies:
            return False
        from loki.leases.leases import PathLeases
        from loki.storage import layout

        tokens = (self.store.change_token(layout.LEASES), self.store.tasks().change_token("in-progress"))
        now = self._timer()
        if tokens == self._lease_tokens and now < self._next_lease_copy:
            return False
        written = PathLeases(self.store).refresh_index() is not None
        self._lease_tokens = tokens
        self._next_lease_copy = now + self.tick_seconds
        return written

    def _should_stop_consuming(self) -> bool:
        """Asked by the consumer between two signals: a stop request, or the lock no longer ours."""
        if self._stop.is_set():
            return True
        if not self.lock.confirm():
            self._lock_gone = True
            return True
        return False

    def _cycle_failed(self, exc: Exception) -> None:
        from loki.errors import LokiError

        message = exc.message if isinstance(exc, LokiError) else f"{type(exc).__name__}: {exc}"
        if self._trouble == message:
            return  # said once per outage, not once a second
        self._trouble = message
        role = "consuming" if self.consuming else "display-only"
        self._emit({"event": "warning", "timestamp": self._now_ts(),
                    "detail": f"{message}; the watcher carries on ({role}) and tries again every cycle"})

    def _now_ts(self) -> str:
        from loki.clock import format_ts

        return format_ts(self.store.clock.now())  # the store's clock: no database round trip while it is away

    def _lost_lock(self) -> None:
        """The consumer lock went away under us (its connection died): another watcher may hold it
        now, so this one only displays from here on (and tries to take over like any other).

        Everything that needs the database comes last: when it is away, this watcher is display-only
        already, and the followers are made by the next display-only cycle that reaches it."""
        self._stop_observer()
        self.consumer = None
        self._lock_gone = False
        self.lock.release()
        self.holder = None
        self._follower = None
        self._tick_follower = None
        self._next_takeover = self._timer() + self.rescan_seconds
        self._emit({"event": "warning", "timestamp": self._now_ts(),
                    "detail": "lost the consumer lock (its database connection ended); display-only until it "
                              "can be taken again"})
        self._follow_consumer()

    def _follow_consumer(self) -> None:
        """Display-only: who consumes, and the followers of its outcome and tick logs (from their end)."""
        self.holder = consumer_status(self.store)
        if self._follower is None:
            self._follower = outcomes.Follower(self.store)
        if self._tick_follower is None:
            self._tick_follower = outcomes.Follower(self.store, log=EVENTS_LOG)

    def run_tick(self) -> list[dict[str, Any]]:
        self._next_tick = self._timer() + self.tick_seconds
        events: list[dict[str, Any]] = []
        try:
            events = self.tick.run()
            for event in events:
                self._emit(event)
            if self.consumer is not None:
                self.consumer.save({"last_tick": self.store.now_ts()})
        except Exception as exc:
            self._emit_error(exc, "tick")
        return events

    def _display_only_step(self) -> None:
        if self._follower is None or self._tick_follower is None:
            self._follow_consumer()  # after a lost lock whose database was away
        if self._follower is not None:
            for record in self._follower.poll():
                self._emit({"event": "signal", "observed": True, **record})
        if self._tick_follower is not None:
            # What the consumer's tick did (leases, review timeouts, breakers, the dead-letter review).
            for record in self._tick_follower.poll():
                self._emit({"event": "tick", "observed": True, **record})
        if self._timer() >= self._next_takeover and not self._stop.is_set():
            self._next_takeover = self._timer() + self.rescan_seconds
            if self.lock.try_acquire():
                self._become_consumer()

    def wait(self) -> None:
        """Until a hint, a stop request, the next rescan or the next tick, whichever comes first."""
        timeout = self.rescan_seconds
        if self.consumer is not None:
            timeout = min(timeout, max(0.0, self._next_tick - self._timer()))
        self._wake.wait(timeout)

    def run(self, on_cycle: Callable[[Watcher], None] | None = None) -> None:
        """The live loop, until :meth:`stop`. ``on_cycle`` runs after every cycle (the view redraws)."""
        self.start()
        try:
            self.follow_activity()
            while not self._stop.is_set():
                self._wake.clear()
                handled = self.step()
                if on_cycle is not None:
                    self._draw(on_cycle)
                if not handled and not self._stop.is_set():
                    self.wait()
        finally:
            self.close()

    def _draw(self, on_cycle: Callable[[Watcher], None]) -> None:
        """``on_cycle`` (the live view's frame, read from the store): a frame that meets the database away
        is skipped and said in the feed like a failed cycle; the next cycle draws again. Anything else
        (a bug in the view) still ends the loop, with its traceback."""
        from loki.errors import LokiError

        try:
            on_cycle(self)
        except LokiError as exc:
            self._cycle_failed(exc)

    def run_once(self) -> dict[str, Any]:
        """``loki watch --once``: what is waiting, one tick, and exit."""
        events: list[dict[str, Any]] = []
        self._captured = events
        try:
            consuming = self.start(observe=False)
            if consuming:
                # One attempt, for cron: a cycle that fails (the database went away) raises, so the exit
                # code says so (5), where the live loop would say it in the feed and go on.
                self._cycle(force_tick=True)
        finally:
            self.close()
            self._captured = None
        handled = [e for e in events if e.get("event") == "signal"]
        return {"consuming": consuming, "holder": self.holder, "signals": len(handled),
                "outcomes": {kind: sum(1 for e in handled if e.get("outcome") == kind)
                             for kind in outcomes.OUTCOMES if any(e.get("outcome") == kind for e in handled)},
                "events": events}

    # -- events ------------------------------------------------------------------------------------

    def _emit(self, event: dict[str, Any]) -> None:
        key = identity(event)
        if key is not None:
            if key in self._seen:
                return  # the other report of a happening already reported
            self._seen[key] = None
            if len(self._seen) > SEEN:
                del self._seen[next(iter(self._seen))]
        if event.get("event") == "signal":
            self.recent.append(event)
        if self._captured is not None:
            self._captured.append(event)
        self.on_event(event)

    def _emit_error(self, exc: Exception, where: str, *, retry: bool = True) -> None:
        from loki.errors import LokiError

        message = exc.message if isinstance(exc, LokiError) else f"{type(exc).__name__}: {exc}"
        self._emit({"event": "error", "detail": f"{where}: {message}" + ("; retrying on the next cycle" if retry
                                                                         else "")})

    # -- the observer (a hint) -------------------------------------------------------------------------

    def _start_observer(self) -> None:
        if self.observer_mode == "polling" or self._observer is not None:
            self.observer = "polling" if self._observer is None else self.observer
            return
        try:
            self._observer = self.store.observe(layout.SIGNALS_DIR, self._wake.set)
            self.observer = self._observer.kind
        except Exception as exc:  # inotify limits, an exotic filesystem: the rescan timer still works
            if self.observer_mode == "native":
                raise
            self.observer = "polling"
            self._emit({"event": "warning", "detail": f"no native observer ({exc}); polling every "
                                                      f"{self.rescan_seconds:g}s"})

    def _stop_observer(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            join = getattr(self._observer, "join", None)
            if join is not None:
                join(timeout=5)
            self._observer = None


def describe_holder(holder: dict[str, Any] | None) -> str:
    """The consuming watcher in words (``consumer_status``'s record), for messages."""
    if not holder:
        return "another watcher"
    return f"pid {holder.get('pid')} on {holder.get('host')} ({holder.get('command')}, since {holder.get('since')})"
