"""The MCP tool set: the holder verbs, each a thin call of the library ``loki queue``/``signal``/``escalate``/``lease``
use (eight queue tools and one ``lease`` tool with an ``action``).

No SDK here (:mod:`loki.mcpserver.server` does the protocol): :data:`TOOLS` is the tool list as the protocol
sends it, and :meth:`ToolSet.call` runs one tool and returns ``(reply, is_error)``. Every reply is one JSON
object with a ``status`` the agent branches on, never prose to parse (docs/mcp.md, "Replies"):

* ``claimed``, ``ok``, ``completed``, ``failed``, ``released``, ``emitted``, ``escalated``, ``acquired``: done;
* ``nothing_ready`` (with ``waiting`` counts and ``next_at``), ``breaker_open`` (tasks held back only by their
  type's circuit breaker), ``budget_exceeded`` (a spent budget refuses the claim until ``refill_at``),
  ``not_ready`` (``claim`` by id): nothing was claimed, an answer and not a failure;
* ``lease_lost`` (the claim ended: the lease expired and was requeued, or the token is stale because the task
  was claimed again), ``conflict`` (another agent holds it, or it is not in progress; for ``lease``: another
  agent's lease or claimed task overlaps the patterns, with ``holder``, ``task``, ``expires_at``, or the lease
  is another agent's), ``not_found``,
  ``bad_input`` (with ``field``), ``busy`` (a lock could not be had: try again), ``unverified`` (``complete``
  of a task whose checks have no passing result for the current HEAD: ``checks`` names them), ``error``: refused, and
  nothing changed. These are sent with the protocol's ``isError``.

Claim tokens and task ids are explicit arguments (the protocol's stateless direction); the agent's name is
the server's (``loki mcp --agent NAME`` or ``LOKI_AGENT``), never an argument, so a model cannot act as another
agent. Every reply is bounded (:data:`MAX_REPLY_BYTES`); ``ready`` is paged.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from loki.errors import (
    CircuitOpen,
    Conflict,
    InvalidArgument,
    InvalidInput,
    LockTimeout,
    LokiError,
    NotFound,
    NothingToDo,
    SchemaViolation,
    UsageError,
)

MAX_REPLY_BYTES = 6000
"""A reply's JSON text at most, in UTF-8 bytes: under 2,000 tokens even for text a tokenizer cuts small
(tests/mcpserver measure it with a real tokenizer); a token is rarely under 3 bytes of ordinary text."""

PAGE = 10
"""``ready``'s rows per page by default (``limit`` up to :data:`MAX_PAGE`)."""
MAX_PAGE = 25

_ID = {"type": "string", "maxLength": 128}
_TOKEN = {"type": "string", "maxLength": 128, "description": "claim token from claim"}

