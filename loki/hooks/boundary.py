"""``loki hook <event>``: Claude Code's hook contract at the process boundary.

Claude Code runs the hook command with one JSON document on stdin and reads the answer from the
exit code and stdout (docs/hooks.md has the contract as implemented):

* exit 0 with nothing on stdout: nothing to say; exit 0 with a JSON document: the answer
  (``hookSpecificOutput`` ...);
* exit 2 would *block* (PreToolUse: refuse the call; Stop: keep the session going). loki never
  exits 2: a refusal is an explicit ``permissionDecision``, and Stop is advisory only;
* any other exit is a non-blocking error: its stderr is shown to the user, the session goes on.

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
}
"""``loki hook`` argument -> Claude Code's ``hook_event_name``."""
TOOL_EVENTS = frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure"})
MAX_STDIN_BYTES = 4 * 1024 * 1024
"""No real payload comes near: tool inputs are bounded by the model's output (tens of KB) and
Claude Code cuts Bash output at 30,000 characters."""
_DRAIN_LIMIT = 256 * 1024 * 1024
_HELP_FLAGS = frozenset({"--help", "-h"})


def parse_args(args: list[str]) -> tuple[str | None, str] | None:
    """``(root, event)`` for ``[--root R] hook EVENT``; None when typer should handle it (help)."""
    from loki.cli.output import split_root

    split = split_root(args)
    if split is None:
        return None
    root, rest = split
    if len(rest) != 2 or rest[0] != "hook" or rest[1] in _HELP_FLAGS:
        return None
    return root, rest[1]


def read_stdin(stream: BinaryIO, limit: int = MAX_STDIN_BYTES) -> bytes:
    """All of stdin, refusing a terminal and anything over ``limit`` bytes."""
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        raise HookError("stdin is a terminal: pipe Claude Code's hook JSON into this command")
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


def parse_payload(data: bytes, event_name: str) -> dict[str, Any]:
    """Decode and check one hook payload; :class:`HookError` says exactly what is wrong."""
    if not data.strip():
        raise HookError("stdin is empty: expected Claude Code's hook JSON")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HookError(f"stdin is not valid UTF-8 (byte {exc.start})") from None
    from loki.storage.jsonio import STRICT_HOOKS, JsonError, replace_lone_surrogates

    try:
        # Strict as loki's own files: Claude Code's JSON.stringify never writes a duplicate key or
        # NaN, and guessing which of two tool_names was meant would put a strike on the wrong call.
        payload = json.loads(text, **STRICT_HOOKS)
        if "\\u" in text:
            # But a lone surrogate escape is what JSON.stringify writes for an emoji cut in half
            # (tool output truncated mid-pair): refusing it would lose the failure, so it becomes
            # U+FFFD and the strike is recorded (docs/hooks.md).
            payload, _ = replace_lone_surrogates(payload)
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
    if event_name in TOOL_EVENTS:
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


def run(event: str, root_option: str | None, stdin: BinaryIO, stdout: TextIO, stderr: TextIO) -> int:
    """One hook invocation: read, answer, and turn every failure into one line and exit 1."""
    event_name = EVENTS.get(event)
    try:
        if event_name is None:
            raise HookError(f"unknown hook event {event!r}; known: {', '.join(EVENTS)}")
        try:
            payload = parse_payload(read_stdin(stdin), event_name)
        except HookError:
            # Bad input in a repository without loki is none of our business either.
            if locate_root(root_option, os.getcwd()) is None:
                return 0
            raise
        root = locate_root(root_option, work_dir(payload))
        if root is None:
            return 0
        from loki.hooks.handlers import HANDLERS

        answer = HANDLERS[event_name](payload, root)
        if answer is not None:
            stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
        return 0
    except Exception as exc:  # a hook must never crash the agent's session
        if os.environ.get("LOKI_DEBUG"):
            import traceback

            traceback.print_exc(file=stderr)
        stderr.write(f"loki hook {event}: {_one_line(exc)}\n")
        return 1
    except KeyboardInterrupt:
        stderr.write(f"loki hook {event}: interrupted\n")
        return 1


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, HookError):
        text = str(exc)
    else:
        message = getattr(exc, "message", None)  # LokiError carries its own clean message
        text = message if isinstance(message, str) else f"internal error: {type(exc).__name__}: {exc}"
    return " ".join(text.split())


def main(args: list[str]) -> int | None:
    """The fast lane's entry: run the hook if ``args`` is ``[--root R] hook EVENT``, else None."""
    parsed = parse_args(args)
    if parsed is None:
        return None
    root, event = parsed
    return run(event, root, sys.stdin.buffer, sys.stdout, sys.stderr)
