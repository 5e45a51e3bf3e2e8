"""What happened in the tree besides the watcher's own work, as events for the live view's feed.

The watcher reports what it does itself (signals applied, the tick's leases, review timeouts and
dead-letter reviews). Agents and humans change the tree too, and each change already leaves a
trace in state loki keeps; :class:`Activity` turns those traces into events, reading only what
is new:

* **breaker changes**: ``logs/circuit-recovery.log``, followed by log position (``read_after``), so
  a breaker opened by an agent's ``loki breaker failure`` shows as soon as it is logged;
* **strikes**: the ``attempts`` of each ``state/errors/<branch>.json`` (a file is re-read only when
  its change token moves); a streak that disappears from ``keys`` was cleared;
* **escalations**: files appearing in ``escalations/`` (opened) and files gaining a Resolution
  section (resolved), each re-read only when it changed;
* **dead-letter reviews run elsewhere** (the session-start hook, ``loki deadletter review``): the
  dead-letter file's ``metadata.last_reviewed`` moving;
* **task failures, moves to the dead-letter queue and every review**: ``logs/tasks.jsonl``
  (:mod:`loki.queue.tasklog`), followed by log position like the breakers' log.

Every event is a dict with ``event`` (its kind), ``timestamp`` and ``detail`` (one line for people),
like the watcher's own, so ``--no-tui`` prints them and ``--json`` writes them as they are. A
transition two sources both report (the tick saves a breaker's HALF_OPEN *and* the breaker logs it;
the tick runs the dead-letter review *and* the file records it) has one :func:`identity`, and the
watcher shows it once.

Only the state-store protocol is used (``list``, ``change_token``, ``read``, ``read_text``,
``log_end``, ``read_after``, ``read_tail``; the task store's ``dead_letter_doc``), so a database
store serves the same feed.
"""

from __future__ import annotations

import re

from loki.breakers.breakers import RECOVERY_LOG
from loki.queue import tasklog
from loki.signals import outcomes
from loki.storage import layout
from loki.strikes.key import make_key
from loki.watch.ticks import EVENTS_LOG

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Hashable
    from typing import Any

    from loki.storage.state import StateStore as Store

HISTORY_BYTES = 64 * 1024
"""How far back into each log the live view looks for the events it shows at start."""
BREAKER_CHANGES = ("opened", "reopened", "tripped manually", "half-open", "recovered", "reset")
_BREAKER_LINE = re.compile(r"^(\S+) Circuit (" + "|".join(BREAKER_CHANGES) + r"): (.*)$")


# -- one event per trace -------------------------------------------------------------------------------


def breaker_event(line: str) -> dict[str, Any] | None:
    """A ``logs/circuit-recovery.log`` line as an event (None: not a transition line).

    ``2026-01-25T10:00:20Z Circuit opened: api/claude (3 failures within 60s; ...)`` is
    ``{"event": "breaker", "breaker": "api/claude", "change": "opened", "reason": "3 failures ..."}``.
    The reason is loki's own words and never holds `` (``; a name may, so the name is what is left
    before the last `` (``; a recovery line has no reason at all.
    """
    match = _BREAKER_LINE.match(line.rstrip("\n"))
    if match is None:
        return None
    at, change, rest = match.groups()
    name, reason = rest, ""
    if change != "recovered" and rest.endswith(")") and " (" in rest:
        name, _, reason = rest[:-1].rpartition(" (")
    return {"event": "breaker", "timestamp": at, "breaker": name, "change": change, "reason": reason,
            "detail": f"{name} ({reason})" if reason else name}


def strike_event(branch: str, attempt: dict[str, Any], call: str | None, tier: str) -> dict[str, Any]:
    """One recorded failure of a call (an ``attempts`` record of a branch's strike file)."""
    label = call or str(attempt.get("tool") or "a call")
    count = attempt.get("strike")
    return {"event": "strike", "timestamp": attempt.get("timestamp"), "branch": branch, "change": "strike",
            "strike": count, "tier": tier, "tool": attempt.get("tool"), "call": label,
            "error": attempt.get("error"), "detail": f"{label} on {branch}: {attempt.get('error') or ''}".rstrip()}


def strikes_cleared_event(branch: str, entry: dict[str, Any], now: str) -> dict[str, Any]:
    """A streak that left a branch's ``keys``: the same call succeeded, or ``loki errors reset``."""
    label = entry.get("call") or str(entry.get("tool") or "a call")
    return {"event": "strike", "timestamp": now, "branch": branch, "change": "cleared",
            "strike": entry.get("strike_count"), "tool": entry.get("tool"), "call": label,
            "detail": f"{label} on {branch} (after {entry.get('strike_count')})"}


