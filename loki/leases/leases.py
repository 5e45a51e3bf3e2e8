"""Path leases as state: who holds which patterns, exclusive or shared, until when (docs/leases.md).

One document, ``state/path-leases.json``, under its own lock domain on every backend (files: its lock file;
memory; PostgreSQL: its document row): every acquire reads the live leases and writes the new one in one
transaction, so two processes racing on overlapping patterns never both get an exclusive lease. A lease past
its ``expires_at`` is dead: no reader counts it, and the next write moves it to ``history`` as ``expired``.
Released and broken leases go to ``history`` too (the most recent :data:`HISTORY_KEPT`).

Time comes from the store's lease clock (the database's on PostgreSQL), never from ``datetime.now()``.
"""

from __future__ import annotations

from datetime import timedelta

from loki.clock import format_ts, parse_ts
from loki.errors import Conflict, InvalidArgument, InvalidInput, NotFound
from loki.leases.patterns import Pattern, normalise, overlaps
from loki.storage import layout

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from datetime import datetime
    from typing import Any

    from loki.storage.state import StateStore

DEFAULT_TTL = 3600
"""Seconds a lease lives when ``--ttl`` is not given: an hour (renew to keep it)."""
MAX_TTL = 7 * 24 * 3600
"""A TTL over a week is refused as absurd: a lease nobody renews must end."""
MAX_PATTERNS = 100
HISTORY_KEPT = 1000
"""Ended leases kept in the document's history (newest last); older ones are dropped."""
LIVE_TASK_STATES = ("pending", "in-progress", "blocked")
HOLDING_STATES = ("in-progress", "landing")
"""The queue states whose tasks hold their paths: claimed, or verified and waiting to land."""
NOBODY = "(nobody)"
"""The holder of a landing task's paths when no agent completed it (a testing signal on an unheld task)."""

EXPIRED, RELEASED, BROKEN = "expired", "released", "broken"


def parse_ttl(value: str | int | float | None) -> int:
    """Seconds from ``90``, ``90s``, ``15m``, ``2h``, ``1d``; refused (exit 2): zero, negative, over a week,
    or not a duration."""
    if value is None:
        return DEFAULT_TTL
    text = str(value).strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        seconds = float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float(text)
    except ValueError:
        raise InvalidArgument(f"invalid --ttl {text!r}: give seconds or a duration like 90s, 15m, 2h, 1d",
                              field="ttl") from None
    if seconds != seconds or seconds <= 0:  # NaN or not positive
        raise InvalidArgument(f"invalid --ttl {text!r}: a lease must live at least one second", field="ttl")
    if seconds > MAX_TTL:
        raise InvalidArgument(f"invalid --ttl {text!r}: over a week is absurd for a lease (renew it instead)",
                              field="ttl")
    return max(1, int(seconds))


def empty() -> dict[str, Any]:
    return {"version": 1, "next_id": 1, "leases": [], "history": []}


