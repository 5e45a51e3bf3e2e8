"""What each Claude Code hook event does (docs/hooks.md). :mod:`loki.hooks.boundary` calls these.

Every handler takes the checked payload and the ``.loki/`` root and returns the JSON answer to
print, or None to say nothing:

* ``PreToolUse``: read-only and lock-free (:mod:`loki.strikes.view`, :mod:`loki.memory.hints`).
  Nothing to do unless this exact call has strikes on this branch; at the warn tier it adds
  context, at the stop tier it answers ``permissionDecision`` ``deny`` (or ``ask``, or context
  only: ``strikes.stop_decision``). Before a Bash command whose prefix failed before and was
  fixed, it adds error memory's one-line hint ("last time this failed with ...; it was fixed by ...").
* ``PostToolUseFailure``: captures the failure in error memory (:mod:`loki.memory.memory`: one appended
  line), records a strike (:class:`loki.strikes.strikes.Strikes`) and, from the warn tier on, answers
  ``additionalContext``: change approach, the recovery suggestion, previous errors.
* ``PostToolUse``: a success clears the call's strikes and links the streaks it ends (same tool,
  same command prefix) to it as their resolution in error memory; an output that shows a
  failure anyway (:mod:`loki.hooks.tooloutcome`) counts as one. While the branch has strikes, every
  call is counted (:mod:`loki.strikes.callcount`): a resolution's confidence falls with the calls between.
* ``SessionStart``: a short briefing: the dead-letter review, open escalations, this branch's
  strikes, the head of CONTINUITY.md.
* ``Stop``: advisory only. It mentions calls stopped on this branch, and the failing checks of the tasks
  this agent holds, to the user (``systemMessage``) and never answers ``decision: "block"``: a hook must
  not trap a session.
* ``TaskCompleted`` (Claude Code's task list): the mapped loki task's declared checks run, and a failing
  one answers ``decision: "block"``: the one event where loki refuses, since refusing is its purpose.

The hot handlers import only what they need; the store and everything behind it are imported
inside the functions that write. They read strike state, hints and settings from ``view``
(:func:`loki.strikes.view.hot_root`): the tree itself, or on a tree whose state is in a database this
machine's copies, which the handlers that connect anyway keep fresh (``store.keep_local``:
``Strikes`` after each write, error memory after a resolution, SessionStart for all of them).
"""

from __future__ import annotations

import os

from loki.hooks.payload import HookError, work_dir
from loki.memory import hints as memoryhints
from loki.storage import layout
from loki.strikes import callcount, gitbranch
from loki.strikes import key as strikekey
from loki.strikes import view as strikeview
from loki.strikes.tiers import STOP, WARN, Tiers, deny_reason, hash_chars, stop_text, warn_text
from loki.wording import plural

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from loki.hooks.tooloutcome import Outcome
    from loki.storage.state import StateStore as Store
    from loki.strikes.strikes import Strikes

BRIEFING_MAX_CHARS = 4000
CONTINUITY_HEAD_LINES = 20
CONTINUITY_HEAD_CHARS = 1500
LISTED = 5


def context_answer(event_name: str, text: str) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": event_name, "additionalContext": text}}


def _tool(payload: dict[str, Any]) -> tuple[str, Any]:
    tool_input = payload.get("tool_input")
    return str(payload["tool_name"]), {} if tool_input is None else tool_input


STORE_OPENER: Callable[[str], Store] | None = None
"""Set by a resident process that keeps warm state (``loki serve``: :mod:`loki.serve.warm`); a command hook
leaves it None and opens the tree's store for its one call."""


def _store(root: str) -> Store:
    if STORE_OPENER is not None:
        return STORE_OPENER(root)
    from loki.storage.opening import open_store

    return open_store(root)


# -- PreToolUse (hot path) ---------------------------------------------------------------------


def pre_tool_use(payload: dict[str, Any], root: str, *, hint: bool = True) -> dict[str, Any] | None:
    """``hint=False`` for an agent that cannot take context before a call (Gemini CLI): the hint
    then goes with the failure's answer instead (``post_tool_use_failure(hint=True)``)."""
    leased = _lease_answer(payload, root)
    if leased is not None and "permissionDecision" in leased["hookSpecificOutput"]:
        return leased  # a file another agent holds: nothing else matters for this call
    answer = _strike_answer(payload, strikeview.hot_root(root))
    if leased is not None:
        answer = _with_context(answer, leased["hookSpecificOutput"]["additionalContext"])
    return with_hint(answer, payload, root, "PreToolUse") if hint else answer