def escalation_event(row: dict[str, Any], change: str, now: str) -> dict[str, Any]:
    """An escalation file opened or resolved, dated by what loki recorded in its header (``created_at``,
    ``resolved_at``), else when it was seen (a file written before the header kept ``resolved_at``)."""
    recorded = row.get("created_at") if change == "opened" else row.get("resolved_at")
    when = recorded if isinstance(recorded, str) and recorded else now
    about = ", ".join(str(v) for v in (row.get("task_id") and f"task {row['task_id']}", row.get("trigger")) if v)
    detail = f"{row['id']} ({about})" if about else str(row["id"])
    if change == "resolved" and row.get("resolution"):
        detail = f"{row['id']}: {row['resolution']}"
    return {"event": "escalation", "timestamp": when, "change": change, "escalation": row["id"],
            "task_id": row.get("task_id"), "trigger": row.get("trigger"), "resolution": row.get("resolution"),
            "detail": detail}


def review_event(metadata: dict[str, Any], before: dict[str, Any] | None, entries: int) -> dict[str, Any]:
    """A dead-letter review seen in the file's metadata (``before``: the metadata last seen, if any)."""
    recovered = abandoned = None
    if before is not None:
        recovered = int(metadata.get("total_recovered") or 0) - int(before.get("total_recovered") or 0)
        abandoned = int(metadata.get("total_abandoned") or 0) - int(before.get("total_abandoned") or 0)
    parts = [] if recovered is None else [f"{recovered} recovered", f"{abandoned} abandoned"]
    parts.append(f"{entries} left")
    return {"event": "review", "timestamp": metadata["last_reviewed"], "reviewed_at": metadata["last_reviewed"],
            "recovered": recovered, "abandoned": abandoned, "entries": entries,
            "detail": "dead-letter review: " + ", ".join(parts)}


def identity(event: dict[str, Any]) -> Hashable | None:
    """What makes two reports the same happening (None: every report is its own).

    The tick saves a breaker's HALF_OPEN and the breaker logs the transition; the tick runs the
    dead-letter review and the file records it. Both carry the instant of the change (the tick's
    events since this version carry ``at`` and ``reviewed_at``), so the watcher shows each once,
    whichever report it meets first.
    """
    kind = event.get("event")
    if kind == "breaker" and event.get("change") == "half-open":
        return ("half-open", event.get("breaker"), event.get("timestamp"))
    if kind == "tick" and event.get("action") == "breaker_half_open" and event.get("at"):
        return ("half-open", event.get("breaker"), event.get("at"))
    if kind == "review" or (kind == "tick" and event.get("action") == "deadletter_review"):
        return ("review", event.get("reviewed_at")) if event.get("reviewed_at") else None
    return None


# -- the escalation files, re-read only when one changed -----------------------------------------------


