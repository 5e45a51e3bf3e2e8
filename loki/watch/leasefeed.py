"""Path leases in the live view's feed (docs/leases.md, "Visible"): a lease acquired, released, broken or
expired, and an edit the PreToolUse hook denied (or asked a person about).

The first four are read from ``state/path-leases.json`` itself: its live leases and its ``history`` of
ended ones say everything, so no second record is written. A lease whose ``expires_at`` has passed is
reported expired when the watcher sees the time pass, before any write sweeps it into the history (dated at
its expiry either way). The document is re-read only when its change token moves.

The denials are the lines the hook appends (``logs/path-leases.jsonl``, :data:`loki.leases.hotcopy.DENIALS`):
followed through the store on a file tree; on a database tree the hook never connects, so they are this
machine's ``.loki/cache/logs/path-leases.jsonl`` and the feed shows the denials made here.

Every event is ``{"event": "lease", "change", "timestamp", "lease_id", "agent", "patterns", "detail", ...}``.
"""

from __future__ import annotations

from loki.storage import layout

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Hashable
    from typing import Any

    from loki.storage.state import StateStore as Store

CHANGES = ("acquired", "released", "broken", "expired", "denied", "asked")
HISTORY_BYTES = 64 * 1024


def lease_event(lease: dict[str, Any], change: str, timestamp: str) -> dict[str, Any]:
    """A lease acquired or ended, as one event."""
    patterns = " ".join(str(p) for p in lease.get("patterns") or [])
    kind = "exclusive" if lease.get("exclusive", True) else "shared"
    task = f", task {lease['task']}" if lease.get("task") else ""
    if change == "acquired":
        until = lease.get("expires_at")
        detail = f"{lease['lease_id']} {patterns} by {lease.get('agent')} ({kind}{task}, until {until})"
    elif change == "broken":
        why = f": {lease['end_reason']}" if lease.get("end_reason") else ""
        detail = f"{lease['lease_id']} {patterns} of {lease.get('agent')} by {lease.get('ended_by')}{why}"
    elif change == "expired":
        detail = f"{lease['lease_id']} {patterns} of {lease.get('agent')} (not renewed{task})"
    else:
        detail = f"{lease['lease_id']} {patterns} by {lease.get('agent')}{task}"
    return {"event": "lease", "change": change, "timestamp": timestamp, "lease_id": lease["lease_id"],
            "agent": lease.get("agent"), "patterns": list(lease.get("patterns") or []),
            "exclusive": bool(lease.get("exclusive", True)), "task": lease.get("task"), "detail": detail}


def denial_event(record: dict[str, Any]) -> dict[str, Any] | None:
    """A line of the hook's log as an event (None: not one of its lines)."""
    if record.get("event") != "lease" or record.get("change") not in ("denied", "asked"):
        return None
    who = record.get("agent") or "an agent with no name"
    task = f", task {record['task']}" if record.get("task") else ""
    detail = (f"{record.get('tool')} of {record.get('path')} by {who}: {record.get('pattern')} is held by "
              f"{record.get('holder')} ({record.get('lease_id')}{task})")
    return {**record, "detail": detail}


def _denials_log(store: Store) -> str | None:
    """Where the hook's lines are: the tree's log (files), else this machine's copy (None: no tree here)."""
    import os

    from loki.leases.hotcopy import DENIALS

    if not store.keeps_local_copies:
        return DENIALS
    local = getattr(store, "local_root", None)
    return None if local is None else os.path.join(local, layout.LOCAL_CACHE_DIR, *DENIALS.split("/"))


