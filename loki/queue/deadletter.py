"""The dead-letter queue: entries in the reference's format (001 Troubleshooting, Dead Letter Queue).

A task that fails ``max_attempts`` times leaves the queue as an *entry* that keeps
the whole task in ``task_data`` and every attempt, with a recovery strategy chosen
from its attempts.
"""

from __future__ import annotations

import hashlib

from loki.clock import add_seconds, format_ts, parse_ts
from loki.config import setting
from loki.errors import InvalidArgument, NotFound
from loki.storage.paths import check_id
from loki.tasks import history
from loki.tasks.record import add_note, clear_claim, start_fresh_budget
from loki.wording import dead_letter_next, duration, plural

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from loki.storage.state import StateStore as Store
    from loki.storage.tasks import TaskTxn

REVIEWER = "loki"
"""Who the review's decisions are by, in a task's history (as in its notes)."""


class DeadLetter:
    """The dead-letter queue of one ``.loki/`` tree, and its session-start review."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @classmethod
    def open(cls, root: str | None = None) -> DeadLetter:
        from loki.storage.opening import open_store

        return cls(open_store(root))

    def _setting(self, key: str) -> Any:
        return setting(self.store.config, "deadletter", key)

    # -- reading -------------------------------------------------------------------------------

    def entries(self) -> dict[str, Any]:
        """The whole dead-letter document (entries and metadata)."""
        return self.store.tasks().dead_letter_doc()

    def list_entries(self) -> dict[str, Any]:
        doc = self.entries()
        rows = [{"task_id": e["task_id"], "title": e["task_data"].get("title"), "failure_count": e["failure_count"],
                 "last_failure": e["last_failure"], "recovery_strategy": e["recovery_strategy"],
                 "error_summary": e["error_summary"], "escalation": e.get("escalation")} for e in doc["tasks"]]
        return {"total": len(rows), "entries": rows, "metadata": doc["metadata"]}

    def show(self, task_id: str) -> dict[str, Any]:
        check_id(task_id, "task id")
        for entry in self.entries()["tasks"]:
            if entry["task_id"] == task_id:
                found: dict[str, Any] = entry
                return found
        raise NotFound(f"{task_id!r} is not in the dead-letter queue", task_id=task_id)

    def abandoned(self) -> dict[str, Any]:
        entries = self.store.tasks().view(["abandoned"])["abandoned"]
        rows = [{"task_id": e["task_id"], "title": e["task_data"].get("title"), "failure_count": e["failure_count"],
                 "abandoned_at": e["abandoned_at"], "abandon_reason": e["abandon_reason"]} for e in entries]
        return {"total": len(rows), "entries": rows}

    # -- single-entry operations -----------------------------------------------------------------

    def retry(self, task_id: str, *, approach: str | None = None, reset_count: bool = False,
              fix_commit: str | None = None, by: str | None = None) -> dict[str, Any]:
        """Back to pending now (a recovery), documenting the new approach or the fixing commit (``by``: who)."""
        from loki.queue.queue import Queue, check_fix_commit

        check_fix_commit(fix_commit)  # arguments first, then the state
        self.show(task_id)  # only dead-letter entries: a clear error otherwise
        return Queue(self.store).retry(task_id, approach=approach, reset_count=reset_count, fix_commit=fix_commit,
                                       by=by)

    def propose(self, task_id: str, approach: str, *, by: str | None = None) -> dict[str, Any]:
        """Record a new approach for the next review to act on (the retry condition "new approach")."""
        if not approach.strip():
            raise InvalidArgument("--approach must describe the new approach", field="approach")
        approach = _redacted(approach)  # it is stored, shown, and becomes the next attempt's approach
        with self.store.tasks().transaction() as unit:
            entry = _entry(unit, task_id)
            entry["new_approach"] = approach.strip()
            now = self.store.now_ts()
            history.record(entry["task_data"], "proposed", now, by=by,
                           detail=f"next review retries it with: {approach.strip()}")
            unit.update_dead_letter(entry)
            due = self._next_review_after(unit.dead_letter_metadata().get("last_reviewed"), now)
        # The review may be a day away: say when, and the command that does not wait for it.
        wait = f" (in {duration((parse_ts(due) - parse_ts(now)).total_seconds())})" if due else ""
        later = f"the next review, after {due}{wait}," if due else "the next review (due now: the next session start)"
        return entry | {"next_review_after": due,
                        "next": f"{later} retries it; `loki deadletter review --force` retries it now"}

    def _next_review_after(self, last: str | None, now: str) -> str | None:
        """When the review is next due (None: it is due now, never run or its interval over)."""
        if last is None:
            return None
        due = format_ts(add_seconds(parse_ts(last), float(self._setting("review_interval_hours")) * 3600))
        return due if parse_ts(now) < parse_ts(due) else None

    def abandon(self, task_id: str, reason: str, *, by: str | None = None) -> dict[str, Any]:
        """Human explicitly abandons: into abandoned.json with the reason (``by``: who)."""
        if not reason.strip():
            raise InvalidArgument("--reason is required: abandoned tasks keep why", field="reason")
        reason = _redacted(reason)  # kept in abandoned.json and shown by `abandoned list`
        with self.store.tasks().transaction() as unit:
            now = self.store.now_ts()
            entry = _entry(unit, task_id)
            why = f"human explicitly abandoned: {reason.strip()}"
            history.record(entry["task_data"], "abandoned", now, by=by, to="abandoned", detail=why)
            record = unit.abandon(entry, why, now)
        return record

    def split(self, task_id: str, titles: Sequence[str], *, description: str = "",
              priority: str | None = None, by: str | None = None) -> dict[str, Any]:
        """Simpler scope defined: new task(s) linked to the original, which moves to abandoned with that reason."""
        from loki.queue.queue import Queue

        titles = [t.strip() for t in titles if t.strip()]
        if not titles:
            raise InvalidArgument("split needs at least one --title for the simpler task", field="title")
        queue = Queue(self.store)
        with queue.tasks.transaction() as unit:
            now = self.store.now_ts()
            entry = _entry(unit, task_id)
            original = entry["task_data"]
            created = []
            for title in titles:
                spec = {"title": title, "description": description or f"Simpler scope of {task_id}: "
                        f"{original.get('title')}", "priority": priority or original.get("priority", "medium"),
                        "type": original.get("type"), "labels": list(original.get("labels", []))}
                task = queue.task_from_spec(spec, now)
                task["split_from"] = task_id
                history.record(task, "added", now, by=by, to="pending", detail=f"split from {task_id}")
                unit.put("pending", task)
                created.append(task)
            ids = ", ".join(t["id"] for t in created)
            history.record(original, "abandoned", now, by=by, to="abandoned", detail=f"split into {ids}")
            record = unit.abandon(entry, f"split into simpler task(s): {ids}", now)
        return {"original": record, "created": created}

    # -- the review ----------------------------------------------------------------------------

    def review(self, *, force: bool = False) -> dict[str, Any]:
        """The session-start review (reference: Processing Protocol, Agent Workflow).

        Skipped (``"skipped": True``) when the last review is younger than
        ``deadletter.review_interval_hours`` (24) unless ``force``. Otherwise each entry, in
        order, gets the first decision that applies:

        1. retry: a dependency completed since the failures began (strategy ``dependency_blocked``;
           ``loki queue fail --depends-on`` records the dependency an attempt discovered)
           -> pending with ``recovery_strategy: dependency_resolved``; or a new approach was
           recorded (``propose``) -> pending with a fresh attempt budget. Entries that
           require human review are never retried automatically;
        2. abandon: 10+ total attempts; the same normalised error across 3 different
           approaches; a dependency that will never complete (cancelled or abandoned);
        3. escalate (once per entry): an escalation label (security, auth, secrets ...), or
           strategy ``requires_human_review``; and 3+ remaining entries with the same root
           cause get one escalation for the systemic issue;
        4. leave it for the next review.
        """
        interval = float(self._setting("review_interval_hours"))
        decisions: list[dict[str, Any]] = []
        escalations_to_emit: list[dict[str, Any]] = []
        with self.store.tasks().transaction() as unit:
            now_dt = self.store.clock.now()
            now = format_ts(now_dt)
            metadata = unit.dead_letter_metadata()
            last = metadata["last_reviewed"]
            skew: str | None = None
            if last is not None and not force:
                age = (now_dt - parse_ts(last)).total_seconds()
                if age < 0:
                    # A review dated in the future was run under a wrong clock (LOKI_NOW, a clock set
                    # ahead and back): honouring it would switch the daily review off until then. No
                    # rule can date a review after now, so it is due now, and says why.
                    skew = (f"last_reviewed {last} is in the future (clock skew?); reviewing now and dating "
                            f"the review {now}")
                elif age < interval * 3600:
                    return {"skipped": True, "last_reviewed": last, "entries": len(unit.dead_letters()),
                            "next_review_after": format_ts(add_seconds(parse_ts(last), interval * 3600)),
                            "decisions": []}
            states = _TaskStates(unit)
            remaining: list[dict[str, Any]] = []
            for entry in list(unit.dead_letters()):
                decision = self._decide(entry, states)
                if decision["action"] == "retry":
                    self._requeue(unit, unit.recover(entry), decision, now)
                elif decision["action"] == "abandon":
                    history.record(entry["task_data"], "abandoned", now, by=REVIEWER, to="abandoned",
                                   detail=f"dead-letter review: {decision['reason']}")
                    unit.abandon(entry, decision["reason"], now)
                elif decision["action"] == "escalate":
                    file_rel = self._escalate_entry(entry, decision["reason"], now)
                    escalations_to_emit.append({"entries": [entry], "file": file_rel, "reason": decision["reason"]})
                else:
                    remaining.append(entry)
                decisions.append(decision)
            for group in self._systemic_groups(remaining):
                reason = (f"systemic issue: {len(group)} tasks fail with the same root cause "
                          f"({_root_cause(group[0])[:120]})")
                file_rel = self._escalate_systemic(group, reason, now)
                escalations_to_emit.append({"entries": group, "file": file_rel, "reason": reason})
                for entry in group:
                    decision = next(d for d in decisions if d["task_id"] == entry["task_id"])
                    decision.update(action="escalate", reason=reason)
            unit.mark_reviewed(now)
            unit.update_dead_letter(*unit.dead_letters())
            metadata = dict(metadata)
        for escalation in escalations_to_emit:
            self._emit(escalation)
        counts = {action: sum(1 for d in decisions if d["action"] == action)
                  for action in ("retry", "abandon", "escalate", "leave")}
        result = {"skipped": False, "reviewed_at": now, "entries": len(decisions), "counts": counts,
                  "decisions": decisions, "metadata": metadata, "clock_skew": skew}
        from loki.queue import tasklog

        # For the live view's feed: every review, wherever it ran (a watcher started later reads them back).
        tasklog.append(self.store, [tasklog.review_event(result, counts["leave"] + counts["escalate"])])
        return result

    def _decide(self, entry: dict[str, Any], states: _TaskStates) -> dict[str, Any]:
        from loki.text.errorscan import normalise_error

        task = entry["task_data"]
        task_id = entry["task_id"]
        attempts = entry["attempts"]
        human = entry["recovery_strategy"] == "requires_human_review"

        def decision(action: str, reason: str, **extra: Any) -> dict[str, Any]:
            return {"task_id": task_id, "action": action, "reason": reason, **extra}

        if not human:
            deps = task.get("dependencies", [])
            if entry["recovery_strategy"] == "dependency_blocked" and deps and all(
                    states.state_of(d) == "completed" for d in deps):
                # Only a dependency that completed after the trouble began counts as "now available":
                # one that was complete all along was not what blocked the task.
                fresh = [d for d in deps if (states.completed_at(d) or "") > entry["first_failure"]]
                if fresh:
                    return decision("retry", f"dependency now completed: {', '.join(fresh)}",
                                    strategy="dependency_resolved")
            approach = entry.get("new_approach")
            tried = {a.get("approach", "") for a in attempts}
            if approach and approach not in tried:
                return decision("retry", f"new approach recorded: {approach}", strategy="new_approach",
                                approach=approach)
        limit = int(self._setting("abandon_after_attempts"))
        if len(attempts) >= limit:
            return decision("abandon", f"{len(attempts)} total attempts (>= {limit}): diminishing returns, likely "
                                       "an architectural issue")
        by_error: dict[str, set[str]] = {}
        for attempt in attempts:
            key = normalise_error(attempt.get("error_message", ""))
            by_error.setdefault(key, set()).add(attempt.get("approach") or "(unspecified)")
        needed = int(self._setting("same_error_approaches"))
        for error, approaches in sorted(by_error.items()):
            if len(approaches) >= needed:
                return decision("abandon", f"same error across {len(approaches)} different approaches: "
                                           f"{error[:160]}")
        for dep in task.get("dependencies", []):
            # The reference's criterion is a dependency that was cancelled or abandoned. One loki does
            # not know (a Loki Mode task, a dependency of an imported entry) may complete elsewhere.
            dep_state = states.state_of(dep)
            if dep_state in ("cancelled", "abandoned"):
                return decision("abandon", f"dependency {dep} will never complete (was {dep_state})")
        if entry.get("escalated_at"):
            return decision("leave", f"escalated at {entry['escalated_at']}; awaiting a human decision",
                            next=f"loki approve {task_id} --decision approve|cancel|clarify (or "
                                 f"{dead_letter_next(task_id)})")
        labels = sorted(set(task.get("labels", [])) & set(self._setting("escalation_labels")))
        if labels:
            return decision("escalate", f"security-critical task ({', '.join(labels)}) failed")
        if human:
            return decision("escalate", "recovery strategy requires_human_review")
        return decision("leave", "no retry condition, abandon criterion or escalation trigger applies yet",
                        next=dead_letter_next(task_id))

    def _systemic_groups(self, entries: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        needed = int(self._setting("systemic_root_cause_count"))
        groups: dict[str, list[dict[str, Any]]] = {}
        for entry in entries:
            cause = _root_cause(entry)
            if not entry.get("escalated_at") and cause.strip():  # no message is no evidence of one cause
                groups.setdefault(cause, []).append(entry)
        return [group for _, group in sorted(groups.items()) if len(group) >= needed]

    def _requeue(self, unit: TaskTxn, task: dict[str, Any], decision: dict[str, Any], now: str) -> None:
        clear_claim(task)
        task["available_at"] = now
        task["updated_at"] = now
        task["recovery_strategy"] = decision["strategy"]
        if decision["strategy"] == "new_approach":
            # "Reset failure_count": the history stays, the budget starts again.
            start_fresh_budget(task)
            task["new_approach"] = decision["approach"]  # the next attempts' approach (loki work records it)
            add_note(task, f"dead-letter review: retry with a new approach: {decision['approach']}", now, "loki")
        else:
            add_note(task, f"dead-letter review: {decision['reason']}", now, "loki")
        history.record(task, "retried", now, by=REVIEWER, to="pending",
                       detail=f"dead-letter review: {decision['reason']}")
        unit.put("pending", task)

    def _escalate_entry(self, entry: dict[str, Any], reason: str, now: str) -> str:
        from loki.queue.escalations import attempts_table, write_file

        task = entry["task_data"]
        values = {
            "task_title": task.get("title", entry["task_id"]), "task_id": entry["task_id"],
            "failure_count": str(entry["failure_count"]), "trigger": reason, "error_summary": entry["error_summary"],
            "attempts_log": attempts_table(entry["attempts"]),
            "agent_analysis": f"The dead-letter review found: {reason}. Its rule is to escalate rather than retry.",
            "recommended_options": "1. Approve a retry with a clarified spec or new approach (loki approve "
                                   f"{entry['task_id']} --decision approve --note ...).\n2. Cancel it "
                                   f"(loki approve {entry['task_id']} --decision cancel): it is abandoned.",
            "timestamp": now, "agent": "loki deadletter review",
        }
        rel = write_file(self.store, task_id=entry["task_id"], values=values, now=now)
        entry["recovery_strategy"] = "requires_human_review"
        entry["escalated_at"] = now
        entry["escalation"] = rel.rsplit("/", 1)[-1]
        history.record(task, "escalated", now, by=REVIEWER, detail=f"{reason}: {rel}")
        return rel

    def _escalate_systemic(self, group: list[dict[str, Any]], reason: str, now: str) -> str:
        from loki.queue.escalations import SYSTEMIC_PREFIX, write_file

        digest_id = SYSTEMIC_PREFIX + hashlib.sha256(_root_cause(group[0]).encode()).hexdigest()[:12]
        ids = [e["task_id"] for e in group]
        values = {
            "task_title": f"Systemic issue across {len(group)} tasks", "task_id": ", ".join(ids),
            "failure_count": str(sum(e["failure_count"] for e in group)), "trigger": reason,
            "error_summary": group[0]["error_summary"],
            "attempts_log": "\n".join(f"- {e['task_id']} ({e['task_data'].get('title')}): "
                                      f"{plural(e['failure_count'], 'attempt')}, last {e['last_failure']}"
                                      for e in group),
            "agent_analysis": "Several tasks fail with one root cause: fixing it once is likely to unblock all of "
                              "them; retrying them one by one is not.",
            "recommended_options": "1. Fix the root cause (architectural review), then approve every task at once "
                                   f"(loki approve {digest_id} --decision approve --note ...).\n"
                                   "2. Cancel the affected tasks if the feature is out of scope "
                                   f"(loki approve {digest_id} --decision cancel).",
            "timestamp": now, "agent": "loki deadletter review",
        }
        rel = write_file(self.store, task_id=digest_id, values=values, now=now)
        for entry in group:
            entry["recovery_strategy"] = "requires_human_review"
            entry["escalated_at"] = now
            entry["escalation"] = rel.rsplit("/", 1)[-1]
            history.record(entry["task_data"], "escalated", now, by=REVIEWER, detail=f"{reason}: {rel}")
        return rel

    def _emit(self, escalation: dict[str, Any]) -> None:
        from loki.signals import emit as signals
        from loki.signals import types as signaltypes

        for entry in escalation["entries"]:
            signals.emit(self.store, signaltypes.HUMAN_REVIEW_NEEDED,
                         {"reason": escalation["reason"], "context": entry["error_summary"], "blocking": True,
                          "escalation": escalation["file"].rsplit("/", 1)[-1]},
                         task_id=entry["task_id"], severity="high", agent="loki deadletter review")


def _root_cause(entry: dict[str, Any]) -> str:
    """The normalised last error of an entry: what "the same root cause" compares."""
    from loki.text.errorscan import normalise_error

    attempts = entry.get("attempts") or []
    return normalise_error(attempts[-1].get("error_message", "")) if attempts else entry["error_summary"].lower()


def _entry(unit: TaskTxn, task_id: str) -> dict[str, Any]:
    check_id(task_id, "task id")
    entry = unit.find_dead_letter(task_id)
    if entry is not None:
        return entry
    raise NotFound(f"{task_id!r} is not in the dead-letter queue", task_id=task_id)


class _TaskStates:
    """Where each task is, for the dependency checks of one review."""

    def __init__(self, unit: TaskTxn) -> None:
        from loki.tasks.record import TASK_STATES

        self._state: dict[str, str] = {}
        self._completed_at: dict[str, str | None] = {}
        for state in (s.value for s in TASK_STATES):
            for task in unit.tasks(state):
                self._state[task["id"]] = state
                if state == "completed":
                    self._completed_at[task["id"]] = task.get("completed_at")
        for entry in unit.dead_letters():
            self._state[entry["task_id"]] = "dead-letter"
        for entry in unit.abandoned():
            self._state[entry["task_id"]] = "abandoned"
        self._unit = unit

    def state_of(self, task_id: str) -> str | None:
        if task_id not in self._state:
            found = self._unit.find_archived(task_id)
            if found is not None:
                self._state[task_id] = found[0]
                self._completed_at[task_id] = found[1].get("completed_at")
        return self._state.get(task_id)

    def completed_at(self, task_id: str) -> str | None:
        self.state_of(task_id)
        return self._completed_at.get(task_id)


def _redacted(text: str) -> str:
    from loki.text.redact import redact

    return redact(text)
