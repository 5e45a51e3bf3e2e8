from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_server_left(stop_servers: None) -> None:
    """No test here leaves a ``loki serve`` running (tests/conftest.py, ``stop_servers``)."""