class PathLeases:
    """The path leases of one state store. Every method that decides takes "now" from the store's lease
    clock; ``root`` (the repository's absolute path) lets an absolute pattern inside it be accepted."""

    def __init__(self, store: StateStore, *, root: str | None = None) -> None:
        self.store = store
        self.root = root

    # -- time ------------------------------------------------------------------------------------------

    def now(self) -> datetime:
        clock = getattr(self.store, "lease_clock", None) or self.store.clock
        return clock.now()

    # -- reading ---------------------------------------------------------------------------------------

    def _doc(self) -> dict[str, Any]:
        doc = self.store.read(layout.LEASES) if self.store.exists(layout.LEASES) else None
        return doc if isinstance(doc, dict) else empty()

    def live(self, now: datetime | None = None) -> list[dict[str, Any]]:
        """The leases not past their expiry, oldest first (nothing is written)."""
        stamp = format_ts(now or self.now())
        return [lease for lease in self._doc()["leases"] if lease["expires_at"] > stamp]

    def claims(self, now: datetime | None = None) -> list[dict[str, Any]]:
        """The paths held by tasks (in-progress tasks with paths and a live claim, landing tasks with paths
        before their landing deadline), lease-shaped."""
        stamp = format_ts(now or self.now())
        view = self.store.tasks().view(list(HOLDING_STATES))
        return task_holders(view["in-progress"], stamp, view["landing"])

    def history(self) -> list[dict[str, Any]]:
        return list(self._doc()["history"])

    def get(self, lease_id: str) -> dict[str, Any]:
        for lease in self.live():
            if lease["lease_id"] == lease_id:
                return lease
        raise NotFound(f"no live lease {lease_id!r} (loki lease list shows the live ones)", lease_id=lease_id)

    def conflicts(self, now: datetime | None = None) -> list[dict[str, Any]]:
        """Pairs of live leases of different agents whose patterns overlap: ``kind`` is ``exclusive`` when
        either is (acquire never lets such a pair exist; a pair here means state written by other means),
        ``shared`` for two readers."""
        leases = self.live(now)
        found = []
        for i, a in enumerate(leases):
            for b in leases[i + 1:]:
                if a["agent"] == b["agent"]:
                    continue
                pair = _overlap(a["patterns"], b["patterns"])
                if pair is not None:
                    kind = "exclusive" if a["exclusive"] or b["exclusive"] else "shared"
                    found.append({"kind": kind, "a": a["lease_id"], "b": b["lease_id"], "patterns": list(pair)})
        return found

    def blocking(self, patterns: Iterable[str], agent: str | None, *, exclusive: bool = True,
                 now: datetime | None = None) -> list[dict[str, Any]]:
        """The live leases of other agents that a lease on ``patterns`` would collide with (an agent of None is
        "someone else" to every holder)."""
        wanted = [normalise(p, self.root) for p in patterns]
        return _blocking(self.live(now), [p.text for p in wanted], agent, exclusive)

    # -- writing ---------------------------------------------------------------------------------------

    def acquire(self, patterns: Sequence[str], *, agent: str, exclusive: bool = True, ttl: str | int | None = None,
                task: str | None = None, reason: str | None = None, key: str | None = None) -> dict[str, Any]:
        """A new lease, or the live one this ``key`` already made (``"reused": True``). Raises
        :class:`Conflict` (exit 4) naming the holder, its task and expiry when another agent's live lease
        overlaps (an exclusive one, or any when this one is exclusive); bad input raises before anything is
        read or written."""
        from loki.text.textsafe import check_name

        check_name(agent, "agent name")
        seconds = parse_ttl(ttl)
        if not patterns:
            raise InvalidArgument("a lease needs at least one pattern", field="patterns")
        if len(patterns) > MAX_PATTERNS:
            raise InvalidArgument(f"a lease holds at most {MAX_PATTERNS} patterns, not {len(patterns)}",
                                  field="patterns")
        texts = _unique(p.text for p in (normalise(raw, self.root) for raw in patterns))
        if reason is not None:
            check_name(reason, "reason", max_length=2000)
            from loki.text.redact import redact

            reason = redact(reason)  # prose a person or an agent typed: a pasted token is not kept
        if key is not None:
            check_name(key, "idempotency key", max_length=200)
        if task is not None:
            from loki.storage.paths import check_id

            check_id(task, "task id")
            self._check_task(task)
        # The queue's lock first, then the leases': a claim of a task with paths holds the queue's lock and
        # reads the leases, so a lease and a claim of overlapping paths never both succeed (docs/leases.md).
        with self.store.tasks().transaction() as unit, self.store.transaction(layout.lock_for(layout.LEASES)) as txn:
            doc = _read(txn)
            now = self.now()
            changed = _sweep(doc, now)
            claims = task_holders(unit.tasks("in-progress"), format_ts(now), unit.tasks("landing"))
            if key is not None:
                for held in doc["leases"]:
                    if held.get("key") == key and held["agent"] == agent:
                        if changed:
                            txn.write(layout.LEASES, doc)
                        return {**held, "reused": True}
            blocked = _blocking([*doc["leases"], *claims], texts, agent, exclusive)
            if blocked:
                if changed:
                    txn.write(layout.LEASES, doc)
                    txn.commit()
                raise _conflict(blocked[0], texts)
            lease: dict[str, Any] = {
                "lease_id": f"L{doc['next_id']}", "agent": agent, "patterns": texts, "exclusive": exclusive,
                "task": task, "reason": reason, "key": key, "ttl": seconds,
                "acquired_at": format_ts(now), "renewed_at": format_ts(now),
                "expires_at": format_ts(now + timedelta(seconds=seconds)),
            }
            doc["next_id"] += 1
            doc["leases"].append(lease)
            txn.write(layout.LEASES, doc, changed=[lease])
        self.refresh_index()
        return {**lease, "reused": False}

    def renew(self, lease_id: str, *, agent: str, ttl: str | int | None = None) -> dict[str, Any]:
        """Push the expiry of the holder's live lease to now + ``ttl`` (default: its own TTL)."""
        seconds = parse_ttl(ttl) if ttl is not None else None
        with self.store.transaction(layout.lock_for(layout.LEASES)) as txn:
            doc = _read(txn)
            now = self.now()
            lease = _live(txn, doc, lease_id, now)
            _check_holder(lease, agent, "renews")
            lease["ttl"] = seconds or lease["ttl"]
            lease["renewed_at"] = format_ts(now)
            lease["expires_at"] = format_ts(now + timedelta(seconds=lease["ttl"]))
            txn.write(layout.LEASES, doc, changed=[lease])
        self.refresh_index()
        return lease

    def release(self, lease_id: str, *, agent: str) -> dict[str, Any]:
        """The holder ends its lease (kept in history as ``released``)."""
        return self._end(lease_id, RELEASED, by=agent, reason=None, holder_only=True)

    def break_(self, lease_id: str, *, by: str, reason: str) -> dict[str, Any]:
        """A person ends someone's lease (kept in history as ``broken``, with who and why)."""
        from loki.text.textsafe import check_name

        check_name(by, "--by name")
        check_name(reason, "reason", max_length=2000)
        from loki.text.redact import redact

        return self._end(lease_id, BROKEN, by=by, reason=redact(reason), holder_only=False)

    def sweep(self) -> list[dict[str, Any]]:
        """Move the expired leases to history; returns them."""
        with self.store.transaction(layout.lock_for(layout.LEASES)) as txn:
            doc = _read(txn)
            before = {lease["lease_id"] for lease in doc["leases"]}
            if _sweep(doc, self.now()):
                txn.write(layout.LEASES, doc)
            gone = before - {lease["lease_id"] for lease in doc["leases"]}
        if gone:
            self.refresh_index()
        return [entry for entry in doc["history"] if entry["lease_id"] in gone]

    def _end(self, lease_id: str, why: str, *, by: str, reason: str | None, holder_only: bool) -> dict[str, Any]:
        with self.store.transaction(layout.lock_for(layout.LEASES)) as txn:
            doc = _read(txn)
            now = self.now()
            lease = _live(txn, doc, lease_id, now)
            if holder_only:
                _check_holder(lease, by, "releases")
            entry = _to_history(doc, lease, why, now, by=by, reason=reason)
            txn.write(layout.LEASES, doc, changed=[entry])
        self.refresh_index()
        return entry

    # -- what the PreToolUse hook reads ----------------------------------------------------------------

    def refresh_index(self) -> str | None:
        """Rewrite what the PreToolUse hook reads (:mod:`loki.leases.hotcopy`): on a file tree the index
        beside the document; on a database tree this machine's copy of the live leases and the claims of
        tasks with paths, stamped with this machine's time. Returns its path (None: the memory store, a
        store opened without a tree). Never raises for the index: it is derived, and one that could not be
        written is not used (files: it names another version of the document) or reads as old (a copy)."""
        from loki.errors import LokiError

        try:
            return self._write_index()
        except (LokiError, OSError, ValueError) as exc:
            import sys

            sys.stderr.write(f"loki: the path leases' index for the hook was not refreshed ({exc})\n")
            return None

    def _write_index(self) -> str | None:
        import os

        from loki.leases import hotcopy

        store = self.store
        local = getattr(store, "local_root", None)
        if local is None:
            return None
        if store.keeps_local_copies:
            path = os.path.join(local, layout.LOCAL_CACHE_DIR, *hotcopy.INDEX.split("/"))
            # Under the leases' lock: every change to the holders made here (a lease, a claim of a task with
            # paths) rewrites the copy after its commit by taking this lock, so copies are written in the
            # order of the changes they show. Read unvalidated: a cache for the hook, which never validates.
            with store.transaction(layout.lock_for(layout.LEASES)):
                import json

                text = store.read_text(layout.LEASES)
                doc = json.loads(text) if text else empty()
                stamp = format_ts(self.now())
                holders = [lease for lease in doc.get("leases", []) if lease["expires_at"] > stamp]
                view = store.tasks().view(list(HOLDING_STATES))
                holders += task_holders(view["in-progress"], stamp, view["landing"])
                hotcopy.write(path, hotcopy.build(holders, source=None, claims=True,
                                                  refreshed_at=format_ts(store.clock.now())))
            return path
        from loki.storage.store import Store

        if not isinstance(store, Store):
            return None
        with store.transaction(layout.lock_for(layout.LEASES)):  # one writer at a time: the last one wins
            return hotcopy.rebuild_beside(local)

    def _check_task(self, task: str) -> None:
        view = self.store.tasks().view(LIVE_TASK_STATES)
        if not any(t.get("id") == task for state in LIVE_TASK_STATES for t in view.get(state, [])):
            raise NotFound(f"no task {task!r} waiting or in progress: a lease is bound to a live task",
                           task_id=task)


