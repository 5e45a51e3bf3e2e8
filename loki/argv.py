"""The global ``--root`` option, taken out of a command line wherever it stands.

Shared ground: the typer app (loki/cli/app.py), the fast lanes (loki/cli/fast.py) and the hook boundary
(loki/hooks/boundary.py) all read it, and the hooks sit below the CLI, so it lives in neither. No imports:
it is on every cold start.
"""

from __future__ import annotations


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
