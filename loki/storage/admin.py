"""``status``, ``validate`` and ``doctor`` for whichever backend a tree is on.

Administration is what differs most between backends (a file tree has journals, temp files and
hard links to check; a database has its schema version and its rows), so each backend has its own
(:mod:`loki.storage.tree`, :mod:`loki.storage.postgres.admin`) and this module picks one. Every report
says which backend it is about (``backend``).
"""

from __future__ import annotations

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

    from loki.storage.state import StateStore
    from loki.storage.tree import DoctorReport, Problem


def status(store: StateStore) -> dict[str, Any]:
    from loki.storage.store import Store

    if isinstance(store, Store):
        from loki.storage.tree import status as tree_status

        return {**tree_status(store), "backend": store.backend}
    from loki.storage.postgres.admin import status as database_status  # type: ignore[import-not-found, import-untyped, unused-ignore]

    report: dict[str, Any] = database_status(store)
    return report


def validate(store: StateStore) -> list[Problem]:
    from loki.storage.store import Store

    if isinstance(store, Store):
        from loki.storage.tree import validate_tree

        return validate_tree(store)
    from loki.storage.postgres.admin import validate as validate_database  # type: ignore[import-not-found, import-untyped, unused-ignore]

    problems: list[Problem] = validate_database(store)
    return problems


def doctor(store: StateStore, repair: bool = False) -> DoctorReport:
    from loki.storage.store import Store

    if isinstance(store, Store):
        from loki.storage.tree import doctor as tree_doctor

        return tree_doctor(store, repair=repair)
    from loki.storage.postgres.admin import doctor as database_doctor  # type: ignore[import-not-found, import-untyped, unused-ignore]

    doctored: DoctorReport = database_doctor(store, repair=repair)
    return doctored
