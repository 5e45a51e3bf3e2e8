"""Budgets: how much the team, a task type, a label or an agent may spend per hour, day or week (docs/spend.md).

A budget is a record of ``state/budgets.json`` (one document under the storage interface, like the breakers':
a file on a file tree, a row of the database's documents on PostgreSQL, so every machine of the team reads
the same budgets). What a budget has spent is read from the running totals the task store keeps with every
usage entry, in the same unit of work (loki/tasks/totals.py, ``queue/spend.json``): never summed from the whole
history, never counted twice, nothing to reconcile after a crash.

Windows are fixed and UTC: an hour from its start, a day from midnight, a week from Monday midnight. The
budget refills when its window ends.

Each claim (``loki work``, ``loki queue claim``: :func:`claim`) hands the queue a :class:`ClaimGate`, which the
queue asks inside the claim's unit of work (the queue's lock held, on every store): a budget is spent when what
its scope spent in the window, plus ``reserve`` for each attempt of its scope already running and for this one,
reaches its limit. A spent budget of the team, or of the claiming agent, refuses the claim
(:class:`BudgetExceeded`, exit 75, with the refill time, as an OPEN breaker does); one of a type or a label
keeps the claim off that type's or label's tasks (and refuses it when nothing else is ready). The first refusal
of a window writes a ``BUDGET_EXCEEDED`` signal, which the watcher leaves in place for others
(``signals.leave_for_others``: what Loki Mode's ``run.sh`` waits on), and an escalation that parks no task.

The overshoot: the check and the claim being one step, a budget of ``N`` dollars ends under ``N + A x C`` with
``A`` agents on its scope and attempts costing at most ``C``; with ``reserve >= C`` it never passes ``N``
(docs/spend.md, "The overshoot").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from loki.clock import format_ts, parse_ts
from loki.errors import ExitCode, InvalidArgument, LokiError, NotFound, UsageError
from loki.storage import layout
from loki.tasks import totals as running_totals

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from loki.queue.queue import Queue
    from loki.storage.state import StateStore as Store

PERIODS = ("hour", "day", "week")
SCOPE_KINDS = ("team", "type", "label", "agent")
MAX_USD = 1_000_000.0
MAX_TOKENS = 10**12
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_TOKENS = re.compile(r"(\d+(?:\.\d+)?)([kKmMbB]?)")


class BudgetExceeded(LokiError):
    """A spent budget refuses the claim: not now, try again when it refills (exit 75, like an open breaker)."""

    exit_code = ExitCode.CIRCUIT_OPEN
    kind = "budget_exceeded"

    def __init__(self, message: str, *, budget: str, refill_at: str, retry_after: float) -> None:
        super().__init__(message, budget=budget, refill_at=refill_at, retry_after=retry_after)
        self.budget = budget
        self.refill_at = refill_at
        self.retry_after = retry_after


def check_budget_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise UsageError(f"invalid budget name {name!r}: 1 to 64 letters, digits, '.', '_' or '-', starting with a "
                         "letter or digit", field="name")
    return name


def parse_scope(scope: str) -> tuple[str, str | None]:
    """``team``, ``type:X``, ``label:X`` or ``agent:X`` (:class:`UsageError`, exit 2, otherwise)."""
    kind, _, value = scope.partition(":")
    if kind == "team" and not value:
        return "team", None
    if kind in SCOPE_KINDS[1:] and value:
        from loki.text.textsafe import check_name

        check_name(value, f"{kind} name")
        return kind, value
    raise UsageError(f"invalid scope {scope!r}: team, type:NAME, label:NAME or agent:NAME", field="scope")


def parse_tokens(text: str) -> int:
    """``5M``, ``200k``, ``1.5M``, ``1000``: a whole number of tokens from 1 to 10^12."""
    match = _TOKENS.fullmatch(text.strip())
    if not match:
        raise UsageError(f"invalid --tokens {text!r}: a number of tokens, with k, M or B (5M, 200k)", field="tokens")
    scale = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9}[match.group(2).lower()]
    value = float(match.group(1)) * scale
    if value != int(value) or not 1 <= value <= MAX_TOKENS:
        raise InvalidArgument(f"invalid --tokens {text!r}: a whole number of tokens from 1 to 10^12", field="tokens")
    return int(value)


def window(per: str, now: datetime) -> tuple[datetime, datetime]:
    """The fixed UTC window holding ``now``: ``(start, end)``."""
    now = now.astimezone(timezone.utc)
    if per == "hour":
        start = now.replace(minute=0, second=0, microsecond=0)
        return start, start + timedelta(hours=1)
    start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if per == "day":
        return start, start + timedelta(days=1)
    start -= timedelta(days=start.weekday())
    return start, start + timedelta(days=7)


def _matches(kind: str, value: str | None, task: dict[str, Any], agent: str | None) -> bool:
    if kind == "team":
        return True
    if kind == "type":
        return bool(task.get("type", "general") == value)
    if kind == "label":
        return value in (task.get("labels") or [])
    return agent == value


@dataclass
class Standing:
    """One budget now: what its scope spent in the window and whether it is spent."""

    name: str
    record: dict[str, Any]
    start: str
    refill_at: str
    spent_usd: float
    spent_tokens: int
    running: int
    reserve: float = 0.0

    @property
    def limit(self) -> float:
        return float(self.record["usd"] if self.record.get("usd") is not None else self.record["tokens"])

    @property
    def exhausted(self) -> bool:
        """Spent: the window's spend reached the limit, or (dollars, with a reserve) the spend and a reserve
        for every running attempt of the scope and for the one about to be claimed would pass it."""
        if self.record.get("usd") is None:
            return self.spent_tokens >= self.limit
        return self.spent_usd >= self.limit or (
            self.reserve > 0 and self.spent_usd + self.reserve * (self.running + 1) > self.limit)

    def describe(self) -> str:
        if self.record.get("usd") is not None:
            spent = f"${self.spent_usd:,.4f} of ${float(self.record['usd']):,.2f}"
            if self.reserve:
                spent += f" (+ ${self.reserve:g} reserved for each of {self.running + 1} attempts)"
        else:
            spent = f"{self.spent_tokens:,} of {int(self.record['tokens']):,} tokens"
        return f"budget {self.name} ({self.record['scope']}) spent: {spent} this {self.record['per']}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, **self.record, "window_start": self.start, "refill_at": self.refill_at,
                "spent_usd": round(self.spent_usd, 6), "spent_tokens": self.spent_tokens,
                "running": self.running, "exhausted": self.exhausted}


@dataclass
class Gate:
    """What the budgets allow one claim: refused outright (``blocking``), or kept off types and labels."""

    blocking: list[Standing] = field(default_factory=list)
    types: dict[str, Standing] = field(default_factory=dict)
    labels: dict[str, Standing] = field(default_factory=dict)

    def excludes(self, task: dict[str, Any]) -> Standing | None:
        hit = self.types.get(task.get("type") or "general")
        if hit is not None:
            return hit
        return next((self.labels[label] for label in task.get("labels") or [] if label in self.labels), None)


class Budgets:
    """The budgets of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _doc(self) -> dict[str, Any]:
        doc = self.store.read(layout.BUDGETS) if self.store.exists(layout.BUDGETS) else {}
        return doc if isinstance(doc, dict) else {}

    def set(self, name: str, *, per: str, usd: float | None = None, tokens: int | None = None,
            scope: str = "team") -> dict[str, Any]:
        """Create or replace a budget: ``usd`` or ``tokens`` per ``per``, for ``scope``."""
        check_budget_name(name)
        if per not in PERIODS:
            raise UsageError(f"invalid --per {per!r}: one of {', '.join(PERIODS)}", field="per")
        parse_scope(scope)
        if (usd is None) == (tokens is None):
            raise UsageError("give one limit: --usd DOLLARS or --tokens COUNT", field="usd")
        if usd is not None and (isinstance(usd, bool) or not isinstance(usd, (int, float)) or not math.isfinite(usd)
                                or not 0 < usd <= MAX_USD):
            raise InvalidArgument(f"invalid --usd {usd!r}: dollars above 0 and at most 1,000,000", field="usd")
        if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int)
                                   or not 1 <= tokens <= MAX_TOKENS):
            raise InvalidArgument(f"invalid --tokens {tokens!r}: a whole number from 1 to 10^12", field="tokens")
        record = {"scope": scope, "usd": float(usd) if usd is not None else None, "tokens": tokens, "per": per,
                  "created_at": format_ts(self.store.clock.now()), "signalled": None, "escalation": None}
        with self.store.transaction(layout.BUDGETS) as txn:
            doc = dict(txn.read(layout.BUDGETS) or {})
            doc[name] = record
            txn.write(layout.BUDGETS, doc, changed=[record])
        ensure_totals(self.store)  # the first budget builds the running totals its checks read
        limit = f"${float(usd):g}" if usd is not None else f"{tokens:,} tokens"
        resolved = resolve_escalations(self.store, name, f"budget set to {limit} per {per} ({scope}) at "
                                                         f"{record['created_at']}")
        return {"name": name, **record, "resolved": resolved}

    def remove(self, name: str) -> dict[str, Any]:
        check_budget_name(name)
        with self.store.transaction(layout.BUDGETS) as txn:
            doc = dict(txn.read(layout.BUDGETS) or {})
            if name not in doc:
                raise NotFound(f"no budget {name!r} (`loki budget list`)", budget=name)
            record = doc.pop(name)
            txn.write(layout.BUDGETS, doc, changed=[])
        resolved = resolve_escalations(self.store, name, f"budget removed at {self.store.now_ts()}")
        return {"name": name, **record, "resolved": resolved}

    def standings(self, *, reserve: float = 0.0, totals: dict[str, Any] | None = None,
                  running: list[dict[str, Any]] | None = None, doc: dict[str, Any] | None = None) -> list[Standing]:
        """Every budget now, by name, from the running totals (loki/tasks/totals.py: read, or built once when
        the tree has none) and the attempts running. A claim passes its unit's ``totals`` and ``running``
        (read under the queue's lock) and the budgets ``doc`` it read."""
        doc = self._doc() if doc is None else doc
        if not doc:
            return []
        if totals is None:
            totals = self.store.tasks().spend_totals() or ensure_totals(self.store)
        if running is None:
            running = self.store.tasks().view(["in-progress"])["in-progress"]
        now = self.store.clock.now()
        result = []
        for name in sorted(doc):
            record = doc[name]
            kind, value = parse_scope(record["scope"])
            start_dt, end_dt = window(record["per"], now)
            usd, tokens = running_totals.spent(totals, record["scope"], record["per"], start_dt)
            result.append(Standing(
                name, record, format_ts(start_dt), format_ts(end_dt), spent_usd=usd, spent_tokens=tokens,
                running=sum(1 for t in running if _matches(kind, value, t, t.get("claimed_by"))), reserve=reserve))
        return result

    def show(self, name: str) -> Standing:
        check_budget_name(name)
        for standing in self.standings():
            if standing.name == name:
                return standing
        raise NotFound(f"no budget {name!r} (`loki budget list`)", budget=name)

    def gate(self, agent: str, *, reserve: float = 0.0, **read: Any) -> Gate:
        """What the budgets allow ``agent``'s claim now (``read``: what :meth:`standings` takes)."""
        gate = Gate()
        for standing in self.standings(reserve=reserve, **read):
            if not standing.exhausted:
                continue
            kind, value = parse_scope(standing.record["scope"])
            if kind == "team" or (kind == "agent" and value == agent):
                gate.blocking.append(standing)
            elif kind == "type" and value is not None:
                gate.types[value] = standing
            elif kind == "label" and value is not None:
                gate.labels[value] = standing
        return gate

    def refuse(self, standing: Standing, agent: str, extra: str = "") -> BudgetExceeded:
        """The refusal of a claim; the first of the budget's window writes BUDGET_EXCEEDED and the window's
        escalation (once, whoever refuses first: decided under the budgets' lock)."""
        escalation = None
        with self.store.transaction(layout.BUDGETS) as txn:
            doc = dict(txn.read(layout.BUDGETS) or {})
            record = doc.get(standing.name)
            first = isinstance(record, dict) and record.get("signalled") != standing.start
            if first and isinstance(record, dict):
                escalation = escalate(self.store, standing, agent)
                doc[standing.name] = {**record, "signalled": standing.start, "escalation": escalation}
                txn.write(layout.BUDGETS, doc, changed=[doc[standing.name]])
        if first:
            from loki.signals.emit import emit

            # the escalation of an earlier window of this budget is answered by this one
            resolve_escalations(self.store, standing.name, f"superseded by {escalation}", keep=escalation)
            emit(self.store, "BUDGET_EXCEEDED", {
                "budget": standing.name, "scope": standing.record["scope"], "per": standing.record["per"],
                "limit_usd": standing.record.get("usd"), "limit_tokens": standing.record.get("tokens"),
                "spent_usd": round(standing.spent_usd, 6), "spent_tokens": standing.spent_tokens,
                "refill_at": standing.refill_at, "escalation": escalation}, agent=agent)
        seconds = max(0.0, (parse_ts(standing.refill_at) - self.store.clock.now()).total_seconds())
        return BudgetExceeded(f"{standing.describe()}{extra}; it refills at {standing.refill_at}",
                              budget=standing.name, refill_at=standing.refill_at, retry_after=seconds)


