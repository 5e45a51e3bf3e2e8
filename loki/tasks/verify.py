"""A task's declared checks (``--verify CMD``) and the evidence that they passed (docs/verify.md).

A check is one command line, split as a POSIX shell splits words (``shlex``) and run without a shell
(write ``sh -c '...'`` for pipes and ``&&``), in the agent's working directory, after the agent's
command exited 0. A task's checks are its own ``verify`` list when it has one, else its type's
defaults from the team's settings (``verify.types.<type>`` in ``config/loki.json``).

This module holds the pure rules: what a check may be, which checks a task has, and what evidence
proves them (every check passed, on the commit ``HEAD`` names now). Running them is
loki/work/checks.py's.
"""

from __future__ import annotations

import shlex

from loki.errors import InvalidArgument, InvalidInput, LokiError
from loki.text.lazyre import LazyRegex

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

MAX_CHECKS = 20
MAX_CHECK_CHARS = 1000
DEFAULT_TIMEOUT_SECONDS = 600.0
TAIL_CHARS = 2000
"""Of a check's output kept as evidence (and of its head in a failure's message)."""


class Unverified(LokiError):
    """A completion refused: the task has checks and nothing shows they passed (exit 1)."""

    kind = "unverified"


def check_command(value: Any, where: str = "--verify") -> list[str]:
    """The argv of one check; :class:`InvalidArgument` (exit 2) when it is not a command line."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{where}: a check must be a command line (a string), got {type(value).__name__}",
                              field="verify")
    if "\x00" in value:
        raise InvalidArgument(f"{where}: the check {value[:60]!r} contains NUL, which no command can carry",
                              field="verify")
    if not value.strip():
        raise InvalidArgument(f"{where}: a check is empty; give the command to run, e.g. --verify 'make test'",
                              field="verify")
    if len(value) > MAX_CHECK_CHARS:
        raise InvalidArgument(f"{where}: the check {value[:40]!r}... is {len(value)} characters long; the limit "
                              f"is {MAX_CHECK_CHARS}", field="verify")
    if any(ord(char) < 32 and char not in "\t" for char in value):
        raise InvalidArgument(f"{where}: the check {value[:60]!r} contains a control character (a check is one "
                              "line)", field="verify")
    try:
        argv = shlex.split(value)
    except ValueError as exc:
        raise InvalidArgument(f"{where}: the check {value[:60]!r} is not a command line: {exc}",
                              field="verify") from None
    if not argv or not argv[0]:
        raise InvalidArgument(f"{where}: the check {value[:60]!r} names no program", field="verify")
    return argv


def check_commands(value: Any, where: str = "--verify") -> list[str]:
    """A task's ``verify`` list, each check checked (:func:`check_command`); duplicates dropped."""
    if not isinstance(value, list):
        raise InvalidArgument(f"{where}: checks must be a list of command lines", field="verify")
    if len(value) > MAX_CHECKS:
        raise InvalidArgument(f"{where}: {len(value)} checks; the limit is {MAX_CHECKS}", field="verify")
    for item in value:
        check_command(item, where)
    return list(dict.fromkeys(value))