class LeaseActivity:
    """The lease events since :meth:`start`, one :meth:`poll` at a time (a source of
    :class:`loki.watch.activity.Activity`)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._token: Hashable | None = None
        self._doc: dict[str, Any] | None = None
        self._live: set[str] = set()
        self._ended: set[str] = set()
        self._position: Any = None
        self._local_position = 0
        self.started = False

    def start(self) -> None:
        self._read()
        doc = self._doc or {}
        self._live = {lease["lease_id"] for lease in doc.get("leases", [])}
        self._ended = {entry["lease_id"] for entry in doc.get("history", [])}
        now = self._now()
        self._ended |= {lease["lease_id"] for lease in doc.get("leases", []) if lease["expires_at"] <= now}
        log = _denials_log(self.store)
        if log is not None and store_log(self.store):
            self._position = self.store.log_end(log)
        elif log is not None:
            from loki.leases import hotcopy

            self._local_position = hotcopy.log_size(log)
        self.started = True

    def poll(self) -> list[dict[str, Any]]:
        if not self.started:
            self.start()
            return []
        events = self._document_events()
        events += self._denials()
        events.sort(key=lambda e: str(e.get("timestamp") or ""))
        return events

    def _now(self) -> str:
        from loki.clock import format_ts
        from loki.leases.leases import PathLeases

        return format_ts(PathLeases(self.store).now())

    def _read(self) -> None:
        token = self.store.change_token(layout.LEASES)
        if self._doc is not None and token is not None and token == self._token:
            return
        doc = self.store.read(layout.LEASES) if self.store.exists(layout.LEASES) else None
        self._doc = doc if isinstance(doc, dict) else {"leases": [], "history": []}
        self._token = token

    def _document_events(self) -> list[dict[str, Any]]:
        self._read()
        assert self._doc is not None
        now = self._now()
        events = []
        for lease in self._doc["leases"]:
            if lease["lease_id"] not in self._live and lease["lease_id"] not in self._ended:
                self._live.add(lease["lease_id"])
                events.append(lease_event(lease, "acquired", lease["acquired_at"]))
            if lease["expires_at"] <= now and lease["lease_id"] not in self._ended:
                self._ended.add(lease["lease_id"])
                events.append(lease_event(lease, "expired", lease["expires_at"]))
        for entry in self._doc["history"]:
            if entry["lease_id"] in self._ended:
                continue
            self._ended.add(entry["lease_id"])
            if entry["lease_id"] not in self._live:  # acquired and ended between two looks
                events.append(lease_event(entry, "acquired", entry["acquired_at"]))
            events.append(lease_event(entry, entry["ended"], entry["ended_at"]))
        self._live -= self._ended
        return events

    def _denials(self) -> list[dict[str, Any]]:
        from loki.signals.outcomes import parse_lines

        log = _denials_log(self.store)
        if log is None:
            return []
        if store_log(self.store):
            if not self.store.log_valid(log, self._position):
                self._position = None
            lines, self._position = self.store.read_after(log, self._position)
            data = b"\n".join(line.data for line in lines if line.data is not None)
        else:
            from loki.leases import hotcopy

            data, self._local_position = hotcopy.log_read(log, self._local_position)
        return [event for event in map(denial_event, parse_lines(data)) if event is not None]


def store_log(store: Store) -> bool:
    """Whether the hook's lines are a log of the store (a file tree) rather than this machine's file."""
    return not store.keeps_local_copies


def history(store: Store) -> list[dict[str, Any]]:
    """The lease events on record, oldest first: every lease in the document acquired, the ended ones
    ended (or expired, by the time), and the tail of the hook's lines."""
    from loki.leases.leases import PathLeases
    from loki.signals.outcomes import parse_lines

    doc = store.read(layout.LEASES) if store.exists(layout.LEASES) else None
    events = []
    if isinstance(doc, dict):
        now = PathLeases(store).now()
        from loki.clock import format_ts

        stamp = format_ts(now)
        for lease in doc["leases"]:
            events.append(lease_event(lease, "acquired", lease["acquired_at"]))
            if lease["expires_at"] <= stamp:
                events.append(lease_event(lease, "expired", lease["expires_at"]))
        for entry in doc["history"]:
            events.append(lease_event(entry, "acquired", entry["acquired_at"]))
            events.append(lease_event(entry, entry["ended"], entry["ended_at"]))
    log = _denials_log(store)
    if log is not None:
        if store_log(store):
            data = b"\n".join(store.read_tail(log, HISTORY_BYTES))
        else:
            from loki.leases import hotcopy

            data = hotcopy.log_tail(log, HISTORY_BYTES)
        events += [event for event in map(denial_event, parse_lines(data)) if event is not None]
    events.sort(key=lambda e: str(e.get("timestamp") or ""))
    return events


def counts(store: Store, since: str) -> dict[str, int]:
    """How many leases were broken and expired, and edits denied (or asked about), since ``since``: what
    ``loki status`` shows."""
    found = dict.fromkeys(("denied", "broken", "expired"), 0)
    for event in history(store):
        change = event["change"]
        if str(event.get("timestamp") or "") < since:
            continue
        if change in ("denied", "asked"):
            found["denied"] += 1
        elif change in ("broken", "expired"):
            found[change] += 1
    return found