ESCALATION_PREFIX = "budget-"
"""What a budget escalation's header names in place of a task: ``budget-<name>`` (it parks no task)."""


def escalate(store: Store, standing: Standing, agent: str) -> str:
    """The escalation file of ``standing``'s window (its name): written by the first refusal of the window, found
    by any other. Called under the budgets' lock; the file is named by the window, not the moment, so a writer
    that died between the file and the budget's record leaves a file the next one finds, not a second file."""
    from loki.queue.escalations import file_stem, list_escalations, write_file

    task_id = ESCALATION_PREFIX + standing.name
    stem = file_stem(task_id, standing.start)
    for row in list_escalations(store, open_only=True):  # a resolved one (the budget was raised) is not reused
        if row.get("budget") == standing.name and row.get("window_start") == standing.start:
            return str(row["file"])
    name, record = standing.name, standing.record
    values = {
        "task_title": f"budget {name} ({record['scope']}) spent this {record['per']}",
        "task_id": task_id,
        "failure_count": "0",
        "trigger": "budget_exceeded",
        "error_summary": f"{standing.describe()}; it refills at {standing.refill_at}",
        "attempts_log": "(a budget, not a task: no task is parked, and no attempt failed)",
        "agent_analysis": (
            f"{standing.describe()}. Every claim in its scope is refused (exit 75) until the window refills at "
            f"{standing.refill_at}; `loki work` stops between tasks. The attempts already running finish and are "
            f"counted (docs/spend.md, the overshoot). First refused: {agent}."),
        "recommended_options": "\n".join([
            f"1. Wait: the budget refills at {standing.refill_at}, and claims go on by themselves.",
            f"2. Raise it: `loki budget set {name} --usd ... --per {record['per']} --scope {record['scope']}` "
            "(this escalation is then resolved).",
            f"3. Acknowledge it: `loki approve {stem}` or `loki escalations close {stem} --note ...`; the budget "
            "stays spent."]),
        "timestamp": store.now_ts(),
        "agent": agent,
    }
    rel = write_file(store, task_id=task_id, values=values, now=store.now_ts(), stamped=standing.start,
                     fields={"budget": name, "window_start": standing.start, "refill_at": standing.refill_at})
    return rel.rsplit("/", 1)[-1]


