"""Merge loki's hook commands into Claude Code's settings file, and take them out again.

Claude Code's settings (``.claude/settings.json``) hold hooks as::

    {"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": "..."}]}], ...}}

``install`` adds one matcher group per event loki handles, keeping everything else byte-for-byte
in meaning (other keys, other hooks, their order); it is idempotent: an event that already runs
``loki hook <event>`` (under any matcher the user chose) is left alone, and its command is
updated in place only when a different loki command was asked for. ``uninstall`` removes exactly
the hook entries that run ``loki hook <event>``, and the groups and event lists that only they
filled. A settings file that is not what Claude Code expects is refused, never rewritten: the
error names the file and the JSON pointer.

Writing goes through a temp file and a rename, so Claude Code never reads half a file. This file
belongs to the project (or the user), not to ``.loki/``, so it is not a loki state file and the
store is not involved.
"""

from __future__ import annotations

import json
import os
import shlex
import sys

from loki.errors import InvalidInput
from loki.hooks.boundary import EVENTS
from loki.storage import jsonio
from loki.storage.schema import pointer

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

TOOL_EVENTS_MATCHER = "*"
"""Tool events: every tool (a strike can concern any tool, MCP tools included)."""
UNMATCHED_EVENTS = frozenset({"SessionStart", "Stop"})
"""Events installed without a matcher (SessionStart fires for startup, resume, clear and compact)."""
MAX_SETTINGS_BYTES = 64 * 1024 * 1024
"""Far beyond any real settings file; only there so that reading one is bounded."""


class SettingsError(InvalidInput):
    """The settings file cannot be used as it is (it is left untouched)."""

    def __init__(self, path: str, reason: str, where: str = "") -> None:
        at = f" at {where}" if where else ""
        super().__init__(f"{path}{at}: {reason}; fix it by hand (loki never rewrites a file it cannot read)",
                         file=path, pointer=where, reason=reason)


def default_command(project_dir: str) -> str:
    """How the settings should run loki (the part before ``hook <event>``).

    A project's ``.claude/settings.json`` is usually committed, so: ``loki`` when that is this
    installation on ``PATH``; else, for a console script inside the project (``.venv/bin/loki``),
    a path relative to ``$CLAUDE_PROJECT_DIR``, which Claude Code sets for hook commands; else the
    absolute path, which is machine-specific (``--settings .claude/settings.local.json`` suits it).
    """
    import shutil

    script = os.path.join(os.path.dirname(sys.executable), "loki")
    if not os.path.exists(script):
        return f"{shlex.quote(sys.executable)} -m loki"
    real = os.path.realpath(script)
    on_path = shutil.which("loki")
    if on_path and os.path.realpath(on_path) == real:
        return "loki"
    project = os.path.realpath(project_dir)
    if real.startswith(project + os.sep):
        return '"$CLAUDE_PROJECT_DIR"/' + shlex.quote(os.path.relpath(real, project))
    return shlex.quote(script)


def hook_command(base: str, event: str) -> str:
    return f"{base} hook {event}"


def loki_event(command: Any) -> str | None:
    """The event a hook command runs if it is ``… loki … hook <event>``, else None."""
    if not isinstance(command, str):
        return None
    words = _split(command)
    if len(words) < 3 or words[-2] != "hook" or words[-1] not in EVENTS:
        return None
    if not any(os.path.basename(word) in ("loki", "loki.exe") for word in words[:-2]):
        return None
    return words[-1]