TOOLS: list[dict[str, Any]] = [
    {
        "name": "ready",
        "description": "List tasks you may claim, in claim order, then the ones waiting and why (dependency, "
                       "backoff, deferred, breaker). Paged: pass next_offset back as offset.",
        "inputSchema": {"type": "object", "properties": {
            "type": {"type": "string", "maxLength": 200},
            "offset": {"type": "integer", "minimum": 0},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE},
        }, "additionalProperties": False},
    },
    {
        "name": "claim",
        "description": "Take the best ready task (or task_id). Returns status claimed with task and token: pass "
                       "the token to every later call on it. status nothing_ready or breaker_open: no task now, "
                       "try later (next_at); not_ready: that task cannot be claimed now (reason).",
        "inputSchema": {"type": "object", "properties": {
            "task_id": _ID,
            "type": {"type": "string", "maxLength": 200},
            "lease_seconds": {"type": "number", "minimum": 1},
        }, "additionalProperties": False},
    },
    {
        "name": "heartbeat",
        "description": "Extend your lease while working on a long task (every third of lease_seconds). "
                       "status lease_lost: stop, the task is no longer yours.",
        "inputSchema": {"type": "object", "properties": {
            "task_id": _ID, "token": _TOKEN, "lease_seconds": {"type": "number", "minimum": 1},
        }, "required": ["task_id", "token"], "additionalProperties": False},
    },
    {
        "name": "complete",
        "description": "Mark your task done, with a result object and evidence notes. A task with checks needs "
                       "checks: each one's result, run on the current HEAD, else status unverified names them. "
                       "A task that must land answers status landing: commit and push first. "
                       "lease_lost: it was requeued; do not complete it.",
        "inputSchema": {"type": "object", "properties": {
            "task_id": _ID, "token": _TOKEN,
            "result": {"type": "object"},
            "evidence": {"type": "array", "items": {"type": "string", "maxLength": 1000}, "maxItems": 20},
            "checks": {"type": "array", "maxItems": 20, "items": {"type": "object", "properties": {
                "command": {"type": "string", "maxLength": 1000}, "exit_code": {"type": "integer"},
                "commit": {"type": "string", "maxLength": 64}}, "required": ["command", "exit_code"]}},
        }, "required": ["task_id", "token"], "additionalProperties": False},
    },
    {
        "name": "fail",
        "description": "Report a failed attempt with the error text (classified, secrets redacted) and what you "
                       "tried. It is retried later unless final; state says where it went.",
        "inputSchema": {"type": "object", "properties": {
            "task_id": _ID, "token": _TOKEN,
            "error": {"type": "string", "maxLength": 8000},
            "approach": {"type": "string", "maxLength": 2000},
            "final": {"type": "boolean"},
        }, "required": ["task_id", "token", "error"], "additionalProperties": False},
    },
    {
        "name": "release",
        "description": "Give your task back untouched (no failure recorded), e.g. when you cannot do it.",
        "inputSchema": {"type": "object", "properties": {"task_id": _ID, "token": _TOKEN},
                        "required": ["task_id", "token"], "additionalProperties": False},
    },
    {
        "name": "signal",
        "description": "Emit a signal for the watcher, e.g. TESTS_PASSED with subject, or a custom UPPER_CASE "
                       "type; fields per type.",
        "inputSchema": {"type": "object", "properties": {
            "type": {"type": "string", "maxLength": 100},
            "subject": {"type": "string", "maxLength": 100},
            "task_id": _ID,
            "severity": {"enum": ["low", "medium", "high", "critical"]},
            "fields": {"type": "object"},
        }, "required": ["type"], "additionalProperties": False},
    },
    {
        "name": "escalate",
        "description": "Ask a human to decide: the task is blocked until they answer. Say why (trigger), what "
                       "you tried (analysis) and the options.",
        "inputSchema": {"type": "object", "properties": {
            "task_id": _ID,
            "trigger": {"type": "string", "maxLength": 200},
            "analysis": {"type": "string", "maxLength": 4000},
            "options": {"type": "array", "items": {"type": "string", "maxLength": 500}, "maxItems": 5},
        }, "required": ["task_id", "trigger"], "additionalProperties": False},
    },
    {
        "name": "lease",
        "description": "Lease the files you will edit: acquire (patterns: repo-relative globs; ttl like 15m; a "
                       "key makes a retry safe), renew or release (lease_id), list. conflict: another agent "
                       "holds them (holder, task, expires_at).",
        "inputSchema": {"type": "object", "properties": {
            "action": {"enum": ["acquire", "renew", "release", "list"]},
            "patterns": {"type": "array", "items": {"type": "string", "maxLength": 1024}, "maxItems": 100},
            "lease_id": _ID,
            "ttl": {"type": ["string", "integer"]},
            "task_id": _ID,
            "shared": {"type": "boolean"},
            "reason": {"type": "string", "maxLength": 2000},
            "key": {"type": "string", "maxLength": 200},
        }, "required": ["action"], "additionalProperties": False},
    },
]
"""The tool list: names, descriptions, input schemas (under 1,500 tokens in all: BENCHMARKS.md)."""

MAX_JSON_ARGUMENT = 8000
"""An object argument (``result``, ``fields``) as JSON text at most."""

