"""``{title}``-style placeholders in the command ``loki work`` runs for each task.

``loki work --agent a -- claude -p "Do {id}: {title}. Details in {task_file}."`` runs the command with
each placeholder replaced by the claimed task's value. The set is fixed (:data:`PLACEHOLDERS`); a
placeholder outside it is a usage error (exit 2) found before anything is claimed, so a typo such as
``{titel}`` never costs a task an attempt.

Only ``{name}`` with a name made of letters, digits and ``_`` is a placeholder: JSON on the command
line (``'{"a": {"b": 1}}'``), ``{}``, brace expansions and the shell's ``${NAME}`` (in ``sh -c '...'``)
pass through untouched. ``{{name}}`` stands for
a literal ``{name}``.

A value is substituted whole into the one argument that holds it (no shell re-splitting: the command
is run without a shell). A value is never code: a placeholder in the program (``-- {title}``) or in
the script a shell is given with ``-c`` (``sh -c 'echo {title}'``, ``bash -lc``, ``env sh -c`` ...)
is a usage error, pointing at the safe form ``sh -c '... "$1"' sh {title}``. Quoting the value into
the script instead was rejected: whether a spot is inside quotes, ``$(...)``, a here-document or
``eval`` is the shell's parse to make, and one missed context runs the task's text.

NUL cannot pass through ``exec``; it becomes U+FFFD, and the exact text is in the task file.
"""

from __future__ import annotations

import json
import re

from loki.errors import UsageError

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

PLACEHOLDERS: dict[str, str] = {
    "id": "the task id",
    "title": "the task's title",
    "description": "the task's description (may be empty)",
    "type": "the task's type",
    "priority": "high, medium or low",
    "labels": "the task's labels, comma-separated",
    "payload": "the task's payload, as compact JSON",
    "attempt": "this attempt's number (1 for the first)",
    "agent": "the --agent name",
    "token": "the claim token (for `loki queue heartbeat --token` and the like)",
    "task_file": "path of a file holding the claimed task as JSON",
    "result_file": "path where the command may write its result, a JSON object",
}
"""Every placeholder and what it stands for (the README and ``loki work --help`` list them)."""

_PLACEHOLDER = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}|(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")
"""``{{name}}`` (escaped) or ``{name}`` not after ``$`` (``${HOME}`` in ``sh -c`` is the shell's)."""


def check(args: Sequence[str]) -> None:
    """Raise :class:`UsageError` (exit 2) naming the first unknown placeholder in ``args``, or a
    placeholder where its value would be code: the program, or a shell's ``-c`` script (:func:`code_span`)."""
    for index, arg in enumerate(args):
        for match in _PLACEHOLDER.finditer(arg):
            name = match.group(2)
            if name is not None and name not in PLACEHOLDERS:
                known = ", ".join("{" + key + "}" for key in PLACEHOLDERS)
                raise UsageError(f"unknown placeholder {{{name}}} in the command's argument {index + 1} ({arg!r}); "
                                 f"known: {known}; write {{{{{name}}}}} for a literal {{{name}}}",
                                 field="command", placeholder=name)
    program, script = code_span(args)
    for index in range(min(len(args), script + 1 if script is not None else program + 1)):
        name = _first_placeholder(args[index])
        if name is None:
            continue
        if index == program:
            raise UsageError(f"placeholder {{{name}}} in the program to run ({args[index]!r}): a task's text must "
                             f"not choose what runs; name the program and pass {{{name}}} as an argument",
                             field="command", placeholder=name)
        raise UsageError(f"placeholder {{{name}}} in the shell script of {args[program]!r} (argument {index + 1}, "
                         f"{args[index]!r}): a task's text would run as shell code; pass it as an argument "
                         f"instead: sh -c '... \"$1\"' sh {{{name}}} (or read \"$LOKI_TASK_TITLE\" and the like "
                         "from the environment)", field="command", placeholder=name)


SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ksh93", "mksh", "pdksh", "ash", "yash", "posh", "oksh",
                    "loksh", "fish", "csh", "tcsh", "rbash", "busybox"})
"""Programs whose ``-c`` argument is a script: a value substituted into it would be parsed as code."""

_SHELL_OPTIONS_WITH_VALUE = frozenset({"--rcfile", "--init-file", "--init-command"})
"""Long options whose next word is their value, not the script."""


def code_span(args: Sequence[str]) -> tuple[int, int | None]:
    """(the index of the program, the index of its shell script or None).

    The program is ``args[0]``, or what ``env [OPTION|NAME=VALUE]...`` runs. When it is a shell
    (:data:`SHELLS`, by its file name) given ``-c`` (alone or in a cluster: ``-lc``, ``-ec``;
    ``--command`` for fish), the script is the first word after the options (``-o NAME`` and
    ``--rcfile FILE`` take a word each): every word from the program to the script is code or
    chooses code. Words after it are ``$0``, ``$1`` ...: data.
    """
    program = 0
    if args and _base(args[0]) == "env":
        program = 1
        while program < len(args) and (args[program].startswith("-") or "=" in args[program]):
            program += 1
    if program >= len(args):
        return 0, None
    shell = _base(args[program])
    index = program + 1
    if shell == "busybox" and index < len(args):
        shell = _base(args[index])
        index += 1
    if shell not in SHELLS:
        return program, None
    script_given = False
    while index < len(args):
        word = args[index]
        if word == "--":
            index += 1
            break
        if word.startswith("--"):
            if word == "--command" or word.startswith("--command="):
                if "=" in word:
                    return program, index
                script_given = True
            elif word in _SHELL_OPTIONS_WITH_VALUE:
                index += 1
            index += 1
            continue
        if len(word) > 1 and word[0] in "-+":
            letters = word[1:]
            if word[0] == "-" and "c" in letters:
                script_given = True
            index += 1 + letters.count("o") + letters.count("O")
            continue
        break
    if not script_given:
        return program, None
    return program, min(index, len(args) - 1)


def _base(arg: str) -> str:
    return arg.rsplit("/", 1)[-1]


def _first_placeholder(arg: str) -> str | None:
    for match in _PLACEHOLDER.finditer(arg):
        if match.group(2) is not None:
            return match.group(2)
    return None


def values(task: dict[str, Any], *, agent: str, task_file: str, result_file: str) -> dict[str, str]:
    """What each placeholder stands for, for ``task`` as claimed (also the environment's values)."""
    return {
        "id": task["id"],
        "title": task["title"],
        "description": task.get("description") or "",
        "type": task.get("type") or "general",
        "priority": task["priority"],
        "labels": ",".join(task.get("labels") or []),
        "payload": json.dumps(task.get("payload") or {}, ensure_ascii=False, separators=(",", ":")),
        "attempt": str(len(task.get("attempts") or []) + 1),
        "agent": agent,
        "token": task.get("claim_token") or "",
        "task_file": task_file,
        "result_file": result_file,
    }


def uses_any(arg: str) -> bool:
    """Does ``arg`` hold a placeholder (not only an escaped ``{{name}}``)?"""
    return any(match.group(2) is not None for match in _PLACEHOLDER.finditer(arg))


def expand(args: Sequence[str], given: dict[str, str]) -> list[str]:
    """``args`` with every placeholder replaced by its value in ``given`` (checked by :func:`check`)."""

    def replace(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return "{" + match.group(1) + "}"
        return exec_safe(given[match.group(2)])

    return [_PLACEHOLDER.sub(replace, arg) for arg in args]


def exec_safe(text: str) -> str:
    """``text`` as an argument or environment value can carry it: NUL ends a C string, so it becomes U+FFFD."""
    return text.replace("\x00", "\ufffd")
