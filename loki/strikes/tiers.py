"""Strike tiers and what the hooks say at each (the 3-strike protocol, docs/design.md §4).

Two presets unify the reference documents:

* ``adr`` (default, ADR 059 and the ErrorRecovery ticket): strike 1 is recorded silently, strike 2
  says "MUST use a different approach" with a recovery suggestion and the previous errors,
  strike 3 stops the call (PreToolUse answers ``deny``) and escalates to a human once.
* ``soft-hard`` ("tool error retry escalation"): strikes 1-2 recorded, 3-4 a soft prompt, 5+ a
  forced "MUST use an alternative approach" injected as context, with no deny and no escalation.

``{"strikes": {"preset": "soft-hard"}}`` switches; explicit keys (``warn_at``, ``stop_at``,
``stop_decision``, ``escalate``) override the preset's values one by one.

Stdlib-only and import-free: the PreToolUse hook builds its answer from here without the store.
"""

from __future__ import annotations

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

DECISIONS = ("deny", "ask", "context")
PRESETS: dict[str, dict[str, Any]] = {
    "adr": {"warn_at": 2, "stop_at": 3, "stop_decision": "deny", "escalate": True},
    "soft-hard": {"warn_at": 3, "stop_at": 5, "stop_decision": "context", "escalate": False},
}
DEFAULT_PRESET = "adr"
MAX_ERROR_CHARS = 200
PREVIOUS_ERRORS_SHOWN = 3

RECORD, WARN, STOP = "record", "warn", "stop"


class Tiers:
    """Thresholds of one tree: ``tier(count)`` is ``record``, ``warn`` or ``stop``."""

    __slots__ = ("escalate", "preset", "stop_at", "stop_decision", "warn_at")

    def __init__(self, warn_at: int, stop_at: int, stop_decision: str, escalate: bool, preset: str) -> None:
        self.warn_at = warn_at
        self.stop_at = max(stop_at, 1)
        self.stop_decision = stop_decision
        self.escalate = escalate
        self.preset = preset

    @classmethod
    def from_config(cls, config: Any) -> Tiers:
        """From a parsed ``config/loki.json``; values of the wrong type fall back to the preset's.

        The PreToolUse hook reads the config without validating it (validation needs the schema
        machinery); a hand-made mistake there must not block anybody's tool call, and every
        command that writes reports it.
        """
        section = config.get("strikes") if isinstance(config, dict) else None
        section = section if isinstance(section, dict) else {}
        preset_name = section.get("preset")
        if preset_name not in PRESETS:
            preset_name = DEFAULT_PRESET
        values = dict(PRESETS[preset_name])
        for key in ("warn_at", "stop_at"):
            value = section.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
                values[key] = value
        if section.get("stop_decision") in DECISIONS:
            values["stop_decision"] = section["stop_decision"]
        if isinstance(section.get("escalate"), bool):
            values["escalate"] = section["escalate"]
        return cls(values["warn_at"], values["stop_at"], values["stop_decision"], values["escalate"], preset_name)

    def tier(self, count: int) -> str:
        if count >= self.stop_at:
            return STOP
        if count >= self.warn_at:
            return WARN
        return RECORD

    def to_json(self) -> dict[str, Any]:
        return {"preset": self.preset, "warn_at": self.warn_at, "stop_at": self.stop_at,
                "stop_decision": self.stop_decision, "escalate": self.escalate}