_REFUSALS = {"lease_lost", "conflict", "not_found", "bad_input", "busy", "unverified", "error"}


class ToolSet:
    """The tools for one agent over one tree: ``call(name, arguments)`` -> ``(reply, is_error)``."""

    def __init__(self, store: Any, agent: str, head: Callable[[], str | None] | None = None) -> None:
        """``head``: the commit checks must have run on (default: git's ``HEAD`` in this directory, as
        ``loki queue complete --evidence`` reads it)."""
        from loki.queue.queue import Queue
        from loki.tasks.verify import git_head
        from loki.text.textsafe import check_name

        self.head = head or git_head
        self.agent = check_name(agent, "agent name")
        self.store = store
        self.queue = Queue(store)

    @staticmethod
    def tools() -> list[dict[str, Any]]:
        return TOOLS

    def call(self, name: str, arguments: Any) -> tuple[dict[str, Any], bool]:
        """Run tool ``name``: its reply (bounded) and whether it is a refusal (nothing changed)."""
        try:
            spec = _TOOL_BY_NAME.get(name)
            if spec is None:
                raise InvalidArgument(f"no tool {name[:60]!r}: the tools are {', '.join(_TOOL_BY_NAME)}", field="name")
            args = _checked(spec, {} if arguments is None else arguments)
            reply = getattr(self, f"_{name}")(**args)
        except LokiError as exc:
            reply = refusal(exc)
        except Exception as exc:  # a bug or an OS error: a structured reply, never a dropped connection
            reply = {"status": "error", "error": type(exc).__name__, "message": _clip_text(str(exc), 400)}
        return bounded(reply), reply["status"] in _REFUSALS

    # -- the tools ----------------------------------------------------------------------------------

    def _ready(self, type: str | None = None, offset: int = 0, limit: int = PAGE) -> dict[str, Any]:
        from loki.tasks.readiness import short_reason

        report = self.queue.ready(types=[type] if type else [])
        rows = [_row(t) | {"ready": True} for t in report["ready"]]
        rows += [_row(t) | {"ready": False, "why": short_reason(t["reasons"])} for t in report["not_ready"]]
        page = rows[offset:offset + limit]
        reply: dict[str, Any] = {"status": "ok", "ready_total": len(report["ready"]),
                                 "waiting_total": len(report["not_ready"]), "tasks": page}
        if offset + limit < len(rows):
            reply["next_offset"] = offset + limit
        return reply

    def _claim(self, task_id: str | None = None, type: str | None = None,
               lease_seconds: float | None = None) -> dict[str, Any]:
        from loki.spend.budgets import claim

        try:  # within the budgets, as `loki queue claim` and `loki work` claim
            task = claim(self.queue, self.agent, types=[type] if type else [], task_id=task_id,
                         lease_seconds=lease_seconds)
        except NothingToDo as exc:
            if task_id is not None:
                return {"status": "not_ready", "task_id": task_id, "reason": _clip_text(exc.message, 600)}
            return self._nothing_ready(exc.message, type)
        return {"status": "claimed", "task_id": task["id"], "token": task["claim_token"],
                "lease_until": task["lease_until"], "task": _task_view(task)}

    def _nothing_ready(self, reason: str, type: str | None) -> dict[str, Any]:
        """Why nothing was ready, as counts by reason and the earliest time one may become ready."""
        from loki.tasks.readiness import BREAKER

        report = self.queue.ready(types=[type] if type else [])
        waiting: dict[str, int] = {}
        times: list[str] = []
        breakers: list[str] = []
        for task in report["not_ready"]:
            kinds = {r["reason"] for r in task["reasons"]}
            for kind in kinds:
                waiting[kind] = waiting.get(kind, 0) + 1
            times += [r["until"] for r in task["reasons"] if r.get("until")]
            if kinds == {BREAKER}:
                breakers += [r["text"] for r in task["reasons"]]
        reply: dict[str, Any] = {"status": "breaker_open" if breakers else "nothing_ready",
                                 "reason": _clip_text(reason, 600), "pending": report["pending"], "waiting": waiting}
        if times:
            reply["next_at"] = min(times)
        if breakers:
            reply["breakers"] = [_clip_text(text, 200) for text in dict.fromkeys(breakers)][:3]
        return reply

    def _heartbeat(self, task_id: str, token: str, lease_seconds: float | None = None) -> dict[str, Any]:
        task = self.queue.heartbeat(task_id, self.agent, token=token, lease_seconds=lease_seconds)
        return {"status": "ok", "task_id": task["id"], "lease_until": task["lease_until"]}

    def _complete(self, task_id: str, token: str, result: dict[str, Any] | None = None,
                  evidence: list[str] | None = None,
                  checks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """``evidence`` is notes kept in the result; ``checks`` is the check results the queue judges against
        the task's checks on the current HEAD, the library call ``loki queue complete --evidence FILE`` makes."""
        from loki.tasks.verify import evidence_checks

        stored: dict[str, Any] = dict(result or {})
        if evidence:
            stored["evidence"] = evidence
        results = evidence_checks(checks, "checks") if checks is not None else None
        from loki.queue.landing import current_branch

        # HEAD here: what the checks ran on, and what a task that must land waits for (docs/verify.md)
        head = self.head()
        task = self.queue.complete(task_id, self.agent, token=token, result=stored or None, evidence=results,
                                   head=head, work_branch=current_branch() if head else None)
        if task["status"] == "landing":
            return {"status": "landing", "task_id": task["id"], "commit": task["landing"]["commit"],
                    "branch": task["landing"]["branch"], "deadline": task["landing"]["deadline"]}
        return {"status": "completed", "task_id": task["id"], "completed_at": task.get("completed_at")}

    def _fail(self, task_id: str, token: str, error: str, approach: str = "", final: bool = False) -> dict[str, Any]:
        error_type, error_class, message = classify(error)
        outcome = self.queue.fail(task_id, self.agent, error=message, error_type=error_type, approach=approach,
                                  token=token, final=final)
        return {"status": "failed", "task_id": task_id, "state": outcome["state"], "retry_at": outcome["retry_at"],
                "error_type": error_type, "error_class": error_class}

    def _release(self, task_id: str, token: str) -> dict[str, Any]:
        task = self.queue.release(task_id, self.agent, token=token)
        return {"status": "released", "task_id": task["id"]}

    def _signal(self, type: str, subject: str | None = None, task_id: str | None = None,
                severity: str | None = None, fields: dict[str, Any] | None = None) -> dict[str, Any]:
        from loki.signals.emit import emit

        result = emit(self.store, type, dict(fields or {}), subject=subject, task_id=task_id, severity=severity,
                      agent=self.agent, known_task=True)
        return {"status": "emitted", "name": result["name"], "type": result["type"]}

    def _escalate(self, task_id: str, trigger: str, analysis: str | None = None,
                  options: list[str] | None = None) -> dict[str, Any]:
        from loki.queue.escalations import escalate

        result = escalate(self.store, task_id, trigger, analysis=analysis, options=options or [], agent=self.agent)
        return {"status": "escalated", "task_id": task_id, "state": result["state"],
                "deadline": result.get("deadline"), "signal": result.get("signal")}


    def _lease(self, action: str, patterns: list[str] | None = None, lease_id: str | None = None,
               ttl: str | int | None = None, task_id: str | None = None, shared: bool | None = None,
               reason: str | None = None, key: str | None = None) -> dict[str, Any]:
        """The path-lease verbs as ``loki lease acquire|renew|release|list`` call them, as the server's agent."""
        given = {"patterns": patterns, "lease_id": lease_id, "ttl": ttl, "task_id": task_id, "shared": shared,
                 "reason": reason, "key": key}
        needed, allowed = _LEASE_ARGUMENTS[action]
        for name in needed:
            if given[name] is None:
                raise InvalidArgument(f"{name} is required with action {action}", field=name)
        for name, value in given.items():
            if value is not None and name not in allowed:
                raise InvalidArgument(f"{name} does not apply to action {action} (it takes: "
                                      f"{', '.join(allowed) or 'nothing more'})", field=name)
        leases = self._leases()
        try:
            if action == "acquire":
                lease = leases.acquire(patterns or [], agent=self.agent, exclusive=not shared, ttl=ttl, task=task_id,
                                       reason=reason, key=key)
                return {"status": "acquired", "reused": lease["reused"], "lease": _lease_view(lease)}
            if action == "renew":
                return {"status": "ok", "lease": _lease_view(leases.renew(lease_id or "", agent=self.agent,
                                                                          ttl=ttl))}
            if action == "release":
                return {"status": "released", "lease": _lease_view(leases.release(lease_id or "", agent=self.agent))}
        except Conflict as exc:  # another agent's live lease or claimed task overlaps: the CLI's exit 4
            details = exc.details
            overlap = details.get("overlap")
            return {"status": "conflict", "error": "leased", "message": _clip_text(exc.message, 600),
                    "holder": _clip_text(str(details.get("holder")), 200), "lease_id": details.get("lease_id"),
                    "task": details.get("task"), "expires_at": details.get("expires_at"),
                    "overlap": [_clip_text(str(p), 200) for p in overlap] if isinstance(overlap, list) else None}
        except InvalidInput as exc:
            if isinstance(exc, UsageError) or "holder" not in exc.details:
                if "pattern" in exc.details and "field" not in exc.details:  # a refused lease pattern
                    exc.details["field"] = "patterns"
                elif exc.details.get("field") == "idempotency_key":
                    exc.details["field"] = "key"
                raise
            # not the holder's lease: refused as the queue refuses another agent's task
            return {"status": "conflict", "error": "not_holder", "message": _clip_text(exc.message, 600),
                    "holder": _clip_text(str(exc.details["holder"]), 200), "lease_id": lease_id}
        now = leases.now()
        held = [_lease_view(item) for item in [*leases.live(now), *leases.claims(now)]]
        return {"status": "ok", "total": len(held), "leases": held[:MAX_PAGE]}

    def _leases(self) -> Any:
        """The tree's path leases, rooted as ``loki lease`` roots them (the directory holding ``.loki/``)."""
        import os

        from loki.leases.leases import PathLeases

        local = self.store.local_root
        return PathLeases(self.store, root=os.path.dirname(os.path.abspath(local)) if local else None)


_TOOL_BY_NAME = {tool["name"]: tool for tool in TOOLS}

_LEASE_ARGUMENTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "acquire": (("patterns",), ("patterns", "ttl", "task_id", "shared", "reason", "key")),
    "renew": (("lease_id",), ("lease_id", "ttl")),
    "release": (("lease_id",), ("lease_id",)),
    "list": ((), ()),
}
"""Per action: the arguments it needs, and all it takes (another is refused, naming it)."""


