"""The ``loki`` executable.

Most commands go through the typer app in :mod:`loki.cli`. A few run on every tool
call of every agent and must start in a few tens of milliseconds, so they are
dispatched here first, before typer (~60 ms of imports) is loaded. Anything
unusual (``--help``, unknown options) falls through to typer, which owns help
text and usage errors.
"""

from __future__ import annotations

import sys


def _fast_lane(args: list[str]) -> int | None:
    if args in (["--version"], ["-V"]):
        from loki import __version__

        print(f"loki {__version__}")
        return 0
    if "breaker" in args:
        from loki.cli_fast import breaker_check

        return breaker_check(args)
    if "signal" in args and "emit" in args:  # agents emit signals constantly (loki/cli_fast.py)
        from loki.cli_fast import signal_emit

        return signal_emit(args)
    if "hook" in args:  # Claude Code's hooks: every tool call of every agent (loki/hookio.py)
        from loki.hookio import main as hook_main

        return hook_main(args)
    return None


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    code = _fast_lane(args)
    if code is None:
        from loki.cli import run

        code = run(args)
    sys.exit(code)