def _lease_answer(payload: dict[str, Any], root: str) -> dict[str, Any] | None:
    """The path-lease check (:mod:`loki.hooks.leasegate`), on this machine's clock (``LOKI_NOW`` in tests)."""
    from loki.clock import default_clock, format_ts
    from loki.hooks import leasegate

    return leasegate.check(payload, root, format_ts(default_clock().now()))


def _with_context(answer: dict[str, Any] | None, text: str) -> dict[str, Any]:
    if answer is None:
        return context_answer("PreToolUse", text)
    output = answer["hookSpecificOutput"]
    field = "additionalContext" if "additionalContext" in output else "permissionDecisionReason"
    output[field] = f"{text}\n{output[field]}"
    return answer


def with_hint(answer: dict[str, Any] | None, payload: dict[str, Any], root: str,
              event_name: str) -> dict[str, Any] | None:
    """``answer`` with error memory's line for this call added (one more line of its context or of
    its denial's reason), or the line alone; ``answer`` itself when there is no hint."""
    view = strikeview.hot_root(root)
    tool, tool_input = _tool(payload)
    hint = memoryhints.hint_for(view, tool, tool_input)  # never raises: any problem is no hint
    if hint is None:
        return answer
    if answer is None:
        return context_answer(event_name, hint)
    output = answer["hookSpecificOutput"]
    field = "additionalContext" if "additionalContext" in output else "permissionDecisionReason"
    output[field] = f"{output[field]}\n{hint}"
    return answer


def _strike_answer(payload: dict[str, Any], view: str) -> dict[str, Any] | None:
    if not strikeview.any_strike_files(view):  # no strikes anywhere: the common case
        return None
    branch = gitbranch.current_branch(work_dir(payload))
    try:
        keys = strikeview.read_keys(view, gitbranch.file_name(branch))
    except strikeview.Unreadable as exc:
        raise HookError(f"{exc}; no call is stopped until it is fixed") from None
    if not keys:
        return None
    config = strikeview.read_config(view)
    tool, tool_input = _tool(payload)
    key, _, _ = strikekey.strike_key(tool, tool_input, hash_chars(config))
    entry = keys.get(key)
    if not isinstance(entry, dict) or not isinstance(entry.get("strike_count"), int):
        return None
    tiers = Tiers.from_config(config)
    tier = tiers.tier(entry["strike_count"])
    label = strikekey.call_label(tool, tool_input)
    if tier == STOP:
        # On a database tree the hot path reads this machine's copies (.loki/cache/): no escalation file to name.
        files = os.path.basename(view) != layout.LOCAL_CACHE_DIR
        if tiers.stop_decision == "context":
            return context_answer("PreToolUse", stop_text(tiers, entry, label, files=files))
        return {"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": tiers.stop_decision,
            "permissionDecisionReason": deny_reason(tiers, entry, label, key, branch, files=files),
        }}
    if tier == WARN:
        session = payload.get("session_id")
        if isinstance(session, str) and session and session == entry.get("last_session"):
            return None  # this session got the warning right after the failure: once is enough
        return context_answer("PreToolUse", warn_text(tiers, entry, label))
    return None


# -- PostToolUse / PostToolUseFailure ----------------------------------------------------------


def post_tool_use(payload: dict[str, Any], root: str, *, hint: bool = False) -> dict[str, Any] | None:
    """``hint=True``: a call that counts as a failure also gets error memory's line (see pre_tool_use)."""
    from loki.hooks.tooloutcome import FAILURE, SUCCESS, after_success

    tool, tool_input = _tool(payload)
    outcome = after_success(tool, tool_input, payload.get("tool_response"))
    if outcome.kind == FAILURE:
        return _record_failure(payload, root, outcome, "PostToolUse", hint=hint)
    view = strikeview.hot_root(root)
    branch, keys = _branch_keys(payload, view)
    if keys is None or not keys:
        if keys is None:  # unreadable: let the store report it properly
            _record_success(payload, root, str(branch), None)
        return None
    call = callcount.tick(view, gitbranch.file_name(str(branch)))  # a call in between, for resolutions
    if outcome.kind == SUCCESS and _ends_a_streak(keys, view, tool, tool_input):
        _record_success(payload, root, str(branch), call)
    return None