def _lease_view(lease: dict[str, Any]) -> dict[str, Any]:
    return {"lease_id": lease["lease_id"], "agent": _clip_text(str(lease["agent"]), 200),
            "patterns": [_clip_text(str(p), 300) for p in lease["patterns"]][:20],
            "exclusive": lease["exclusive"], "task": lease.get("task"), "expires_at": lease["expires_at"]}


def classify(error: str) -> tuple[str, str, str]:
    """An agent's error text as ``loki work`` names a failed run's (loki/work/failure.py): the queue's
    ``error_type``, the classifier's class, and the message whose first line names the class. The queue
    redacts secrets where every attempt is made (loki/tasks/record.make_attempt)."""
    from loki.text.errorscan import scan
    from loki.work.failure import QUEUE_ERROR_TYPES

    found = scan(error, None)
    error_class = found.error_class or "unclassified"
    if found.error_class is None:
        return "other", error_class, error
    return QUEUE_ERROR_TYPES.get(error_class, "other"), error_class, f"({error_class}) {error}"


def refusal(exc: LokiError) -> dict[str, Any]:
    """A library error as a structured reply: its status, the error's kind, message and field."""
    details = exc.details
    if isinstance(exc, Conflict):
        stale = exc.message.startswith("lease lost") or ("holder" not in details and "state" not in details)
        status = "lease_lost" if stale else "conflict"
    elif isinstance(exc, (UsageError, InvalidInput, SchemaViolation)):
        status = "bad_input"
    elif isinstance(exc, NotFound):
        status = "not_found"
    elif isinstance(exc, LockTimeout):
        status = "busy"
    elif exc.kind == "unverified":  # loki.tasks.verify.Unverified: the task's checks did not pass
        named = details.get("checks")
        checks = named if isinstance(named, list) else []
        return {"status": "unverified", "checks": [_clip_text(str(c), 200) for c in checks][:10],
                "message": _clip_text(exc.message, 600)}
    elif exc.kind == "budget_exceeded":  # loki.spend.budgets.BudgetExceeded: not now, nothing was claimed
        return {"status": "budget_exceeded", "budget": _clip_text(str(details.get("budget")), 200),
                "refill_at": details.get("refill_at"), "retry_after": details.get("retry_after"),
                "message": _clip_text(exc.message, 400)}
    elif isinstance(exc, CircuitOpen):
        return {"status": "breaker_open", "breaker": exc.name, "retry_after": exc.retry_after,
                "message": _clip_text(exc.message, 400)}
    else:
        status = "error"
    reply: dict[str, Any] = {"status": status, "error": exc.kind, "message": _clip_text(exc.message, 600)}
    for key in ("field", "task_id", "holder", "state"):
        if isinstance(details.get(key), str):
            reply[key] = _clip_text(details[key], 200)
    if "field" in reply:  # the library names some fields as the CLI says them ("task id")
        reply["field"] = reply["field"].replace(" ", "_")
    return reply