class EscalationFiles:
    """The rows of ``escalations/*.md`` (``escalations.read_header``), each re-read only when its
    change token moved: listing a directory and looking at each entry is cheap, reading every
    file every second is not."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._rows: dict[str, tuple[Hashable | None, dict[str, Any]]] = {}

    def rows(self) -> list[dict[str, Any]]:
        """Every escalation, oldest first (by name: ``<UTC-ts>-<task>[-n]``)."""
        from loki.queue.escalations import read_header

        names = sorted((n for n in self.store.list(layout.ESCALATIONS_DIR) if n.endswith(".md")),
                       key=lambda n: n.removesuffix(".md"))
        rows = {}
        for name in names:
            rel = f"{layout.ESCALATIONS_DIR}/{name}"
            token = self.store.change_token(rel)
            cached = self._rows.get(name)
            if cached is None or token is None or cached[0] != token:
                cached = (token, read_header(self.store, rel))
            rows[name] = cached
        self._rows = rows
        return [row for _, row in rows.values()]

    def open_rows(self) -> list[dict[str, Any]]:
        return [row for row in self.rows() if row["open"]]


# -- following them ---------------------------------------------------------------------------------------


class Activity:
    """The events of other processes since :meth:`start`, one :meth:`poll` at a time.

    Each source is read on its own; one that fails (a corrupt strike file, a log replaced by hand)
    yields a ``warning`` event once, and again only when its error changes, and the others go on.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.escalations = EscalationFiles(store)
        self._breaker_position: Any = None
        self._tasks: outcomes.Follower | None = None
        self._strikes: dict[str, tuple[Hashable | None, set[tuple[Any, ...]], dict[str, dict[str, Any]]]] = {}
        self._open: dict[str, bool] = {}
        self._deadletter: tuple[Hashable | None, dict[str, Any] | None] = (None, None)
        self._errors: dict[str, str] = {}
        from loki.watch.leasefeed import LeaseActivity

        self._leases = LeaseActivity(store)
        self.started = False

    def start(self) -> None:
        """Remember where everything is now: only what happens after this is reported.

        When the store cannot answer (a database away), this raises and :meth:`poll` starts again."""
        self._breaker_position = self.store.log_end(RECOVERY_LOG)
        self._tasks = outcomes.Follower(self.store, log=tasklog.LOG)  # from the log's end
        for source in (self._strike_events, self._escalation_events, self._review_events):
            self._guarded(source)
        self._guarded(self._lease_start)
        self.started = True

    def poll(self) -> list[dict[str, Any]]:
        """The events since the last poll, oldest first within each source."""
        if not self.started:
            self.start()
            return []
        events: list[dict[str, Any]] = []
        for source in (self._breaker_events, self._strike_events, self._escalation_events, self._task_events,
                       self._review_events, self._lease_events):
            events.extend(self._guarded(source))
        return once(events)  # a review is in the tasks' log and in the dead-letter file's metadata

    def _guarded(self, source: Any) -> list[dict[str, Any]]:
        from loki.errors import LokiError

        name = source.__name__.strip("_")
        try:
            events: list[dict[str, Any]] = source()
        except (LokiError, OSError, ValueError, KeyError, TypeError) as exc:
            message = exc.message if isinstance(exc, LokiError) else f"{type(exc).__name__}: {exc}"
            if self._errors.get(name) == message:
                return []
            self._errors[name] = message
            return [{"event": "warning", "timestamp": self.store.now_ts(),
                     "detail": f"cannot follow {name.replace('_events', '').replace('_', ' ')}s: {message}"}]
        self._errors.pop(name, None)
        return events

    # -- the sources -------------------------------------------------------------------------------------

    def _breaker_events(self) -> list[dict[str, Any]]:
        if not self.store.log_valid(RECOVERY_LOG, self._breaker_position):  # replaced by hand: start over
            self._breaker_position = None
        lines, self._breaker_position = self.store.read_after(RECOVERY_LOG, self._breaker_position)
        events = (breaker_event(line.data.decode("utf-8", "replace")) for line in lines if line.data is not None)
        return [event for event in events if event is not None]

    def _lease_start(self) -> list[dict[str, Any]]:
        self._leases.start()
        return []

    def _lease_events(self) -> list[dict[str, Any]]:
        # loki.watch.leasefeed: leases acquired, released, broken, expired; edits the hook denied.
        return self._leases.poll()

    def _task_events(self) -> list[dict[str, Any]]:
        # Its lines are the feed's events as they are shown: followed as the outcome log is.
        return [] if self._tasks is None else self._tasks.poll()

    def _strike_events(self) -> list[dict[str, Any]]:
        from loki.strikes.tiers import Tiers

        tiers = Tiers.from_config(self.store.config)
        events: list[dict[str, Any]] = []
        seen = {}
        for name in self.store.list(layout.STRIKES_DIR):
            if not name.endswith(".json") or name.startswith("."):
                continue
            rel = f"{layout.STRIKES_DIR}/{name}"
            token = self.store.change_token(rel)
            before = self._strikes.get(rel)
            if before is not None and token is not None and before[0] == token:
                seen[rel] = before
                continue
            doc = self.store.read(rel) or {"branch": name.removesuffix(".json"), "attempts": [], "keys": {}}
            attempts = {_attempt_id(a): a for a in doc["attempts"]}
            keys = {key: {"call": e.get("call"), "tool": e.get("tool"), "strike_count": e.get("strike_count")}
                    for key, e in doc["keys"].items()}
            seen[rel] = (token, set(attempts), keys)
            if before is None and not self.started:
                continue
            old_ids, old_keys = (before[1], before[2]) if before is not None else (set(), {})
            for aid, attempt in attempts.items():
                if aid not in old_ids:
                    entry = doc["keys"].get(make_key(str(attempt.get("tool")), str(attempt.get("input_hash")))) or {}
                    events.append(strike_event(doc["branch"], attempt, entry.get("call"),
                                               tiers.tier(int(attempt.get("strike") or 0))))
            now = doc.get("updated_at") or self.store.now_ts()
            events.extend(strikes_cleared_event(doc["branch"], entry, now)
                          for key, entry in old_keys.items() if key not in keys)
        self._strikes = seen
        return events

    def _escalation_events(self) -> list[dict[str, Any]]:
        rows = self.escalations.rows()
        now = self.store.now_ts()
        events = []
        for row in rows:
            was_open = self._open.get(row["id"])
            if self.started and was_open is None:
                events.append(escalation_event(row, "opened", now))
                if not row["open"]:  # opened and answered between two looks
                    events.append(escalation_event(row, "resolved", now))
            elif self.started and was_open and not row["open"]:
                events.append(escalation_event(row, "resolved", now))
        self._open = {row["id"]: row["open"] for row in rows}
        return events

    def _review_events(self) -> list[dict[str, Any]]:
        tasks = self.store.tasks()
        token = tasks.change_token("dead-letter")
        before_token, before = self._deadletter
        if before is not None and token is not None and token == before_token:
            return []
        doc = tasks.dead_letter_doc()
        metadata = dict(doc["metadata"])
        self._deadletter = (token, metadata)
        last = metadata.get("last_reviewed")
        if not self.started or last is None or (before is not None and before.get("last_reviewed") == last):
            return []
        return [review_event(metadata, before, len(doc["tasks"]))]


