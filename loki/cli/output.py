"""What the typer app and the fast lanes both print, and the ``--root`` splitter both use.

Errors are formatted in one place (:func:`write_error`) and guarded in one place
(:func:`guarded`), so ``loki breaker check`` answers the same through the fast lane
(:mod:`loki.cli.fast`) and through typer (:mod:`loki.cli.app`); the parity tests in
tests/test_cli_*.py compare both byte for byte. The fast lanes import this module on every
call: it imports only ``json``, ``os`` and ``sys`` at the top, everything else when used.
"""

from __future__ import annotations

import json
import os
import sys

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from loki.breakers.breakers import Decision
    from loki.errors import LokiError


def split_root(args: list[str]) -> tuple[str | None, list[str]] | None:
    """``(root, the other arguments)`` with the global ``--root R`` / ``--root=R`` taken out wherever
    it stands; None for what a fast lane leaves to typer: a ``--`` separator, ``--root`` without a value.

    The typer app accepts ``--root`` anywhere too (:func:`loki.cli.app.hoist_root`), so both agree.
    """
    root: str | None = None
    rest: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            return None
        if arg == "--root":
            if index + 1 >= len(args):
                return None
            root = args[index + 1]
            index += 2
            continue
        if arg.startswith("--root="):
            root = arg[len("--root="):]
        else:
            rest.append(arg)
        index += 1
    return root, rest


def write_error(exc: LokiError, json_output: bool) -> int:
    """Print a LokiError on stderr (one JSON document with ``--json``); return its exit code.

    The one place that formats errors, for the typer app (:func:`loki.cli.app.run`) and the fast lanes.
    """
    from loki.errors import ExitCode
    from loki.textsafe import for_terminal, json_for_terminal

    if json_output:
        sys.stderr.write(json_for_terminal(json.dumps(exc.to_json(), ensure_ascii=False)) + "\n")
    else:
        # "Nothing ready" (3) and "circuit open, retry later" (75) are answers, not failures.
        answer = exc.exit_code in (ExitCode.NOTHING_TO_DO, ExitCode.CIRCUIT_OPEN)
        sys.stderr.write(f"{'' if answer else 'error: '}{for_terminal(exc.message)}\n")
        if exc.kind == "invalid_state_file":
            sys.stderr.write("hint: fix it by hand, or run `loki doctor --repair`: it sets broken records and files "
                             "aside (nothing is deleted)\n")
        elif exc.kind == "state_file_too_large":
            sys.stderr.write("hint: make it smaller by hand; `loki doctor "
                             "--repair` leaves it where it is, as it may hold live records\n")
    return exc.exit_code


def guarded(command: Callable[[], int], json_output: bool) -> int:
    """Run a fast-lane command as :func:`loki.cli.app.run` runs a typer one: loki's errors become a message
    and their exit code, Ctrl-C exit 130, and a bug one plain line (the traceback with LOKI_DEBUG=1)."""
    from loki.errors import LokiError

    try:
        return command()
    except LokiError as exc:
        return write_error(exc, json_output)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except Exception as exc:
        if os.environ.get("LOKI_DEBUG"):
            raise
        from loki.textsafe import for_terminal

        sys.stderr.write(for_terminal(f"internal error: {type(exc).__name__}: {exc}") +
                         " (set LOKI_DEBUG=1 for the traceback)\n")
        return 1


def emit_check(decision: Decision, json_output: bool) -> int:
    """Print a check's answer on stdout; return its exit code (0 go ahead, 75 wait).

    A refusal's message goes to stderr as the error it is: the typer command raises
    ``decision.error()``, the fast lane writes it with :func:`write_error`.
    """
    from loki.textsafe import for_terminal, json_for_terminal

    if json_output:
        sys.stdout.write(json_for_terminal(json.dumps(decision.to_json(), ensure_ascii=False, default=str)) + "\n")
    elif decision.allowed:
        sys.stdout.write(f"go: {for_terminal(decision.reason)}\n")
    return 0 if decision.allowed else decision.error().exit_code


def print_emitted(result: dict[str, object], json_output: bool) -> None:
    """What ``loki signal emit`` prints (typer command and fast lane alike)."""
    from loki.textsafe import json_for_terminal

    if json_output:
        sys.stdout.write(json_for_terminal(json.dumps(result, ensure_ascii=False, default=str)) + "\n")
    elif "offset" in result:
        sys.stdout.write(f"appended to {result['file']} at byte {result['offset']}\n")
    else:
        sys.stdout.write(f"emitted {result['name']} ({result['file']})\n")


def claim_lines(task: dict[str, Any]) -> list[str]:
    """What ``loki queue claim`` prints for people (typer command and fast lane alike)."""
    return [f"claimed {task['id']} [{task['priority']}] {task['title']}",
            f"lease until {task['lease_until']}, token {task['claim_token']}"]