# -- arguments -----------------------------------------------------------------------------------------

_TYPE_NAMES = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
               "object": "a JSON object", "array": "a list"}


def _checked(spec: dict[str, Any], arguments: Any) -> dict[str, Any]:
    """``arguments`` checked against the tool's schema, with one clear, short message (never quoting a huge
    value back), and free text free of control characters but newline and tab."""
    from jsonschema import Draft202012Validator

    if not isinstance(arguments, dict):
        raise InvalidArgument("the arguments must be a JSON object", field="arguments")
    # null for an optional argument means "not given", as models often send it; a required one is still missing
    arguments = {key: value for key, value in arguments.items() if value is not None}
    errors = sorted(Draft202012Validator(spec["inputSchema"]).iter_errors(arguments), key=lambda e: list(e.path))
    if errors:
        raise _argument_error(errors[0])
    for key, value in arguments.items():
        for where, text in _strings(value, key):
            _check_text(where, text)
        if isinstance(value, dict):
            size = len(json.dumps(value, ensure_ascii=False, default=str))
            if size > MAX_JSON_ARGUMENT:
                raise InvalidArgument(f"{key} is {size} characters as JSON; the limit is {MAX_JSON_ARGUMENT}",
                                      field=key)
    return dict(arguments)


def _argument_error(error: Any) -> InvalidArgument:
    path = ".".join(str(p) for p in error.path)
    kind, expected = error.validator, error.validator_value
    if kind == "required":
        missing = [name for name in expected if name not in error.instance]
        return InvalidArgument(f"{missing[0]} is required", field=missing[0])
    if kind == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        name = extra[0][:60] if extra else "?"
        known = ", ".join(error.schema.get("properties", {}))
        return InvalidArgument(f"unknown argument {name!r} (this tool takes: {known})", field=name)
    if kind == "type":
        kinds = expected if isinstance(expected, list) else [expected]
        return InvalidArgument(f"{path} must be {' or '.join(_TYPE_NAMES.get(k, str(k)) for k in kinds)}", field=path)
    if kind == "maxLength":
        return InvalidArgument(f"{path} is {len(error.instance)} characters; the limit is {expected}", field=path)
    if kind == "maxItems":
        return InvalidArgument(f"{path} has {len(error.instance)} items; the limit is {expected}", field=path)
    if kind in ("minimum", "maximum"):
        word = "at least" if kind == "minimum" else "at most"
        return InvalidArgument(f"{path} must be {word} {expected}", field=path)
    if kind == "enum":
        return InvalidArgument(f"{path} must be one of {', '.join(map(str, expected))}", field=path)
    return InvalidArgument(f"{path or 'arguments'}: not valid ({kind})", field=path or "arguments")


