"""A reduced round of the crash harness in every test run (`make torture` runs the long one)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.torture.harness import run

pytestmark = pytest.mark.slow  # rounds of workers and loki work agents killed at random (make test-fast skips it)


def test_crash_harness_finds_no_violation(tmp_path: Path) -> None:
    rounds = int(os.environ.get("LOKI_TORTURE_ROUNDS", "15"))
    result = run(rounds=rounds, workers=4, seed=20261122, root=str(tmp_path), work=2)
    assert result["violations"] == 0, result["violation_details"]
    assert result["rounds"] == rounds and result["kills"] >= rounds * 3
    assert result["operations"] > rounds * 5
    # loki work agents were killed too, and their commands ran and completed tasks between the kills.
    assert result["work_kills"] >= rounds and result["work_runs"] > 0 and result["work_completed"] > 0
    # Half the tasks carry a declared check (tests/torture/check.py): some completed with their evidence.
    assert result["work_verified"] > 0
    # Some tasks must land (docs/verify.md): some landed as main moved (how many went back when their branch was
    # deleted depends on where the kills fell: tests/contract/test_landing.py covers that case for sure).
    assert result["landed"] > 0


def test_crash_harness_with_loki_serve_killed_too_finds_no_violation(tmp_path: Path) -> None:
    """The server and its client's hook requests and board actions, SIGKILLed at random with the workers."""
    rounds = int(os.environ.get("LOKI_TORTURE_SERVE_ROUNDS", "8"))
    result = run(rounds=rounds, workers=2, seed=20261127, root=str(tmp_path), work=1, serve=True)
    assert result["violations"] == 0, result["violation_details"]
    assert result["rounds"] == rounds and result["kills"] >= rounds * 4  # the watcher, 2 workers, the server, ...
    assert result["serve_requests"] > 0 and result["serve_refused"] == 0
