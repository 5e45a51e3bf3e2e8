"""The 3-strike protocol: consecutive failures of the same tool call, per git branch.

References: ADR 059 "Structured Error Logging with 3-Strike Protocol" (state per branch, strike
count, last error hash, escalation at 3), the "tool error retry escalation" pattern (key = tool +
hash of the first 200 characters of the input, escalating tiers) and the ErrorRecovery ticket
(error patterns, recovery suggestions, reset on success). One mechanism:

* a **key** is ``<tool>:<input hash>`` (:mod:`loki.strikes.key` says what "the same input" means);
* every failure of a key adds a strike to it; a success of that key clears it (its attempts
  become ``resolved``); another input has its own count; ``loki errors reset`` clears by hand;
* the count lives in ``.loki/state/errors/<branch>.json`` (:mod:`loki.strikes.gitbranch`), so every
  session and agent on a branch shares it, and it survives restarts (the ADR's point);
* the tier (:mod:`loki.strikes.tiers`) says what to do: record, warn ("MUST use a different approach",
  the recovery suggestion, the previous errors) or stop; reaching the stop tier writes one
  escalation file and emits one HUMAN_REVIEW_NEEDED per streak, not on every later failure.

Everything stored is redacted first (:func:`loki.text.redact.redact`): the input preview, the error
messages, the escalation. The file is written only through :class:`loki.storage.store.Store`.

Python use::

    from loki import open_store
    from loki.strikes.strikes import Strikes

    strikes = Strikes(open_store())            # the branch of the working directory
    outcome = strikes.record_failure("Bash", {"command": "cargo build"}, "bash: cargo: command not found")
    outcome.strike_count, outcome.tier, outcome.guidance
    strikes.record_success("Bash", {"command": "cargo build"})
"""

from __future__ import annotations

from loki.errors import InvalidArgument, InvalidInput, NotFound
from loki.storage import layout
from loki.strikes import cmdprefix, gitbranch
from loki.strikes import key as strikekey
from loki.strikes import view as strikeview
from loki.strikes.tiers import RECORD, STOP, WARN, Tiers, clip, hash_chars, stop_text, warn_text
from loki.text.redact import redact

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from loki.storage.state import StateStore as Store
    from loki.storage.state import StateTxn as Transaction
    from loki.text.errorscan import ScanResult

MAX_KEYS = 500
"""Calls tracked per branch; beyond it the longest-quiet keys are dropped (their attempts stay)."""
ERRORS_PER_KEY = 5
SESSIONS_PER_KEY = 10
MEMORY_IDS_PER_KEY = 20
"""Error memory records remembered per streak (a resolution links at most these)."""
MAX_MESSAGE_CHARS = 300
GENERIC_SUGGESTION = "Read the error and change the call (arguments, path, tool) instead of repeating it."
ESCALATION_PREFIX = "strike-"


class StrikeOutcome:
    """What one recorded failure led to."""

    __slots__ = ("branch", "entry", "escalation", "guidance", "key", "signal", "strike_count", "tier")

    def __init__(self, *, key: str, branch: str, entry: dict[str, Any], tier: str, guidance: str | None,
                 escalation: str | None, signal: str | None) -> None:
        self.key = key
        self.branch = branch
        self.entry = entry
        self.strike_count: int = entry["strike_count"]
        self.tier = tier
        self.guidance = guidance
        """Text for the agent (``additionalContext``), from the warn tier on; None at ``record``."""
        self.escalation = escalation
        """The escalation file written by *this* failure (only the one that reached the stop tier)."""
        self.signal = signal

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "branch": self.branch, "strike_count": self.strike_count, "tier": self.tier,
                "guidance": self.guidance, "escalation": self.escalation, "signal": self.signal, "entry": self.entry}


def empty_state(branch: str) -> dict[str, Any]:
    return {"version": 1, "branch": branch, "attempts": [], "strike_count": 0, "last_error_hash": None, "keys": {}}


