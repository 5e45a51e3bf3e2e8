"""What each signal does when it is consumed: the rule table (reference: Signal Processing).

``RULES`` is the table, as data: the type it matches, a name, the effect in one
sentence (``loki signal rules`` prints it; docs/signals.md is that output) and the
handler. :func:`apply` runs the rule of one signal and returns its outcome; the
consumer (:mod:`loki.watch.consumer`) logs it.

Every handler is idempotent, keyed by the signal's unique id, because after a crash the
consumer applies a claimed signal again when its outcome was not logged yet. The key is
written in the same atomic change as the effect itself:

* queue effects put ``[signal <id>]`` into a note of the task, in the transaction that
  moves it (a retry that finds the note reports ``already_applied``);
* the friction map keeps the ids of the signals applied to each entry;
* Markdown files (institutional knowledge, CONTINUITY.md) end each appended section
  with ``<!-- loki-signal <id> -->``, written last in one append.

Handlers say "skipped" (with why) when a signal cannot apply -- no such task, a task in
the wrong state -- and raise only for trouble with the tree itself (a lock timeout, a
corrupt file), which the consumer retries later without losing the signal.
"""

from __future__ import annotations

from loki.clock import add_seconds, format_ts, parse_ts
from loki.config import setting
from loki.errors import Conflict, InvalidInput, NotFound
from loki.signals import types as signaltypes
from loki.storage import layout
from loki.tasks import history
from loki.tasks.record import add_note, clear_claim, make_attempt

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime
    from typing import Any

    from loki.storage.state import StateStore as Store
    from loki.storage.tasks import TaskTxn

    Handler = Callable[["Store", "Signal"], dict[str, Any]]

PAUSABLE = ("pending", "in-progress", "failed")
"""States a signal may move to blocked: work not finished and not already parked."""
HIGH_SEVERITIES = ("high", "critical")
WATCHER = "loki watch"


class Signal:
    """One signal as a rule sees it: its unique id, published name, type and content."""

    __slots__ = ("body", "id", "name", "recovered", "type")

    def __init__(self, sig_id: str, name: str, body: dict[str, Any], *, recovered: bool = False) -> None:
        self.id = sig_id
        self.name = name
        self.type = signaltypes.type_of_file(name)
        self.body = body
        self.recovered = recovered

    @property
    def marker(self) -> str:
        """What the effect records so that applying this signal again is a no-op."""
        return f"[signal {self.id}]"

    @property
    def task_id(self) -> str | None:
        value = self.body.get("task_id")
        return value if isinstance(value, str) else None

    @property
    def agent(self) -> str | None:
        value = self.body.get("agent")
        return value if isinstance(value, str) and value.strip() else None


def outcome(kind: str, detail: str, **extra: Any) -> dict[str, Any]:
    return {"outcome": kind, "detail": detail, **extra}


class Rule:
    """One row of the table: ``match`` is a type, a subject prefix (``TESTS_PASSED_``) or ``*``."""

    __slots__ = ("effect", "handler", "match", "name")

    def __init__(self, match: str, name: str, effect: str, handler: Handler) -> None:
        self.match = match
        self.name = name
        self.effect = effect
        self.handler = handler

    def matches(self, signal_type: str) -> bool:
        if self.match.endswith("_"):  # a subject type: TESTS_PASSED_auth, never a bare TESTS_PASSED_
            return signaltypes.subject_of(signal_type) is not None and signal_type.startswith(self.match)
        return self.match in ("*", signal_type)

    def to_json(self) -> dict[str, str]:
        shown = self.match + "x" if self.match.endswith("_") else self.match
        return {"signal": shown, "rule": self.name, "effect": self.effect}


# -- helpers shared by the handlers ------------------------------------------------------------------


def _has_marker(task: dict[str, Any] | None, marker: str) -> bool:
    return task is not None and any(marker in str(note.get("text", "")) for note in task.get("notes", []))


