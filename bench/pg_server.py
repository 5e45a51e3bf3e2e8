"""The PostgreSQL server the benchmarks use: ``LOKI_BENCH_DATABASE_URL``, else ``LOKI_TEST_DATABASE_URL``,
else a throwaway cluster started like the tests' (tests/pgserver.py; fsync off there, for loki and the
comparison alike). Each benchmark gets a schema of its own."""

from __future__ import annotations

import os


def schema_url(migrate: bool = True) -> str:
    from tests import pgserver

    base = os.environ.get("LOKI_BENCH_DATABASE_URL") or None
    return pgserver.fresh_schema_url(base, migrate=migrate)


def describe(url: str) -> str:
    from loki.storage.postgres.connect import without_password

    return "the server of LOKI_BENCH_DATABASE_URL" if os.environ.get("LOKI_BENCH_DATABASE_URL") else \
        ("LOKI_TEST_DATABASE_URL" if os.environ.get("LOKI_TEST_DATABASE_URL") else
         f"a throwaway cluster (fsync off) at {without_password(url).split('?')[0]}")