def claim_moved(store: Any, task: dict[str, Any]) -> None:
    """A claim of a task with paths began, was renewed, changed its paths or ended here, or such a task landed
    or left ``landing``: on a database tree this machine's copy of the path holders, which the PreToolUse hook
    reads, is rewritten at once (docs/leases.md). A file tree's hook reads ``queue/in-progress.json`` and
    ``queue/landing.json`` itself."""
    if task.get("paths") and store.keeps_local_copies:
        PathLeases(store).refresh_index()


def task_holders(in_progress: Iterable[dict[str, Any]], lease_now: str,
                 landing: Iterable[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The in-progress tasks with paths and a live claim, each as a lease-shaped record (``lease_id``
    ``task:<id>``; its expiry the claim's ``lease_until``), then the ``landing`` tasks with paths whose
    landing deadline has not passed (held by the agent that completed them, until ``landing.deadline``,
    ``"landing": True``; docs/leases.md, "Landing tasks keep their paths")."""
    found = []
    for task in in_progress:
        paths = task.get("paths")
        until = task.get("lease_until")
        if not paths or not until or until <= lease_now or not task.get("claimed_by"):
            continue
        found.append({"lease_id": f"task:{task['id']}", "agent": task["claimed_by"], "patterns": list(paths),
                      "exclusive": True, "task": task["id"], "expires_at": until, "claim": True})
    for task in landing:
        paths = task.get("paths")
        deadline = (task.get("landing") or {}).get("deadline")
        if not paths or not isinstance(deadline, str) or deadline <= lease_now:
            continue
        # completed_by None: a testing signal completed a task nobody held; its paths are still held, by nobody
        # in particular (every agent is someone else), until it lands.
        found.append({"lease_id": f"task:{task['id']}", "agent": task.get("completed_by") or NOBODY,
                      "patterns": list(paths), "exclusive": True, "task": task["id"], "expires_at": deadline,
                      "claim": True, "landing": True})
    return found


# -- helpers over the document -------------------------------------------------------------------------

def _read(txn: Any) -> dict[str, Any]:
    doc = txn.read(layout.LEASES)
    if not isinstance(doc, dict) or "leases" not in doc:
        return empty()
    return {**doc, "leases": [dict(lease) for lease in doc["leases"]], "history": list(doc["history"])}


def _find(doc: dict[str, Any], lease_id: str) -> dict[str, Any] | None:
    return next((lease for lease in doc["leases"] if lease["lease_id"] == lease_id), None)


def _sweep(doc: dict[str, Any], now: datetime) -> bool:
    stamp = format_ts(now)
    dead = [lease for lease in doc["leases"] if lease["expires_at"] <= stamp]
    for lease in dead:
        _to_history(doc, lease, EXPIRED, parse_ts(lease["expires_at"]), by=None, reason=None)
    return bool(dead)



def _live(txn: Any, doc: dict[str, Any], lease_id: str, now: datetime) -> dict[str, Any]:
    """The live lease ``lease_id`` of ``doc``, once the expired ones are swept; else NotFound, with the sweep
    committed (an expiry found on the way is kept even though the caller's change is refused)."""
    changed = _sweep(doc, now)
    lease = _find(doc, lease_id)
    if lease is None:
        if changed:
            txn.write(layout.LEASES, doc)
            txn.commit()
        raise NotFound(f"no live lease {lease_id!r}: it expired or ended (loki lease list shows the live ones)",
                       lease_id=lease_id)
    return lease

def _to_history(doc: dict[str, Any], lease: dict[str, Any], why: str, when: datetime, *, by: str | None,
                reason: str | None) -> dict[str, Any]:
    doc["leases"] = [other for other in doc["leases"] if other["lease_id"] != lease["lease_id"]]
    entry = {**lease, "ended": why, "ended_at": format_ts(when), "ended_by": by, "end_reason": reason}
    doc["history"] = [*doc["history"], entry][-HISTORY_KEPT:]
    return entry


def _check_holder(lease: dict[str, Any], agent: str, verb: str) -> None:
    if lease["agent"] != agent:
        raise InvalidInput(f"lease {lease['lease_id']} is held by {lease['agent']!r}, not {agent!r}: only its holder "
                           f"{verb} it (a person may end it with loki lease break)", lease_id=lease["lease_id"],
                           holder=lease["agent"])


def _compiled(texts: Iterable[str]) -> list[Pattern]:
    return [normalise(text) for text in texts]


def _overlap(mine: Iterable[str], theirs: Iterable[str]) -> tuple[str, str] | None:
    theirs_c = _compiled(theirs)
    for a in _compiled(mine):
        for b in theirs_c:
            if overlaps(a, b):
                return a.text, b.text
    return None


def _blocking(leases: Iterable[dict[str, Any]], texts: list[str], agent: str | None,
              exclusive: bool) -> list[dict[str, Any]]:
    found = []
    for lease in leases:
        if agent is not None and lease["agent"] == agent:
            continue
        if not (exclusive or lease["exclusive"]):
            continue
        pair = _overlap(texts, lease["patterns"])
        if pair is not None:
            found.append({**lease, "overlap": list(pair)})
    return found


def _conflict(holder: dict[str, Any], texts: list[str]) -> Conflict:
    return Conflict(describe_holder(holder), lease_id=holder["lease_id"], holder=holder["agent"],
                    task=holder.get("task"), expires_at=holder["expires_at"], overlap=holder["overlap"])


def describe_holder(holder: dict[str, Any]) -> str:
    """One line naming the lease, its holder, its task and its expiry (the wording the hook and the
    readiness reason share); the holder's names are escaped: an agent wrote them."""
    from loki.text.textsafe import for_terminal as esc

    mine, theirs = holder["overlap"]
    kind = "exclusive" if holder["exclusive"] else "shared"
    task = f" for task {esc(holder['task'])}" if holder.get("task") else ""
    what = ("waiting to land" if holder.get("landing") else "its claim") if holder.get("claim") else \
        f"{kind} lease {holder['lease_id']}"
    return (f"{esc(mine)} is leased: {esc(theirs)} is held by {esc(holder['agent'])}{task} "
            f"({what}, until {holder['expires_at']})")


def _unique(texts: Iterable[str]) -> list[str]:
    seen: list[str] = []
    for text in texts:
        if text not in seen:
            seen.append(text)
    return seen
