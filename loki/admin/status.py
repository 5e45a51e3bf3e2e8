"""``status``, ``validate`` and ``doctor`` for whichever backend a tree is on.

Administration is what differs most between backends (a file tree has journals, temp files and
hard links to check; a database has its schema version and its rows), so each backend has its own
(:mod:`loki.storage.tree`, :mod:`loki.storage.postgres.admin`) and this module picks one. Every report
says which backend it is about (``backend``).
"""

from __future__ import annotations

from loki.storage import layout
from loki.storage.layout import QUEUE_STATES

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

    from loki.storage.problems import DoctorReport, Problem
    from loki.storage.state import StateStore


def status(store: StateStore) -> dict[str, Any]:
    """Tasks per state, breakers by state, signals waiting, dead-letter size and last review, the
    watcher, and which backend the tree is on: read through the storage interfaces, the same on all."""
    from loki.breakers.breakers import Breakers
    from loki.spend.report import team
    from loki.tasks.landing import landing_lines
    from loki.tasks.verify import checks_failing

    view = store.tasks().view([*QUEUE_STATES, "dead-letter", "abandoned"])
    counts = {state: len(view[state]) for state in (*QUEUE_STATES, "dead-letter", "abandoned")}
    by_state = {"CLOSED": 0, "OPEN": 0, "HALF_OPEN": 0}
    for breaker in Breakers(store).status():
        by_state[breaker.state.value] += 1  # the effective state: an OPEN one past its cooldown is probing
    return {
        "root": store.where,
        "backend": store.backend,
        "queue": counts,
        "breakers": by_state,
        "signals_waiting": count_signals(store),
        "dead_letter": {"size": counts["dead-letter"],
                        "last_reviewed": store.tasks().dead_letter_doc()["metadata"]["last_reviewed"]},
        "escalations": _escalation_counts(store),
        "watcher": _watcher(store),
        "checks_failing": checks_failing(view),  # loki.tasks.verify
        "landing": landing_lines(view, limit=0),  # loki.tasks.landing: verified, waiting for their commit
        "spend": team(store),  # docs/spend.md: what the agents reported spending, today (UTC) and in all

        "path_leases": _path_leases(store),
    }


def _path_leases(store: StateStore) -> dict[str, int]:
    """Live path leases, tasks whose claim holds paths, and overlapping pairs of different agents (docs/leases.md)."""
    from datetime import timedelta

    from loki.clock import format_ts
    from loki.leases.leases import PathLeases
    from loki.watch.leasefeed import counts

    leases = PathLeases(store)
    now = leases.now()
    # What the watch feed shows, counted over the last day: edits the hook denied (or asked about), leases
    # broken by a person, leases that expired unrenewed.
    return {"live": len(leases.live(now)), "task_claims": len(leases.claims(now)),
            "conflicts": len(leases.conflicts(now)), **counts(store, format_ts(now - timedelta(days=1)))}


def _watcher(store: StateStore) -> dict[str, Any]:
    """Whether a ``loki watch`` consumes signals now (and which), and how far it got."""
    from loki.watch.consumer import consumer_status

    holder = consumer_status(store)
    state = store.read(layout.WATCH_STATE)
    return {"consuming": holder is not None, "holder": holder, "last_tick": state.get("last_tick"),
            "signals_processed": state.get("signals_processed", 0)}


def _escalation_counts(store: StateStore) -> dict[str, int]:
    from loki.queue.escalations import list_escalations

    rows = list_escalations(store)
    return {"open": sum(1 for r in rows if r["open"]), "total": len(rows)}


def count_signals(store: StateStore) -> int:
    """Signals waiting for the watcher (drift reports excepted: they are a log, not a queue)."""
    from loki.signals import types as signaltypes

    return sum(1 for name in store.list(layout.SIGNALS_DIR)
               if not name.startswith(".") and signaltypes.type_of_file(name) != signaltypes.DRIFT)


def validate(store: StateStore) -> list[Problem]:
    """The backend's own checks (:meth:`validate_state`: files, rows, memory), then the clock's."""
    return store.validate_state() + future_timestamps(store)


FUTURE_TOLERANCE_SECONDS = 60
"""How far past now a stamp may lie before validate calls it the future: a minute covers machines kept
by NTP (the queue's lease bounds use the same tolerance)."""
STAMPED = ("created_at", "updated_at", "claimed_at", "completed_at")
"""The fields that record a moment that has happened (``lease_until``, ``available_at`` and a deferral
lie ahead by design)."""


def future_timestamps(store: StateStore) -> list[Problem]:
    """Tasks stamped in the future: a moment that has happened (created, updated, claimed, completed)
    dated more than :data:`FUTURE_TOLERANCE_SECONDS` after now, written by a clock that was ahead.

    "Now" is the clock leases are judged by: the database's on PostgreSQL, this machine's on files. The
    record is not wrong in shape, so nothing sets it aside (``whole_file`` False); the message says which
    clock to look at. A state that cannot be read was reported by the backend's own checks."""
    from loki.clock import format_ts, parse_ts
    from loki.errors import LokiError
    from loki.storage.problems import Problem

    clock = getattr(store, "lease_clock", None) or store.clock
    states = [*QUEUE_STATES, "dead-letter", "abandoned"]
    try:
        now = clock.now()
        view = store.stored_records(states)
    except LokiError:
        return []
    postgres = store.backend == "postgresql"
    found: list[Problem] = []
    for state in states:
        where = f"tasks[{state}]" if postgres else layout.DEADLETTER if state == "dead-letter" \
            else layout.ABANDONED if state == "abandoned" else layout.queue_file(state)
        for index, record in enumerate(view[state]):
            if not isinstance(record, dict):
                continue
            task = record.get("task_data") if state in ("dead-letter", "abandoned") else record
            if not isinstance(task, dict):
                continue
            prefix = f"/tasks/{index}{'/task_data' if task is not record else ''}"
            for field in STAMPED:
                value = task.get(field)
                if not isinstance(value, str):
                    continue
                try:
                    ahead = (parse_ts(value) - now).total_seconds()
                except (ValueError, OverflowError):
                    continue  # the schema check names a stamp that is not one
                if ahead > FUTURE_TOLERANCE_SECONDS:
                    found.append(Problem(where, f"{prefix}/{field}",
                                         f"task {task.get('id')!r} has {field} {value}, {ahead:.0f}s in the future "
                                         f"(now is {format_ts(now)} by {'the database' if postgres else 'this machine'}"
                                         "'s clock): written by a clock that was ahead", whole_file=False))
    return found


def doctor(store: StateStore, repair: bool = False) -> DoctorReport:
    return store.doctor_state(repair=repair)
