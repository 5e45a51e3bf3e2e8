"""The PostgreSQL server the benchmarks run against, and a tree on it.

``LOKI_BENCH_DATABASE_URL`` names one (a real server: its fsync and commit settings are what a team
gets); else the tests' throwaway cluster (tests/pgserver.py: initdb + pg_ctl on a Unix socket, with
fsync off, so its numbers flatter durability). Each benchmark gets a schema of its own. None when
neither is available: the PostgreSQL rows are then left out, saying why.
"""

from __future__ import annotations

import json
import os
from typing import Any

URL_ENV = "LOKI_BENCH_DATABASE_URL"


def schema_url() -> tuple[str | None, str]:
    """``(URL of a fresh migrated schema, where it is)``, or ``(None, why not)``."""
    try:
        from tests.pgserver import fresh_schema_url
    except ImportError as exc:  # psycopg missing
        return None, f"no PostgreSQL driver ({exc})"
    base = os.environ.get(URL_ENV)
    try:
        url = fresh_schema_url(base)
    except BaseException as exc:  # pytest's skip (no server could be started) is a BaseException
        return None, f"no PostgreSQL server ({' '.join(str(exc).split())[:200]})"
    where = f"the server at {URL_ENV}" if base else "a throwaway cluster (fsync off)"
    return url, where


def team(url: str, config: dict[str, Any]) -> None:
    """Make ``config`` the team's settings in the database at ``url``."""
    from loki.storage.postgres.store import PgStore

    store = PgStore.open(url, config=config)
    store.close()


def point_tree(root: str, url: str) -> None:
    """Make the tree at ``root`` (a ``.loki/`` directory) one whose state is in the database at ``url``."""
    with open(os.path.join(root, "config", "loki.json"), "w") as handle:
        json.dump({"version": 1, "storage": {"backend": "postgresql", "database": url}}, handle)
