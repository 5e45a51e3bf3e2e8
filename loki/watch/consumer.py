"""Consuming signals exactly once in effect (docs/design.md §4).

The delivery protocol, for each file in ``signals/``:

1. **claim** it by moving it into ``signals/.processing/<name>.<stamp>-<hex>`` (a hard link,
   then an unlink: see :meth:`Consumer.claim`); that name is the signal's unique id from
   now on (``HUMAN_REVIEW_NEEDED`` is published again after this one is consumed, so the
   file name alone is not unique). Both directories are fsynced, so a claimed signal never
   reappears unclaimed after a power loss;
2. **apply** its rule (:mod:`loki.watch.rules`): idempotent, keyed by the id;
3. **log** the outcome to ``logs/signals.jsonl`` (one line, fsynced);
4. **delete** it (unknown types are moved to ``signals/.archive/``, malformed files to
   ``signals/.quarantine/``: logged first, then moved).

A crash anywhere leaves the file in ``.processing/``. The next consumer starts by
finishing those: an id already in the log is only deleted (or moved), anything else is
applied again -- and the rule finds its own marker, so nothing is applied twice. A
consumer also rescans ``.processing/`` on every pass, for what another consumer left
there after this one started (one that lost its lock while it worked).

``signals/DRIFT_DETECTED`` is a log, not a file to consume: the consumer follows it by
byte offset (kept in ``state/watch.json``), one complete line at a time. A line without
its newline yet is being written: it waits. A line's id is ``DRIFT_DETECTED@<offset>``.

One consumer at a time: whoever holds ``state/watch.consumer.lock`` (the watcher, for its
whole life, or :func:`consume_pending` for one pass). Both ask the lock before each
signal (``run_pass``'s ``should_stop``), so one that lost it stops before the next.
``LOKI_CRASHPOINT`` names (``signal-claimed``, ``signal-applied``, ``signal-logged``, ``drift-applied``) make a
consumer die at that step, as ``kill -9`` would, for the crash tests (``signal-linked``: the
claim half done).
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone

from loki.clock import format_ts
from loki.config import setting
from loki.errors import LockTimeout, LokiError
from loki.signals import emit as signals
from loki.signals import outcomes
from loki.signals import types as signaltypes
from loki.storage import jsonio, layout
from loki.storage.store import crashpoint
from loki.text.redact import redact_obj
from loki.watch import rules

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from loki.storage.logpos import LogLine
    from loki.storage.state import HeldLock
    from loki.storage.state import StateStore as Store

    EventSink = Callable[[dict[str, Any]], None]

CONSUMER_LOCK = "state/watch.consumer.lock"
DRIFT_CHUNK = 1 << 20
DRIFT_SAVE_EVERY = 50
"""Drift lines applied between two saves of the offset (a crash re-reads at most this many)."""
MAX_RETRY_SECONDS = 60.0
MAX_LOGGED_BODY = 16 * 1024
"""A signal's content is copied into its outcome line up to this size; a bigger one is kept in .archive/."""


# -- the one-consumer lock ------------------------------------------------------------------------


