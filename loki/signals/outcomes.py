"""The outcome log, ``logs/signals.jsonl``: one JSON line per consumed signal, saying what it did.

Written only by the consumer (one at a time, see :mod:`loki.watch.consumer`), read by
``loki signal list|show|log``, the live view and the display-only watchers. A line is
appended, fsynced, *before* the signal file is deleted: after a crash, a signal whose
id is already in the log is finished without being applied again.

Readers only look at the tail (the last 256 KiB by default): the log is append-only and
grows forever, and everything a reader needs is recent.
"""

from __future__ import annotations

from loki.storage import jsonio, layout

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from loki.storage.state import Logs as Store  # the one role the outcome log uses

LOG = f"{layout.LOGS_DIR}/signals.jsonl"
TAIL_BYTES = 256 * 1024
OUTCOMES = ("applied", "already_applied", "skipped", "logged", "archived", "quarantined", "rejected")
"""applied: the rule changed something; already_applied: the change was already made (a retry after a
crash, or HUMAN_REVIEW_NEEDED announcing an escalation that already parked the task);
skipped: the rule did not apply (no such task, wrong state); logged: the rule is to log;
archived: an unknown type, kept under signals/.archive/; quarantined: a malformed signal file;
rejected: a malformed DRIFT_DETECTED line (it stays in the log)."""


def append(store: Store, records: Iterable[dict[str, Any]]) -> None:
    """Append outcome lines, redacted: they copy the signal and quote reasons from files agents wrote."""
    from loki.text.redact import redact_obj

    store.append_lines(LOG, [redact_obj(record) for record in records])


def parse_lines(data: bytes) -> list[dict[str, Any]]:
    """Complete lines that parse as JSON objects; torn or foreign lines are skipped."""
    records = []
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            record = jsonio.loads_strict(line)
        except jsonio.JsonError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def tail(store: Store, max_bytes: int = TAIL_BYTES) -> list[dict[str, Any]]:
    """The records in the last ``max_bytes`` of the log, oldest first (a line still being written, or
    torn by a crash, is not an outcome yet)."""
    return parse_lines(b"\n".join(store.read_tail(LOG, max_bytes)))


def recent(store: Store, limit: int = 20, *, type_prefix: str | None = None) -> list[dict[str, Any]]:
    """The last ``limit`` outcomes, newest last (optionally only types starting with ``type_prefix``)."""
    records = tail(store)
    if type_prefix:
        records = [r for r in records if str(r.get("type") or "").startswith(type_prefix)]
    return records[-limit:] if limit > 0 else []


def logged(store: Store, max_bytes: int = TAIL_BYTES) -> dict[str, dict[str, Any]]:
    """id -> outcome record for the ids in the tail (what a consumer restarting after a crash checks)."""
    return {str(r["id"]): r for r in tail(store, max_bytes) if "id" in r}


class Follower:
    """Yields the lines appended to a JSON-lines log since it last looked (a display-only watcher
    follows the outcome log, and the tick's ``logs/events.jsonl``)."""

    def __init__(self, store: Store, *, from_end: bool = True, log: str = LOG) -> None:
        self.store = store
        self.log = log
        self.position = store.log_end(log) if from_end else None

    def poll(self) -> list[dict[str, Any]]:
        if not self.store.log_valid(self.log, self.position):  # replaced (by hand): start over
            self.position = None
        lines, self.position = self.store.read_after(self.log, self.position)
        return parse_lines(b"\n".join(line.data for line in lines if line.data is not None))
