"""Gemini CLI's hook contract, translated to and from loki's own (Claude Code's) at the boundary.

Gemini CLI (``@google/gemini-cli``; read from 0.61.0's source, checked by tests/agents/) runs a hook
command with one JSON document on stdin and reads the answer from stdout, like Claude Code, but with
its own events, payloads and answers. The decisions are the same for every agent
(:mod:`loki.hooks.handlers`: strikes, error memory, the briefing); this module only reshapes:

=================  ==========================  ==============================================
Gemini event       loki handler                what Gemini can do with the answer
=================  ==========================  ==============================================
``BeforeTool``     PreToolUse                  ``decision: "deny"`` + ``reason`` (sent to the model
                                               as the tool's error) or ``"ask"``; no context: Gemini
                                               ignores ``additionalContext`` before a tool runs
``AfterTool``      PostToolUse(Failure)        ``additionalContext``, appended to the tool result
``SessionStart``   SessionStart                ``additionalContext`` (prepended to the prompt in
                                               headless mode, the first turn otherwise)
``AfterAgent``     Stop                        ``systemMessage`` for the user (never a retry)
=================  ==========================  ==============================================

Payloads: Gemini has no failure event: ``AfterTool`` carries ``tool_response`` =
``{llmContent, returnDisplay, error?}``. A built-in tool that failed has ``error`` (``{message,
type}``); the shell tool (``run_shell_command``) never does: its exit code is a line of
``llmContent`` (``Output: ...\\nExit Code: 127\\nProcess Group PGID: 42``, inside
``<untrusted_context>`` tags). :func:`shell_result` reads that text.

The shell tool is recorded as ``Bash``, loki's name for "a shell command": the same command is the
same call whichever agent runs it, so strikes and error memory on a branch are shared between Claude
Code and Gemini CLI sessions. Other tools keep Gemini's names.

Since Gemini takes no context before a tool runs, error memory's hint ("last time this failed with
...; it was fixed by ...") goes with the answer to the failure instead, and a failed built-in tool's
guidance goes in a ``deny`` (Gemini sends only ``error.message`` to the model for a failed tool and
drops ``additionalContext``): its ``reason`` is the tool's own error followed by the guidance.

Runs on every tool call: it imports only what :mod:`loki.hooks.boundary` has loaded already.
"""

from __future__ import annotations

from loki.hooks import handlers

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

EVENTS = {
    "before-tool": "BeforeTool",
    "after-tool": "AfterTool",
    "session-start": "SessionStart",
    "after-agent": "AfterAgent",
}
"""``loki hook --agent gemini`` argument -> Gemini CLI's ``hook_event_name``."""
TOOL_EVENTS = frozenset({"BeforeTool", "AfterTool"})
SHELL_TOOL = "run_shell_command"
CANONICAL_SHELL = "Bash"

_SECTIONS = ("Process Group PGID: ", "Background PIDs: ", "Signal: ", "Exit Code: ")
"""The lines the shell tool appends after its output, last first (Gemini CLI's shell.ts)."""
_OUTPUT = "Output: "
_EMPTY_OUTPUT = "(empty)"
_UNTRUSTED = ("<untrusted_context>", "</untrusted_context>")
_USER_CANCEL = "Command was cancelled by user"
_TIMEOUT_CANCEL = "Command was automatically cancelled"


def answer(event_name: str, payload: dict[str, Any], root: str) -> dict[str, Any] | None:
    """Gemini CLI's answer to one checked payload, or None to say nothing."""
    if event_name == "BeforeTool":
        return _before_tool(payload, root)
    if event_name == "AfterTool":
        return _after_tool(payload, root)
    if event_name == "SessionStart":
        return _context(handlers.session_start(payload, root), "SessionStart")
    return handlers.stop(payload, root)  # AfterAgent: {"systemMessage": ...}, the same shape


def canonical_tool(name: str) -> str:
    return CANONICAL_SHELL if name == SHELL_TOOL else name


def _before_tool(payload: dict[str, Any], root: str) -> dict[str, Any] | None:
    canonical = {**payload, "tool_name": canonical_tool(payload["tool_name"])}
    decided = handlers.pre_tool_use(canonical, root, hint=False)
    if decided is None:
        return None
    output = decided["hookSpecificOutput"]
    decision = output.get("permissionDecision")
    if decision is None:
        return None  # context only: nowhere to put it before the call; the failure's answer carries it
    reason = str(output["permissionDecisionReason"])
    if decision == "ask":
        return {"decision": "ask", "reason": reason, "systemMessage": reason}
    return {"decision": "deny", "reason": reason}


