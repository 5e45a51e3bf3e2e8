"""The agent installer's skip: visible without node/npm, a failure when CI requires the agents."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agents import npmcache


@pytest.fixture
def no_node(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(npmcache, "CACHE", tmp_path / "agents")
    monkeypatch.setattr(npmcache.shutil, "which", lambda name: None)


def test_missing_node_skips_with_the_reason(no_node: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(npmcache.REQUIRE, raising=False)
    with pytest.raises(pytest.skip.Exception, match="node is not installed: the @google/gemini-cli end-to-end"):
        npmcache.installed_bin("@google/gemini-cli", "0.61.0", "gemini")


def test_missing_node_fails_when_the_agents_are_required(no_node: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(npmcache.REQUIRE, "1")
    with pytest.raises(pytest.fail.Exception, match="LOKI_REQUIRE_AGENTS=1 requires the agent end-to-end tests"):
        npmcache.installed_bin("@google/gemini-cli", "0.61.0", "gemini")
