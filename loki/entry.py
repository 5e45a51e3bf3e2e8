"""The ``loki`` executable.

Most commands go through the typer app in :mod:`loki.cli.app`. A few run on every tool
call of every agent and must start in a few tens of milliseconds, so they are
dispatched here first, before typer (~60 ms of imports) is loaded. Anything
unusual (``--help``, unknown options) falls through to typer, which owns help
text and usage errors.
"""

from __future__ import annotations

import sys


def _fast_lane(args: list[str]) -> int | None:
    if args[:1] == ["__complete"]:  # the shell asking for Tab candidates: it must feel instant
        from loki.cli.completer import main as complete

        return complete(args[1:])
    if args in (["--version"], ["-V"]):
        from loki import __version__

        print(f"loki {__version__}")
        return 0
    # (a word the command line must contain, the lane that may take it); a lane answers None
    # for anything that is not exactly its command (a task titled "breaker", --help ...).
    lanes = (
        ("breaker", "loki.cli.fast", "breaker_check"),  # in front of every API call of a shell loop
        ("emit", "loki.cli.fast", "signal_emit"),  # agents emit signals constantly
        ("claim", "loki.cli.fast", "queue_claim"),  # agents claim in a loop
        ("hook", "loki.hooks.boundary", "main"),  # Claude Code's hooks: every tool call of every agent
    )
    for word, module, function in lanes:
        if word in args:
            from importlib import import_module

            code: int | None = getattr(import_module(module), function)(args)
            if code is not None:
                return code
    return None


def _undecodable(args: list[str]) -> str | None:
    """An argument that is not valid UTF-8 (Python hands it over with lone surrogates): loki could
    store it but never write it back as JSON, so it is refused at the door."""
    for arg in args:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return arg.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return None


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    bad = _undecodable(args)
    if bad is not None:
        sys.stderr.write(f"error: argument {bad!r} is not valid UTF-8\n")
        sys.exit(2)
    code = _fast_lane(args)
    if code is None:
        from loki.cli.app import run

        code = run(args)
    sys.exit(code)