def _locate(unit: TaskTxn, task_id: str) -> tuple[str, dict[str, Any]] | None:
    """Where a task is: the hot queue files first, then dead-letter, abandoned and the archive."""
    from loki.queue.queue import HOT_STATES

    return unit.find(task_id, HOT_STATES) or unit.find_outside(task_id)


def _queue_change(store: Store, task_id: str | None,
                  change: Callable[[TaskTxn, str, dict[str, Any], datetime], dict[str, Any]],
                  marker: str) -> dict[str, Any]:
    """Run ``change(unit, state, task, now)`` in one queue unit of work, unless the task is unknown
    or already carries ``marker`` (the change was made before a crash). ``now`` is read inside the
    lock, so a watcher that waited for it does not stamp the task earlier than the commit before."""
    from loki.storage.paths import check_id

    if task_id is None:
        raise InvalidInput("no task_id")
    check_id(task_id, "task id")
    with store.tasks().transaction() as unit:
        located = _locate(unit, task_id)
        if located is None:
            return outcome("skipped", f"no task {task_id!r}", unknown_task=True)
        state, task = located
        if _has_marker(task, marker):
            return outcome("already_applied", f"{task_id} already carries {marker} ({state})", state=state)
        result = change(unit, state, task, store.clock.now())
    if result.get("state_change") and task.get("paths"):
        # A signal that moved a task with paths (in-progress -> landing or completed, a requeue, a pause) moved
        # who holds them: on a database tree this machine's copy for the hook is rewritten now, as the queue's
        # own verbs do, not at the watcher's next look.
        from loki.leases.leases import claim_moved

        claim_moved(store, task)
    return result


def _pause(store: Store, sig: Signal, reason: str, *, deadline: str | None = None) -> dict[str, Any]:
    """Move the signal's task to blocked (``blocked.signal`` says which signal parked it)."""
    def change(unit: TaskTxn, state: str, task: dict[str, Any], now_dt: datetime) -> dict[str, Any]:
        now = format_ts(now_dt)
        if state == "blocked":
            current = task.get("blocked") or {}
            if deadline is not None and not current.get("deadline"):
                # Paused earlier (by drift, say); now a human is asked: the review deadline applies.
                current.update(deadline=deadline, signal=sig.type)
                task["blocked"] = current
                task["updated_at"] = now
                add_note(task, f"{reason}; waits for a human until {deadline} {sig.marker}", now, sig.agent)
                history.record(task, "blocked", now, by=sig.agent, until=deadline,
                               detail=f"{sig.type}: {reason}; waits for a human")
                unit.update("blocked", task)
                return outcome("applied", f"{task['id']} stays blocked, now waiting for a human until {deadline}",
                               state_change={"from": "blocked", "to": "blocked"})
            if deadline is not None and current.get("deadline"):
                # The usual case: `loki escalate` (or the strike hook) parked the task and announced
                # it with this very signal. The task already waits for a human: nothing is missing.
                source = f", escalations/{current['escalation']}" if current.get("escalation") else ""
                why = f"{current.get('reason', 'no reason')}{source}"
                return outcome("already_applied",
                               f"{task['id']} already waits for a human until {current['deadline']} ({why})")
            until = f" until {current['deadline']}" if current.get("deadline") else ""
            return outcome("skipped", f"{task['id']} is already blocked{until} ({current.get('reason', 'no reason')})")
        if state not in PAUSABLE:
            return outcome("skipped", f"{task['id']} is {state}; only {', '.join(PAUSABLE)} tasks are moved to blocked")
        holder = task.get("claimed_by")
        clear_claim(task)
        task["blocked"] = {"reason": reason, "since": now, "deadline": deadline, "signal": sig.type,
                           "previous_status": state}
        if isinstance(sig.body.get("escalation"), str):
            task["blocked"]["escalation"] = sig.body["escalation"]
        task["updated_at"] = now
        held = f" (claim of {holder} released)" if holder else ""
        add_note(task, f"blocked by {sig.type}: {reason}{held} {sig.marker}", now, sig.agent)
        history.record(task, "blocked", now, by=sig.agent, to="blocked", until=deadline,
                       detail=f"{sig.type}: {reason}{held}")
        unit.move(task, state, "blocked")
        until = f" until {deadline}" if deadline else ""
        return outcome("applied", f"{task['id']}: {state} -> blocked{until}{held}",
                       state_change={"from": state, "to": "blocked"})

    return _queue_change(store, sig.task_id, change, sig.marker)


