"""Merge loki's hook commands into an agent's settings file, and take them out again.

Claude Code (``.claude/settings.json``), Gemini CLI (``.gemini/settings.json``) and Codex CLI
(``.codex/hooks.json``) hold hooks the same way::

    {"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": "..."}]}], ...}}

so one merge serves all three; an :class:`Agent` says what differs: the file, the events and their
``loki hook`` arguments, how a command refers to the project directory, and what else may sit in
the ``hooks`` object (Gemini keeps its switches ``enabled``, ``disabled``, ``notifications`` there).

``install`` adds one matcher group per event loki handles, keeping everything else byte-for-byte
in meaning (other keys, other hooks, their order); it is idempotent: an event that already runs
``loki hook <event>`` (under any matcher the user chose) is left alone, and its command is
updated in place only when a different loki command was asked for. ``uninstall`` removes exactly
the hook entries that run ``loki hook ...``, and the groups and event lists that only they
filled; when nothing at all is left (the file held only loki's hooks, as a file install created
does), the file goes too, and its directory if that leaves it empty. A settings file that is not
what the agent expects is refused, never rewritten: the error names the file and the JSON pointer.

Writing goes through a temp file and a rename, so the agent never reads half a file. This file
belongs to the project (or the user), not to ``.loki/``, so it is not a loki state file and the
store is not involved.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass

from loki.errors import InvalidInput
from loki.hooks import boundary, codex, gemini
from loki.storage import jsonio
from loki.storage.schema import pointer

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

TOOL_EVENTS_MATCHER = "*"
"""Tool events: every tool (a strike can concern any tool, MCP tools included)."""
MAX_SETTINGS_BYTES = 64 * 1024 * 1024
"""Far beyond any real settings file; only there so that reading one is bounded."""
NON_BLOCKING_GUARD = "|| exit 1"
"""Appended to ``loki hook --agent ...``: a hook that cannot even start (``loki`` not on PATH: 127,
which Gemini CLI treats as a block; a loki too old for ``--agent``: a usage error, 2, which blocks
in every agent) then exits 1, a warning, instead of stopping every tool call. Claude Code's plain
``loki hook <event>`` has no option an older loki could refuse, and 127 does not block there."""


@dataclass(frozen=True)
class Agent:
    """What loki writes into one agent's settings, and where."""

    name: str
    """``loki hooks install --agent NAME`` and ``loki hook --agent NAME``."""
    title: str
    settings: str
    """The settings file, relative to the project directory (where ``.loki/`` is)."""
    events: dict[str, str]
    """``loki hook`` argument -> the agent's event name, in the order they are written."""
    unmatched: frozenset[str]
    """Events written without a matcher (lifecycle events)."""
    project_dir: str
    """How a hook command names the project directory (a console script inside it)."""
    guard: str = ""
    config_fields: frozenset[str] = frozenset()
    """Keys of the ``hooks`` object that are settings, not events."""
    comments: bool = False
    """Whether the agent accepts comments in the file (loki refuses to rewrite such a file)."""
    personal: str = ""
    """Advice for a machine-specific command in a shared file."""
    review: str = ""
    """What the user must do before the agent runs hooks that were added or changed."""


CLAUDE = Agent(
    name="claude", title="Claude Code", settings=os.path.join(".claude", "settings.json"),
    events={arg: name for arg, name in boundary.EVENTS.items()},
    # SessionStart fires for startup, resume, clear, compact; TaskCompleted takes no matcher
    unmatched=frozenset({"SessionStart", "Stop", "TaskCompleted"}),
    project_dir='"$CLAUDE_PROJECT_DIR"/',  # Claude Code sets it in the hook's environment
    personal="or use --settings .claude/settings.local.json (or --command)",
)
GEMINI = Agent(
    name="gemini", title="Gemini CLI", settings=os.path.join(".gemini", "settings.json"),
    events=dict(gemini.EVENTS),
    unmatched=frozenset({"SessionStart", "AfterAgent"}),
    # Gemini CLI replaces the text $GEMINI_PROJECT_DIR with the quoted directory itself: no quotes here.
    project_dir="$GEMINI_PROJECT_DIR/",
    guard=NON_BLOCKING_GUARD,
    config_fields=frozenset({"enabled", "disabled", "notifications"}),
    comments=True,
    personal="or use --command",
)
CODEX = Agent(
    name="codex", title="Codex CLI", settings=os.path.join(".codex", "hooks.json"),
    events=dict(codex.EVENTS),
    unmatched=frozenset({"SessionStart", "Stop"}),
    # Codex gives its hooks no project variable; its own documentation names the top this way.
    project_dir='"$(git rev-parse --show-toplevel)"/',
    guard=NON_BLOCKING_GUARD,
    personal="or use --settings ~/.codex/hooks.json (or --command)",
    review=("Codex CLI runs new or changed hooks only once they are reviewed: open `codex` here and trust them "
            "(/hooks); automation that vets its hooks runs `codex exec --dangerously-bypass-hook-trust`. Project "
            "hooks also need the project trusted"),
)
AGENTS = {agent.name: agent for agent in (CLAUDE, GEMINI, CODEX)}


