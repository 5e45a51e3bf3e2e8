"""loki's own source, read and parsed once per test process and shared by the tests that check its shape.

Parsing every module of loki/ costs about a second of CPU; the architecture tests, the storage seam's and the
named queries' each used to parse all of it again (about eight times a run). The source does not change while
the tests run, so each file is read and parsed on first use and kept. The trees are shared: a check walks them
and never edits them.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LOKI = REPO / "loki"


def python_files(top: Path) -> tuple[Path, ...]:
    """Every ``*.py`` under ``top``, sorted: kept when ``top`` is in the repository, listed again otherwise
    (the checks' own tests build a scratch package in tmp_path)."""
    return _kept_files(top) if top.is_relative_to(REPO) else tuple(sorted(top.rglob("*.py")))


def source(path: Path) -> str:
    """The file's text: kept when it is the repository's own, read again otherwise (the checks' own tests
    write a scratch package into tmp_path and rewrite its files between two checks)."""
    return _kept_source(path) if path.is_relative_to(REPO) else path.read_text(encoding="utf-8")


def parsed(path: Path) -> ast.Module:
    """The file's tree, on the same terms as :func:`source`."""
    return _kept_tree(path) if path.is_relative_to(REPO) else ast.parse(path.read_text(encoding="utf-8"))


@functools.cache
def _kept_files(top: Path) -> tuple[Path, ...]:
    return tuple(sorted(top.rglob("*.py")))


@functools.cache
def _kept_source(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@functools.cache
def _kept_tree(path: Path) -> ast.Module:
    return ast.parse(_kept_source(path))


def walked(path: Path) -> tuple[ast.AST, ...]:
    """Every node of the file's tree in ``ast.walk`` order, on the same terms as :func:`source` (several
    checks visit each node of every module)."""
    return _kept_walk(path) if path.is_relative_to(REPO) else tuple(ast.walk(parsed(path)))


@functools.cache
def _kept_walk(path: Path) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(_kept_tree(path)))
