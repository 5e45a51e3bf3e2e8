"""The end-to-end tests with a real agent skip with a reason where they cannot run, and CI cannot skip them.

Each case runs pytest on the Claude Code tests in a subprocess whose ``PATH`` holds no node or npm and
whose agent cache (``LOKI_AGENTS_CACHE``) is empty: the setup cannot install Claude Code. Without
``LOKI_REQUIRE_AGENTS`` that is a visible skip; with it (``.ci/run`` sets it) a failure; and a run in
which no agent test passed at all (deselected, say) fails too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
ONE_AGENT_TEST = "tests/agents/test_agent_claude.py::test_without_the_hooks_claude_code_runs_none"


def pytest_run(tmp_path: Path, *args: str, require: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOKI_", "PYTEST_"))}
    env.update({"PATH": os.path.dirname(sys.executable), "LOKI_AGENTS_CACHE": str(tmp_path / "empty-cache")})
    if require:
        env["LOKI_REQUIRE_AGENTS"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)


def test_without_node_the_agent_tests_skip_saying_why(tmp_path: Path) -> None:
    done = pytest_run(tmp_path, ONE_AGENT_TEST, require=False)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "1 skipped" in done.stdout
    assert "Claude Code needs node and npm on PATH to install @anthropic-ai/claude-code@" in done.stdout


def test_in_ci_a_missing_agent_fails_the_run(tmp_path: Path) -> None:
    done = pytest_run(tmp_path, ONE_AGENT_TEST, require=True)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "1 error" in done.stdout and "skipped" not in done.stdout
    assert "LOKI_REQUIRE_AGENTS=1: the end-to-end tests with the real agents must run" in done.stdout


def test_in_ci_a_run_without_any_agent_test_fails(tmp_path: Path) -> None:
    done = pytest_run(tmp_path, "tests/agents/test_agent_claude.py", "-m", "not agent", require=True)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "LOKI_REQUIRE_AGENTS=1 but no test with a real agent passed" in done.stdout


def test_on_xdist_workers_a_run_without_any_agent_test_fails(tmp_path: Path) -> None:
    """`make test` runs on pytest-xdist workers: the workers collect and run the tests, and the controller,
    which only sees their reports, still fails a run in which other tests passed but no agent test did."""
    done = pytest_run(tmp_path, "tests/agents/test_agent_claude.py", "tests/ground/test_clock_bounds.py",
                      "-m", "not agent", "-n", "2", require=True)
    assert done.returncode == 1, done.stdout[-3000:]
    assert " passed" in done.stdout and "failed" not in done.stdout
    assert "LOKI_REQUIRE_AGENTS=1 but no test with a real agent passed" in done.stdout


def test_on_xdist_workers_a_missing_agent_fails_the_run(tmp_path: Path) -> None:
    done = pytest_run(tmp_path, ONE_AGENT_TEST, "-n", "2", require=True)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "1 error" in done.stdout and "skipped" not in done.stdout
    assert "LOKI_REQUIRE_AGENTS=1: the end-to-end tests with the real agents must run" in done.stdout


def test_on_xdist_workers_a_run_in_which_an_agent_test_passed_is_green(tmp_path: Path) -> None:
    """The other side of the check: the agent test passed on a worker, and the controller counts it from the
    report the worker sent (a stand-in marked `agent`, with this suite's conftest loaded as a plugin, so the
    case costs no real agent)."""
    stand_in = tmp_path / "test_stand_in.py"
    stand_in.write_text("import pytest\n\n\n@pytest.mark.agent\ndef test_an_agent_test() -> None:\n    pass\n\n\n"
                        + "".join(f"def test_other_{n}() -> None:\n    pass\n\n\n" for n in range(4)))
    args = ("-c", str(REPO / "pyproject.toml"), "--rootdir", str(REPO), "-p", "tests.conftest", str(stand_in))
    done = pytest_run(tmp_path, *args, "-n", "2", require=True)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "5 passed" in done.stdout and "no test with a real agent passed" not in done.stdout
    done = pytest_run(tmp_path, *args, "-n", "2", "-m", "not agent", require=True)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "4 passed" in done.stdout and "no test with a real agent passed" in done.stdout
