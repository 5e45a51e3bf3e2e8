from __future__ import annotations

import os
from pathlib import Path

import pytest

# Every write in the test suite is validated in full (LOKI_VALIDATE_ALL), so a domain module
# that forgets to declare a changed record cannot sneak an invalid one past the tests.
os.environ["LOKI_VALIDATE_ALL"] = "1"
for name in ("LOKI_ROOT", "LOKI_NOW", "LOKI_CRASHPOINT", "LOKI_LOCK_TIMEOUT"):
    os.environ.pop(name, None)

from loki.clock import ManualClock  # noqa: E402
from loki.store import Store  # noqa: E402
from loki.tree import init_tree  # noqa: E402


@pytest.fixture
def root(tmp_path: Path) -> Path:
    state = tmp_path / ".loki"
    init_tree(str(state))
    return state


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock("2026-01-25T10:00:00Z")


@pytest.fixture
def store(root: Path, clock: ManualClock) -> Store:
    return Store(root, clock=clock)


@pytest.fixture
def project(root: Path) -> Path:
    """The directory holding .loki/: a checkout of branch main."""
    top = root.parent
    (top / ".git").mkdir()
    (top / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return top