def _split(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


# -- reading and checking ----------------------------------------------------------------------


def load(path: str) -> tuple[dict[str, Any], bool]:
    """The settings document (``{}`` for a missing or empty file) and whether the file existed."""
    from loki.regularfile import NotRegularFile, read_regular

    try:
        data = read_regular(path, MAX_SETTINGS_BYTES + 1)
    except FileNotFoundError:
        return {}, False
    except NotRegularFile:
        raise SettingsError(path, "is not a regular file (a FIFO, socket, device or directory); loki will not "
                            "read or replace it") from None
    except OSError as exc:
        raise SettingsError(path, f"cannot be read ({exc.strerror})") from None
    if len(data) > MAX_SETTINGS_BYTES:
        raise SettingsError(path, f"is over {MAX_SETTINGS_BYTES} bytes, too large for a settings file")
    if not data.strip():
        return {}, True
    try:
        doc = jsonio.loads_strict(data)
    except jsonio.JsonError as exc:
        raise SettingsError(path, exc.reason, exc.pointer) from None
    if not isinstance(doc, dict):
        raise SettingsError(path, "the settings must be a JSON object", "/")
    check(path, doc)
    return doc, True


def check(path: str, doc: dict[str, Any]) -> None:
    """Refuse a ``hooks`` section whose shape install/uninstall would have to guess about."""
    hooks = doc.get("hooks")
    if hooks is None:
        return
    if not isinstance(hooks, dict):
        raise SettingsError(path, "'hooks' must be an object of event names", "/hooks")
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            raise SettingsError(path, "an event's hooks must be an array of matcher groups", pointer(["hooks", event]))
        for index, group in enumerate(groups):
            where = ["hooks", event, str(index)]
            if not isinstance(group, dict):
                raise SettingsError(path, "a matcher group must be an object", pointer(where))
            if "matcher" in group and not isinstance(group["matcher"], str):
                raise SettingsError(path, "'matcher' must be a string", pointer([*where, "matcher"]))
            entries = group.get("hooks")
            if not isinstance(entries, list):
                raise SettingsError(path, "a matcher group needs a 'hooks' array", pointer([*where, "hooks"]))
            for number, entry in enumerate(entries):
                if not isinstance(entry, dict):
                    raise SettingsError(path, "a hook must be an object", pointer([*where, "hooks", str(number)]))


# -- merging -----------------------------------------------------------------------------------


def install(doc: dict[str, Any], base_command: str) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """A new document with loki's hooks merged in, and what was done per event."""
    new = json.loads(json.dumps(doc))  # a deep copy; the input stays as it was
    hooks = new.setdefault("hooks", {})
    actions = []
    for event, name in EVENTS.items():
        wanted = hook_command(base_command, event)
        found = [entry for group in hooks.get(name, []) for entry in group["hooks"]
                 if loki_event(entry.get("command")) == event]
        if not found:
            group: dict[str, Any] = {} if name in UNMATCHED_EVENTS else {"matcher": TOOL_EVENTS_MATCHER}
            group["hooks"] = [{"type": "command", "command": wanted}]
            hooks.setdefault(name, []).append(group)
            actions.append({"event": name, "action": "added", "command": wanted})
        elif any(entry.get("command") == wanted for entry in found):
            actions.append({"event": name, "action": "unchanged", "command": wanted})
        else:
            for entry in found:
                entry["command"] = wanted
            actions.append({"event": name, "action": "updated", "command": wanted})
    return new, actions


def uninstall(doc: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """A new document without loki's hook entries, and what was removed."""
    new = json.loads(json.dumps(doc))
    hooks = new.get("hooks")
    actions: list[dict[str, str]] = []
    if not isinstance(hooks, dict):
        return new, actions
    for name in list(hooks):
        groups = hooks[name]
        kept_groups = []
        for group in groups:
            kept = [e for e in group["hooks"] if loki_event(e.get("command")) is None]
            actions += [{"event": name, "action": "removed", "command": e["command"]}
                        for e in group["hooks"] if loki_event(e.get("command")) is not None]
            if kept or len(kept) == len(group["hooks"]):  # keep groups that were not only loki's
                group["hooks"] = kept
                kept_groups.append(group)
        if kept_groups or not groups:
            hooks[name] = kept_groups
        else:
            del hooks[name]
    if not hooks and "hooks" in doc and doc["hooks"]:
        del new["hooks"]
    return new, actions


# -- writing -----------------------------------------------------------------------------------


def render(doc: dict[str, Any]) -> str:
    """Claude Code's own layout: two-space indent, keys in their order, a final newline."""
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def write(path: str, text: str) -> None:
    """Replace the settings file atomically, keeping its permissions."""
    from loki.storage.store import fsync_dir, write_temp

    path = os.path.realpath(path)  # a symlinked settings file stays a symlink
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    try:
        mode = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        mode = None
    tmp = write_temp(os.path.abspath(path), text.encode("utf-8"))
    try:
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(directory)