def _strings(value: Any, where: str) -> list[tuple[str, str]]:
    """Every string in an argument, keys of its objects included, each with where it is (``fields.note``)."""
    if isinstance(value, str):
        return [(where, value)]
    found: list[tuple[str, str]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            found += [(f"{where}.{key}", str(key)), *_strings(item, f"{where}.{key}")]
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _strings(item, f"{where}[{index}]")
    return found


def _check_text(where: str, text: str) -> None:
    from loki.text.textsafe import unsafe_char

    bad = unsafe_char(text.replace("\n", " ").replace("\t", " "))
    if bad is not None:
        index, char = bad
        raise InvalidArgument(f"{where} contains the control character {char!r} at position {index}; only newline "
                              "and tab are allowed", field=where.split(".")[0].split("[")[0])


# -- replies -----------------------------------------------------------------------------------------

def _row(summary: dict[str, Any]) -> dict[str, Any]:
    return {"id": summary["id"], "title": _clip_text(summary["title"], 120), "priority": summary["priority"],
            "type": summary.get("type")}


def _task_view(task: dict[str, Any]) -> dict[str, Any]:
    """What an agent needs of a task it claimed, within the reply's bound: a long description or payload is
    cut, and says so."""
    view: dict[str, Any] = {key: task.get(key) for key in ("id", "title", "description", "type", "priority",
                                                           "labels", "dependencies")}
    view["title"] = _clip_text(str(view["title"]), 300)
    view["description"] = _clip_text(str(view["description"] or ""), 2500)
    payload = task.get("payload")
    if payload not in (None, {}):
        text = json.dumps(payload, ensure_ascii=False, default=str)
        view["payload"] = payload if len(text) <= 1200 else _clip_text(text, 1200)
    attempts = task.get("attempts") or []
    view["attempt"] = len(attempts) + 1
    if attempts:
        last = attempts[-1]
        view["last_error"] = _clip_text(str(last.get("error_message", "")), 500)
        if last.get("approach"):
            view["last_approach"] = _clip_text(str(last["approach"]), 300)
    return view


def _clip_text(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: limit - 40] + f"... [cut: {len(text)} characters]"


def reply_size(reply: Any) -> int:
    """A reply's size as the bound counts it: its JSON text in UTF-8 bytes."""
    return len(json.dumps(reply, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))


def bounded(reply: dict[str, Any], limit: int = MAX_REPLY_BYTES) -> dict[str, Any]:
    """``reply`` as is if its JSON fits ``limit`` bytes, else with its strings and lists cut until it
    does (``"truncated": true``)."""
    if reply_size(reply) <= limit:
        return reply
    for text_limit, items in ((1000, 20), (300, 10), (100, 5), (40, 3)):
        cut: dict[str, Any] = _cut(reply, text_limit, items)
        cut["truncated"] = True
        if reply_size(cut) <= limit:
            return cut
    return {"status": reply.get("status", "error"), "truncated": True}


def _cut(value: Any, text_limit: int, items: int) -> Any:
    if isinstance(value, str):
        return _clip_text(value, text_limit)
    if isinstance(value, dict):
        return {key: _cut(item, text_limit, items) for key, item in list(value.items())[:50]}
    if isinstance(value, list):
        return [_cut(item, text_limit, items) for item in value[:items]]
    return value