def post_tool_use_failure(payload: dict[str, Any], root: str, *, hint: bool = False) -> dict[str, Any] | None:
    """``hint=True``: the answer also carries error memory's line for this call (see pre_tool_use)."""
    from loki.hooks.tooloutcome import FAILURE, after_failure

    tool, tool_input = _tool(payload)
    outcome = after_failure(tool, tool_input, payload.get("error"), payload.get("is_interrupt"))
    if outcome.kind != FAILURE:
        view = strikeview.hot_root(root)
        branch, keys = _branch_keys(payload, view)
        if keys:
            callcount.tick(view, gitbranch.file_name(str(branch)))
        return None
    return _record_failure(payload, root, outcome, "PostToolUseFailure", hint=hint)


def _branch_keys(payload: dict[str, Any], view: str) -> tuple[str | None, dict[str, Any] | None]:
    """Lock-free: the branch and its strike keys; ``(None, {})`` without any strike file, keys None if unreadable."""
    if not strikeview.any_strike_files(view):  # most calls: no strike file anywhere
        return None, {}
    branch = gitbranch.current_branch(work_dir(payload))
    try:
        return branch, strikeview.read_keys(view, gitbranch.file_name(branch))
    except strikeview.Unreadable:
        return branch, None


def _ends_a_streak(keys: dict[str, Any], view: str, tool: str, tool_input: Any) -> bool:
    """Does this success clear its own strikes, or end a streak of the same kind for error memory?"""
    key, _, _ = strikekey.strike_key(tool, tool_input, hash_chars(strikeview.read_config(view)))
    if key in keys:
        return True
    candidates = [e for e in keys.values() if isinstance(e, dict) and e.get("memory_ids") and e.get("tool") == tool]
    if not candidates:
        return False
    from loki.strikes import cmdprefix

    prefix = cmdprefix.call_prefix(tool, tool_input)
    return bool(prefix) and any(e.get("prefix") == prefix for e in candidates)


def _record_success(payload: dict[str, Any], root: str, branch: str, call: int | None) -> None:
    from loki.strikes.strikes import Strikes

    tool, tool_input = _tool(payload)
    store = _store(root)

    def link(streaks: list[dict[str, Any]]) -> None:
        try:
            from loki.memory.memory import ErrorMemory

            ErrorMemory(store).record_resolutions(streaks, tool, tool_input, branch=branch, cwd=work_dir(payload),
                                                  session_id=payload.get("session_id"))
        except Exception as exc:  # memory is an enhancement: never fail the hook for it
            _memory_skipped("the resolution was not recorded", exc)

    Strikes(store, branch=branch).record_success(tool, tool_input, call_number=call, on_resolved=link)


def _record_failure(payload: dict[str, Any], root: str, outcome: Outcome, event_name: str, *,
                    hint: bool) -> dict[str, Any] | None:
    from loki.strikes.strikes import Strikes

    tool, tool_input = _tool(payload)
    store = _store(root)
    strikes = Strikes(store, cwd=work_dir(payload))
    strikes.state()  # an unusable strike file ends the hook here, before anything is written

    def capture() -> tuple[str | None, int | None]:
        # Run by record_failure once the branch's strike lock is held: a hook that times out on
        # that lock exits 1 having written nothing, neither the call count nor error memory.
        call = callcount.tick(strikeview.hot_root(root), gitbranch.file_name(strikes.branch))
        return _capture(store, payload, outcome, strikes), call

    recorded = strikes.record_failure(tool, tool_input, outcome.error, result=outcome.result,
                                      session=payload.get("session_id"), capture=capture)
    answer = None if recorded.guidance is None else context_answer(event_name, recorded.guidance)
    return with_hint(answer, payload, root, event_name) if hint else answer


def _capture(store: Store, payload: dict[str, Any], outcome: Outcome, strikes: Strikes) -> str | None:
    """Append the failure to error memory (one line, no index work); its id, or None if that failed."""
    tool, tool_input = _tool(payload)
    try:
        from loki.memory.memory import ErrorMemory

        record = ErrorMemory(store).capture(
            tool, tool_input, outcome.error, result=outcome.result, exit_code=outcome.exit_code,
            branch=strikes.branch, cwd=work_dir(payload), session_id=payload.get("session_id"),
            strike_key=strikes.key_for(tool, tool_input)[0])
    except Exception as exc:  # memory is an enhancement: the strike is still recorded
        _memory_skipped("the failure was not captured", exc)
        return None
    return str(record["id"])


