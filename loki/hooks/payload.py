"""What both sides of a hook share: its one error type and where the agent works.

:mod:`loki.hooks.boundary` is the process boundary (stdin, exit codes) and dispatches to the handlers in
:mod:`loki.hooks.handlers`; the handlers raise :class:`HookError` and need :func:`work_dir` too. Both
live in this leaf so the handlers do not import the boundary that imports them (an import
circle). It runs on every tool call: it imports only ``os``.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any


class HookError(Exception):
    """Anything that ends a hook with its one-line message and exit 1."""


def work_dir(payload: dict[str, Any]) -> str:
    """Where the agent is working: the payload's ``cwd`` if it is a directory, else ours."""
    cwd = payload.get("cwd")
    if isinstance(cwd, str) and cwd and os.path.isdir(cwd):
        return cwd
    return os.getcwd()
