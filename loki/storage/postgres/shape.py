"""What the PostgreSQL store's parts and helpers (documents, logs, items, tasks, error memory's search,
validate) need of it, as a protocol.

Named here so that :mod:`.documents`, :mod:`.logs`, :mod:`.items`, :mod:`.tasks`, :mod:`.memorysearch` and
:mod:`.check` need not import :mod:`.store` for types while the store imports them to run: no import circle,
not even a type-only one. :class:`loki.storage.postgres.store.PgStore` is the one implementation (mypy checks
it where the store hands itself to them: its parts are made with ``PgDocuments(self)`` ...).
"""

from __future__ import annotations

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    import builtins
    from typing import Any, Protocol

    from loki.storage.postgres.session import Database
    from loki.storage.state import DatabaseState

    class PgState(DatabaseState, Protocol):
        """A tree's state in a database: every role, plus its connection and one-statement reads."""

        db: Database
        validate_all: bool
        def rows(self, sql: str, params: Any = ...) -> builtins.list[tuple[Any, ...]]: ...
        def check_size(self, rel: str, size: int) -> None: ...
        def encode(self, rel: str, doc: Any, changed: Any = ...) -> bytes: ...