def _memory_skipped(what: str, exc: Exception) -> None:
    import sys

    message = getattr(exc, "message", None)
    reason = message if isinstance(message, str) else f"{type(exc).__name__}: {exc}"
    sys.stderr.write(f"loki hook: error memory: {what} ({' '.join(reason.split())})\n")


# -- SessionStart --------------------------------------------------------------------------------


def session_start(payload: dict[str, Any], root: str) -> dict[str, Any] | None:
    from loki.hooks.serving import session_start_note

    note = session_start_note(root)  # first: a server it starts answers this session's first tool call
    answer = briefing(_store(root), payload)
    if note is None:
        return answer
    if answer is None:
        answer = context_answer("SessionStart", note)
    else:
        output = answer["hookSpecificOutput"]
        output["additionalContext"] = f"{note}\n{output['additionalContext']}"
    if "WARNING" in note:
        answer["systemMessage"] = f"loki: {note}"
    return answer


def briefing(store: Store, payload: dict[str, Any]) -> dict[str, Any] | None:
    """The SessionStart answer for ``store``'s tree: the briefing's sections, each guarded."""
    from loki.errors import LokiError

    sections: list[str] = []
    builders: list[tuple[str, Callable[[Store, dict[str, Any]], str | None]]] = [
        ("Queue", _queue_section),
        ("Signals", _signals_section),
        ("Checks", _checks_section),
        ("Landing", _landing_section),
        ("Dead-letter review", _deadletter_section),
        ("Escalations", _escalations_section),
        ("Strikes", _strikes_section),
        ("CONTINUITY.md", _continuity_section),
    ]
    for title, build in builders:
        try:
            text = build(store, payload)
        except LokiError as exc:  # one broken part must not hide the others
            text = f"- {title}: unavailable ({exc.message})"
        if text:
            sections.append(text)
    _refresh_local_copies(store)
    if not sections:
        return None
    text = "loki briefing (this repository's shared agent state in .loki/; `loki status` shows more):\n"
    text += "\n".join(sections)
    if len(text) > BRIEFING_MAX_CHARS:
        text = text[: BRIEFING_MAX_CHARS - 20] + "\n[... cut short]"
    return context_answer("SessionStart", text)


def _refresh_local_copies(store: Store) -> None:
    """A new session starts with this machine's copies of the team's strikes, hints and settings
    up to date (a database tree; files: nothing to do). A failure costs the briefing nothing."""
    if not store.keeps_local_copies:
        return
    from loki.errors import LokiError
    from loki.storage import layout

    try:
        store.keep_local([layout.CONFIG], [layout.STRIKES_DIR, layout.MEMORY_HINTS_DIR])
        from loki.leases.leases import PathLeases

        PathLeases(store).refresh_index()  # and the path holders the PreToolUse hook checks edits against
    except LokiError as exc:
        import sys

        sys.stderr.write(f"loki hook: the local copies of strikes and hints were not refreshed ({exc.message})\n")


def _call(entry: dict[str, Any]) -> str:
    """``Bash `npm test``` (older entries without a label show their input preview)."""
    call = entry.get("call")
    return call if isinstance(call, str) and call else f"{entry['tool']} {entry.get('input_preview', '')[:100]}"


def _queue_section(store: Store, payload: dict[str, Any]) -> str | None:
    """How to get work: how many tasks are ready now, and the command that takes the best one.

    "Ready" is what ``claim`` would hand out, counted as ``loki queue ready`` counts it
    (:func:`loki.queue.explain.ready_count`: the one rule of loki/tasks/readiness.py; deferred, backing off,
    held, dependencies, breakers), read without the lock."""
    from loki.queue.explain import ready_count

    view = store.tasks().view(["in-progress", "blocked"])
    ready, pending = ready_count(store)
    if not pending and not view["in-progress"]:
        return None
    waiting = pending - ready
    parts = [f"{ready} ready" + (" (`loki queue claim --agent NAME -q` takes the best one and prints its id; "
                                 "heartbeat, then complete or fail it)" if ready else "")]
    if waiting:
        parts.append(f"{waiting} pending but not ready (`loki queue ready --explain` says why)")
    parts.append(f"{len(view['in-progress'])} in progress")
    if view["blocked"]:
        parts.append(f"{len(view['blocked'])} blocked on a human")
    return "- Queue: " + ", ".join(parts) + "."


