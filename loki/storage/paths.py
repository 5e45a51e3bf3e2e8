"""Finding ``.loki/`` and keeping every path inside it.

Ids become file names (escalations, signals), so they are checked against one
pattern before they are ever joined to a path; relative paths are checked for
traversal before the store touches them.
"""

from __future__ import annotations

import os
import re

from loki.errors import InvalidArgument, InvalidInput, NotInitialized, UsageError

ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
STATE_DIR_NAME = ".loki"
ROOT_ENV = "LOKI_ROOT"


def resource_dir(name: str) -> str:
    """A data directory shipped with loki (``schemas``, ``templates``).

    Inside an installed wheel it sits in the package; in a source checkout (editable
    install) it is at the top of the repository.
    """
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the loki package, above storage/
    packaged = os.path.join(here, name)
    return packaged if os.path.isdir(packaged) else os.path.join(os.path.dirname(here), name)


def check_id(value: str, what: str = "id") -> str:
    """Return ``value`` if it is a safe id, else raise a clear :class:`InvalidInput`."""
    if not isinstance(value, str) or ID_PATTERN.fullmatch(value) is None:
        if not isinstance(value, str) or value == "":
            problem = "is empty"
        elif "\x00" in value:
            problem = "contains a NUL byte"
        elif "/" in value or "\\" in value or value.startswith("."):
            problem = "would be a path (ids may not contain '/' or '\\' or start with '.')"
        elif len(value) > 128:
            problem = "is longer than 128 characters"
        else:
            problem = "may only contain letters, digits, '.', '_' and '-' and must start with a letter or digit"
        raise InvalidArgument(
            f"invalid {what} {value!r}: {problem}",
            field=what,
            pattern=ID_PATTERN.pattern,
        )
    return value


def check_relpath(rel: str) -> str:
    """A path relative to the state root, with no way out of it."""
    if not rel or "\x00" in rel or "\\" in rel or rel.startswith("/"):
        raise InvalidInput(f"invalid state path {rel!r}")
    for part in rel.split("/"):
        if part in ("", ".", ".."):
            raise InvalidInput(f"invalid state path {rel!r}: it escapes .loki/")
    return rel


def find_root(explicit: str | os.PathLike[str] | None = None, start: str | os.PathLike[str] | None = None) -> str:
    """The state directory: ``explicit`` (``--root``), ``$LOKI_ROOT``, or the nearest ``.loki/`` upwards.

    Like git with ``.git``: walk up from the working directory to the filesystem root.
    """
    chosen = explicit or os.environ.get(ROOT_ENV)
    if chosen:
        root = os.path.abspath(chosen)
        if not os.path.isdir(root):
            raise NotInitialized(f"state directory {root} does not exist; run `loki init` first", root=root)
        nested = os.path.join(root, STATE_DIR_NAME)
        if os.path.isdir(nested):  # pointed at the project rather than at its .loki/
            return nested
        looks_like_state = os.path.isdir(os.path.join(root, "queue")) or os.path.isfile(
            os.path.join(root, "config", "loki.json"))
        if not looks_like_state:
            raise NotInitialized(f"{root} is not a loki state directory (no queue/ or config/loki.json): point --root "
                                 f"at a .loki/ directory, or create one with `loki init`", root=root)
        return root
    here = os.path.abspath(start or os.getcwd())
    candidate = here
    while True:
        state = os.path.join(candidate, STATE_DIR_NAME)
        if os.path.isdir(state):
            return state
        parent = os.path.dirname(candidate)
        if parent == candidate:
            break
        candidate = parent
    raise NotInitialized(
        f"no {STATE_DIR_NAME}/ directory in {here} or any parent; run `loki init` (or pass --root / set {ROOT_ENV})",
        cwd=str(here),
    )


def init_directory(path: str | None, cwd: str) -> tuple[str, str]:
    """Where ``loki init`` puts ``.loki/``: the project directory, and why (``"path"``, ``"git_top"``:
    the top of the git repository containing ``cwd``, or ``"cwd"``: outside any repository).

    ``--path DIR`` is taken as given (it must be a directory, or not exist yet). Otherwise the top of
    the git repository: that is where Claude Code runs the hooks from and where
    ``.claude/settings.json`` lives, so a tree created in a subdirectory would be found only by
    commands run below it. A chosen directory below an existing tree is refused (:func:`refuse_nested_tree`).
    """
    if path is not None:
        chosen = os.path.abspath(path)
        if os.path.exists(chosen) and not os.path.isdir(chosen):
            raise UsageError(f"--path {path!r} is not a directory: give the project directory that is to "
                             f"hold {STATE_DIR_NAME}/")
        return chosen, "path"
    top = find_work_tree(cwd)
    project, location = (os.path.abspath(cwd), "cwd") if top is None else (top, "git_top")
    refuse_nested_tree(project)
    return project, location


def find_work_tree(start: str) -> str | None:
    """The top of the working tree containing ``start``: the nearest directory holding a ``.git``
    directory or file (a worktree's or submodule's top); None outside a repository."""
    here = os.path.abspath(start)
    while True:
        dot_git = os.path.join(here, ".git")
        if os.path.isdir(dot_git) or os.path.isfile(dot_git):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def refuse_nested_tree(project: str) -> None:
    """Refuse a project directory below an existing tree, unless it was named (``--path``): a second
    ``.loki/`` below the first would split the agents between two states, silently."""
    here = os.path.abspath(project)
    parent = os.path.dirname(here)
    while parent != here:
        if os.path.isdir(os.path.join(parent, STATE_DIR_NAME)):
            raise InvalidInput(f"{os.path.join(parent, STATE_DIR_NAME)} already exists above this directory, and loki "
                               "commands here use it; to create another tree here anyway, say so: "
                               "`loki init --path .`", existing=os.path.join(parent, STATE_DIR_NAME))
        here, parent = parent, os.path.dirname(parent)
