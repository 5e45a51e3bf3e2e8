"""Codex CLI's hook contract, translated to and from loki's own (Claude Code's) at the boundary.

Codex CLI (``@openai/codex``, hooks stable and on by default; read from 0.169.0, checked by
tests/agents/) speaks Claude Code's hook wire format: the same event names, ``tool_name: "Bash"``
with ``tool_input.command`` for a shell command, ``hookSpecificOutput`` with
``additionalContext`` and ``permissionDecision``. Two things differ, and this module handles them:

* There is no ``PostToolUseFailure``: every call, failed or not, comes to ``PostToolUse``, and a
  shell command's ``tool_response`` is its output text alone, without the exit code. So the output
  decides: a failure is what errorscan recognises in it (``command not found``, a traceback, a
  failing test run ...), except for commands whose output is content (``cat``, ``grep``,
  ``git log``: what they print is not their status). A command that fails silently is not seen.
* ``permissionDecision: "ask"`` is refused by Codex ("unsupported"), so a stop tier configured to
  ask denies instead.

Everything else (the memory hint before a command, the briefing, Stop's ``systemMessage``) is
Claude Code's answer as it is. Codex's file edits come to PreToolUse as ``tool_name: "apply_patch"`` with
the patch in ``tool_input.command``; the path-lease gate reads their files from it (loki/hooks/leasegate.py).
Runs on every tool call: standard library and the handlers only.
"""

from __future__ import annotations

from loki.hooks import handlers

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

EVENTS = {
    "pre-tool-use": "PreToolUse",
    "post-tool-use": "PostToolUse",
    "session-start": "SessionStart",
    "stop": "Stop",
}
"""``loki hook --agent codex`` argument -> Codex CLI's ``hook_event_name``."""
TOOL_EVENTS = frozenset({"PreToolUse", "PostToolUse"})


def answer(event_name: str, payload: dict[str, Any], root: str) -> dict[str, Any] | None:
    """Codex CLI's answer to one checked payload, or None to say nothing."""
    if event_name == "PreToolUse":
        return _pre_tool_use(payload, root)
    if event_name == "PostToolUse":
        return _post_tool_use(payload, root)
    if event_name == "SessionStart":
        return handlers.session_start(payload, root)
    return handlers.stop(payload, root)


def _pre_tool_use(payload: dict[str, Any], root: str) -> dict[str, Any] | None:
    said = handlers.pre_tool_use(payload, root)
    if said is not None and said["hookSpecificOutput"].get("permissionDecision") == "ask":
        said["hookSpecificOutput"]["permissionDecision"] = "deny"  # Codex: "unsupported permissionDecision:ask"
    return said


def _post_tool_use(payload: dict[str, Any], root: str) -> dict[str, Any] | None:
    response = payload.get("tool_response")
    command = shell_command(payload)
    if command is None or not isinstance(response, str):
        return handlers.post_tool_use(payload, root)
    if not shell_failed(command, response):
        return handlers.post_tool_use({**payload, "tool_response": {"stdout": response, "stderr": ""}}, root)
    canonical = {key: value for key, value in payload.items() if key != "tool_response"}
    said = handlers.post_tool_use_failure({**canonical, "error": response}, root)
    if said is None:
        return None
    return handlers.context_answer("PostToolUse", said["hookSpecificOutput"]["additionalContext"])


def shell_command(payload: dict[str, Any]) -> str | None:
    tool_input = payload.get("tool_input")
    if payload.get("tool_name") != "Bash" or not isinstance(tool_input, dict):
        return None
    command = tool_input.get("command")
    return command if isinstance(command, str) else None


def shell_failed(command: str, output: str) -> bool:
    """Whether a shell command's output (no exit code known) shows that it failed."""
    from loki.text.errorscan import is_viewer, scan

    if not output.strip() or is_viewer(command):
        return False
    return scan(output, None, command=command).is_error
