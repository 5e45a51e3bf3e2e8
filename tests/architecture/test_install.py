"""The install lines the README and the docs show install this project, and nothing else.

The name ``loki`` on the package index belongs to an unrelated project (an astronomy model), so the
distribution is ``loki-state`` while the command and the import stay ``loki``. The fast tests read every
``pip install`` line of the docs and the hint loki prints without psycopg; the slow one runs the README's
lines in a fresh venv that cannot see this checkout, and runs ``loki --version`` there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loki.storage.postgres.connect import EXTRA

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PYPROJECT = (REPO / "pyproject.toml").read_text(encoding="utf-8")
DIST = re.search(r'^name = "([^"]+)"', PYPROJECT, re.M).group(1)  # type: ignore[union-attr]  # tomllib is 3.11+


def _install_lines() -> list[tuple[str, str]]:
    """(doc, line) for every `pip install` in a doc: in a code block or inline code."""
    found = []
    for doc in DOCS:
        for line in doc.read_text(encoding="utf-8").splitlines():
            for match in re.finditer(r"pip install [^`#\n]+", line):
                found.append((doc.name, match.group(0).strip()))
    return found


def _requirements(line: str) -> list[str]:
    """The requirement words of a pip install line (options and their values left out)."""
    words = [word.strip("'\"") for word in line.split()[2:]]
    return [word for word in words if not word.startswith("-")]


def test_the_distribution_is_not_the_name_another_project_holds_on_the_index() -> None:
    assert DIST == "loki-state"
    # the command and the import stay `loki`
    assert re.search(r'^\[project\.scripts\]\nloki = "loki\.entry:main"$', PYPROJECT, re.M)
    assert re.search(r'^packages = \["loki"\]$', PYPROJECT, re.M)


def test_every_install_line_installs_this_project() -> None:
    """A line installs the checkout (`.`, `-e .`, with extras) or names the distribution, never `loki`."""
    lines = _install_lines()
    assert any(doc == "README.md" for doc, _ in lines) and any(doc == "postgres.md" for doc, _ in lines)
    wrong = []
    for doc, line in lines:
        for requirement in _requirements(line):
            name = re.split(r"[\[<>=!~ @]", requirement, maxsplit=1)[0]
            if name not in (".", DIST) and not name.startswith(("./", "dist/")):
                wrong.append(f"{doc}: {line}")
    assert wrong == []


def test_the_missing_psycopg_hint_names_the_distribution() -> None:
    assert f"pip install '{DIST}[postgres]'" == EXTRA


def _fresh_env(venv: Path) -> dict[str, str]:
    """No PYTHONPATH or virtualenv of this checkout: the venv sees only what was installed into it."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not key.startswith("LOKI_")}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    return env


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
    return done.stdout


def _checkout_copy(target: Path) -> Path:
    """The files a build reads, copied: the venv then holds no path into this checkout."""
    target.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, target / name)
    for name in ("loki", "schemas", "templates"):
        shutil.copytree(REPO / name, target / name, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def _readme_block(after: str) -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme.split(after, 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


@pytest.mark.slow
def test_the_readme_install_lines_work_in_a_fresh_venv(tmp_path: Path) -> None:
    """The README's "install it from this checkout" block and its PostgreSQL install line, run word for word
    in a copy of the checkout, then the hint loki prints without psycopg (`pip install 'loki-state[postgres]'`):
    it keeps this loki, since the distribution name is ours; `loki --version` and `import loki` answer from the
    venv, from a directory outside the copy."""
    source = _checkout_copy(tmp_path / "src")
    block = _readme_block("To install it from this checkout:")
    assert block == ["python3 -m venv .venv && .venv/bin/pip install -e .", ".venv/bin/loki --version"]
    postgres = [line for line in _readme_block("## A team across machines: PostgreSQL") if "pip install" in line]
    assert postgres == [".venv/bin/pip install -e '.[postgres]'"]
    venv = source / ".venv"
    env = _fresh_env(venv)
    for line in [*block, *postgres]:
        _run(["bash", "-ec", line.replace("python3 ", f"{sys.executable} ", 1)], source, env)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert _run([str(venv / "bin" / "loki"), "--version"], elsewhere, env).strip().startswith("loki 0.")
    where = _run([str(venv / "bin" / "python"), "-c",
                  "import importlib.metadata as m, loki, psycopg; print(loki.__file__); "
                  f"print(m.version('{DIST}') == loki.__version__)"], elsewhere, env).splitlines()
    assert Path(where[0]).is_relative_to(source) and not Path(where[0]).is_relative_to(REPO)
    assert where[1] == "True"
    hint = _run(["bash", "-ec", EXTRA.replace("pip ", f"{venv / 'bin' / 'pip'} ", 1)], elsewhere, env)
    assert f"Requirement already satisfied: {DIST}" in hint
    assert _run([str(venv / "bin" / "loki"), "--version"], elsewhere, env).strip().startswith("loki 0.")
    assert _run([str(venv / "bin" / "python"), "-m", "loki", "--version"], elsewhere, env).startswith("loki 0.")