class Strikes:
    """Strike state of one branch of one ``.loki/`` tree."""

    def __init__(self, store: Store, *, branch: str | None = None, cwd: str | None = None) -> None:
        """``branch`` explicitly, else the branch checked out at ``cwd`` (default: the working directory)."""
        self.store = store
        self.branch = branch if branch is not None else gitbranch.current_branch(cwd)
        if not self.branch:
            raise InvalidInput("the branch name is empty", field="branch")
        self.rel = strikeview.strike_file(gitbranch.file_name(self.branch))

    @classmethod
    def open(cls, root: str | None = None, *, branch: str | None = None) -> Strikes:
        """The strikes of the nearest ``.loki/`` (or ``root``), on ``branch`` (default: the current one)."""
        from loki.storage.opening import open_store

        return cls(open_store(root), branch=branch)

    # -- configuration -------------------------------------------------------------------------

    @property
    def tiers(self) -> Tiers:
        return Tiers.from_config(self.store.config)

    def key_for(self, tool: str, tool_input: Any) -> tuple[str, str, str]:
        """``(key, input_hash, preview)`` of a call under this tree's ``input_hash_chars``."""
        if not isinstance(tool, str) or not tool:
            raise InvalidInput("the tool name is empty", field="tool_name")
        return strikekey.strike_key(tool, tool_input, hash_chars(self.store.config))

    # -- reading -------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The branch's whole strike file (its empty form when nothing was ever recorded)."""
        doc = self.store.read(self.rel)
        return doc if doc is not None else empty_state(self.branch)

    def lookup(self, tool: str, tool_input: Any) -> dict[str, Any] | None:
        key, _, _ = self.key_for(tool, tool_input)
        entry = self.state()["keys"].get(key)
        return dict(entry, key=key) if entry is not None else None

    def active(self) -> list[dict[str, Any]]:
        """Every call with strikes, the highest count first (then the most recent)."""
        keys = self.state()["keys"]
        rows = [dict(entry, key=key) for key, entry in keys.items()]
        rows.sort(key=lambda e: e["last_at"], reverse=True)
        rows.sort(key=lambda e: e["strike_count"], reverse=True)
        return rows

    def find_key(self, spec: str) -> str:
        """A key from its full spelling, its input hash or a unique prefix of either."""
        keys = self.state()["keys"]
        if spec in keys:
            return spec
        matches: list[str] = [k for k, e in keys.items() if k.startswith(spec) or e["input_hash"].startswith(spec)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise NotFound(f"no strike {spec!r} on branch {self.branch} (see `loki errors list`)", key=spec,
                           branch=self.branch)
        raise InvalidInput(f"{spec!r} matches {len(matches)} strikes on branch {self.branch}: "
                           + ", ".join(sorted(matches)), key=spec, matches=sorted(matches))

    @staticmethod
    def branches(store: Store) -> list[dict[str, Any]]:
        """Every branch with a strike file: ``{"branch", "file", "strike_count", "keys"}``."""
        names = store.list(layout.STRIKES_DIR)
        rows = []
        for name in names:
            if not name.endswith(".json") or name.startswith("."):
                continue
            rel = f"{layout.STRIKES_DIR}/{name}"
            doc = store.read(rel)
            if doc is None:
                continue
            rows.append({"branch": doc["branch"], "file": rel, "strike_count": doc["strike_count"],
                         "keys": len(doc["keys"])})
        return rows

    # -- writing -------------------------------------------------------------------------------

    def record_failure(
        self,
        tool: str,
        tool_input: Any,
        error: str,
        *,
        result: ScanResult | None = None,
        session: str | None = None,
        memory_id: str | None = None,
        call_number: int | None = None,
        capture: Callable[[], tuple[str | None, int | None]] | None = None,
    ) -> StrikeOutcome:
        """Count one failure of a call; escalate (once per streak) when it reaches the stop tier.

        ``result``: errorscan's reading of the error (the hooks pass the one they made with the exit
        code and the command); without it the text is scanned on its own. ``memory_id``: the error
        memory record of this failure, kept with the streak so a success can name what it resolved;
        ``call_number``: the branch's call count at this failure (:mod:`loki.strikes.callcount`).
        ``capture``: writes that belong to this failure elsewhere (the hooks count the call and
        append it to error memory) and returns ``(memory_id, call_number)``; it runs once the
        branch file's lock is held, so a failure that times out on that lock has written nothing.
        """
        if result is None:
            from loki.text.errorscan import scan

            result = scan(error or "")
        key, input_hash, preview = self.key_for(tool, tool_input)
        message = _message(error, result)
        error_hash = _error_hash(message)
        error_class = result.error_class if result.is_error else "tool_error"
        suggestion = result.suggestion if result.is_error and result.suggestion else GENERIC_SUGGESTION
        location = _location(result)
        session = _session(session)
        label = strikekey.call_label(tool, tool_input)
        prefix = cmdprefix.call_prefix(tool, tool_input)
        tiers = self.tiers
        now = self.store.now_ts()
        escalation = signal = None
        with self.store.transaction(self.rel) as txn:
            doc = self._read(txn)
            if capture is not None:
                memory_id, call_number = capture()
            entry = doc["keys"].get(key)
            if entry is None:
                entry = {"tool": tool, "input_hash": input_hash, "input_preview": preview, "strike_count": 0,
                         "first_at": now, "last_at": now, "escalated_at": None, "escalation": None,
                         "errors": [], "sessions": []}
                doc["keys"][key] = entry
            entry["strike_count"] += 1
            entry.update(call=label, last_at=now, last_error=message, last_error_hash=error_hash,
                         error_class=error_class, suggestion=suggestion, location=location)
            entry["errors"] = [*entry.get("errors", []), message][-ERRORS_PER_KEY:]
            entry["prefix"] = prefix
            if memory_id is not None:
                entry["memory_ids"] = [*entry.get("memory_ids", []), memory_id][-MEMORY_IDS_PER_KEY:]
            if call_number is not None:
                entry["last_call"] = call_number
            if session is not None and session not in entry.setdefault("sessions", []):
                entry["sessions"] = [*entry["sessions"], session][-SESSIONS_PER_KEY:]
            entry["last_session"] = session  # told right after this failure: PreToolUse need not repeat it
            entry.pop("fixed_by", None)  # failing again after a variant passed: that was not its fix
            doc["attempts"].append({"timestamp": now, "tool": tool, "input_hash": input_hash, "error": message,
                                    "error_hash": error_hash, "error_class": error_class,
                                    "strike": entry["strike_count"], "status": "unresolved", "session": session})
            history = int(self.store.setting("strikes", "history", 50))
            doc["attempts"] = doc["attempts"][-history:]
            doc["last_error_hash"] = error_hash
            _forget_quiet_keys(doc, keep=key)
            _finish(doc, now)
            tier = tiers.tier(entry["strike_count"])
            if tier == STOP and tiers.escalate and entry.get("escalated_at") is None:
                # Inside the lock: a second process failing at the same moment sees escalated_at set.
                # File and signal come before the commit: a crash in between repeats the escalation
                # (a human sees it twice) rather than losing it.
                escalation, signal = self._escalate(doc, key, entry, label, tiers, session, now)
                entry.update(escalated_at=now, escalation=escalation)
            txn.write(self.rel, doc)
        self._keep_local(layout.CONFIG)  # the stop tier's settings are read from the copy too
        guidance = {RECORD: None, WARN: warn_text, STOP: stop_text}[tier]
        files = self.store.backend == "files"  # else no escalation file exists on this machine to point at
        text = (None if guidance is None else stop_text(tiers, entry, label, files=files) if tier == STOP
                else guidance(tiers, entry, label))
        return StrikeOutcome(key=key, branch=self.branch, entry=dict(entry), tier=tier, guidance=text,
                             escalation=escalation, signal=signal)

    def record_success(
        self,
        tool: str,
        tool_input: Any,
        *,
        call_number: int | None = None,
        on_resolved: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> dict[str, Any] | None:
        """A success of a call clears its strikes; returns the cleared entry (None if it had none).

        It also *ends*, for error memory, every streak of the same kind of call: same tool, same
        command prefix (:mod:`loki.strikes.cmdprefix`), with errors captured in memory. Each such streak is
        passed to ``on_resolved`` (inside the branch file's lock, before the commit, so two
        processes never resolve one streak twice) as ``{"key", "entry", "memory_ids",
        "calls_between", "same_input"}``; its ``memory_ids`` are then emptied, so it is resolved
        once. A streak of another input keeps its strikes: only a success of the same call clears
        them (docs/hooks.md).
        """
        key, _, _ = self.key_for(tool, tool_input)
        prefix = cmdprefix.call_prefix(tool, tool_input)
        keys = self.state()["keys"]
        if key not in keys and not _resolvable(keys, key, tool, prefix):  # the common case, without the lock
            return None
        cleared: dict[str, Any] | None = None
        with self.store.transaction(self.rel) as txn:
            doc = self._read(txn)
            ended = []
            now = self.store.now_ts()
            for other in _resolvable(doc["keys"], key, tool, prefix):
                entry = doc["keys"][other]
                if other != key:  # a variant passed: the exact call stays stopped, its deny names the variant
                    entry["fixed_by"] = {"call": strikekey.call_label(tool, tool_input), "at": now}
                last = entry.get("last_call")
                between = call_number - last - 1 if isinstance(last, int) and call_number is not None else 0
                ended.append({"key": other, "entry": dict(entry), "memory_ids": list(entry["memory_ids"]),
                              "calls_between": max(0, between), "same_input": other == key})
                entry["memory_ids"] = []
            if key in doc["keys"]:
                entry = doc["keys"].pop(key)
                cleared = dict(entry, key=key)
                _mark_attempts(doc, entry, "resolved")
            if ended and on_resolved is not None:
                on_resolved(ended)
            if ended or cleared is not None:
                _finish(doc, now)
                txn.write(self.rel, doc)
        if ended or cleared is not None:
            self._keep_local()
        if cleared is not None:
            self._close_escalation(cleared, "the same call succeeded; the strikes were cleared")
        return cleared

    def reset(self, key: str | None = None, *, all_keys: bool = False) -> list[dict[str, Any]]:
        """Clear one call's strikes (``key``: full key, hash or unique prefix) or every call's."""
        if all_keys == (key is not None):
            raise InvalidArgument("name one strike to reset, or ask for all of them", field="key")
        keys = list(self.state()["keys"]) if all_keys else [self.find_key(str(key))]
        cleared = self._clear(keys, "reset") if keys else []
        for entry in cleared:
            self._close_escalation(entry, "the strikes were reset by hand (`loki errors reset`)")
        return cleared

    def _clear(self, keys: list[str], status: str) -> list[dict[str, Any]]:
        cleared = []
        with self.store.transaction(self.rel) as txn:
            doc = self._read(txn)
            for key in keys:
                entry = doc["keys"].pop(key, None)
                if entry is None:
                    continue
                cleared.append(dict(entry, key=key))
                _mark_attempts(doc, entry, status)
            if cleared:
                _finish(doc, self.store.now_ts())
                txn.write(self.rel, doc)
        if cleared:
            self._keep_local()
        return cleared

    def _keep_local(self, *others: str) -> None:
        """This machine's copy of the branch's strikes follows every write made here (a database tree:
        the PreToolUse hook reads the copy, docs/postgres.md; files: nothing to copy). Best effort: the
        write is done, and a stale copy is refreshed by the next hook that connects."""
        from contextlib import suppress

        from loki.errors import LokiError

        store = self.store
        if store.keeps_local_copies:
            with suppress(LokiError, OSError):
                store.keep_local([self.rel, *others])

    def _read(self, txn: Transaction) -> dict[str, Any]:
        doc = txn.read(self.rel)
        return doc if doc is not None else empty_state(self.branch)

    # -- escalation ----------------------------------------------------------------------------

    def _close_escalation(self, entry: dict[str, Any], why: str) -> None:
        """Mark a cleared streak's escalation resolved, so briefings stop listing it as waiting."""
        from loki.queue.escalations import mark_resolved

        name = entry.get("escalation")
        if isinstance(name, str) and name:
            note = f"{why} at {self.store.now_ts()} (key {entry['key']}, branch {self.branch})."
            mark_resolved(self.store, name, note)

    def _escalate(self, doc: dict[str, Any], key: str, entry: dict[str, Any], label: str, tiers: Tiers,
                  session: str | None, now: str) -> tuple[str, str]:
        """Write the escalation file and emit HUMAN_REVIEW_NEEDED; returns (file name, signal name)."""
        from loki.queue import escalations
        from loki.signals import emit as signals
        from loki.signals import types as signaltypes

        count = entry["strike_count"]
        task_id = ESCALATION_PREFIX + entry["input_hash"]
        mine = [a for a in doc["attempts"] if a["tool"] == entry["tool"] and a["input_hash"] == entry["input_hash"]
                and a["status"] == "unresolved"]
        attempts = [{"attempt_number": a.get("strike", n), "timestamp": a["timestamp"], "agent_id": a["session"] or "",
                     "approach": label, "error_type": a.get("error_class") or "",
                     "error_message": a["error"]} for n, a in enumerate(mine, start=1)]
        errors = entry.get("errors", [])
        same = len(set(errors)) == 1
        sessions = entry.get("sessions", [])
        decision = {"deny": "denied", "ask": "held for the user's approval", "context": "flagged to the agent"}
        analysis = (
            f"{count} consecutive failures of the same call ({label}; key {key}) on branch {self.branch}, "
            f"from {len(sessions) or 1} session(s). "
            + ("The error was the same every time. " if same else "The error changed between attempts. ")
            + f"Error class: {entry.get('error_class')}. Suggested recovery: {entry.get('suggestion')} "
            f"The agent was told to change approach at strike {tiers.warn_at}; further identical calls are "
            f"{decision[tiers.stop_decision]} by the PreToolUse hook until the strike is cleared."
        )
        options = [
            f"Fix the cause (install the tool, fix the path or credentials, settle the spec), then clear the strike: "
            f"`loki errors reset {key}`.",
            "Tell the agent which different approach to take; the blocked call stays blocked until it is cleared.",
            "If the failure is expected for now (a test being fixed), clear the strike; a team that iterates on "
            "one test command can set strikes.stop_decision to \"ask\" or \"context\".",
        ]
        values = {
            "task_title": f"{label} keeps failing on branch {self.branch}",
            "task_id": task_id,
            "failure_count": str(count),
            "trigger": f"3-strike protocol: the same call failed {count} times in a row",
            "error_summary": entry.get("last_error", ""),
            "attempts_log": escalations.attempts_table(attempts),
            "agent_analysis": analysis,
            "recommended_options": "\n".join(f"{n}. {text}" for n, text in enumerate(options, start=1)),
            "timestamp": now,
            "agent": session or "loki hook",
        }
        rel = escalations.write_file(self.store, task_id=task_id, values=values, now=now)  # redacts them
        file_name = rel.rsplit("/", 1)[-1]
        emitted = signals.emit(
            self.store, signaltypes.HUMAN_REVIEW_NEEDED,
            {"reason": values["trigger"], "context": f"{label} on branch {self.branch}: {values['error_summary']}",
             "blocking": True, "escalation": file_name, "strike_key": key, "branch": self.branch},
            severity="high", agent=session,
        )
        return file_name, emitted["name"]


def _resolvable(keys: dict[str, Any], key: str, tool: str, prefix: str) -> list[str]:
    """Streaks a success of ``key`` ends for error memory: its own, and the same tool and prefix's."""
    return [other for other, entry in keys.items()
            if entry.get("memory_ids") and entry["tool"] == tool
            and (other == key or (prefix and entry.get("prefix") == prefix))]


def _mark_attempts(doc: dict[str, Any], entry: dict[str, Any], status: str) -> None:
    for attempt in doc["attempts"]:
        if (attempt["tool"] == entry["tool"] and attempt["input_hash"] == entry["input_hash"]
                and attempt["status"] == "unresolved"):
            attempt["status"] = status


def _message(error: str, result: ScanResult) -> str:
    """The line that says what went wrong, redacted and clipped."""
    text = result.message if result.is_error and result.message else ""
    if not text:
        text = next((line for line in (error or "").splitlines() if line.strip()), "") or "the call failed"
    # Redact before clipping: a cut through a token would leave a piece no rule recognises.
    return clip(redact(text[: MAX_MESSAGE_CHARS + strikekey.REDACT_MARGIN]), MAX_MESSAGE_CHARS)


def _error_hash(message: str) -> str:
    from loki.text.errorscan import normalise_error

    return strikekey.text_hash(normalise_error(message))


def _session(session: str | None) -> str | None:
    if not isinstance(session, str) or not session.strip():
        return None
    return clip(redact(session[:1024]), 128)


def _forget_quiet_keys(doc: dict[str, Any], *, keep: str) -> None:
    keys = doc["keys"]
    if len(keys) <= MAX_KEYS:
        return
    quiet = sorted((k for k in keys if k != keep), key=lambda k: keys[k]["last_at"])
    for key in quiet[: len(keys) - MAX_KEYS]:
        del keys[key]


def _finish(doc: dict[str, Any], now: str) -> None:
    doc["strike_count"] = max((e["strike_count"] for e in doc["keys"].values()), default=0)
    doc["updated_at"] = now


def _location(result: ScanResult) -> str | None:
    """``file:line`` of the failure's primary location (errorscan lists it first), redacted; None without one."""
    if not result.is_error or not result.file_refs:
        return None
    ref = result.file_refs[0]
    return clip(redact(f"{ref.file}:{ref.line}"), 300)
