"""What a failed run of the agent's command becomes in the queue: an attempt's type and message.

The classifier is the hooks' (loki/text/errorscan.py): the same output a Bash tool call would have
printed is named the same way (``test_failure``, ``compile_error``, ``missing_module`` ...; by exit
status when the text says nothing: 124 ``timeout``, 137 ``resource``). The queue's attempt keeps the
dead-letter reference's fields and no more, so the class goes into the message; the ``error_type``
the queue and the dead-letter review act on is ``test_failure`` or ``timeout`` when the class is one,
else ``other``.

The message's first line is what ``loki queue show``, the dead-letter summary and the review's
grouping read first: ``exit 1 (test_failure): FAILED tests/test_login.py::test_rate_limit``. When
no pattern matches, it is stderr's last meaningful line (not blank, not a rule of dashes), else
stdout's, else the exit status: a program says what went wrong on stderr, while stdout's lines are
often a banner or progress. Then
the tail of the command's output (its last :data:`TAIL_CHARS` characters of stderr, then of
stdout), so whoever picks the task up next sees what happened. Secrets are redacted
(loki/text/redact.py) here, and again where every attempt is made.
"""

from __future__ import annotations

from loki.text.errorscan import scan
from loki.text.redact import redact

TAIL_CHARS = 2000
"""Of each stream: the part of a long log that says what went wrong, without bloating the queue file."""

QUEUE_ERROR_TYPES = {"test_failure": "test_failure", "timeout": "timeout"}
"""errorscan classes that are one of the queue's error types; any other class is ``other``."""


class Failure:
    """One failed run: ``error_type`` (the queue's), ``error_class`` (errorscan's), ``message``."""

    __slots__ = ("error_class", "error_type", "headline", "message")

    def __init__(self, error_type: str, error_class: str, headline: str, message: str) -> None:
        self.error_type = error_type
        self.error_class = error_class
        self.headline = headline
        """The message's first line."""
        self.message = message


def describe(exit_code: int, stdout: bytes, stderr: bytes) -> Failure:
    """The failure of a command that exited with ``exit_code`` (128+N: killed by signal N) after
    printing ``stdout`` and ``stderr`` (their tails)."""
    out = stdout.decode("utf-8", "replace")
    err = stderr.decode("utf-8", "replace")
    found = scan(err + "\n" + out, exit_code)
    error_class = found.error_class or "exit_status"
    detail = found.message or f"exited with code {exit_code}"
    if found.pattern in (None, "exit_status"):
        # No known pattern: the classifier's fallback is the combined text's last line, which is stdout's
        # (often a banner or a progress line). What went wrong is where programs say it: stderr.
        detail = last_meaningful(err) or last_meaningful(out) or detail
    headline = redact(f"exit {exit_code} ({error_class}): {detail}".splitlines()[0])
    parts = [headline]
    for name, text in (("stderr", err), ("stdout", out)):
        tail = _tail(text)
        if tail:
            parts.append(f"{name} (last lines):\n{redact(tail)}")
    return Failure(QUEUE_ERROR_TYPES.get(error_class, "other"), error_class, headline, "\n\n".join(parts))


def bad_result(reason: str) -> Failure:
    """The command exited 0 but its result file is unusable: a ``validation`` failure."""
    headline = redact(f"exit 0 (bad_result_file): {reason}".splitlines()[0])
    return Failure("validation", "bad_result_file", headline, headline)


def not_committed(branch: str, head: str | None, changed: list[str] | None = None) -> Failure:
    """The command exited 0 (its checks passed) but the task must land and no commit holds the work
    (not a git work tree, ``HEAD`` names no commit, or tracked files were changed and not committed): a
    ``validation`` failure, the task not given up as done (docs/work.md, "Tasks that must land")."""
    if changed:
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        where = f"{len(changed)} changed file(s) are not committed ({shown})"
    elif head is None:
        where = "HEAD names no commit here (not a git work tree?)"
    else:
        where = f"{head[:12]} is not a commit here"
    headline = redact(f"exit 0 (not_committed): the task must land on {branch} and {where}; commit the work "
                      "(and push its branch) before exiting")
    return Failure("validation", "not_committed", headline, headline)


def last_meaningful(text: str) -> str:
    """The last line of ``text`` that says something: not blank, not only rules and punctuation."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if any(char.isalnum() for char in line):
            return line[:300]
    return ""


def _tail(text: str) -> str:
    text = text.strip("\n")
    if len(text) <= TAIL_CHARS:
        return text
    cut = text[-TAIL_CHARS:]
    newline = cut.find("\n")
    # Start at a line boundary when one is near, so the first line shown is whole.
    return "..." + (cut[newline:] if 0 <= newline < 200 else cut)