def hash_chars(config: Any, default: int = 200) -> int:
    """``strikes.input_hash_chars`` (how much of the normalised input is hashed)."""
    section = config.get("strikes") if isinstance(config, dict) else None
    value = section.get("input_hash_chars") if isinstance(section, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else default


def clip(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _previous_errors(entry: dict[str, Any]) -> str:
    errors = [e for e in entry.get("errors") or [] if isinstance(e, str)][-PREVIOUS_ERRORS_SHOWN:]
    if not errors:
        return ""
    # Only the last few errors are shown: past that, "all 3 times" would contradict "failed 4 times".
    partial = len(errors) < int(entry.get("strike_count", 0) or 0)
    if len(set(errors)) == 1:
        if partial:
            return f" Last {len(errors)} errors (the same each time): {clip(errors[0])}."
        times = {1: "", 2: " (the same both times)"}.get(len(errors), f" (the same all {len(errors)} times)")
        return f" Previous error{times}: {clip(errors[0])}."
    listed = "; ".join(f"({n}) {clip(e)}" for n, e in enumerate(errors, start=1))
    return f" {f'Last {len(errors)} errors' if partial else 'Previous errors'}: {listed}."


def _suggestion(entry: dict[str, Any]) -> str:
    suggestion = entry.get("suggestion")
    if not isinstance(suggestion, str) or not suggestion:
        return ""
    error_class = entry.get("error_class")
    label = f" ({error_class})" if isinstance(error_class, str) and error_class else ""
    location = entry.get("location")
    at = f" at {location}" if isinstance(location, str) and location else ""
    return f" Recovery suggestion{label}{at}: {suggestion}"


def warn_text(tiers: Tiers, entry: dict[str, Any], label: str) -> str:
    """Strike ``warn_at`` .. ``stop_at - 1``: change approach (context after the failure)."""
    count = int(entry.get("strike_count", 0))
    left = tiers.stop_at - count
    then = "stops it and escalates to a human" if tiers.escalate else "blocks it"
    return (f"loki 3-strike protocol: strike {count} of {tiers.stop_at} for this exact call ({label}). "
            f"You MUST use a different approach; do not repeat the same call (different arguments? a different "
            f"path? a missing dependency?).{_suggestion(entry)}{_previous_errors(entry)} "
            f"{left} more identical failure{'s' if left != 1 else ''} {then}.")


def escalation_where(escalation: str, files: bool = True) -> str:
    """Where an agent reads an escalation: its file on a file tree; on a tree whose state is in a database (or
    in memory) there is no such file on this machine, so the command that shows it."""
    if files:
        return f".loki/escalations/{escalation}"
    return f"`loki escalations show {escalation.removesuffix('.md')}`"


def stop_text(tiers: Tiers, entry: dict[str, Any], label: str, *, files: bool = True) -> str:
    """Strike ``stop_at`` and beyond: stop repeating it (and, in the ADR preset, it is escalated).
    ``files``: the tree keeps its state in files (else the escalation is named by the command that shows it)."""
    count = int(entry.get("strike_count", 0))
    escalation = entry.get("escalation")
    if tiers.escalate:
        where = f" ({escalation_where(escalation, files)})" if isinstance(escalation, str) and escalation else ""
        ask = (f"It has been escalated to a human{where}. STOP: do not retry it or a trivial variant of it; tell "
               "the user what failed and what you tried, then wait or take a clearly different approach.")
    else:
        ask = "MUST use an alternative approach. Do NOT retry the same command."
    return (f"loki 3-strike protocol: this exact call ({label}) has failed {count} times in a row. {ask}"
            f"{_suggestion(entry)}{_previous_errors(entry)}")


def deny_reason(tiers: Tiers, entry: dict[str, Any], label: str, key: str, branch: str, *, files: bool = True) -> str:
    """What PreToolUse says when it refuses (or asks about) a call at the stop tier (``files``: as
    :func:`stop_text`)."""
    count = int(entry.get("strike_count", 0))
    last = entry.get("last_error")
    location = entry.get("location")
    at = f" at {location}" if isinstance(location, str) and location else ""
    last_text = f" Last error{at}: {clip(last)}." if isinstance(last, str) and last else ""
    escalation = entry.get("escalation")
    where = (f" It was escalated: {escalation_where(escalation, files)}." if isinstance(escalation, str) and escalation
             else "")
    fixed = entry.get("fixed_by")
    if isinstance(fixed, dict) and isinstance(fixed.get("call"), str):
        # A variant passing is recorded as the fix, but does not prove this exact call works now.
        return (f"loki 3-strike protocol: {label} has failed {count} times in a row on branch {branch} and is "
                f"stopped.{last_text}{where} A similar call passed since ({fixed['call']} at {fixed.get('at')}, "
                f"recorded as its fix): run that instead; if the cause is fixed for this exact call too, "
                f"`loki errors reset {key}` lifts the stop.")
    return (f"loki 3-strike protocol: {label} has failed {count} times in a row on branch {branch} and is stopped."
            f"{last_text}{where} Use a different approach or ask the user; once the cause is fixed, "
            f"`loki errors reset {key}` clears it.")
