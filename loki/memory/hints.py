"""What the PreToolUse hook says before a Bash command that failed before and was fixed.

"Last time this failed with ...; it was fixed by ...": one line of context, at most
``memory.inject_max_chars`` characters, and nothing when there is nothing useful.

The hook runs before every tool call, so it cannot open the SQLite index (``sqlite3`` alone costs
~5 ms of import) and must not depend on it being up to date (it only catches up when searched).
Instead every resolution also offers itself as the *hint* of its command prefix:
``memory/hints/<hash of tool and prefix>.json``, one small file per resolved prefix. The hook
computes the prefix of the command it is about to allow (:mod:`loki.strikes.cmdprefix`), hashes it and
tries to open one file: no index, no scan, the same cost with 10 or 100,000 records.

A prefix keeps its best resolution: the highest confidence, then the most recent. Resolutions by
the *same* input (the failing command later succeeded unchanged: whatever fixed it happened in
between) are not offered: "it was fixed by running it again" helps nobody. The hook also says
nothing when the command it is about to run is the fix itself, or when the confidence is below
``memory.hint_min_confidence``.

The files are derived data: ``loki errors reindex`` and ``loki errors compact`` rebuild them from
the log. The hook reads them lock-free (a writer replaces a file atomically) with the strike
reader's rules (:func:`loki.strikes.view.read_json`); any problem means no hint.
"""

from __future__ import annotations

from loki.storage import layout
from loki.strikes import key as strikekey

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from loki.storage.state import StateStore as Store

HINT_SCHEMA = "memory-hint.json"
HINT_FIELDS = ("tool", "prefix", "command", "error_message", "error_class", "location", "resolution",
               "confidence", "calls_between", "timestamp", "resolution_id")
DEFAULT_MAX_CHARS = 300
DEFAULT_MIN_CONFIDENCE = 0.3
_COMMAND_CHARS = 80


def hint_file(tool: str, prefix: str) -> str:
    """``memory/hints/<16 hex digits>.json`` for one tool and prefix."""
    return f"{layout.MEMORY_HINTS_DIR}/{strikekey.text_hash(tool + chr(10) + prefix)}.json"


def any_hints(root: str) -> bool:
    """False when no prefix was ever resolved (the common case: skip everything)."""
    from loki.strikes.view import any_json_file  # the hot path has it loaded already

    return any_json_file(root, layout.MEMORY_HINTS_DIR)


# -- reading (PreToolUse) -----------------------------------------------------------------------------


def hint_for(root: str, tool: str, tool_input: Any, config: dict[str, Any] | None = None) -> str | None:
    """The line to inject before this call, or None. Never raises: a hint is never worth a failure.

    ``config``: the parsed ``config/loki.json`` (read, lock-free, only when a hint is found).
    """
    try:
        return _hint_for(root, tool, tool_input, config)
    except Exception:  # an unreadable hint is no hint; the call goes ahead untouched
        return None


def _hint_for(root: str, tool: str, tool_input: Any, config: dict[str, Any] | None) -> str | None:
    if tool != "Bash" or not isinstance(tool_input, dict) or not isinstance(tool_input.get("command"), str):
        return None
    if not any_hints(root):
        return None
    from loki.strikes import cmdprefix
    from loki.strikes import view as strikeview

    prefix = cmdprefix.call_prefix(tool, tool_input)
    if not prefix:
        return None
    doc = strikeview.read_json(root, hint_file(tool, prefix))
    if not _usable(doc) or doc["tool"] != tool or doc["prefix"] != prefix:
        return None
    if config is None:
        config = strikeview.read_config(root)
    section = config.get("memory")
    if not isinstance(section, dict):
        section = {}
    minimum = section.get("hint_min_confidence", DEFAULT_MIN_CONFIDENCE)
    limit = section.get("inject_max_chars", DEFAULT_MAX_CHARS)
    if not isinstance(minimum, (int, float)) or not isinstance(limit, int) or limit < 1:
        minimum, limit = DEFAULT_MIN_CONFIDENCE, DEFAULT_MAX_CHARS
    if doc["confidence"] < minimum:
        return None
    if _same_command(tool_input["command"], doc["resolution"]):
        return None  # the agent is about to run the fix itself
    return hint_text(doc, limit)


def _usable(doc: Any) -> bool:
    if not isinstance(doc, dict):
        return False
    texts = ("tool", "prefix", "command", "error_message", "resolution")
    return (all(isinstance(doc.get(name), str) for name in texts)
            and isinstance(doc.get("confidence"), (int, float)) and isinstance(doc.get("calls_between"), int))