class ConsumerLock:
    """``state/watch.consumer.lock``, taken without waiting: either we consume, or someone else does."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock: HeldLock | None = None

    @property
    def held(self) -> bool:
        return self._lock is not None and self._lock.held

    def confirm(self) -> bool:
        """Whether the lock is still ours, asked now (on PostgreSQL one round trip on the lock's connection)."""
        return self._lock is not None and self._lock.confirm()

    def try_acquire(self) -> bool:

        if self.held:
            return True
        lock = self.store.lock(CONSUMER_LOCK, 0.0)
        try:
            lock.acquire()
        except LockTimeout:
            return False
        self._lock = lock
        return True

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None


def consumer_status(store: Store) -> dict[str, Any] | None:
    """Who consumes signals right now (pid, command, host, since), or None when nobody does.

    Probes the lock without writing to it, so asking (``loki status``) never looks like a
    consumer to a watcher starting at the same instant... except for the microseconds of the
    probe, which a display-only watcher survives: it tries to take over on every tick.
    """
    return store.lock_holder(CONSUMER_LOCK)


def _text_signal(data: bytes, written: datetime, signal_type: str) -> dict[str, Any] | None:
    """An empty or plain-text signal file (Loki Mode's ``touch``/``echo text >``) as a signal.

    Its text (stripped) is the ``message``; its time is when the file was written. A review
    request's required ``reason`` is the text too. None when the bytes are not text (quarantined).
    """
    text = signaltypes.text_of(data)
    if text is None:
        return None
    body: dict[str, Any] = {"timestamp": format_ts(written), "message": text}
    if signal_type == signaltypes.HUMAN_REVIEW_NEEDED:
        body["reason"] = text[:200] or "human review needed"
    return body


# -- the consumer ---------------------------------------------------------------------------------


class Consumer:
    """Claims, applies, logs and deletes signals; follows the drift log. Needs the consumer lock."""

    def __init__(self, store: Store, *, on_event: EventSink | None = None,
                 timer: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.store = store
        self.on_event = on_event or (lambda event: None)
        self.settle_seconds = float(setting(store.config, "watch", "settle_seconds"))
        self.leave_for_others = tuple(setting(store.config, "signals", "leave_for_others"))
        self._timer = timer
        self._wall = wall
        self._retry_at: dict[str, float] = {}
        self._failures: dict[str, int] = {}
        # Ids already in the outcome log, loaded once when recovering from a crash.
        self._logged: dict[str, dict[str, Any]] = {}
        self._drift_offset: Any = None  # the store's position (opaque), as last saved
        self._drift_unsaved: set[str] = set()
        self._unsaved_count = 0
        self.processed = 0

    # the pass ------------------------------------------------------------------------------------

    def recover(self) -> list[dict[str, Any]]:
        """Finish what a consumer that died left in ``.processing/`` (call once, holding the lock)."""
        self._logged = outcomes.logged(self.store)
        entries = self._processing()
        for entry in entries:
            self._drop_waiting_twin(entry)
        done = [r for r in (self.handle(entry, recovered=True) for entry in entries) if r is not None]
        self.save()
        return done

    def run_pass(self, should_stop: Callable[[], bool] = lambda: False) -> list[dict[str, Any]]:
        """Everything waiting now: retries due, new signals (oldest first), new drift lines.

        ``should_stop`` is asked between two signals: a stop request finishes the one in hand.
        The ``signals_processed`` counter is saved by :meth:`save` (the watcher's tick), not here:
        one more locked write per signal would halve the throughput for a statistic.
        """
        done: list[dict[str, Any]] = []
        now = self._timer()
        for entry in [*[e for e, when in self._retry_at.items() if when <= now], *self._left_by_others()]:
            if should_stop():
                break
            try:
                record = self.handle(entry, recovered=True)
            except Exception as exc:  # its last step (delete, move) failed: retried later, the rest goes on
                self._defer(entry, exc)
                continue
            if record is not None:
                done.append(record)
        for name in self.waiting():
            if should_stop():
                break
            claimed = self.claim(name)
            if claimed is not None:
                record = self.handle(claimed)
                if record is not None:
                    done.append(record)
        if not should_stop():
            done.extend(self.follow_drift(should_stop))
        return done

    @property
    def deferred(self) -> int:
        """Signals kept in ``.processing/`` because applying them failed; they are retried."""
        return len(self._retry_at)

    # step 0: what is waiting -----------------------------------------------------------------------

    def waiting(self) -> list[str]:
        """Names in ``signals/`` to claim, oldest first (emission order, as far as mtimes tell)."""
        found: list[tuple[int, str]] = []
        wall = self._wall()
        for entry in self.store.scan(layout.SIGNALS_DIR):
            if not signals.is_signal_entry(entry["name"]):
                continue
            if signaltypes.left_for_others(entry["name"], self.leave_for_others):
                continue  # another tool (Loki Mode's run.sh) waits for it: consuming it would steal it
            if entry["kind"] == "file" and wall - entry["mtime_ns"] / 1e9 < self.settle_seconds and \
                    not self._complete(entry["name"], entry["bytes"]):
                continue  # being written by hand (`cat > signals/X`): look again once it settles
            found.append((entry["mtime_ns"], entry["name"]))
        return [name for _, name in sorted(found)]

    def _complete(self, name: str, size: int) -> bool:
        """Whether a young file already holds a whole JSON document (emit's files always do)."""
        if size == 0 or size > signals.MAX_SIGNAL_BYTES:
            return size > 0
        try:
            jsonio.loads_strict(self.store.read_bytes(f"{layout.SIGNALS_DIR}/{name}") or b"")
        except (LokiError, jsonio.JsonError):
            return False
        return True

    def _processing(self) -> list[str]:
        return [n for n in self.store.list(signals.PROCESSING_DIR) if not n.startswith(".")]

    def _left_by_others(self) -> list[str]:
        """Claimed signals this consumer does not hold (not deferred by it), found by a rescan on every pass.

        Another consumer left them: one whose lock was lost while it applied (its lock connection died on
        PostgreSQL, and this one took over), or one that failed to log or finish a signal. Without the
        rescan they would wait for the next takeover's :meth:`recover`, whose look at the outcome log
        (its tail) may no longer find them. They are handled as recovered: the outcome log's tail is read
        again for them, and each rule finds its own marker if it was applied.
        """
        found = [entry for entry in self._processing() if entry not in self._retry_at]
        if found:
            logged = outcomes.logged(self.store)
            self._logged.update((entry, logged[entry]) for entry in found if entry in logged)
            for entry in found:
                self._drop_waiting_twin(entry)
        return found

    # step 1: claim -------------------------------------------------------------------------------

    def claim(self, name: str) -> str | None:
        """Move ``signals/name`` into ``.processing/`` under a unique id; None if it is gone.

        The store makes the claim exclusive (:meth:`loki.storage.store.Store.claim_into`: on files a hard
        link then an unlink, durable before the waiting name goes).
        """
        stamp = self.store.now_ts().replace("-", "").replace(":", "")
        entry = f"{name}.{stamp}-{os.urandom(4).hex()}"
        if not self.store.claim_into(f"{layout.SIGNALS_DIR}/{name}", signals.PROCESSING_DIR, entry):
            return None
        return entry

    def _drop_waiting_twin(self, entry: str) -> None:
        """After a crash between the claim's two steps: the waiting name of a claimed item goes."""
        store = self.store
        if not store.claims_in_one_step:  # a claim in one step (memory, PostgreSQL) never leaves a twin
            store.drop_twin(f"{signals.PROCESSING_DIR}/{entry}", f"{layout.SIGNALS_DIR}/{signals.original_name(entry)}")

    # steps 2-4: apply, log, finish ---------------------------------------------------------------------

    def handle(self, entry: str, *, recovered: bool = False) -> dict[str, Any] | None:
        """Apply, log and finish one claimed signal. None when there was nothing to log (its outcome
        was logged before a crash) or applying failed (it stays claimed and is retried)."""
        name = signals.original_name(entry)
        known = self._logged.get(entry)
        if known is not None:
            self._finish(entry, known)  # kept in _logged until it is done: a retry only finishes it
            self._logged.pop(entry, None)
            self._retry_at.pop(entry, None)
            return None
        try:
            body, reason = self._read(entry, name)
        except FileNotFoundError:  # removed by hand while claimed: nothing left to apply
            self._retry_at.pop(entry, None)
            return None
        if reason is not None:
            return self._quarantine(entry, name, reason, body, recovered)
        assert body is not None
        sig = rules.Signal(entry, name, body, recovered=recovered)
        try:
            result = rules.apply(self.store, sig)
            crashpoint("signal-applied")
            record = self._record(entry, name, sig.type, result, body, recovered)
            outcomes.append(self.store, [record])
        except Exception as exc:  # the tree's trouble (or a bug): keep the signal and retry it later
            self._defer(entry, exc)
            return None
        crashpoint("signal-logged")
        self._finish_logged(entry, record)
        self._retry_at.pop(entry, None)
        self._failures.pop(entry, None)
        self._count()
        self.on_event({"event": "signal", **record})
        return record

    def _record(self, entry: str, name: str, signal_type: str | None, result: dict[str, Any],
                body: Any, recovered: bool) -> dict[str, Any]:
        record: dict[str, Any] = {"timestamp": self.store.now_ts(), "id": entry, "name": name, "type": signal_type}
        task_id = body.get("task_id") if isinstance(body, dict) else None
        record["task_id"] = task_id if isinstance(task_id, str) else None
        record.update(result)
        if recovered:
            record["recovered"] = True
        if result.get("outcome") == "archived":
            record["moved_to"] = f"{signals.ARCHIVE_DIR}/{entry}"
        if body is not None:
            size = len(jsonio.dumps_compact(body))
            if size <= MAX_LOGGED_BODY:
                record["signal"] = body
            else:
                # The log stays made of small lines (recovery reads its tail); the file itself is kept.
                record["signal_bytes"] = size
                record.setdefault("moved_to", f"{signals.ARCHIVE_DIR}/{entry}")
        return record

    def _read(self, entry: str, name: str) -> tuple[dict[str, Any] | None, str | None]:
        """``(signal, None)``, or ``(whatever parsed, reason)`` for a file to quarantine."""
        rel = f"{signals.PROCESSING_DIR}/{entry}"
        item = self.store.entry(rel)
        if item is None:
            raise FileNotFoundError(rel)  # as before: the caller treats a vanished claim as gone
        if item["kind"] == "symlink":
            return None, "a symbolic link (loki never follows links inside .loki/)"
        if item["kind"] == "directory":
            return None, "a directory, not a signal file"
        if item["kind"] != "file":
            return None, "not a regular file"
        if item["bytes"] > signals.MAX_SIGNAL_BYTES:
            return None, f"{item['bytes']} bytes, over the {signals.MAX_SIGNAL_BYTES}-byte limit for a signal"
        signal_type = signaltypes.type_of_file(name)
        if signal_type == signaltypes.DRIFT:
            return None, "DRIFT_DETECTED is an append-only log: append a line to signals/DRIFT_DETECTED instead"
        if not signaltypes.is_signal_name(signal_type):
            return None, f"{signal_type!r} is not a signal name (UPPER_CASE letters, digits and '_', an optional " \
                         "_subject)"
        try:
            data = self.store.read_bytes(rel) or b""
            body = jsonio.loads_strict(data)
        except jsonio.JsonError as exc:
            # Not a clock reading from the future (a test's LOKI_NOW): the file's time, or now if earlier.
            written = min(datetime.fromtimestamp(item["mtime_ns"] / 1e9, timezone.utc), self.store.clock.now())
            body = _text_signal(data, written, signal_type)
            if body is None:
                return None, f"not valid JSON: {exc.reason.removeprefix('invalid JSON: ')}"
        except LokiError as exc:
            return None, exc.message
        if not isinstance(body, dict):
            return None, f"not a JSON object (a {type(body).__name__})"
        schema = signaltypes.schema_for(signal_type)
        found = self.store.schemas.problems(schema, body)
        # Validated as written, then redacted: the rules' effects (notes, errors, Markdown, escalations) and
        # the outcome log only ever see the redacted body of a file an agent dropped by hand.
        if found:
            where, why = found[0]
            return redact_obj(body), f"does not match {schema} at {where or '/'}: {why}"
        return redact_obj(body), None

    def _quarantine(self, entry: str, name: str, reason: str, body: Any, recovered: bool) -> dict[str, Any] | None:
        signal_type = signaltypes.type_of_file(name)
        moved_to = f"{signals.QUARANTINE_DIR}/{entry}"
        result = {"rule": "quarantine", "outcome": "quarantined", "detail": f"{reason} (kept in {moved_to})",
                  "reason": reason, "moved_to": moved_to}
        record = self._record(entry, name, signal_type if signaltypes.is_signal_name(signal_type) else None,
                              result, body, recovered)
        try:
            outcomes.append(self.store, [record])
        except Exception as exc:
            self._defer(entry, exc)
            return None
        crashpoint("signal-logged")
        self._finish_logged(entry, record)
        self._retry_at.pop(entry, None)
        self._count()
        self.on_event({"event": "signal", **record})
        return record

    def _finish_logged(self, entry: str, record: dict[str, Any]) -> None:
        """Step 4 for a signal whose outcome is logged now: if it fails, a retry only finishes it."""
        self._logged[entry] = record
        self._finish(entry, record)
        self._logged.pop(entry, None)

    def _finish(self, entry: str, record: dict[str, Any]) -> None:
        """Step 4: delete the claimed file, or move it where its logged outcome says (``moved_to``)."""
        moved_to = str(record.get("moved_to") or "")
        target_dir = next((d for d in (signals.QUARANTINE_DIR, signals.ARCHIVE_DIR) if moved_to.startswith(d + "/")),
                          None)
        self.store.finish(f"{signals.PROCESSING_DIR}/{entry}", target_dir)

    def _defer(self, entry: str, exc: Exception) -> None:
        failures = self._failures.get(entry, 0) + 1
        self._failures[entry] = failures
        delay = min(MAX_RETRY_SECONDS, 2.0 ** (failures - 1))
        self._retry_at[entry] = self._timer() + delay
        message = exc.message if isinstance(exc, LokiError) else f"{type(exc).__name__}: {exc}"
        self.on_event({"event": "error", "id": entry, "message": message, "retry_in": delay,
                       "detail": f"{entry} kept in signals/.processing/; retry in {delay:g}s: {message}"})

    def _count(self) -> None:
        self.processed += 1
        self._unsaved_count += 1

    # DRIFT_DETECTED ----------------------------------------------------------------------------------

    def follow_drift(self, should_stop: Callable[[], bool] = lambda: False) -> list[dict[str, Any]]:
        """Apply the complete lines appended to the drift log since the saved position.

        The position (``drift_offset`` in state/watch.json) is the store's: it is kept, saved and handed
        back, never computed with.
        """
        if self._drift_offset is not None and self.store.log_end(signals.DRIFT_LOG) == self._drift_offset:
            return []
        state = self.store.read(layout.WATCH_STATE)
        position = state.get("drift_offset")
        if not self.store.log_valid(signals.DRIFT_LOG, position):
            size = self.store.log_size(signals.DRIFT_LOG)
            self.on_event({"event": "warning", "detail": f"{signals.DRIFT_LOG} shrank to {size} bytes (below the "
                                                         f"applied offset {position}); reading it from the start"})
            position = None
        done: list[dict[str, Any]] = []
        applied_since_save = 0
        stopped = False
        while not stopped and not should_stop():
            lines, after = self.store.read_after(signals.DRIFT_LOG, position, DRIFT_CHUNK)
            if not lines:
                position = after  # the same position, or the log's start as the store names it
                break  # nothing, or a line still being written: it waits
            for line, following in zip(lines, [*(line.position for line in lines[1:]), after], strict=True):
                if should_stop():
                    stopped = True
                    break
                if line.data is None:  # one line longer than a chunk: reject it whole
                    self._reject_long_line(line, done)
                elif line.data.strip():
                    record = self._drift_line(line.data, line.position, state)
                    if record is not None:
                        done.append(record)
                    applied_since_save += 1
                position = following
                if applied_since_save >= DRIFT_SAVE_EVERY:
                    self._save_drift(state, position)
                    applied_since_save = 0
        if position is not None:
            self._save_drift(state, position)
        return done

    def _drift_line(self, line: bytes, position: Any, state: dict[str, Any]) -> dict[str, Any] | None:
        entry = f"{signaltypes.DRIFT}@{position}"
        try:
            body = jsonio.loads_strict(line)
            found = self.store.schemas.problems(signaltypes.schema_for(signaltypes.DRIFT), body) \
                if isinstance(body, dict) else [("", "not a JSON object")]
        except jsonio.JsonError as exc:
            body, found = None, [("", f"not valid JSON: {exc.reason.removeprefix('invalid JSON: ')}")]
        if found:
            where, why = found[0]
            reason = why + (f" at {where}" if where else "")
            result = {"rule": "drift", "outcome": "rejected", "reason": reason,
                      "detail": f"line rejected (it stays in the log): {reason}"}
        else:
            body = redact_obj(body)  # a line appended by hand, like a file dropped by hand (see _read)
            result = rules.apply_drift(self.store, rules.Signal(entry, signaltypes.DRIFT, body), state)
            crashpoint("drift-applied")
        if entry in self._logged or entry in self._drift_unsaved:
            self._logged.pop(entry, None)
            return None  # logged before a crash; the counters above were rebuilt from the saved ones
        record = self._record(entry, signaltypes.DRIFT, signaltypes.DRIFT, result, body, False)
        outcomes.append(self.store, [record])
        self._drift_unsaved.add(entry)
        self._count()
        self.on_event({"event": "signal", **record})
        return record

    def _reject_long_line(self, line: LogLine, done: list[dict[str, Any]]) -> None:
        entry = f"{signaltypes.DRIFT}@{line.position}"
        if entry not in self._logged and entry not in self._drift_unsaved:
            reason = f"a line of {line.length} bytes, over the {DRIFT_CHUNK}-byte limit"
            record = self._record(entry, signaltypes.DRIFT, signaltypes.DRIFT,
                                  {"rule": "drift", "outcome": "rejected", "detail": f"line rejected: {reason}",
                                   "reason": reason}, None, False)
            outcomes.append(self.store, [record])
            self._drift_unsaved.add(entry)
            done.append(record)

    def _save_drift(self, state: dict[str, Any], offset: Any) -> None:
        if offset == self._drift_offset and not self._drift_unsaved:
            return
        keys = ("drift_counts", "drift_total", "drift_unconsolidated", "drift_consolidations")
        fields: dict[str, Any] = {k: state[k] for k in keys if k in state}
        self.update_state({**fields, "drift_offset": offset})
        self._drift_offset = offset
        self._drift_unsaved.clear()

    # bookkeeping -------------------------------------------------------------------------------------

    def update_state(self, fields: dict[str, Any]) -> dict[str, Any]:
        with self.store.transaction(layout.WATCH_STATE) as txn:
            doc = dict(txn.read(layout.WATCH_STATE))
            doc.update(fields)
            txn.write(layout.WATCH_STATE, doc)
        return doc

    def save(self, fields: dict[str, Any] | None = None) -> None:
        """Add what was processed since the last save to ``signals_processed`` (and store ``fields``)."""
        if self._unsaved_count or fields:
            with self.store.transaction(layout.WATCH_STATE) as txn:
                doc = dict(txn.read(layout.WATCH_STATE))
                doc["signals_processed"] = int(doc.get("signals_processed", 0)) + self._unsaved_count
                doc.update(fields or {})
                txn.write(layout.WATCH_STATE, doc)
            self._unsaved_count = 0


def consume_pending(store: Store, *, on_event: EventSink | None = None) -> dict[str, Any]:
    """One consuming pass right now, unless a watcher is consuming (then it will do it).

    For commands that want their signal applied at once when no watcher runs (``loki
    approve``). Returns ``{"consumed": bool, "consumer": holder or None, "outcomes": [...],
    "errors": [...]}``: ``errors`` are the signals that could not be applied (each ``{"id",
    "message", ...}``; they stay in ``signals/.processing/`` for the next consumer).
    """
    lock = ConsumerLock(store)
    if not lock.try_acquire():
        return {"consumed": False, "consumer": consumer_status(store), "outcomes": [], "errors": []}
    errors: list[dict[str, Any]] = []

    def sink(event: dict[str, Any]) -> None:
        if event.get("event") == "error":
            errors.append(event)
        if on_event is not None:
            on_event(event)

    try:
        consumer = Consumer(store, on_event=sink)
        # The lock is asked between two signals, as the watcher does: lost (its connection died), a
        # watcher may be taking over, so this pass stops before the next signal.
        done = consumer.recover() + consumer.run_pass(lambda: not lock.confirm())
        consumer.save()
    finally:
        lock.release()
    return {"consumed": True, "consumer": None, "outcomes": done, "errors": errors}