class SettingsError(InvalidInput):
    """The settings file cannot be used as it is (it is left untouched)."""

    def __init__(self, path: str, reason: str, where: str = "") -> None:
        at = f" at {where}" if where else ""
        super().__init__(f"{path}{at}: {reason}; fix it by hand (loki never rewrites a file it cannot read)",
                         file=path, pointer=where, reason=reason)


def default_command(project_dir: str, agent: Agent = CLAUDE) -> str:
    """How the settings should run loki (the part before ``hook <event>``).

    A project's settings are usually committed, so: ``loki`` when that is this installation on
    ``PATH``; else, for a console script inside the project (``.venv/bin/loki``), a path relative to
    the project directory the agent gives its hooks (``$CLAUDE_PROJECT_DIR``,
    ``$GEMINI_PROJECT_DIR``); else the absolute path, which is machine-specific (Claude Code's
    ``--settings .claude/settings.local.json`` suits it).
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
        return agent.project_dir + shlex.quote(os.path.relpath(real, project))
    return shlex.quote(script)


def hook_command(base: str, event: str, agent: Agent = CLAUDE) -> str:
    words = [base, "hook", event] if agent is CLAUDE else [base, "hook", "--agent", agent.name, event]
    return " ".join([*words, agent.guard] if agent.guard else words)


def loki_hook(command: Any) -> tuple[str, str] | None:
    """``(agent, event argument)`` if a hook command is ``… loki … hook [--agent A] <event> [|| exit 1]``."""
    if not isinstance(command, str):
        return None
    words = _split(command)
    guard = NON_BLOCKING_GUARD.split()
    if words[-len(guard):] == guard:
        words = words[:-len(guard)]
    agent = CLAUDE.name
    if len(words) >= 3 and words[-2].startswith("--agent="):
        agent, words = words[-2][len("--agent="):], words[:-2] + words[-1:]
    elif len(words) >= 4 and words[-3] == "--agent":
        agent, words = words[-2], words[:-3] + words[-1:]
    known = AGENTS.get(agent)
    if known is None or len(words) < 3 or words[-2] != "hook" or words[-1] not in known.events:
        return None
    if not any(os.path.basename(word) in ("loki", "loki.exe") for word in words[:-2]):
        return None
    return agent, words[-1]


def _split(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


# -- reading and checking ----------------------------------------------------------------------


def load(path: str, agent: Agent = CLAUDE) -> tuple[dict[str, Any], bool]:
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
        reason = exc.reason
        if agent.comments and has_comment(data.decode("utf-8", "replace")):
            reason += (f" ({agent.title} accepts comments in this file, loki does not: it would lose them "
                       "when it rewrites the file; remove them or add the hooks by hand, see docs/agents.md)")
        raise SettingsError(path, reason, exc.pointer) from None
    if not isinstance(doc, dict):
        raise SettingsError(path, "the settings must be a JSON object", "/")
    check(path, doc, agent)
    return doc, True


def has_comment(text: str) -> bool:
    """Whether JSON text has a ``//`` or ``/*`` comment outside its strings (JSONC, as Gemini CLI reads)."""
    in_string = escaped = False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "/" and text[index + 1:index + 2] in ("/", "*"):
            return True
    return False


def check(path: str, doc: dict[str, Any], agent: Agent = CLAUDE) -> None:
    """Refuse a ``hooks`` section whose shape install/uninstall would have to guess about."""
    hooks = doc.get("hooks")
    if hooks is None:
        return
    if not isinstance(hooks, dict):
        raise SettingsError(path, "'hooks' must be an object of event names", "/hooks")
    for event, groups in hooks.items():
        if event in agent.config_fields:
            continue
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


def notes(doc: dict[str, Any], agent: Agent = CLAUDE) -> list[str]:
    """What in this file keeps the agent from running loki's hooks, in words (empty: nothing)."""
    found = []
    if agent is CLAUDE and doc.get("disableAllHooks") is True:
        found.append("disableAllHooks is true in this file: Claude Code runs no hooks at all")
    config = doc.get("hooksConfig")
    if agent is GEMINI and isinstance(config, dict):
        if config.get("enabled") is False:
            found.append("hooksConfig.enabled is false in this file: Gemini CLI runs no hooks at all")
        disabled = config.get("disabled")
        if isinstance(disabled, list) and any(loki_hook(name) for name in disabled):
            found.append("hooksConfig.disabled names loki's hooks: Gemini CLI skips them")
    return found


# -- merging -----------------------------------------------------------------------------------