def _text(value: Any, limit: int = 300) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- the handlers --------------------------------------------------------------------------------------


def block_for_review(store: Store, sig: Signal) -> dict[str, Any]:
    if sig.task_id is None:
        return outcome("logged", "a human was asked; no task_id, so no task is blocked")
    if sig.body.get("blocking") is False:
        return outcome("logged", f"non-blocking review requested for {sig.task_id}; the task keeps running")
    hours = float(setting(store.config, "signals", "human_review_timeout_hours"))
    # The deadline runs from when the agent asked, not from when a (possibly late) watcher saw it.
    deadline = format_ts(add_seconds(parse_ts(sig.body["timestamp"]), hours * 3600))
    reason = f"human review needed: {_text(sig.body.get('reason', ''), 200)}"
    result = _pause(store, sig, reason, deadline=deadline)
    if result["outcome"] == "skipped" and result.get("unknown_task"):
        return _escalate_unknown_task(store, sig)
    return result


def _escalate_unknown_task(store: Store, sig: Signal) -> dict[str, Any]:
    """A review request for a task loki does not know (Loki Mode's own, say) still needs a human:
    it is kept as an open escalation file, never consumed into nothing. The file carries the
    signal's marker, so applying the signal again after a crash writes no second one."""
    # Looked for and written under the queue's lock, where escalate() writes its files: two consumers at
    # once (one that lost its lock, one taking over) must not both find the marker missing.
    with store.tasks().transaction():
        return _write_unknown_task_escalation(store, sig)


def _write_unknown_task_escalation(store: Store, sig: Signal) -> dict[str, Any]:
    from loki.queue.escalations import list_escalations, write_file

    for row in list_escalations(store, open_only=False):
        if sig.marker in (store.read_text(f"{layout.ESCALATIONS_DIR}/{row['file']}") or ""):
            return outcome("already_applied", f"escalations/{row['file']} already carries {sig.marker}")
    body = sig.body
    reason = _text(body.get("reason", ""), 200) or "human review needed"
    context = _text(body.get("context") or body.get("message") or "", 2000)
    options = body.get("alternatives_considered")
    listed = [str(o) for o in options] if isinstance(options, list) else []
    values = {
        "task_title": f"{sig.task_id} (not a task in loki's queue)",
        "task_id": str(sig.task_id),
        "failure_count": "0",
        "trigger": reason,
        "error_summary": context or reason,
        "attempts_log": "(loki's queue has no such task, so no attempts are recorded)",
        "agent_analysis": f"{sig.type} from {sig.agent or 'an agent'}: {context or reason} {sig.marker}",
        "recommended_options": "\n".join(f"{n}. Considered: {text}" for n, text in enumerate(listed, start=1))
                               or "1. Decide, and tell the agent (or the tool) that asked.",
        "timestamp": store.now_ts(),
        "agent": sig.agent or "loki",
    }
    rel = write_file(store, task_id=str(sig.task_id), values=values, now=store.now_ts())
    return outcome("applied", f"no task {sig.task_id!r} in the queue: kept for a human as {rel}", escalation=rel)


