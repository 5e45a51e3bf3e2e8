"""``loki hook [--agent A] <event>``: the agents' hook contracts at the process boundary.

Claude Code's contract is loki's own: its events and payloads are what :mod:`loki.hooks.handlers`
takes. Another agent's hooks (``--agent gemini``: :mod:`loki.hooks.gemini`; ``--agent codex``:
:mod:`loki.hooks.codex`) are translated to it and back by a small adapter; the decisions are the
same. Claude Code runs the hook command with one JSON document on stdin and reads the answer from
the exit code and stdout (docs/hooks.md has the contract as implemented; docs/agents.md the other
agents'):

* exit 0 with nothing on stdout: nothing to say; exit 0 with a JSON document: the answer
  (``hookSpecificOutput`` ...);
* exit 2 would *block* (PreToolUse: refuse the call; Stop: keep the session going). loki never
  exits 2: a refusal is an explicit ``permissionDecision``, and Stop is advisory only;
* any other exit is a non-blocking error: its stderr is shown to the user, the session goes on.
  (Gemini CLI blocks on any exit but 0 and 1, and every agent on 2, which an older loki's usage
  error would be: their settings run ``loki hook --agent ... || exit 1``.)

So whatever goes wrong here -- bad stdin, an invalid state file, a lock timeout, a bug -- ends
as one line on stderr and exit 1, never as a traceback or a blocked session. A repository
without ``.loki/`` is not loki's business: exit 0, silently.

This module runs on every tool call (PreToolUse, PostToolUse), before typer, rich, jsonschema or
portalocker could be imported; :mod:`loki.entry` dispatches here.
"""

from __future__ import annotations

import json
import os
import sys

from loki.hooks.payload import HookError, work_dir

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any, BinaryIO, TextIO

EVENTS = {
    "pre-tool-use": "PreToolUse",
    "post-tool-use": "PostToolUse",
    "post-tool-use-failure": "PostToolUseFailure",
    "session-start": "SessionStart",
    "stop": "Stop",
    "task-completed": "TaskCompleted",
}
"""``loki hook`` argument -> Claude Code's ``hook_event_name``."""
TOOL_EVENTS = frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure"})
AGENTS = ("claude", "gemini", "codex")
"""``loki hook --agent``: whose hook contract stdin and stdout follow (claude by default)."""
DEFAULT_AGENT = "claude"
MAX_STDIN_BYTES = 4 * 1024 * 1024
"""No real payload comes near: tool inputs are bounded by the model's output (tens of KB) and
Claude Code cuts Bash output at 30,000 characters."""
_DRAIN_LIMIT = 256 * 1024 * 1024
_HELP_FLAGS = frozenset({"--help", "-h"})


def parse_args(args: list[str]) -> tuple[str | None, str, str] | None:
    """``(root, agent, event)`` for ``[--root R] hook [--agent A] EVENT`` (``--agent`` before or after
    the event, ``--agent=A`` too); None when typer should handle it (help, anything else)."""
    from loki.argv import split_root

    split = split_root(args)
    if split is None:
        return None
    root, rest = split
    if not rest or rest[0] != "hook":
        return None
    words, agent = rest[1:], DEFAULT_AGENT
    for index, word in enumerate(words):
        if word == "--agent" and index + 1 < len(words):
            agent, words = words[index + 1], words[:index] + words[index + 2:]
            break
        if word.startswith("--agent="):
            agent, words = word[len("--agent="):], words[:index] + words[index + 1:]
            break
    if len(words) != 1 or words[0].startswith("-"):
        return None
    return root, agent, words[0]


def agent_events(agent: str) -> tuple[dict[str, str], frozenset[str]]:
    """An agent's ``loki hook`` arguments -> its event names, and which of those are tool events."""
    if agent == "gemini":
        from loki.hooks import gemini

        return gemini.EVENTS, gemini.TOOL_EVENTS
    if agent == "codex":
        from loki.hooks import codex

        return codex.EVENTS, codex.TOOL_EVENTS
    if agent != DEFAULT_AGENT:
        raise HookError(f"unknown agent {agent!r}; known: {', '.join(AGENTS)}")
    return EVENTS, TOOL_EVENTS


def read_stdin(stream: BinaryIO, limit: int = MAX_STDIN_BYTES) -> bytes:
    """All of stdin, refusing a terminal and anything over ``limit`` bytes."""
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        raise HookError("stdin is a terminal: pipe the agent's hook JSON into this command")
    data = stream.read(limit + 1)
    if len(data) > limit:
        total = len(data)
        while total < _DRAIN_LIMIT:  # read the rest, so the writer is not left with a broken pipe
            chunk = stream.read(1 << 20)
            if not chunk:
                break
            total += len(chunk)
        raise HookError(f"stdin is {total} bytes, over the {limit}-byte limit for a hook payload")
    return data


