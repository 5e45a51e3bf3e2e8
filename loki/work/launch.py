"""How ``loki work`` starts the agent's command: under the guard, with the task in its environment.

The guard (loki/work/guard.py) leads the command's process group and kills it when ``loki work``
dies. It learns that from one pipe: ``loki work`` creates it once and keeps the write end to itself
(close-on-exec, never passed to a child); each guard gets the read end. When ``loki work`` exits,
however it exits, the kernel closes the write end and every guard's read sees end-of-file.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Mapping

GUARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "guard.py")
GUARD_PYTHON = [sys.executable, "-I", "-S"]
"""``-S``: no site packages to scan, the guard needs only the standard library (~10 ms to start);
``-I``: nothing from the environment (PYTHONPATH, PYTHONSTARTUP) runs inside it."""


class GuardedLauncher:
    """A :data:`loki.breakers.runner.Launcher` that starts each command under the guard, with ``env``."""

    def __init__(self) -> None:
        self._watch, self._alive = os.pipe()  # both ends close-on-exec (PEP 446)
        self.env: Mapping[str, str] | None = None
        """The environment of the next command (None: this process's)."""

    def __call__(self, command: list[str], cwd: str | None = None) -> subprocess.Popen[bytes]:
        return subprocess.Popen([*GUARD_PYTHON, GUARD, str(self._watch), "--", *command],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                pass_fds=(self._watch,), env=self.env, cwd=cwd)

    def close(self) -> None:
        """Close the pipe: a guard still running (there should be none) takes its command down."""
        for fd in (self._watch, self._alive):
            with contextlib.suppress(OSError):  # closed already
                os.close(fd)
