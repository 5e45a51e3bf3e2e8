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
KEPT = (LOKI, REPO / "bench")
"""The folders whose files are kept once read: the code the checks read. Anything else (a check's own test
writes a scratch package into tmp_path and rewrites its files between two checks) is read again each time."""


def _kept(path: Path) -> bool:
    return any(path.is_relative_to(folder) for folder in KEPT)


def python_files(top: Path) -> tuple[Path, ...]:
    """Every ``*.py`` under ``top``, sorted (kept: see KEPT)."""
    return _kept_files(top) if _kept(top) else tuple(sorted(top.rglob("*.py")))


def parsed(path: Path) -> ast.Module:
    """The file's tree (kept: see KEPT)."""
    return _kept_tree(path) if _kept(path) else ast.parse(path.read_text(encoding="utf-8"))


@functools.cache
def _kept_files(top: Path) -> tuple[Path, ...]:
    return tuple(sorted(top.rglob("*.py")))


@functools.cache
def _kept_tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def walked(path: Path) -> tuple[ast.AST, ...]:
    """Every node of the file's tree in ``ast.walk`` order (kept: see KEPT): several checks visit each node
    of every module."""
    return _kept_walk(path) if _kept(path) else tuple(ast.walk(parsed(path)))


@functools.cache
def _kept_walk(path: Path) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(_kept_tree(path)))
