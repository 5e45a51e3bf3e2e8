"""Where no PostgreSQL can be had, its tests skip saying why; with LOKI_REQUIRE_POSTGRES (``.ci/run``) each is a
failure instead, serial and on the pytest-xdist workers `make test` runs on.

Each case runs pytest on two PostgreSQL contract tests in a subprocess without ``LOKI_TEST_DATABASE_URL``,
with a plugin that hides ``initdb`` and ``pg_ctl`` from tests/pgserver.py: no throwaway cluster can start.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
TESTS = ["tests/contract/test_queue.py::test_add_fills_every_field_and_validates[postgres]",
         "tests/contract/test_queue.py::test_priority_then_fifo_order[postgres]"]
NO_CLUSTER = "import tests.pgserver\n\ntests.pgserver._binary = lambda name: None\n"


def pytest_run(tmp_path: Path, *args: str, require: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "no_cluster.py").write_text(NO_CLUSTER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOKI_", "PYTEST_"))}
    env["PYTHONPATH"] = str(tmp_path)
    if require:
        env["LOKI_REQUIRE_POSTGRES"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no_cluster", "-rs",
                           *TESTS, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "two workers"])
def test_without_a_server_the_postgresql_tests_skip_saying_why(tmp_path: Path, workers: list[str]) -> None:
    done = pytest_run(tmp_path, *workers, require=False)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "2 skipped" in done.stdout and "passed" not in done.stdout
    assert "no PostgreSQL: initdb and pg_ctl were not found" in done.stdout


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "two workers"])
def test_when_postgresql_is_required_a_test_that_would_skip_fails_the_run(tmp_path: Path, workers: list[str]) -> None:
    done = pytest_run(tmp_path, *workers, require=True)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "skipped" not in done.stdout and "passed" not in done.stdout
    assert "PostgreSQL is required (LOKI_REQUIRE_POSTGRES is set) but initdb and pg_ctl were not found" in done.stdout
