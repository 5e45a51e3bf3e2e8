"""Which git branch a directory is on, read from ``.git`` directly (no ``git`` process).

Strike state is kept per branch (the ADR's ``.plan/{branch}/``), and the PreToolUse hook asks
this on every tool call: spawning ``git`` costs ~5 ms of fork/exec plus git's own start-up, while
reading ``HEAD`` is two small file reads. Handled:

* a normal checkout: ``.git/HEAD`` holds ``ref: refs/heads/<branch>``;
* worktrees and submodules: ``.git`` is a file ``gitdir: <path>`` pointing at the real git dir
  (``<main>/.git/worktrees/<name>``), whose ``HEAD`` is the worktree's own;
* a detached HEAD (a commit id in ``HEAD``): ``detached-<first 12 hex digits>``;
* no repository above the directory: ``no-git``;
* the reftable backend, which leaves a placeholder ``HEAD`` (``refs/heads/.invalid``): only then
  is ``git symbolic-ref`` asked.

:func:`file_name` turns a branch into a file name: ``feature/login`` -> ``feature%2Flogin``
(letters, digits, ``.``, ``_`` and ``-`` are kept; every other byte is ``%XX``-encoded, a leading
``.`` too), so names are unambiguous, never a path and never hidden.
"""

from __future__ import annotations

import os

NO_GIT = "no-git"
DETACHED_PREFIX = "detached-"
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_MAX_NAME = 120
_MAX_HEAD_BYTES = 4096


def find_git_dir(start: str) -> str | None:
    """The git directory of the repository containing ``start`` (following a ``.git`` file)."""
    here = os.path.abspath(start)
    while True:
        dot_git = os.path.join(here, ".git")
        if os.path.isdir(dot_git):
            return dot_git
        if os.path.isfile(dot_git):
            return _follow_gitfile(dot_git)
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _follow_gitfile(path: str) -> str | None:
    text = _read_small(path)
    if text is None or not text.startswith("gitdir:"):
        return None
    target = text[len("gitdir:"):].strip()
    if not target:
        return None
    if not os.path.isabs(target):
        target = os.path.join(os.path.dirname(path), target)
    return os.path.normpath(target)


def _read_small(path: str) -> str | None:
    """The start of a small git file; None when it is absent, unreadable or not a regular file (a
    FIFO planted as ``HEAD`` must not hang the hook that asks for the branch)."""
    from loki.regularfile import read_regular

    try:
        data = read_regular(path, _MAX_HEAD_BYTES)
    except OSError:
        return None
    return data.decode("utf-8", "replace")


def current_branch(start: str | None = None) -> str:
    """The branch checked out at ``start`` (default: the working directory), as git names it."""
    git_dir = find_git_dir(start or os.getcwd())
    if git_dir is None:
        return NO_GIT
    head = _read_small(os.path.join(git_dir, "HEAD"))
    if head is None:
        return NO_GIT
    head = head.strip()
    if head.startswith("ref:"):
        ref = head[len("ref:"):].strip()
        if ref == "refs/heads/.invalid":  # reftable: HEAD lives in the table, ask git
            return _ask_git(start or os.getcwd())
        return ref[len("refs/heads/"):] if ref.startswith("refs/heads/") else ref
    if head and all(c in "0123456789abcdef" for c in head):
        return DETACHED_PREFIX + head[:12]
    return NO_GIT


def _ask_git(start: str) -> str:
    import subprocess

    try:
        done = subprocess.run(["git", "-C", start, "rev-parse", "--abbrev-ref", "HEAD"], capture_output=True,
                              text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return NO_GIT
    name = done.stdout.strip()
    if done.returncode != 0 or not name:
        return NO_GIT
    if name == "HEAD":
        sha = subprocess.run(["git", "-C", start, "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, check=False).stdout.strip()
        return DETACHED_PREFIX + sha[:12] if sha else NO_GIT
    return name


def file_name(branch: str) -> str:
    """A file-name-safe, unambiguous spelling of ``branch`` (without the ``.json`` suffix)."""
    out = []
    for index, char in enumerate(branch):
        if char in _SAFE and not (index == 0 and char == "."):
            out.append(char)
        else:
            out.extend(f"%{byte:02X}" for byte in char.encode("utf-8"))
    name = "".join(out) or "%00"
    if len(name) > _MAX_NAME:  # keep it a legal file name; the hash keeps long names apart
        from loki.strikes.key import text_hash

        name = name[: _MAX_NAME - 17] + "~" + text_hash(branch)
    return name
