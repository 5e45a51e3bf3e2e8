"""Did a tool call fail? Read from Claude Code's PostToolUse / PostToolUseFailure payloads.

Claude Code sends a failed call (a Bash command exiting non-zero, a tool raising) to
PostToolUseFailure, with ``error`` = ``"Exit code N\\n<output>"`` for Bash, and a successful one to
PostToolUse with the tool's ``tool_response``. So:

* **PostToolUseFailure** is always a failure, except a user interrupt (``is_interrupt``), which
  says nothing about the approach and is ignored. For Bash the exit code and the command feed
  :func:`loki.text.errorscan.scan`, which names the class and a recovery suggestion; exit 1 of
  ``grep``/``diff`` (the last command of the line) means "no match" / "files differ" and is
  ignored too.
* **PostToolUse** is a success, with three refinements that decide what "no crying wolf" means:

  - **Bash** exited 0. Its output is scanned with ``exit_code=0`` and the command, so only the
    shapes errorscan trusts to override a success count (``pytest | tail`` hiding a failure, a
    traceback after ``|| true``); content viewers (``cat``, ``grep``, ``git log``) never count.
    On the corpus (tests/corpus, the 100 exit-0 outputs) this is exact: 11 hidden failures found,
    0 false alarms. An interrupted command (``interrupted: true``) is ignored.
  - **Content tools** (Read, Grep, Glob, WebFetch, Edit, Write, Task, ...) are never scanned:
    what they return is file or web content, not their own status, and their own failures go to
    PostToolUseFailure. A Read of a log full of tracebacks is a success.
  - **Any other tool** (MCP tools, tools loki does not know) fails if its response says so
    structurally (``isError``/``is_error`` true, ``success: false``) or if the *first line* of
    its text is an error (an error reply leads with it; content that merely quotes errors does
    not). Measured on the corpus as if every output were such a reply: precision 1.0 (the full
    text would give 0.975: the log files), at the cost of recall, which matters less because
    failing MCP calls normally arrive through PostToolUseFailure anyway.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

    from loki.text.errorscan import ScanResult

SUCCESS, FAILURE, IGNORED = "success", "failure", "ignored"

CONTENT_TOOLS = frozenset({
    "Read", "Grep", "Glob", "LS", "NotebookRead", "WebFetch", "WebSearch", "Edit", "MultiEdit", "Write",
    "NotebookEdit", "TodoWrite", "TodoRead", "Task", "Agent", "ExitPlanMode", "BashOutput", "KillShell",
    "KillBash", "SlashCommand", "Skill", "AskUserQuestion", "ListMcpResourcesTool", "ReadMcpResourceTool",
})
"""Built-in tools whose response is content (files, pages, a sub-agent's report), never a status."""

_EXIT_CODE_PREFIX = "Exit code "
_TOOL_ERROR_TAGS = ("<tool_use_error>", "</tool_use_error>")
MAX_TEXT_CHARS = 1024 * 1024


class Outcome:
    """What a hook payload says about a call: ``kind`` and, for a failure, the error."""

    __slots__ = ("error", "exit_code", "kind", "result")

    def __init__(self, kind: str, error: str = "", result: ScanResult | None = None,
                 exit_code: int | None = None) -> None:
        self.kind = kind
        self.error = error
        """The raw error text (the caller redacts before storing)."""
        self.result = result
        """errorscan's classification, when the text matched a known shape."""
        self.exit_code = exit_code

    def __repr__(self) -> str:
        pattern = self.result.pattern if self.result is not None else None
        return f"Outcome({self.kind!r}, pattern={pattern!r}, exit_code={self.exit_code!r})"


def after_failure(tool_name: str, tool_input: Any, error: Any, is_interrupt: Any = False) -> Outcome:
    """A PostToolUseFailure payload: a failure (or ignored, for a user interrupt)."""
    from loki.text.errorscan import scan

    if is_interrupt is True:
        return Outcome(IGNORED)
    text = _strip_tags(error if isinstance(error, str) else "" if error is None else json.dumps(error))
    command = _command(tool_name, tool_input)
    exit_code, output = _split_exit_code(text) if tool_name == "Bash" else (None, text)
    result = scan(output or text, exit_code, command=command)
    if exit_code is not None and not result.is_error:
        return Outcome(IGNORED, text, None, exit_code)  # grep/diff exit 1: "no match" is an answer
    return Outcome(FAILURE, text, result if result.is_error else None, exit_code)


def after_success(tool_name: str, tool_input: Any, tool_response: Any) -> Outcome:
    """A PostToolUse payload: a success, unless one of the refinements above applies."""
    if tool_name == "Bash":
        return _bash_success(tool_input, tool_response)
    if tool_name in CONTENT_TOOLS:
        return Outcome(SUCCESS)
    return _other_success(tool_response)


def _bash_success(tool_input: Any, response: Any) -> Outcome:
    from loki.text.errorscan import scan

    if isinstance(response, dict) and response.get("interrupted") is True:
        return Outcome(IGNORED)
    text = response_text(response)
    if not text.strip():
        return Outcome(SUCCESS)
    result = scan(text, 0, command=_command("Bash", tool_input))
    return Outcome(FAILURE, text, result, 0) if result.is_error else Outcome(SUCCESS)


def _other_success(response: Any) -> Outcome:
    from loki.text.errorscan import scan

    text = response_text(response)
    if isinstance(response, dict) and (
        response.get("isError") is True or response.get("is_error") is True or response.get("success") is False
    ):
        result = scan(text)
        return Outcome(FAILURE, text or "the tool reported a failure", result if result.is_error else None)
    first = next((line for line in text.splitlines() if line.strip()), "")
    if first:
        result = scan(first)
        if result.is_error:
            return Outcome(FAILURE, text, result)
    return Outcome(SUCCESS)


def response_text(response: Any) -> str:
    """The text of a tool response: Bash stdout + stderr, MCP ``content`` blocks, or its JSON."""
    if response is None:
        return ""
    if isinstance(response, str):
        return response[:MAX_TEXT_CHARS]
    if isinstance(response, dict):
        if "stdout" in response or "stderr" in response:
            parts = [response.get("stdout"), response.get("stderr")]
            return "\n".join(p for p in parts if isinstance(p, str) and p)[:MAX_TEXT_CHARS]
        content = response.get("content")
        if isinstance(content, list):
            return _blocks_text(content)
        for field in ("error", "message", "output", "result", "text"):
            value = response.get(field)
            if isinstance(value, str) and value:
                return value[:MAX_TEXT_CHARS]
    if isinstance(response, list):
        return _blocks_text(response)
    return json.dumps(response, ensure_ascii=False)[:MAX_TEXT_CHARS]


def _blocks_text(blocks: list[Any]) -> str:
    texts = [b["text"] if isinstance(b, dict) and isinstance(b.get("text"), str) else b if isinstance(b, str) else ""
             for b in blocks]
    return "\n".join(t for t in texts if t)[:MAX_TEXT_CHARS]


def _command(tool_name: str, tool_input: Any) -> str | None:
    if tool_name == "Bash" and isinstance(tool_input, dict) and isinstance(tool_input.get("command"), str):
        return str(tool_input["command"])
    return None


def _split_exit_code(text: str) -> tuple[int | None, str]:
    """``"Exit code 127\\n<output>"`` -> ``(127, "<output>")``; anything else -> ``(None, text)``."""
    if not text.startswith(_EXIT_CODE_PREFIX):
        return None, text
    first, _, rest = text.partition("\n")
    number = first[len(_EXIT_CODE_PREFIX):].strip()
    if not number.lstrip("-").isdigit():
        return None, text
    return int(number), rest


def _strip_tags(text: str) -> str:
    for tag in _TOOL_ERROR_TAGS:
        text = text.replace(tag, "")
    return text.strip()[:MAX_TEXT_CHARS]
