"""Which backend a tree's ``config/loki.json`` names, read without validating it.

A leaf: :mod:`loki.storage.opening` asks it to pick the store, and ``Store.open`` to refuse a tree whose
state is not in its files. One small read, no jsonschema (the store validates the config when it uses it).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any


def storage_section(root: str) -> dict[str, Any] | None:
    """``/storage`` of the tree's config when it names PostgreSQL; None for a file tree (and for a config
    that is absent or broken: the file store reports that where it matters)."""
    import json

    from loki.storage.layout import CONFIG

    try:
        with open(os.path.join(root, *CONFIG.split("/")), "rb") as handle:
            config = json.loads(handle.read(1 << 20))
    except (OSError, ValueError):
        return None
    storage = config.get("storage") if isinstance(config, dict) else None
    if not isinstance(storage, dict) or storage.get("backend") != "postgresql":
        return None
    return storage