def apply_decision(store: Store, sig: Signal) -> dict[str, Any]:
    from loki.queue.escalations import resolve
    from loki.queue.queue import Queue

    task_id = str(sig.body["task_id"])
    decision = str(sig.body["decision"])
    try:
        found = Queue(store).show(task_id)
    except NotFound:
        return outcome("skipped", f"no task {task_id!r}")
    if _has_marker(found["task"], sig.marker):
        return outcome("already_applied", f"{task_id} already carries {sig.marker} ({found['state']})")
    note = sig.body.get("note")
    approver = sig.body.get("approver") or sig.agent
    result = resolve(store, task_id, decision, note=f"{note} {sig.marker}" if note else sig.marker,
                     approver=approver if isinstance(approver, str) else None)
    if not result["applied"]:
        return outcome("skipped", f"{task_id} is {found['state']}, not waiting for a human; {decision} not applied")
    return outcome("applied", f"{decision}: {task_id} -> {result['outcome']}",
                   state_change={"from": found["state"], "to": result["outcome"]})


def complete_task(store: Store, sig: Signal) -> dict[str, Any]:
    """TESTS_PASSED_x: the testing stream's word is the authority, whoever holds the task."""
    from loki.queue.queue import Queue

    if sig.task_id is None:
        return outcome("logged", f"{sig.type} names no task_id; logged for the streams that follow it")
    def change(unit: TaskTxn, state: str, task: dict[str, Any], now_dt: datetime) -> dict[str, Any]:
        now = format_ts(now_dt)
        if state not in ("in-progress", "pending"):
            return outcome("skipped", f"{task['id']} is {state}; {sig.type} completes in-progress or pending tasks")
        holder = task.get("claimed_by")
        clear_claim(task)
        task["result"] = {"signal": sig.id, "type": sig.type,
                          **{k: sig.body[k] for k in ("summary", "passed", "failed") if k in sig.body}}
        from loki.queue.verified import signal_evidence, signal_landing

        # A task with declared checks keeps the testing stream's word as its evidence (docs/verify.md).
        evidence = signal_evidence(task, store.config, sig.type, sig.id, sig.agent, sig.body)
        if evidence is not None:
            task["result"]["verification"] = evidence
        task["completed_by"] = holder  # the agent whose work the tests passed (None: nobody held it)
        task["updated_at"] = now
        held = f" (held by {holder})" if holder else ""
        landing = signal_landing(task, store.config, sig.body, now_dt)
        if landing is not None:  # it must land, and the signal names the commit to wait for (docs/verify.md)
            task["landing"] = landing
            add_note(task, f"verified by {sig.type}{held} {sig.marker}", now, sig.agent)
            history.record(task, "completed", now, by=sig.agent, to="landing", until=landing["deadline"],
                           detail=f"by {sig.type}{held}; waiting to land {landing['commit'][:12]} on "
                                  f"{landing['branch']}")
            unit.move(task, state, "landing")
            return outcome("applied", f"{task['id']}: {state} -> landing{held}",
                           state_change={"from": state, "to": "landing"})
        task["completed_at"] = now
        add_note(task, f"completed by {sig.type}{held} {sig.marker}", now, sig.agent)
        history.record(task, "completed", now, by=sig.agent, to="completed", detail=f"by {sig.type}{held}")
        unit.move(task, state, "completed")
        Queue(store).rotate_hot(unit, "completed")
        return outcome("applied", f"{task['id']}: {state} -> completed{held}",
                       state_change={"from": state, "to": "completed"})

    return _queue_change(store, sig.task_id, change, sig.marker)


