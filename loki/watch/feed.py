"""The live view's feed of events, and the same events as lines for ``loki watch --no-tui``.

An event is a dict from the watcher (``signal``, ``tick``, ``started``, ``stopped``, ``error``,
``warning``, ``info``: working again after a failed cycle) or from :mod:`loki.watch.activity`
(``breaker``, ``strike``, ``escalation``, ``review``, ``task``). :func:`entry` says it for the feed: a time, a
one-word label (what kind of thing happened), the text, and a tone the terminal colours (``ok``, ``warn``,
``bad``, ``dim`` or plain).
:func:`event_line` is the ``--no-tui`` line: the time, then the same words.

:class:`Feed` keeps the latest entries (a bounded buffer) and counts every entry it was given, so a
view that holds a position (paused, or scrolled back) can say how many came since.
"""

from __future__ import annotations

from collections import deque

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

CAPACITY = 1000
"""Entries the feed keeps; scrolling goes back this far."""

SIGNAL_TONE = {"applied": "ok", "already_applied": "dim", "skipped": "warn", "logged": "", "archived": "dim",
               "quarantined": "bad", "rejected": "bad"}
TICK_LABEL = {"lease_expired": "lease", "review_timeout": "review", "breaker_half_open": "breaker",
              "deadletter_review": "review"}
BREAKER_TONE = {"opened": "bad", "reopened": "bad", "tripped manually": "bad", "half-open": "warn",
                "recovered": "ok", "reset": "ok"}
STRIKE_TONE = {"record": "", "warn": "warn", "stop": "bad"}
LEASE_TONE = {"acquired": "", "released": "ok", "broken": "bad", "expired": "warn", "denied": "bad", "asked": "warn"}


class Entry:
    """One line of the feed."""

    __slots__ = ("at", "label", "stamp", "text", "tone")

    def __init__(self, stamp: str, label: str, text: str, tone: str = "", at: str = "") -> None:
        self.stamp = stamp
        """``HH:MM:SS`` (UTC, like every timestamp loki writes)."""
        self.label = label
        self.text = text
        self.tone = tone
        self.at = at
        """The whole timestamp, which orders the feed."""

    def __repr__(self) -> str:
        return f"Entry({self.stamp!r}, {self.label!r}, {self.text!r}, {self.tone!r})"


def _stamp(event: dict[str, Any], now: str) -> str:
    return str(event.get("timestamp") or now)[11:19]


def _seen(event: dict[str, Any]) -> str:
    return " (seen in the log)" if event.get("observed") else ""


def entry(event: dict[str, Any], now: str) -> Entry:
    """``event`` as the feed shows it (``now``: the time for an event that carries none)."""
    kind = str(event.get("event"))
    stamp = _stamp(event, now)
    detail = str(event.get("detail") or "")
    if kind == "signal":
        outcome = str(event.get("outcome"))
        return Entry(stamp, "signal", f"{event.get('name')} {outcome}: {detail}", SIGNAL_TONE.get(outcome, ""))
    if kind == "tick":
        action = str(event.get("action"))
        if action == "breaker_half_open":  # worded like the breaker's own log line, which it stands for
            return Entry(stamp, "breaker", f"half-open: {detail.replace(', HALF_OPEN', '')}", "warn")
        tone = "warn" if action in ("lease_expired", "review_timeout") else ""
        return Entry(stamp, TICK_LABEL.get(action, "tick"), detail, tone)
    if kind == "breaker":
        change = str(event.get("change"))
        return Entry(stamp, "breaker", f"{change}: {detail}", BREAKER_TONE.get(change, ""))
    if kind == "strike":
        if event.get("change") == "cleared":
            return Entry(stamp, "strike", f"cleared: {detail}", "ok")
        tier = str(event.get("tier"))
        return Entry(stamp, "strike", f"{event.get('strike')} ({tier}): {detail}", STRIKE_TONE.get(tier, ""))
    if kind == "escalation":
        change = str(event.get("change"))
        return Entry(stamp, "escalation", f"{change}: {detail}", "ok" if change == "resolved" else "bad")
    if kind == "review":
        return Entry(stamp, "review", detail)
    if kind == "lease":  # loki.watch.leasefeed: a path lease acquired or ended, an edit the hook denied
        change = str(event.get("change"))
        return Entry(stamp, "lease", f"{change}: {detail}", LEASE_TONE.get(change, ""))
    if kind == "task":  # loki.queue.tasklog: an attempt failed, or the task left the queue for good
        return Entry(stamp, "task", detail, "warn" if event.get("change") == "failed" else "bad")
    tone = {"error": "bad", "warning": "warn"}.get(kind, "dim")
    return Entry(stamp, "watch" if kind in ("started", "stopped") else kind, f"{kind}: {detail}", tone)


def event_line(event: dict[str, Any], now: str) -> str:
    """One event as one line for people (``--no-tui``): the time, then what happened.

    Signals and the tick keep the words they always had (``10:00:02 TESTS_PASSED_auth applied:
    ...``, ``10:00:05 tick lease_expired: ...``; a display-only watcher adds "(seen in the log)");
    the others read ``10:00:07 breaker opened: api/claude (...)``.
    """
    kind = event.get("event")
    stamp = _stamp(event, now)
    if kind == "signal":
        return f"{stamp} {event.get('name')} {event.get('outcome')}: {event.get('detail')}{_seen(event)}"
    if kind == "tick":
        return f"{stamp} tick {event.get('action')}: {event.get('detail')}{_seen(event)}"
    if kind in ("breaker", "strike", "escalation", "task", "lease"):
        item = entry(event, now)
        return f"{stamp} {item.label} {item.text}"
    return f"{stamp} {kind}: {event.get('detail')}"


class Feed:
    """The latest entries, oldest first, and how many were ever added."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.entries: deque[Entry] = deque(maxlen=capacity)
        self.total = 0
        """Entries ever added: a position in the feed that survives the buffer dropping old ones."""

    def add(self, event: dict[str, Any], now: str) -> None:
        """Add ``event`` where its time puts it: the sources are read one after the other (signals, then
        what other processes did), so a breaker opened a second before a signal may arrive after it.
        Equal times keep the order they came in; a full feed drops its oldest entry."""
        item = entry(event, now)
        item.at = str(event.get("timestamp") or now)
        self.total += 1
        index = len(self.entries)
        while index > 0 and self.entries[index - 1].at > item.at:
            index -= 1
        if len(self.entries) == self.entries.maxlen:
            if index == 0:
                return  # older than everything kept: it would be the one dropped
            self.entries.popleft()
            index -= 1
        self.entries.insert(index, item)

    def extend(self, events: list[dict[str, Any]], now: str) -> None:
        for event in events:
            self.add(event, now)

    def window(self, rows: int, *, upto: int | None = None, back: int = 0) -> tuple[list[Entry], int, int]:
        """The ``rows`` entries a view shows, oldest first, and how many entries it hides (older, newer).

        ``upto``: the position the view is pinned to (``total`` when it was paused), None for the
        newest; ``back``: how many entries it is scrolled back from there.
        """
        end = len(self.entries) - (self.total - upto if upto is not None else 0) - back
        end = max(0, min(len(self.entries), end))
        start = max(0, end - max(0, rows))
        return list(self.entries)[start:end], start, len(self.entries) - end