def resolve_escalations(store: Store, name: str, text: str, *, keep: str | None = None) -> list[str]:
    """Resolve the open escalations of budget ``name`` (but ``keep``), with ``text``; their file names."""
    from loki.queue.escalations import list_escalations, mark_resolved

    files = [row["file"] for row in list_escalations(store, open_only=True)
             if row.get("budget") == name and row["file"] != keep]
    for file_name in files:
        mark_resolved(store, file_name, text)
    return files


def ensure_totals(store: Store) -> dict[str, Any]:
    """The running totals of usage, built from every task once when the tree has none (its first budget, a tree
    just migrated: the document is an index, not moved), under the queue's lock: no usage entry can land between
    the scan and the write."""
    from loki.spend.report import entries

    with store.tasks().transaction() as unit:
        doc = unit.spend_totals()
        if doc is None:
            doc = running_totals.build(entries(store))
            unit.set_spend_totals(doc)
    return doc


class ClaimGate:
    """The budgets' part of one claim, asked by the queue inside the claim's unit of work (:meth:`inside`: the
    totals and the running attempts as that unit reads them, under the queue's lock), and after it for the
    refusal (:meth:`refusal`: the signal and the escalation are written outside the queue's lock)."""

    def __init__(self, budgets: Budgets, agent: str, reserve: float, doc: dict[str, Any]) -> None:
        self.budgets, self.agent, self.reserve, self.doc = budgets, agent, reserve, doc

    def inside(self, unit: Any) -> Gate:
        totals = unit.spend_totals()
        if totals is None:  # not built yet (a race with the first budget): count from the tasks, this once
            from loki.spend.report import entries

            totals = running_totals.build(entries(self.budgets.store))
        return self.budgets.gate(self.agent, reserve=self.reserve, totals=totals, running=unit.tasks("in-progress"),
                                 doc=self.doc)

    def refusal(self, standing: Standing, extra: str) -> BudgetExceeded:
        return self.budgets.refuse(standing, self.agent, extra)