def fail_task(store: Store, sig: Signal) -> dict[str, Any]:
    """TESTS_FAILED_x: one failed attempt (error_type test_failure), with the queue's backoff."""
    from loki.queue.queue import Queue

    if sig.task_id is None:
        return outcome("logged", f"{sig.type} names no task_id; logged for the streams that follow it")
    def change(unit: TaskTxn, state: str, task: dict[str, Any], now_dt: datetime) -> dict[str, Any]:
        now = format_ts(now_dt)
        if state != "in-progress":
            return outcome("skipped", f"{task['id']} is {state}; {sig.type} fails an in-progress task only "
                                      "(there is no attempt in flight to fail)")
        holder = task.get("claimed_by") or "unknown"
        error = sig.body.get("error") or sig.body.get("summary") or f"{sig.type}: tests failed"
        # A fixed approach label: each signal's id in it would make every failure look like a new
        # approach to the dead-letter review's "same error across 3 approaches" rule.
        given = sig.body.get("approach")
        approach = given if isinstance(given, str) and given.strip() else "(reported by tests)"
        attempt = make_attempt(task, now=now, agent_id=sig.agent or holder, approach=approach,
                               error_type="test_failure", error_message=_text(error, 2000))
        add_note(task, f"tests failed ({sig.type}) {sig.marker}", now, sig.agent)
        result = Queue(store).record_failure(unit, task, attempt, now_dt, final=False)
        dead.extend(unit.dead_lettered)
        where = f"retry at {result['retry_at']}" if result["state"] == "pending" else result["state"]
        return outcome("applied", f"{task['id']}: attempt {attempt['attempt_number']} failed -> {where}",
                       state_change={"from": state, "to": result["state"]})

    dead: list[dict[str, Any]] = []
    applied = _queue_change(store, sig.task_id, change, sig.marker)
    Queue(store).report_dead_letters(dead)  # after the commit: a dead-lettered task counts against its type
    return applied


MAX_SIGNAL_IDS = 20
"""Ids a friction entry keeps for show (the last ones), besides those that may still be applied again."""


def _signal_ids(store: Store, ids: list[str]) -> list[str]:
    """The ids a friction entry keeps: the last ``MAX_SIGNAL_IDS``, and every older one whose signal is
    still claimed (in ``signals/.processing/``). A signal can be applied again only while it is claimed
    (a consumer that lost its lock before logging it, a crash): its id must not expire before it is
    finished, however many reports came in meanwhile; once finished, it is never applied again."""
    from loki.signals.emit import PROCESSING_DIR

    older = ids[:-MAX_SIGNAL_IDS]
    claimed = [i for i in older if store.exists(f"{PROCESSING_DIR}/{i}")] if older else []
    return [*claimed, *ids[-MAX_SIGNAL_IDS:]]


def record_friction(store: Store, sig: Signal) -> dict[str, Any]:
    body = sig.body
    with store.transaction(layout.FRICTION_MAP) as txn:
        now = store.now_ts()
        doc = txn.read(layout.FRICTION_MAP)
        entry = next((f for f in doc["frictions"] if f["friction_id"] == body["friction_id"]), None)
        if entry is not None and sig.id in entry["signals"]:
            return outcome("already_applied", f"{body['friction_id']} already counts {sig.id}")
        classification = body.get("classification") or "unknown"
        if entry is None:
            entry = {"friction_id": body["friction_id"], "location": body["location"], "behavior": body["behavior"],
                     "classification": classification, "first_seen": now, "last_seen": now, "reports": 0,
                     "agents": [], "signals": []}
            doc["frictions"].append(entry)
            detail = f"new friction {body['friction_id']} at {body['location']} ({classification})"
        else:
            entry["location"], entry["behavior"], entry["last_seen"] = body["location"], body["behavior"], now
            # Never removed, and never turned back into "unknown" once someone classified it.
            if classification != "unknown":
                entry["classification"] = classification
            detail = f"friction {body['friction_id']} reported again ({entry['classification']})"
        entry["reports"] += 1
        if sig.agent and sig.agent not in entry["agents"]:
            entry["agents"].append(sig.agent)
        if sig.task_id:
            entry["task_id"] = sig.task_id
        entry["signals"] = _signal_ids(store, [*entry["signals"], sig.id])
        txn.write(layout.FRICTION_MAP, doc, changed=[entry])
    return outcome("applied", f"{detail}: {layout.FRICTION_MAP}")


