"""What the typer app and the fast lanes both print (the ``--root`` splitter they share is loki/argv.py).

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


def write_error(exc: LokiError, json_output: bool) -> int:
    """Print a LokiError on stderr (one JSON document with ``--json``); return its exit code.

    The one place that formats errors, for the typer app (:func:`loki.cli.app.run`) and the fast lanes.
    """
    from loki.errors import ExitCode
    from loki.text.textsafe import for_terminal, json_for_terminal

    if json_output:
        sys.stderr.write(json_for_terminal(json.dumps(exc.to_json(), ensure_ascii=False)) + "\n")
    else:
        # "Nothing ready" (3) and "circuit open, retry later" (75) are answers, not failures.
        answer = exc.exit_code in (ExitCode.NOTHING_TO_DO, ExitCode.CIRCUIT_OPEN)
        sys.stderr.write(f"{'' if answer else 'error: '}{for_terminal(exc.message)}\n")
        if exc.details.get("hint"):
            sys.stderr.write(f"hint: {for_terminal(str(exc.details['hint']))}\n")
        elif exc.kind == "invalid_state_file":
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
        from loki.storage.postgres.connect import as_loki_error, is_driver_error

        if is_driver_error(exc):  # a driver error no store mapped: still loki's, with its exit code
            return write_error(as_loki_error(None, exc), json_output)
        if os.environ.get("LOKI_DEBUG"):
            raise
        from loki.text.textsafe import for_terminal

        sys.stderr.write(for_terminal(f"internal error: {type(exc).__name__}: {exc}") +
                         " (set LOKI_DEBUG=1 for the traceback)\n")
        return 1


def emit_check(decision: Decision, json_output: bool) -> int:
    """Print a check's answer on stdout; return its exit code (0 go ahead, 75 wait).

    A refusal's message goes to stderr as the error it is: the typer command raises
    ``decision.error()``, the fast lane writes it with :func:`write_error`.
    """
    from loki.text.textsafe import for_terminal, json_for_terminal

    if json_output:
        sys.stdout.write(json_for_terminal(json.dumps(decision.to_json(), ensure_ascii=False, default=str)) + "\n")
    elif decision.allowed:
        sys.stdout.write(f"go: {for_terminal(decision.reason)}\n")
    return 0 if decision.allowed else decision.error().exit_code


def note_similar_breaker(similar: str | None, name: str, json_output: bool) -> None:
    """After a go-ahead for a breaker never recorded: say which recorded one its name is close to (stderr)."""
    if similar is not None and not json_output:
        from loki.text.textsafe import for_terminal

        sys.stderr.write(for_terminal(f"note: no breaker {name!r} was recorded before (did you mean {similar}?); "
                                      "a new name starts CLOSED") + "\n")


def print_emitted(result: dict[str, object], json_output: bool) -> None:
    """What ``loki signal emit`` prints (typer command and fast lane alike)."""
    from loki.text.textsafe import json_for_terminal

    if json_output:
        sys.stdout.write(json_for_terminal(json.dumps(result, ensure_ascii=False, default=str)) + "\n")
    elif "offset" in result:
        where = result["path"] or "in the database: `loki signal list`"
        sys.stdout.write(f"appended to the drift log ({where}); the watcher applies it\n")
    else:
        # a database tree has no signals/ file on this machine: name the command that shows the signal
        where = result["path"] or f"in the database: `loki signal show {result['name']}`"
        sys.stdout.write(f"emitted {result['name']} ({where})\n")


def claim_lines(task: dict[str, Any]) -> list[str]:
    """What ``loki queue claim`` prints for people (typer command and fast lane alike)."""
    verb = "already yours (--reuse):" if getattr(task, "reused", False) else "claimed"
    return [f"{verb} {task['id']} [{task['priority']}] {task['title']}",
            f"lease until {task['lease_until']}, token {task['claim_token']}"]


def claim_json(task: dict[str, Any]) -> dict[str, Any]:
    """What ``loki queue claim --json`` prints: the task, and whether it is the agent's live claim again."""
    return {"task": task, "reused": bool(getattr(task, "reused", False))}


# -- output formats (--format, -q) -----------------------------------------------------------------