def _same_command(command: str, resolution: str) -> bool:
    from loki.text.redact import redact

    return " ".join(redact(command).split()) == " ".join(resolution.split())


def hint_text(doc: dict[str, Any], max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """``loki memory: last time `X` failed with "E"; it was fixed by `Y` (right after, confidence 1.0).``"""
    calls = doc["calls_between"]
    when = "right after" if calls == 0 else f"{calls} call{'s' if calls != 1 else ''} later"
    command = _short(doc["command"], _COMMAND_CHARS)
    resolution = _short(doc["resolution"], _COMMAND_CHARS)
    location = doc.get("location")
    at = f" at {_short(location, _COMMAND_CHARS)}" if isinstance(location, str) and location else ""
    head = f"loki memory: last time `{command}` failed here with \""
    tail = f"\"{at}; it was fixed by `{resolution}` ({when}, confidence {doc['confidence']:.2f})."
    room = max_chars - len(head) - len(tail)
    message = " ".join(doc["error_message"].split())
    if room < 20:  # too tight for the message: drop it rather than the fix
        text = f"loki memory: `{command}` failed here before; it was fixed by `{resolution}`."
        return text if len(text) <= max_chars else text[: max_chars - 3] + "..."
    if len(message) > room:
        message = message[: room - 3] + "..."
    return head + message + tail


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- writing (the hooks' resolution path, reindex, compact) --------------------------------------------


def from_resolution(record: dict[str, Any]) -> dict[str, Any] | None:
    """The hint a resolution record would give, or None (same input, or nothing to key it by)."""
    if record.get("same_input") or not record.get("prefix") or record.get("tool") != "Bash":
        return None
    return {
        "version": 1,
        "tool": record["tool"],
        "prefix": record["prefix"],
        "command": record.get("command") or record["prefix"],
        "error_message": record.get("error_message") or "",
        "error_class": record.get("error_class"),
        "location": record.get("location") if isinstance(record.get("location"), str) else None,
        "resolution": record["resolution"],
        "confidence": record["confidence"],
        "calls_between": record["calls_between"],
        "timestamp": record["timestamp"],
        "resolution_id": record["id"],
    }


def better(new: dict[str, Any], old: Any) -> bool:
    """Does ``new`` replace ``old``? The higher confidence wins; on a tie, the more recent."""
    if not _usable(old) or not isinstance(old.get("timestamp"), str):
        return True
    return (new["confidence"], new["timestamp"]) >= (old["confidence"], old["timestamp"])


def offer(store: Store, record: dict[str, Any]) -> bool:
    """Make a resolution its prefix's hint if it is better than the current one (caller holds the log lock)."""
    import json

    from loki.errors import LokiError
    from loki.storage import jsonio

    hint = from_resolution(record)
    if hint is None:
        return False
    rel = hint_file(hint["tool"], hint["prefix"])
    try:
        text = store.read_text(rel)
        current = jsonio.loads_strict(text) if text is not None else None
    except (LokiError, jsonio.JsonError):
        current = None  # a broken hint is replaced
    if not better(hint, current):
        return False
    store.schemas.validate(HINT_SCHEMA, hint, rel)
    if store.keys_need_dirs:
        store.ensure_dir(layout.MEMORY_HINTS_DIR)
    store.write_text(rel, json.dumps(hint, ensure_ascii=False, sort_keys=True) + "\n")
    return True


def rebuild(store: Store, resolutions: Iterable[dict[str, Any]]) -> int:
    """Rewrite every hint from the resolution records; remove hints no resolution supports. Returns the count."""
    import json

    best: dict[str, dict[str, Any]] = {}
    for record in resolutions:
        hint = from_resolution(record)
        if hint is None:
            continue
        rel = hint_file(hint["tool"], hint["prefix"])
        if better(hint, best.get(rel)):
            best[rel] = hint
    with store.transaction(layout.MEMORY_LOG):
        if store.keys_need_dirs:
            store.ensure_dir(layout.MEMORY_HINTS_DIR)
        for rel, hint in best.items():
            store.schemas.validate(HINT_SCHEMA, hint, rel)
            text = json.dumps(hint, ensure_ascii=False, sort_keys=True) + "\n"
            if store.read_text(rel) != text:
                store.write_text(rel, text)
        for name in store.list(layout.MEMORY_HINTS_DIR):
            rel = f"{layout.MEMORY_HINTS_DIR}/{name}"
            if name.endswith(".json") and not name.startswith(".") and rel not in best:
                store.remove(rel)
    return len(best)