def _checks_section(store: Store, payload: dict[str, Any]) -> str | None:
    """Tasks whose declared checks failed at their last attempt (docs/verify.md): what an agent picking
    them up must fix first."""
    from loki.tasks.verify import checks_failing

    failing = checks_failing(store.tasks().view(["pending", "in-progress", "blocked", "dead-letter"]))
    if not failing:
        return None
    shown = ", ".join(f"{row['task_id']} {row['check']!r} ({row['state']}, {row['error_class']})"
                      for row in failing[:5])
    more = f" and {len(failing) - 5} more" if len(failing) > 5 else ""
    return (f"- Checks: {plural(len(failing), 'task')} failed a declared check at the last attempt: {shown}{more} "
            "(`loki queue show ID` has the check's output; the task completes only when its checks pass).")


def _landing_section(store: Store, payload: dict[str, Any]) -> str | None:
    """Tasks verified but not landed (docs/verify.md, "Landing"): done only once their commit reaches
    their branch, so what depends on them waits."""
    from loki.tasks.landing import landing_lines, landing_text

    rows = landing_lines(store.tasks().view(["landing"]), limit=0)
    if not rows:
        return None
    return (f"- Landing: {plural(len(rows), 'task')} verified and waiting to land: {landing_text(rows)} (each "
            "completes when its commit reaches the branch: merge or push it; `loki queue land-check` checks now).")


def _signals_section(store: Store, payload: dict[str, Any]) -> str | None:
    """Signals wait for a watcher; say so when none runs (nothing applies them meanwhile)."""
    from loki.signals.emit import entries
    from loki.watch.consumer import consumer_status

    waiting = len(entries(store, "waiting"))
    if not waiting or consumer_status(store) is not None:
        return None
    return (f"- Signals: {plural(waiting, 'signal')} waiting and no watcher consumes them: nothing applies them until "
            "`loki watch` runs (in a terminal of its own; `loki watch --once` applies them now).")


def _deadletter_section(store: Store, payload: dict[str, Any]) -> str | None:
    from loki.queue.deadletter import DeadLetter

    review = DeadLetter(store).review()
    entries = int(review.get("entries", 0))
    if review.get("skipped"):
        if not entries:
            return None
        return (f"- Dead-letter queue: {plural(entries, 'entry', 'entries')} waiting; last "
                f"reviewed {review['last_reviewed']} (`loki deadletter list`).")
    if not entries:
        return None
    counts = review["counts"]
    lines = [f"- Dead-letter review just ran on {plural(entries, 'entry', 'entries')}: "
             f"{counts['retry']} retried, {counts['abandon']} abandoned, {counts['escalate']} escalated, "
             f"{counts['leave']} left."]
    acted = [d for d in review["decisions"] if d["action"] != "leave"]
    lines += [f"  - {d['task_id']}: {d['action']} ({d['reason']})" for d in acted[:LISTED]]
    return "\n".join(lines)


def _escalations_section(store: Store, payload: dict[str, Any]) -> str | None:
    from loki.queue.escalations import list_escalations

    waiting = list_escalations(store, open_only=True)
    if not waiting:
        return None
    lines = [f"- {plural(len(waiting), 'open escalation')} waiting for a human (`loki escalations list --open`); "
             "do not work around them:"]
    files = store.backend == "files"
    for row in waiting[-LISTED:]:
        title = row.get("title") or row.get("trigger") or ""
        lines.append(f"  - {_escalation_name(row['file'], files)}: {title}")
    return "\n".join(lines)


def _escalation_name(file_name: str, files: bool) -> str:
    """An escalation as an agent finds it: its file under .loki/ on a file tree, else the command that shows it
    (a database tree has no such file on this machine)."""
    return f"escalations/{file_name}" if files else f"`loki escalations show {file_name.removesuffix('.md')}`"