def _after_tool(payload: dict[str, Any], root: str) -> dict[str, Any] | None:
    tool = payload["tool_name"]
    response = payload.get("tool_response")
    canonical = {key: value for key, value in payload.items() if key != "tool_response"}
    canonical["tool_name"] = canonical_tool(tool)
    if tool == SHELL_TOOL:
        return _context(_after_shell(canonical, response, root), "AfterTool")
    error = response.get("error") if isinstance(response, dict) else None
    if error is None:
        # Gemini reports a failed tool structurally (``error``): without one the call succeeded, and
        # its content (a file, a page) is nothing to scan.
        return _context(handlers.post_tool_use({**canonical, "tool_response": None}, root, hint=True), "AfterTool")
    message = _error_message(error)
    said = handlers.post_tool_use_failure({**canonical, "error": message}, root, hint=True)
    if said is None:
        return None
    return {"decision": "deny", "reason": f"{message}\n\n{said['hookSpecificOutput']['additionalContext']}"}


def _after_shell(canonical: dict[str, Any], response: Any, root: str) -> dict[str, Any] | None:
    result = shell_result(response)
    if result.interrupted:
        return handlers.post_tool_use_failure({**canonical, "error": result.output, "is_interrupt": True}, root)
    if result.failed:
        error = result.output if result.exit_code is None else f"Exit code {result.exit_code}\n{result.output}"
        return handlers.post_tool_use_failure({**canonical, "error": error}, root, hint=True)
    return handlers.post_tool_use({**canonical, "tool_response": {"stdout": result.output, "stderr": ""}}, root,
                                  hint=True)


def _context(answer: dict[str, Any] | None, event_name: str) -> dict[str, Any] | None:
    if answer is None:
        return None
    return handlers.context_answer(event_name, answer["hookSpecificOutput"]["additionalContext"])


def _error_message(error: Any) -> str:
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return error if isinstance(error, str) else str(error)


# -- the shell tool's result ----------------------------------------------------------------------


class ShellResult:
    """What one ``run_shell_command`` did, read from its ``llmContent``."""

    __slots__ = ("exit_code", "failed", "interrupted", "output")

    def __init__(self, output: str, exit_code: int | None = None, *, failed: bool = False,
                 interrupted: bool = False) -> None:
        self.output = output
        self.exit_code = exit_code
        self.failed = failed
        self.interrupted = interrupted

    def __repr__(self) -> str:
        return (f"ShellResult(exit_code={self.exit_code!r}, failed={self.failed!r}, "
                f"interrupted={self.interrupted!r}, output={self.output[:60]!r})")


def shell_result(response: Any) -> ShellResult:
    """Read the shell tool's ``tool_response``: its output, exit code and whether it failed.

    The text is ``Output: <output>`` followed by optional lines (``Error: ...``, ``Exit Code: N``,
    ``Signal: N``, ``Background PIDs: ...``, ``Process Group PGID: N``). The output itself may contain
    such lines, so where the output ends is taken from ``returnDisplay`` (the output alone) when it
    is a prefix, and otherwise the known lines are read from the end, in the order Gemini writes them.
    A non-zero exit code or a signal is a failure; so is a timeout; a cancellation by the user is an
    interrupt, which says nothing about the approach.
    """
    content = _text(response.get("llmContent") if isinstance(response, dict) else response)
    if not content.startswith(_OUTPUT):
        if content.startswith(_USER_CANCEL):
            return ShellResult(content, interrupted=True)
        return ShellResult(content, failed=content.startswith(_TIMEOUT_CANCEL))
    body = content[len(_OUTPUT):]
    display = response.get("returnDisplay") if isinstance(response, dict) else None
    if isinstance(display, str) and display and body.startswith(display + "\n"):
        output, trailer = display, body[len(display) + 1:].split("\n")
    else:
        output, trailer = _split_trailer(body)
    sections = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in trailer if ": " in line}
    exit_code = _number(sections.get("Exit Code"))
    signal = _number(sections.get("Signal"))
    if exit_code is None and signal is not None:
        exit_code = 128 + signal  # how a shell reports a command killed by a signal
    output = "" if output == _EMPTY_OUTPUT else output
    failed = bool(exit_code) or "Signal" in sections or "Error" in sections
    if failed and exit_code is None:  # a spawn error or a named signal: say which, there is no number
        output = "\n".join([output, *(f"{name}: {sections[name]}" for name in ("Error", "Signal") if name in sections)])
    return ShellResult(output, exit_code if failed else 0, failed=failed)


def _split_trailer(body: str) -> tuple[str, list[str]]:
    lines = body.split("\n")
    trailer: list[str] = []
    for prefix in _SECTIONS:
        if len(lines) > 1 and lines[-1].startswith(prefix):
            trailer.insert(0, lines.pop())
    return "\n".join(lines), trailer


def _number(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.lstrip("-").isdigit() else None


def _text(content: Any) -> str:
    """``llmContent`` as text (a string, or parts with ``text``), without the untrusted-context tags."""
    if isinstance(content, list):
        content = "\n".join(part["text"] if isinstance(part, dict) and isinstance(part.get("text"), str)
                            else part if isinstance(part, str) else "" for part in content)
    if not isinstance(content, str):
        return ""
    text = content.strip()
    opening, closing = _UNTRUSTED
    if text.startswith(opening) and text.endswith(closing):
        text = text[len(opening):-len(closing)].strip("\n")
    return text
