"""The git pre-commit guard: staged paths another agent holds stop the commit (docs/leases.md).

Shell writes cannot be attributed before they happen; the commit is where they surface. ``loki lease guard
--staged`` lists the staged paths (``git diff --cached --name-only -z``: added, copied, modified, renamed,
deleted) and refuses the commit when one of them is covered by another agent's live exclusive lease or task
claim. ``.loki/`` is exempt: it is loki's own state. ``loki hooks install --git`` writes the hook that runs it.
"""

from __future__ import annotations

import os
import subprocess

from loki.errors import InvalidInput
from loki.leases.holders import PathHolders

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from loki.leases.leases import PathLeases

MARK = "# loki: path-lease guard (loki hooks install --git)"
EXEMPT = (".loki/",)


def git_dir_hook(repo: str) -> str:
    """Where git runs the pre-commit hook of ``repo`` from (core.hooksPath respected)."""
    done = subprocess.run(["git", "rev-parse", "--git-path", "hooks/pre-commit"], cwd=repo, capture_output=True,
                          text=True, timeout=30)
    if done.returncode != 0:
        raise InvalidInput(f"{repo} is not a git repository: {done.stderr.strip() or 'git rev-parse failed'}")
    path = done.stdout.strip()
    return path if os.path.isabs(path) else os.path.join(repo, path)


def staged_paths(repo: str) -> list[str]:
    done = subprocess.run(["git", "diff", "--cached", "--name-only", "-z", "--diff-filter=ACDMR"], cwd=repo,
                          capture_output=True, timeout=60)
    if done.returncode != 0:
        raise InvalidInput(f"cannot list the staged paths: {done.stderr.decode(errors='replace').strip()}")
    return [name for name in done.stdout.decode("utf-8", "surrogateescape").split("\0") if name]


def check(leases: PathLeases, paths: list[str], agent: str | None) -> list[dict[str, Any]]:
    """Each path of ``paths`` (repository-relative) another agent holds, with its holder."""
    now = leases.now()
    holders = PathHolders(leases.live(now), leases.claims(now))
    found = []
    for path in paths:
        if path.startswith(EXEMPT):
            continue
        escaped = "/".join("".join("\\" + c if c in "*?[\\" else c for c in part) for part in path.split("/"))
        holder = holders.blocker([escaped], agent, exclusive=False)
        if holder is not None and holder["exclusive"]:
            found.append({"path": path, **holder})
    return found


def hook_script(command: str) -> str:
    return f"#!/bin/sh\n{MARK}\nexec {command} lease guard --staged\n"


def default_command() -> str:
    """How the hook runs loki when ``--command`` is not given: ``loki`` when that is this installation on
    ``PATH``, else this installation's absolute path. Git runs pre-commit with no agent's project variable
    (``$CLAUDE_PROJECT_DIR``), so the settings' project-relative form would not be found there (exit 127:
    every commit refused)."""
    import shlex
    import shutil
    import sys

    script = os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "loki")
    if not os.path.exists(script):
        return f"{shlex.quote(os.path.abspath(sys.executable))} -m loki"
    on_path = shutil.which("loki")
    if on_path and os.path.realpath(on_path) == os.path.realpath(script):
        return "loki"
    return shlex.quote(script)


def install(repo: str, command: str, *, dry_run: bool = False) -> tuple[str, str]:
    """Write the pre-commit hook; returns ``(path, "installed" | "unchanged")`` (with ``dry_run``, ``"would
    install"`` and nothing written). A pre-commit hook that is not loki's is refused (exit 1), never
    overwritten."""
    path = git_dir_hook(repo)
    script = hook_script(command)
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            current = f.read()
        if MARK not in current:
            raise InvalidInput(f"{path} exists and is not loki's: add `{command} lease guard --staged` to it "
                               "yourself; nothing written", path=path)
        if current == script:
            return path, "unchanged"
    if dry_run:
        return path, "would install"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.loki-tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(script)
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)
    return path, "installed"