def parse_payload(data: bytes, event_name: str, tool_events: frozenset[str] = TOOL_EVENTS) -> dict[str, Any]:
    """Decode and check one hook payload; :class:`HookError` says exactly what is wrong."""
    if not data.strip():
        raise HookError("stdin is empty: expected the agent's hook JSON")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HookError(f"stdin is not valid UTF-8 (byte {exc.start})") from None
    from loki.storage.jsonio import INPUT_DEPTH, STRICT_HOOKS, JsonError, check_depth, replace_lone_surrogates

    try:
        # Strict as loki's own files: Claude Code's JSON.stringify never writes a duplicate key or
        # NaN, and guessing which of two tool_names was meant would put a strike on the wrong call.
        payload = json.loads(text, **STRICT_HOOKS)
        if "\\u" in text:
            # But a lone surrogate escape is what JSON.stringify writes for an emoji cut in half
            # (tool output truncated mid-pair): refusing it would lose the failure, so it becomes
            # U+FFFD and the strike is recorded (docs/hooks.md).
            payload, _ = replace_lone_surrogates(payload)
        # Python's parser takes ~1,000 levels, but storing such a payload would overflow the encoder.
        check_depth(payload, INPUT_DEPTH, text)
    except JsonError as exc:
        raise HookError(f"stdin is not valid JSON: {exc.reason}") from None
    except json.JSONDecodeError as exc:
        ended = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
        cut = "; it ends early (truncated?)" if ended else ""
        raise HookError(f"stdin is not valid JSON: {exc.msg} (line {exc.lineno} column {exc.colno}){cut}") from None
    except RecursionError:
        raise HookError("stdin is not valid JSON: nesting is too deep") from None
    except ValueError as exc:  # an integer longer than Python converts
        raise HookError(f"stdin is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise HookError(f"stdin is JSON but not an object (got {type(payload).__name__})")
    named = payload.get("hook_event_name")
    if named is not None and named != event_name:
        raise HookError(f"stdin is a {named} payload, but this hook handles {event_name}; check the hook "
                        "settings (`loki hooks install` writes them)")
    if event_name in tool_events:
        tool = payload.get("tool_name")
        if not isinstance(tool, str) or not tool:
            raise HookError(f"stdin has no tool_name (a {event_name} payload names the tool)")
    for field in ("session_id", "cwd"):
        if field in payload and payload[field] is not None and not isinstance(payload[field], str):
            raise HookError(f"stdin's {field} is not a string")
    return payload


def locate_root(root_option: str | None, start: str) -> str | None:
    """The ``.loki/`` to use: ``--root``/``LOKI_ROOT`` (which must be a tree), else the nearest above
    ``start``; None when there is none (a repository without loki: the hook stays silent)."""
    from loki.errors import NotInitialized
    from loki.storage.paths import ROOT_ENV, find_root

    explicit = root_option or os.environ.get(ROOT_ENV)
    try:
        return find_root(explicit, start)
    except NotInitialized as exc:
        if explicit:
            raise HookError(exc.message) from None
        return None


def run(event: str, root_option: str | None, stdin: BinaryIO, stdout: TextIO, stderr: TextIO,
        agent: str = DEFAULT_AGENT) -> int:
    """One hook invocation: read, answer, and turn every failure into one line and exit 1."""
    try:
        events, tool_events = agent_events(agent)
        event_name = events.get(event)
        if event_name is None:
            known = ", ".join(events)
            raise HookError(f"unknown hook event {event!r} for agent {agent}; known: {known}")
        try:
            payload = parse_payload(read_stdin(stdin), event_name, tool_events)
        except HookError:
            # Bad input in a repository without loki is none of our business either.
            if locate_root(root_option, os.getcwd()) is None:
                return 0
            raise
        root = locate_root(root_option, work_dir(payload))
        if root is None:
            return 0
        answer = decide(agent, event_name, payload, root)
        if answer is not None:
            stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
        return 0
    except Exception as exc:  # a hook must never crash the agent's session
        if os.environ.get("LOKI_DEBUG"):
            import traceback

            traceback.print_exc(file=stderr)
        stderr.write(f"loki hook {event}: {one_line(exc)}\n")
        return 1
    except KeyboardInterrupt:
        stderr.write(f"loki hook {event}: interrupted\n")
        return 1


def decide(agent: str, event_name: str, payload: dict[str, Any], root: str) -> dict[str, Any] | None:
    """The answer to one checked payload: what the command hook prints and ``loki serve`` returns."""
    if agent == "gemini":
        from loki.hooks import gemini

        return gemini.answer(event_name, payload, root)
    if agent == "codex":
        from loki.hooks import codex

        return codex.answer(event_name, payload, root)
    from loki.hooks.handlers import HANDLERS

    return HANDLERS[event_name](payload, root)


def one_line(exc: BaseException) -> str:
    if isinstance(exc, HookError):
        text = str(exc)
    else:
        message = getattr(exc, "message", None)  # LokiError carries its own clean message
        text = message if isinstance(message, str) else f"internal error: {type(exc).__name__}: {exc}"
    return " ".join(text.split())


def main(args: list[str]) -> int | None:
    """The fast lane's entry: run the hook if ``args`` is ``[--root R] hook [--agent A] EVENT``, else None."""
    parsed = parse_args(args)
    if parsed is None:
        return None
    root, agent, event = parsed
    return run(event, root, sys.stdin.buffer, sys.stdout, sys.stderr, agent)
