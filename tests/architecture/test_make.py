"""The front door's test lanes: ``make test`` runs everything, ``make test-fast`` everything not marked slow.

The inner loop is only honest if the slow kinds of test (crash, torture, fuzz, the model, process races)
really carry the marker, and if a misspelt marker is an error rather than a test silently moved to the
fast lane.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SLOW_FILES = ["storage/files/test_torture.py", "storage/files/test_crash.py", "storage/files/test_fuzz.py",
              "taskqueue/test_queue_processes.py", "taskqueue/test_queue_model.py", "watch/test_watch_processes.py"]


def make_recipe(target: str) -> list[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    match = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", text, re.M)
    assert match, f"no {target} target in the Makefile"
    return [line.strip() for line in match.group(1).splitlines()]


def test_make_test_fast_deselects_the_slow_tests_and_make_test_runs_all() -> None:
    assert make_recipe("test-fast") == ['$(PY) -m pytest -q -m "not slow" -n 2 --dist worksteal']  # 2 workers, issue 24
    assert make_recipe("test") == ["$(PY) -m pytest -q -n 2"]  # on two workers too (issue 24)
    phony = re.search(r"^\.PHONY:(.*)$", (REPO / "Makefile").read_text(encoding="utf-8"), re.M)
    assert phony and {"test", "test-fast"} <= set(phony.group(1).split())


def test_the_slow_kinds_of_test_are_marked_slow() -> None:
    for name in SLOW_FILES:
        tree = ast.parse((REPO / "tests" / name).read_text(encoding="utf-8"))
        marks = [ast.unparse(node.value) for node in tree.body
                 if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["pytestmark"]]
        assert marks == ["pytest.mark.slow"], name


@pytest.mark.slow  # real processes one after another: over 1 s (issue 24's --durations)
def test_a_misspelt_marker_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text("import pytest\n\n@pytest.mark.slwo\ndef test_x():\n    pass\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c",
                           str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path), str(tmp_path / "test_x.py")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode != 0
    assert "'slwo' not found in `markers`" in done.stdout + done.stderr


def test_ci_requires_the_end_to_end_tests_with_the_real_agents() -> None:
    """`.ci/run` turns their skip into a failure before it runs `make test`, and they carry both markers."""
    lines = [line.strip() for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert "export LOKI_REQUIRE_AGENTS=1" in lines and "make test" in lines
    assert lines.index("export LOKI_REQUIRE_AGENTS=1") < lines.index("make test")
    assert make_recipe("test-agents") == ["$(PY) -m pytest -q -m agent"]
    tree = ast.parse((REPO / "tests" / "agents" / "test_agent_claude.py").read_text(encoding="utf-8"))
    marks = [ast.unparse(node.value) for node in tree.body
             if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["pytestmark"]]
    assert marks == ["[pytest.mark.slow, pytest.mark.agent]"]