def checks_for(task: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """The checks a task must pass: its own ``verify`` list when it has one (an empty list: none,
    whatever its type's default), else its type's default (``verify.types``)."""
    own = task.get("verify")
    if isinstance(own, list):
        return [str(check) for check in own]
    types = ((config.get("verify") or {}).get("types") or {})
    default = types.get(task.get("type") or "general")
    return [str(check) for check in default] if isinstance(default, list) else []


def timeout_seconds(config: dict[str, Any]) -> float:
    value = (config.get("verify") or {}).get("timeout_seconds")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else DEFAULT_TIMEOUT_SECONDS


def git_head(cwd: str | None = None) -> str | None:
    """The commit ``HEAD`` names in ``cwd`` (None: not in a git work tree, or git is missing)."""
    import subprocess

    try:
        done = subprocess.run(["git", "rev-parse", "--verify", "--quiet", "HEAD"], cwd=cwd, capture_output=True,
                              timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    head = done.stdout.decode("ascii", "replace").strip()
    return head if done.returncode == 0 and head else None


def evidence_checks(doc: Any, where: str) -> list[dict[str, Any]]:
    """The check results an evidence document carries: ``{"checks": [...]}`` (what ``loki work`` stores
    under a result's ``verification``) or the list itself; each ``{"command", "exit_code", ...}``."""
    items = doc.get("checks") if isinstance(doc, dict) else doc
    if not isinstance(items, list):
        raise InvalidInput(f"{where}: expected {{\"checks\": [{{\"command\", \"exit_code\", \"commit\"}}, ...]}}",
                           file=where)
    results = []
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("command"), str) or \
                isinstance(item.get("exit_code"), bool) or not isinstance(item.get("exit_code"), int):
            raise InvalidInput(f"{where} at /checks/{index}: a check result needs \"command\" (a string) and "
                               "\"exit_code\" (an integer)", file=where)
        commit = item.get("commit")
        if commit is not None and not isinstance(commit, str):
            raise InvalidInput(f"{where} at /checks/{index}/commit: expected a string", file=where)
        results.append(item)
    return results


def judge(checks: list[str], results: list[dict[str, Any]], head: str | None, where: str) -> None:
    """Refuse (:class:`Unverified`, exit 1) evidence that does not show every check passing on ``head``:
    a check missing, a failed result, a result for another commit."""
    by_command = {}
    for result in results:
        by_command[result["command"]] = result  # the last run of a command counts
    missing = [check for check in checks if check not in by_command]
    if missing:
        raise Unverified(f"{where} has no result for the check(s) {', '.join(repr(c) for c in missing)}",
                         checks=missing)
    for check in checks:
        result = by_command[check]
        if result["exit_code"] != 0:
            raise Unverified(f"{where}: the check {check!r} failed (exit {result['exit_code']}); fix it and run it "
                             "again", checks=[check])
        commit = result.get("commit")
        if head is not None and commit != head:
            raise Unverified(f"{where}: the check {check!r} ran on {str(commit)[:12] or 'no commit'}, not on HEAD "
                             f"{head[:12]}; run it again on the current commit", checks=[check])


def refusal(task_id: str, checks: list[str]) -> Unverified:
    named = ", ".join(repr(check) for check in checks)
    return Unverified(f"task {task_id} has checks ({named}) and nothing shows they passed: let `loki work` run "
                      "them, or give --evidence FILE (passing results for the current HEAD), or --force --by NAME",
                      task_id=task_id, checks=checks)


def tail(text: str, chars: int = TAIL_CHARS) -> str:
    text = text.strip("\n")
    return text if len(text) <= chars else "..." + text[-chars:]


def head_of(text: str, chars: int = TAIL_CHARS) -> str:
    text = text.strip("\n")
    return text if len(text) <= chars else text[:chars] + "..."


_FAILED_CHECK = LazyRegex(r"check (?:\d+ of \d+ )?('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\") failed: "
                          r"exit (-?\d+) \(([a-z_]+)\)")
"""The first line loki/work/checks.py's :func:`~loki.work.checks.failure` writes."""


def failing_check(task: dict[str, Any]) -> dict[str, Any] | None:
    """The check the task's last attempt failed, when that attempt was a failed check (the message
    loki/work/checks.py writes: ``check 'make test' failed: exit 1 (test_failure): ...``):
    ``{"check", "exit_code", "error_class", "headline", "attempt", "at"}``; else None."""
    import ast

    attempts = task.get("attempts") or []
    if not attempts or not isinstance(attempts[-1], dict):
        return None
    last = attempts[-1]
    message = last.get("error_message")
    if not isinstance(message, str) or not message.startswith("check "):
        return None
    found = _FAILED_CHECK.get().match(message)
    if found is None:
        return None
    try:
        check = ast.literal_eval(found.group(1))
    except (ValueError, SyntaxError):
        return None
    return {"check": str(check), "exit_code": int(found.group(2)), "error_class": found.group(3),
            "headline": message.splitlines()[0][:300], "attempt": last.get("attempt_number"),
            "at": last.get("timestamp")}


def checks_failing(view: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The tasks whose last attempt was a failed declared check (docs/verify.md), not yet completed:
    ``{"task_id", "title", "state", "check", "exit_code", "error_class", "attempt", "at"}``, oldest first."""
    rows = []
    for state in ("pending", "in-progress", "blocked", "dead-letter"):
        for record in view.get(state, []):
            task = record.get("task_data") if state == "dead-letter" else record
            if not isinstance(task, dict):
                continue
            failed = failing_check(task)
            if failed is not None:
                rows.append({"task_id": task.get("id"), "title": task.get("title"), "state": state,
                             **{key: failed[key] for key in ("check", "exit_code", "error_class", "attempt", "at")}})
    rows.sort(key=lambda row: str(row["at"] or ""))
    return rows