KNOWLEDGE_HEADER = ("# Institutional knowledge\n\n"
                    "Tribal knowledge extracted from the code (INSTITUTIONAL_KNOWLEDGE_FOUND), appended by loki.\n")


def _append_section(store: Store, rel: str, marker: str, lines: list[str], header: str = "") -> bool:
    """Append ``lines`` and the marker to a Markdown file unless the marker is there (False then).

    The marker comes last in one append: a section cut by a crash has no marker and is written
    again whole, while a section that has its marker is complete.
    """
    from loki.text.redact import redact

    # The marker is looked for under the lock the append takes (the file's own, layout.lock_for): two
    # consumers at once (one that lost its lock, one taking over) must not both find it missing.
    with store.transaction(rel):
        text = store.read_text(rel)
        if text is not None and marker in text:
            return False
        block = ([header] if text is None and header else []) + ["", *(redact(line) for line in lines), marker]
        # Read whole above: it may not outgrow the read limit. The lock is held already (lock=False).
        store.append_text(rel, block, lock=False, read_whole=True)
    return True


def record_knowledge(store: Store, sig: Signal) -> dict[str, Any]:
    body = sig.body
    where = body.get("location") or body.get("source") or "the code"
    meta = ", ".join(f"{k}: {body[k]}" for k in ("agent", "task_id", "source") if isinstance(body.get(k), str))
    lines = [f"## {body['timestamp']} - {_text(where, 120)}", "", str(body["knowledge"]).strip()]
    if meta:
        lines += ["", f"_{meta}_"]
    if not _append_section(store, layout.KNOWLEDGE, f"<!-- loki-signal {sig.id} -->", lines, KNOWLEDGE_HEADER):
        return outcome("already_applied", f"{layout.KNOWLEDGE} already has {sig.id}")
    return outcome("applied", f"appended to {layout.KNOWLEDGE}: {_text(body['knowledge'], 80)}")


def pause_for_behavior_risk(store: Store, sig: Signal) -> dict[str, Any]:
    if sig.task_id is None:
        return outcome("logged", "behaviour change risk: verify characterization tests exist (no task_id to pause)")
    detail = _text(sig.body.get("message") or sig.body.get("risk") or "verify characterization tests exist", 200)
    return _pause(store, sig, f"behaviour change risk: {detail}")


def block_if_strict(store: Store, sig: Signal) -> dict[str, Any]:
    if not setting(store.config, "signals", "legacy_strict_mode"):
        return outcome("logged", "warning: breaking change to a legacy API (signals.legacy_strict_mode is off)")
    if sig.task_id is None:
        return outcome("logged", "legacy compatibility risk in strict mode, but no task_id to block")
    detail = _text(sig.body.get("message") or "breaking change to a legacy API", 200)
    return _pause(store, sig, f"legacy compatibility risk (strict mode): {detail}")


def log_only(store: Store, sig: Signal) -> dict[str, Any]:
    return outcome("logged", "logged (with its content) for the stream that follows it")


def archive_unknown(store: Store, sig: Signal) -> dict[str, Any]:
    return outcome("archived", f"unknown type {sig.type}: logged and kept in signals/.archive/")


def _drift_documented(store: Store, sig: Signal) -> dict[str, Any]:
    raise InvalidInput("DRIFT_DETECTED is a log: the consumer follows it with apply_drift()")


