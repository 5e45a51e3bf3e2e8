"""The marker of a migration under way, and the check every writer makes against it (docs/postgres.md).

``loki migrate`` writes ``config/migration.json`` (durably) before it reads anything, and removes it
last, after the tree's config names the new backend. While it exists, every command is refused with
exit 5 and the command that finishes the job (a re-run of the same ``loki migrate``): the writers of
the source are held out for the whole migration, so nothing is acknowledged that the copy would miss,
and a migration killed half-way leaves a tree that says so instead of one that looks healthy and empty.

A process that opened its store before the migration began (``loki work``, ``loki watch``) checks
again before every unit it writes: the marker, and that the tree's config still names its backend
(after the switch a file store's writes would land in a tree nobody reads any more).
"""

from __future__ import annotations

import json
import os

from loki.errors import MigrationUnderWay
from loki.storage import layout

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

STEPS = ("holding", "copying", "switching")
"""``holding``: the source's writers are held out, nothing written to the target yet; ``copying``: the
target is being filled (a files target: a re-run clears it first); ``switching``: the copy is verified and
the target is the truth; what is left is setting the files aside and pointing the config at it."""


def marker_path(root: str) -> str:
    return os.path.join(root, *layout.MIGRATION_MARKER.split("/"))


def marker(root: str) -> dict[str, Any] | None:
    """The migration under way on the tree at ``root`` (None: none). A marker that cannot be read
    or parsed still holds everything out: it says a migration began."""
    try:
        with open(marker_path(root), "rb") as handle:
            data = handle.read(1 << 16)
    except FileNotFoundError:
        return None
    except OSError:
        return {}
    try:
        doc = json.loads(data)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def refusal(root: str, doc: dict[str, Any]) -> MigrationUnderWay:
    target = doc.get("target") if isinstance(doc.get("target"), str) else "<the target it names>"
    return MigrationUnderWay(
        f"{root}: `loki migrate --to {target}` began at {doc.get('started_at', '?')} and has not finished "
        f"(step {doc.get('step', '?')}); every other command is held out until it ends: if no `loki migrate` "
        f"is running any more, run `loki migrate --to {target}` again to finish it",
        file=layout.MIGRATION_MARKER, target=target, step=doc.get("step"))


def refuse_if_moving(root: str) -> None:
    """Raise :class:`MigrationUnderWay` (exit 5) while a migration of the tree is under way."""
    doc = marker(root)
    if doc is not None:
        raise refusal(root, doc)


_backends: dict[str, tuple[tuple[int, int, int], str]] = {}


def backend_of(root: str) -> str:
    """``files`` or ``postgresql``: what the tree's config says now (cached by the file's identity)."""
    path = os.path.join(root, *layout.CONFIG.split("/"))
    try:
        st = os.stat(path)
    except OSError:
        return "files"
    key = (st.st_ino, st.st_mtime_ns, st.st_size)
    cached = _backends.get(root)
    if cached is not None and cached[0] == key:
        return cached[1]
    from loki.storage.backendof import storage_section  # the one reading of what the config names

    found = "files" if storage_section(root) is None else "postgresql"
    _backends[root] = (key, found)
    return found


def check_writable(root: str, backend: str) -> None:
    """Before a unit writes: no migration under way, and the tree still keeps its state in ``backend``."""
    refuse_if_moving(root)
    now = backend_of(root)
    if now != backend:
        raise MigrationUnderWay(f"{root} moved its state to {'the database' if now == 'postgresql' else 'its files'} "
                                f"(`loki migrate`) while this process was running on {backend}: nothing was "
                                "written; run the command again", file=layout.CONFIG, target=now)