def _attempt_id(attempt: dict[str, Any]) -> tuple[Any, ...]:
    """What tells two strike attempts apart (they have no id; a resolved one only changes ``status``)."""
    return (attempt.get("timestamp"), attempt.get("tool"), attempt.get("input_hash"), attempt.get("strike"),
            attempt.get("session"), attempt.get("error_hash"))


# -- what the view shows at start ---------------------------------------------------------------------------


def history(store: Store, limit: int = 100) -> list[dict[str, Any]]:
    """The latest ``limit`` events already on record, oldest first, each happening once.

    Signals and the tick's actions from the tails of their logs, breaker changes from the recovery
    log, strikes from the branches' files, escalations (opened and resolved) from their headers, the last dead-letter
    review from its metadata. The live view starts with these, so it is never blank.
    """
    events = [{"event": "signal", **r} for r in outcomes.tail(store, HISTORY_BYTES)]
    for line in store.read_tail(RECOVERY_LOG, HISTORY_BYTES):  # before the tick's: its words win a tie
        event = breaker_event(line.decode("utf-8", "replace"))
        if event is not None:
            events.append(event)
    events += [{"event": "tick", **r} for r in outcomes.parse_lines(b"\n".join(store.read_tail(EVENTS_LOG,
                                                                                             HISTORY_BYTES)))]
    events += _recorded_strikes(store)
    escalations = EscalationFiles(store).rows()
    events += [escalation_event(row, "opened", store.now_ts()) for row in escalations if row.get("created_at")]
    events += [escalation_event(row, "resolved", store.now_ts()) for row in escalations
               if not row["open"] and row.get("resolved_at")]
    events += tasklog.tail(store, HISTORY_BYTES)  # before the file's last review: its words win a tie
    from loki.watch import leasefeed

    events += leasefeed.history(store)
    deadletter = store.tasks().dead_letter_doc()
    if deadletter["metadata"].get("last_reviewed"):
        events.append(review_event(deadletter["metadata"], None, len(deadletter["tasks"])))
    events.sort(key=lambda e: str(e.get("timestamp") or ""))  # stable: a log's own order is kept
    return once(events)[-limit:] if limit > 0 else []


def _recorded_strikes(store: Store) -> list[dict[str, Any]]:
    from loki.strikes.tiers import Tiers

    tiers = Tiers.from_config(store.config)
    events = []
    for name in store.list(layout.STRIKES_DIR):
        if name.endswith(".json") and not name.startswith("."):
            doc = store.read(f"{layout.STRIKES_DIR}/{name}")
            if doc is None:
                continue
            for attempt in doc["attempts"]:
                entry = doc["keys"].get(make_key(str(attempt.get("tool")), str(attempt.get("input_hash")))) or {}
                events.append(strike_event(doc["branch"], attempt, entry.get("call"),
                                           tiers.tier(int(attempt.get("strike") or 0))))
    return events


def once(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``events`` without the second report of a happening (:func:`identity`)."""
    seen: set[Hashable] = set()
    kept = []
    for event in events:
        key = identity(event)
        if key is not None:
            if key in seen:
                continue
            seen.add(key)
        kept.append(event)
    return kept