RULES: tuple[Rule, ...] = (
    Rule(signaltypes.DRIFT, "drift",
         "1st on a task: warning (return to REASON, re-read the task); 2nd on the same task: escalation "
         "(escalation file, task blocked 24 h, HUMAN_REVIEW_NEEDED); severity high/critical: task paused to "
         "blocked; every signals.drift_accumulated_threshold (3) accumulated: consolidated into CONTINUITY.md",
         _drift_documented),
    Rule(signaltypes.HUMAN_REVIEW_NEEDED, "block_for_review",
         "task -> blocked, deadline = signal time + signals.human_review_timeout_hours (24 h); already waiting "
         "for a human (escalate did it): already_applied, left as is; blocking: false or no task_id: logged. Past "
         "the deadline the watcher's tick moves it to the dead-letter queue", block_for_review),
    Rule(signaltypes.HUMAN_APPROVED, "apply_decision",
         "escalations.resolve: approve/clarify -> pending, cancel -> cancelled (a dead-letter entry -> pending or "
         "abandoned); the decision goes into the task's notes and every open escalation file of the task; "
         "approve/clarify start a fresh attempt budget", apply_decision),
    Rule(signaltypes.TESTS_PASSED, "complete_task",
         "the task named by task_id, in progress (any holder) or pending -> completed, result = the signal; "
         "no task_id: logged", complete_task),
    Rule(signaltypes.TESTS_FAILED, "fail_task",
         "the in-progress task named by task_id gets a failed attempt (test_failure): backoff, or dead-letter "
         "at max_attempts; no task_id: logged", fail_task),
    Rule(signaltypes.FRICTION, "record_friction",
         "added to state/friction-map.json (a repeat updates it; never removed, never reclassified as unknown)",
         record_friction),
    Rule(signaltypes.KNOWLEDGE, "record_knowledge", "appended to institutional-knowledge.md", record_knowledge),
    Rule(signaltypes.BEHAVIOR_CHANGE_RISK, "pause_task",
         "task paused to blocked until characterization tests are verified; no task_id: logged",
         pause_for_behavior_risk),
    Rule(signaltypes.LEGACY_RISK, "block_if_strict",
         "signals.legacy_strict_mode: task -> blocked; otherwise a logged warning", block_if_strict),
    Rule("FEATURE_READY_", "log", "logged with its content", log_only),
    Rule("MERGE_REQUESTED_", "log", "logged with its content", log_only),
    Rule("DOCS_NEEDED", "log", "logged with its content", log_only),
    Rule("BLOG_POST_QUEUED", "log", "logged with its content", log_only),
    Rule("PLAN_APPROVED", "log", "logged with its content", log_only),
    Rule("HEALING_PHASE_COMPLETE", "log", "logged with its content (the phase gate hook is not built yet)", log_only),
    Rule("*", "archive", "any other type: logged and the file kept in signals/.archive/", archive_unknown),
)


def rule_for(signal_type: str) -> Rule:
    return next(rule for rule in RULES if rule.matches(signal_type))


def table() -> list[dict[str, str]]:
    return [rule.to_json() for rule in RULES]


def apply(store: Store, sig: Signal) -> dict[str, Any]:
    """Run the rule of ``sig``; ``{"rule", "outcome", "detail", ...}``.

    A signal naming a task that is not there, or in a state the rule does not apply to, is
    "skipped" with the reason. Anything else raised means the tree itself is in trouble.
    """
    rule = rule_for(sig.type)
    try:
        result = rule.handler(store, sig)
    except (NotFound, Conflict, InvalidInput) as exc:
        result = outcome("skipped", exc.message)
    return {"rule": rule.name, **result}


# -- DRIFT_DETECTED --------------------------------------------------------------------------------------