def _strikes_section(store: Store, payload: dict[str, Any]) -> str | None:
    from loki.strikes.strikes import Strikes

    strikes = Strikes(store, cwd=work_dir(payload))
    active = strikes.active()
    if not active:
        return None
    tiers = strikes.tiers
    lines = [f"- {plural(len(active), 'failing call')} on branch {strikes.branch} (3-strike protocol; do not repeat "
             "them as they are; `loki errors list`):"]
    for entry in active[:LISTED]:
        state = {STOP: "STOPPED", WARN: "change approach"}.get(tiers.tier(entry["strike_count"]), "recorded")
        lines.append(f"  - {_call(entry)}: {entry['strike_count']} strike(s), {state}; last error: "
                     f"{entry.get('last_error', '')[:160]}")
    return "\n".join(lines)


def _continuity_section(store: Store, payload: dict[str, Any]) -> str | None:
    from loki.storage import layout

    text = store.read_text(layout.CONTINUITY)
    if not text or text == layout.initial_files()[layout.CONTINUITY]:
        return None
    lines = text.strip().splitlines()[:CONTINUITY_HEAD_LINES]
    head = "\n".join(lines)[:CONTINUITY_HEAD_CHARS]
    more = "\n  [...] (read .loki/CONTINUITY.md for the rest)" if len(head) < len(text.strip()) else ""
    return "- CONTINUITY.md (head):\n" + "\n".join("  " + line for line in head.splitlines()) + more


# -- Stop -----------------------------------------------------------------------------------------


def stop(payload: dict[str, Any], root: str) -> dict[str, Any] | None:
    """Advisory: tell the user which calls are stopped on this branch, and that ``loki serve`` is down when
    the tree's hooks go to it. Never blocks the stop."""
    from loki.hooks.serving import stop_note

    answer = _stopped_calls(payload, root)
    checks = _failing_checks(root)
    if checks is not None:
        answer = {"systemMessage": checks if answer is None else f"{answer['systemMessage']} {checks}"}
    note = stop_note(root)
    if note is None:
        return answer
    if answer is None:
        return {"systemMessage": f"loki: {note}"}
    return {"systemMessage": f"{answer['systemMessage']} {note}"}


def _failing_checks(root: str) -> str | None:
    """The reminder of the held tasks' failing checks (:func:`loki.hooks.teamtasks.stop_reminder`); only an
    agent with a name (``LOKI_AGENT``, ``LOKI_TASK_ID``: what ``loki work`` sets) holds tasks."""
    if not (os.environ.get("LOKI_TASK_ID") or os.environ.get("LOKI_AGENT")):
        return None
    from loki.hooks.teamtasks import stop_reminder

    return stop_reminder(_store(root))


# -- TaskCompleted --------------------------------------------------------------------------------


def task_completed(payload: dict[str, Any], root: str) -> dict[str, Any] | None:
    """A Claude task being marked completed: the mapped loki task's checks run first, and a failing one
    refuses the completion (:mod:`loki.hooks.teamtasks`)."""
    from loki.hooks.teamtasks import task_completed as gate

    return gate(payload, root, _store(root))


def _stopped_calls(payload: dict[str, Any], root: str) -> dict[str, Any] | None:
    if not strikeview.any_strike_files(strikeview.hot_root(root)):
        return None
    from loki.strikes.strikes import Strikes

    strikes = Strikes(_store(root), cwd=work_dir(payload))
    tiers = strikes.tiers
    stopped = [e for e in strikes.active() if tiers.tier(e["strike_count"]) == STOP]
    if not stopped:
        return None
    files = strikes.store.backend == "files"
    named = "; ".join(
        f"{_call(e)} ({e['strike_count']} failures"
        + (f", {_escalation_name(e['escalation'], files)})" if e.get("escalation") else ")")
        for e in stopped[:3])
    more = f" and {len(stopped) - 3} more" if len(stopped) > 3 else ""
    return {"systemMessage": f"loki: {plural(len(stopped), 'call')} stopped by the 3-strike protocol on branch "
                             f"{strikes.branch}: {named}{more}. `loki errors list` shows them; `loki errors reset "
                             "KEY` clears one once fixed."}


HANDLERS: dict[str, Callable[[dict[str, Any], str], dict[str, Any] | None]] = {
    "PreToolUse": pre_tool_use,
    "PostToolUse": post_tool_use,
    "PostToolUseFailure": post_tool_use_failure,
    "SessionStart": session_start,
    "Stop": stop,
    "TaskCompleted": task_completed,
}