def claim(queue: Queue, agent: str, *, types: Sequence[str] = (), labels: Sequence[str] = (),
          priorities: Sequence[str] = (), lease_seconds: float | None = None, reserve: float = 0.0,
          task_id: str | None = None, reuse: bool = False) -> Any:
    """``queue.claim`` within the budgets: refused (:class:`BudgetExceeded`) by a spent budget of the team or
    of ``agent``, kept off the tasks of a spent type or label budget. The check and the claim are one step:
    the queue asks :class:`ClaimGate` inside the claim's unit of work (docs/spend.md, the overshoot)."""
    if isinstance(reserve, bool) or not math.isfinite(reserve) or not 0 <= reserve <= MAX_USD:
        raise InvalidArgument(f"invalid --reserve {reserve!r}: dollars from 0 to 1,000,000", field="reserve")
    budgets = Budgets(queue.store)
    doc = budgets._doc()
    gate = ClaimGate(budgets, agent, reserve, doc) if doc else None
    if gate is not None and queue.store.tasks().spend_totals() is None:
        ensure_totals(queue.store)  # before the claim's unit: the scan takes the queue's lock itself
    return queue.claim(agent, types=types, labels=labels, priorities=priorities, lease_seconds=lease_seconds,
                       task_id=task_id, reuse=reuse, gate=gate)