def apply_drift(store: Store, sig: Signal, state: dict[str, Any]) -> dict[str, Any]:
    """One line of the drift log; ``state`` (watch.json's drift counters) is updated in place.

    The counters are saved by the caller after the outcome is logged; if it crashes first the
    line is applied again from the old counters and every effect below finds its marker.
    """
    body = sig.body
    task_id = str(body["task_id"])
    severity = str(body["severity"])
    counts = state.setdefault("drift_counts", {})
    count = counts.get(task_id, 0) + 1
    counts[task_id] = count
    state["drift_total"] = state.get("drift_total", 0) + 1
    pending = state.setdefault("drift_unconsolidated", [])
    pending.append({"id": sig.id, "task_id": task_id, "severity": severity,
                    **{k: _text(body[k], 200) for k in ("timestamp", "agent", "planned_action", "detected_drift")
                       if isinstance(body.get(k), str)}})
    effects: list[dict[str, Any]] = []
    if count == 1:
        effects.append(outcome("logged", f"drift 1 on {task_id}: warning, return to the REASON phase and re-read "
                                         "the current task"))
    elif count == 2:
        effects.append(_escalate_drift(store, sig, task_id, severity))
    else:
        effects.append(outcome("logged", f"drift {count} on {task_id} (escalated at the 2nd)"))
    if severity in HIGH_SEVERITIES and not (count == 2 and effects[-1]["outcome"] != "skipped"):
        drift = _text(body.get("detected_drift", ""), 160)
        effects.append(_pause(store, sig, f"drift ({severity}): {drift}; an opus reviewer should look at it"))
    threshold = int(setting(store.config, "signals", "drift_accumulated_threshold"))
    if len(pending) >= threshold:
        effects.append(_consolidate(store, sig, pending, threshold))
        state["drift_unconsolidated"] = []
        state["drift_consolidations"] = state.get("drift_consolidations", 0) + 1
    kinds = [e["outcome"] for e in effects]
    kind = "applied" if "applied" in kinds else "already_applied" if "already_applied" in kinds else "logged"
    return {"rule": "drift", "outcome": kind, "detail": "; ".join(e["detail"] for e in effects),
            "drift_count": count}


def _escalate_drift(store: Store, sig: Signal, task_id: str, severity: str) -> dict[str, Any]:
    from loki.queue.escalations import escalate
    from loki.queue.queue import Queue

    try:
        found = Queue(store).show(task_id)
    except NotFound:
        return outcome("skipped", f"drift 2 on {task_id}, but there is no such task to escalate")
    if _has_marker(found["task"], sig.marker):
        return outcome("already_applied", f"drift 2 on {task_id}: already escalated {sig.marker}")
    drift = _text(sig.body.get("detected_drift", ""), 200)
    goal = _text(sig.body.get("original_goal") or sig.body.get("planned_action") or "(not given)", 200)
    try:
        result = escalate(store, task_id, f"drift detected twice on this task {sig.marker}",
                          analysis=f"The agent drifted from the task twice. Goal: {goal}. Latest drift: {drift}.",
                          options=["Clarify the task's goal and approve: it goes back to pending.",
                                   "Cancel the task if the drift shows it is no longer wanted."],
                          agent=sig.agent or WATCHER,
                          severity=severity if severity in HIGH_SEVERITIES else "high")
    except (Conflict, InvalidInput) as exc:
        return outcome("skipped", f"drift 2 on {task_id}; not escalated: {exc.message}")
    return outcome("applied", f"drift 2 on {task_id}: escalated ({result['file']}), task {result['state']}")


def _consolidate(store: Store, sig: Signal, pending: list[dict[str, Any]], threshold: int) -> dict[str, Any]:
    rows = ["| when | task | severity | agent | planned | drifted to |", "|---|---|---|---|---|---|"]
    for d in pending:
        cells = [d.get("timestamp", ""), d["task_id"], d["severity"], d.get("agent", ""), d.get("planned_action", ""),
                 d.get("detected_drift", "")]
        rows.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    lines = [f"## Drift consolidation, {store.now_ts()}", "",
             f"{len(pending)} drifts accumulated (threshold {threshold}). Escalated to the orchestrator for task "
             "review: before acting, return to the REASON phase, re-read the current task and this file.", "",
             *rows]
    if not _append_section(store, layout.CONTINUITY, f"<!-- loki-drift {sig.id} -->", lines):
        return outcome("already_applied", f"CONTINUITY.md already has the consolidation {sig.id}")
    return outcome("applied", f"{len(pending)} accumulated drifts consolidated into CONTINUITY.md")

