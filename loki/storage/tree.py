"""Whole-tree operations on files: ``init`` here; ``validate`` and ``doctor`` in :mod:`loki.storage.treecheck`
(which :meth:`loki.storage.store.Store.validate_state` asks, without importing this module and its store).
"""

from __future__ import annotations

import os
from typing import Any

from loki.errors import InvalidInput
from loki.storage import jsonio, layout
from loki.storage.store import Store, fsync_dir, write_temp
from loki.storage.treecheck import doctor as doctor
from loki.storage.treecheck import validate_tree as validate_tree

# -- init ------------------------------------------------------------------------------------------


_IGNORE_PATTERNS = frozenset({".loki", ".loki/", "/.loki", "/.loki/", ".loki/*", "/.loki/*", ".loki/**"})


def gitignore_state(root: str) -> dict[str, Any]:
    """Whether the git repository around the tree ignores it: ``{"repository", "file", "ignored"}``.

    The README asks for ``.loki/`` in ``.gitignore`` (committing the live state would merge queue files
    across branches); ``loki init`` offers it. Only the ``.gitignore`` beside the tree is read, and only
    the spellings that ignore exactly the tree (``.loki/``, ``/.loki`` ...); ``repository`` is false
    when the directory holding the tree is no git work tree's top.
    """
    project = os.path.dirname(os.path.abspath(root))
    path = os.path.join(project, ".gitignore")
    repository = os.path.exists(os.path.join(project, ".git"))
    ignored = False
    if os.path.basename(os.path.abspath(root)) == ".loki" and os.path.isfile(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            ignored = any(line.strip() in _IGNORE_PATTERNS for line in f)
    return {"repository": repository, "file": path, "ignored": ignored}


def ignore_in_git(root: str) -> bool:
    """Add ``.loki/`` to the ``.gitignore`` beside the tree (created if absent) unless it is already there.
    Returns whether a line was added."""
    state = gitignore_state(root)
    if state["ignored"]:
        return False
    path = state["file"]
    existing = ""
    if os.path.isfile(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            existing = f.read()
    with open(path, "a", encoding="utf-8") as f:
        f.write(("" if not existing or existing.endswith("\n") else "\n") +
                "# loki's live state of the agents on this machine (loki init)\n.loki/\n")
    return True


def init_tree(root: str) -> list[str]:
    """Create the tree under ``root``; never touches an existing file. Returns what it created."""
    created: list[str] = []
    if os.path.lexists(root) and not os.path.isdir(root):
        raise InvalidInput(f"{root} exists and is not a directory; move it away to create the loki tree there",
                           file=root)
    if not os.path.isdir(root):
        os.makedirs(root, exist_ok=True)
        created.append(".")
    store = Store(root)
    for directory in layout.DIRECTORIES:
        if not os.path.isdir(store.path(directory)):
            created.append(directory + "/")
        store.ensure_dir(directory)
    for rel, content in layout.initial_files().items():
        if store.exists(rel):
            continue
        if isinstance(content, str):
            data = content.encode("utf-8")
        else:
            kind = layout.kind_for(rel)
            data = jsonio.dumps_document(content, kind.records_key if kind else None)
        # Whole or not at all: a temp file linked into place, which fails if the name exists (a
        # crash half-way through init must not leave an empty pending.json that init then skips).
        tmp = write_temp(store.path(rel), data)
        try:
            os.link(tmp, store.path(rel))
        except FileExistsError:
            continue
        finally:
            os.unlink(tmp)
        created.append(rel)
    for directory in {os.path.dirname(store.path(rel)) for rel in layout.initial_files()}:
        fsync_dir(directory)
    return created