def install(doc: dict[str, Any], base_command: str, agent: Agent = CLAUDE,
            http_port: int | None = None) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """A new document with loki's hooks merged in, and what was done per event.

    ``http_port`` (Claude Code only): the frequent events (:data:`HTTP_EVENTS`) as HTTP hooks to ``loki
    serve`` on that port (:func:`http_entry`); the others stay commands. A loki hook of the other kind for
    the same event is replaced in place, so switching back and forth keeps one loki hook per event."""
    new = json.loads(json.dumps(doc))  # a deep copy; the input stays as it was
    hooks = new.setdefault("hooks", {})
    actions = []
    for event, name in agent.events.items():
        if http_port is not None and agent is CLAUDE and name in HTTP_EVENTS:
            wanted = http_entry(http_port, event)
        else:
            wanted = {"type": "command", "command": hook_command(base_command, event, agent)}
        shown = wanted.get("command") or wanted["url"]
        found = [entry for group in hooks.get(name, []) for entry in group["hooks"]
                 if (loki_entry(entry) or ("", ""))[1] == event]
        if not found:
            group: dict[str, Any] = {} if name in agent.unmatched else {"matcher": TOOL_EVENTS_MATCHER}
            group["hooks"] = [wanted]
            hooks.setdefault(name, []).append(group)
            actions.append({"event": name, "action": "added", "command": shown})
        elif any(_same(entry, wanted) for entry in found):
            actions.append({"event": name, "action": "unchanged", "command": shown})
        else:
            for entry in found:
                kept = {k: v for k, v in entry.items() if k not in _LOKI_KEYS}  # a timeout the user set, ...
                entry.clear()
                entry.update({**wanted, **kept})
            actions.append({"event": name, "action": "updated", "command": shown})
    return new, actions


HTTP_EVENTS = frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure"})
"""What ``--via http`` sends to ``loki serve``: the events of every tool call. SessionStart and Stop stay
commands: SessionStart starts the server when none answers, and both warn when it cannot."""
HTTP_HOOK_TIMEOUT = 10
"""Seconds Claude Code waits for the server (its default for an HTTP hook is 600)."""
_LOKI_KEYS = frozenset({"type", "command", "url", "headers", "allowedEnvVars"})
"""What loki writes and owns in its entries; anything else there (a ``timeout`` the user chose) is kept."""


def http_entry(port: int, event: str) -> dict[str, Any]:
    """Claude Code's HTTP hook for ``event``: the token and the agent's name (``LOKI_AGENT``, who the path
    lease gate answers for) travel in headers Claude Code fills from the environment variables
    (``allowedEnvVars``), so the settings hold their names, never their values."""
    from loki.resident.files import AGENT_ENV, AGENT_HEADER, DEFAULT_HOST, TOKEN_ENV, TOKEN_HEADER

    return {"type": "http", "url": f"http://{DEFAULT_HOST}:{port}/hook/{event}",
            "headers": {TOKEN_HEADER: f"${TOKEN_ENV}", AGENT_HEADER: f"${AGENT_ENV}"},
            "allowedEnvVars": [TOKEN_ENV, AGENT_ENV],
            "timeout": HTTP_HOOK_TIMEOUT}


def _same(entry: dict[str, Any], wanted: dict[str, Any]) -> bool:
    return all(entry.get(key) == value for key, value in wanted.items() if key != "timeout")


def loki_http_hook(entry: Any) -> str | None:
    """The ``loki hook`` event argument an HTTP hook entry of loki's sends, else None."""
    import re

    if not isinstance(entry, dict) or entry.get("type") != "http" or not isinstance(entry.get("url"), str):
        return None
    match = re.fullmatch(r"http://(?:127\.0\.0\.1|localhost|\[::1\]):\d{1,5}/hook/([a-z-]+)", entry["url"])
    return match.group(1) if match and match.group(1) in CLAUDE.events else None


def loki_entry(entry: Any) -> tuple[str, str] | None:
    """``(agent, event argument)`` for a hook entry of loki's, command or HTTP; else None."""
    if not isinstance(entry, dict):
        return None
    found = loki_hook(entry.get("command")) if entry.get("type", "command") == "command" else None
    if found is None:
        event = loki_http_hook(entry)
        found = (CLAUDE.name, event) if event is not None else None
    return found


def uninstall(doc: dict[str, Any], agent: Agent = CLAUDE) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """A new document without loki's hook entries, and what was removed."""
    new = json.loads(json.dumps(doc))
    hooks = new.get("hooks")
    actions: list[dict[str, str]] = []
    if not isinstance(hooks, dict):
        return new, actions
    for name in list(hooks):
        if name in agent.config_fields:
            continue
        groups = hooks[name]
        kept_groups = []
        for group in groups:
            kept = [e for e in group["hooks"] if loki_entry(e) is None]
            actions += [{"event": name, "action": "removed", "command": e.get("command") or e["url"]}
                        for e in group["hooks"] if loki_entry(e) is not None]
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
    """The agents' own layout: two-space indent, keys in their order, a final newline."""
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


def remove(path: str, agent: Agent = CLAUDE) -> bool:
    """Delete a settings file uninstall emptied; a symlinked one is left alone (loki did not make it).

    Its directory goes too when it is the agent's own (``.gemini/``) and nothing else is in it, as
    after an install that created both. Returns whether the file was deleted.
    """
    if os.path.islink(path) or not os.path.isfile(path):
        return False
    os.unlink(path)
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.basename(directory) == os.path.dirname(agent.settings):
        import contextlib

        with contextlib.suppress(OSError):
            os.rmdir(directory)  # only ever succeeds on an empty directory
    return True