FORMATS = ("table", "id", "json", "jsonl")
"""``--format``: table for people (tab-separated rows when stdout is not a terminal), id one id per line,
json one document (as ``--json``), jsonl one JSON object per line (the items of the document's list)."""
FORMAT_HELP = ("table (people; tab-separated rows when stdout is not a terminal), id (one id per line), json "
               "(one document, as --json) or jsonl (one JSON object per line).")
QUIET_HELP = "Only the ids, one per line, as --format id (for id=$(loki queue claim --agent a1 -q) in a script)."


def resolve_format(fmt: str | None, quiet: bool, json_output: bool) -> str:
    """The one output format ``--format``, ``-q`` and ``--json`` ask for together (case-blind, as every
    choice on loki's command line); :class:`~loki.errors.UsageError` (exit 2) for an unknown one or two
    that disagree (``--json --format id``)."""
    from loki.errors import UsageError

    asked: list[str] = []
    if fmt is not None:
        if fmt.lower() not in FORMATS:
            raise UsageError(f"--format must be one of {', '.join(FORMATS)} (got {fmt!r})", field="format")
        asked.append(fmt.lower())
    if quiet:
        asked.append("id")
    if json_output:
        asked.append("json")
    if len(set(asked)) > 1:
        named = {"id": "-q/--format id", "json": "--json/--format json"}
        raise UsageError("choose one output format: " + " and ".join(named.get(f, f"--format {f}")
                                                                     for f in dict.fromkeys(asked)) + " disagree",
                         field="format")
    return asked[0] if asked else "table"


def json_errors(args: list[str]) -> bool:
    """Whether errors go to stderr as one JSON document: ``--json``, or a JSON ``--format``."""
    for index, arg in enumerate(args):
        if arg == "--":
            break
        value = (args[index + 1] if arg == "--format" and index + 1 < len(args)
                 else arg[len("--format="):] if arg.startswith("--format=") else "")
        if arg == "--json" or value.lower() in ("json", "jsonl"):
            return True
    return False


def terminal_width() -> int | None:
    """The width to draw for when stdout is a terminal; None when it is not (a pipe, a file: plain rows).

    ``LOKI_FORCE_TTY`` acts as gh's ``GH_FORCE_TTY``: set, output is drawn as for a terminal, and a
    number is its width (tests and ``watch``-style wrappers use it).
    """
    forced = os.environ.get("LOKI_FORCE_TTY")
    if forced:
        if forced.isdigit() and int(forced) >= 20:
            return int(forced)
        return _columns()
    isatty = getattr(sys.stdout, "isatty", None)
    if isatty is None or not isatty():
        return None
    return _columns()


def _columns() -> int:
    import shutil

    return shutil.get_terminal_size((80, 24)).columns


def plain_cell(value: object) -> str:
    """One cell of a tab-separated row: no tab or line break inside it, escaped for a terminal."""
    from loki.text.textsafe import for_terminal

    text = "" if value is None else str(value)
    return for_terminal(" ".join(text.split()) if any(c in text for c in "\t\n\r") else text)


def write_plain_rows(rows: list[list[object]]) -> None:
    """Rows as gh prints them into a pipe: tab-separated cells, no header, nothing cut."""
    sys.stdout.write("".join("\t".join(plain_cell(cell) for cell in row) + "\n" for row in rows))


def write_ids(ids: list[object]) -> None:
    from loki.text.textsafe import for_terminal

    sys.stdout.write("".join(for_terminal(str(i)) + "\n" for i in ids))


def write_json(document: object) -> None:
    from loki.text.textsafe import json_for_terminal

    sys.stdout.write(json_for_terminal(json.dumps(document, ensure_ascii=False, default=str)) + "\n")


def write_jsonl(items: list[Any]) -> None:
    from loki.text.textsafe import json_for_terminal

    sys.stdout.write("".join(json_for_terminal(json.dumps(item, ensure_ascii=False, default=str)) + "\n"
                             for item in items))


def print_claim(task: dict[str, Any], fmt: str) -> None:
    """What ``loki queue claim`` prints in each format (typer command and fast lane alike)."""
    if fmt == "json":
        write_json(claim_json(task))
    elif fmt == "jsonl":
        write_jsonl([task])
    elif fmt == "id":
        write_ids([task["id"]])
    else:
        from loki.text.textsafe import for_terminal

        sys.stdout.write("".join(for_terminal(line) + "\n" for line in claim_lines(task)))
