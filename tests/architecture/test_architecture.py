"""The package's shape, checked: no import circles, a typer-free ``loki.cli``, names that cannot be confused.

These rules are in docs/STYLE.md; the tests keep them true. Imports are read with ``ast``, counting the ones
inside functions too: loki imports lazily on its hot paths (docs/STYLE.md), and a circle of lazy imports
still means neither module is the head of its family. Imports under ``if TYPE_CHECKING:`` are left out:
they never run.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import typer.main

from loki.cli.app import build_app
from tests.architecture import codebase

LOKI = codebase.LOKI

KNOWN_CIRCLES: list[set[str]] = []  # none: the last one (queue/deadletter/escalations) went with the task store


def module_name(package: Path, path: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its code (``from loki import x``
    counts ``loki.x`` when that is a module, else ``loki`` itself)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking_only(child):
                for other in child.orelse:  # type: ignore[attr-defined]
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names if alias.name in modules)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(parts + ([child.module] if child.module else []))
                for alias in child.names:
                    target = f"{base}.{alias.name}"
                    found.add(target if target in modules else base)
            visit(child)

    visit(codebase.parsed(path))
    return {module for module in found if module in modules and module != name}


def import_graph(package: Path) -> dict[str, set[str]]:
    paths = {module_name(package, path): path for path in codebase.python_files(package)}
    return {name: imports_of(name, path, set(paths)) for name, path in paths.items()}


@functools.cache
def loki_graph() -> dict[str, set[str]]:
    """loki's graph, built once for the tests below that read it (type-only imports left out, unlike
    test_layers.py's)."""
    return import_graph(LOKI)


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_loki_has_no_import_circles() -> None:
    found = circles(loki_graph())
    assert [sorted(c) for c in found if c not in KNOWN_CIRCLES] == []


def test_the_circle_check_sees_a_circle_made_of_function_level_imports(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "head.py").write_text("from pkg import leaf\n")
    (package / "leaf.py").write_text("TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from pkg import head\n")
    (package / "lazy.py").write_text("def f():\n    from pkg.head import leaf\n")
    assert circles(import_graph(package)) == []  # a type-only import never runs
    (package / "leaf.py").write_text("def g():\n    from . import lazy\n")
    assert circles(import_graph(package)) == [{"pkg.head", "pkg.leaf", "pkg.lazy"}]


def test_the_cli_package_fast_lanes_and_hook_boundary_import_no_typer_rich_or_click() -> None:
    code = ("import sys, loki.cli, loki.cli.fast, loki.cli.output, loki.hooks.boundary, loki.entry\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'typer', 'click', 'rich'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "[]\n"


def test_only_the_entry_point_imports_the_fast_lanes() -> None:
    """What the typer app and the fast lanes share is in loki.cli.output: the dependency points inward."""
    graph = loki_graph()
    importers = sorted(name for name, targets in graph.items() if targets & {"loki.cli.fast", "loki.cli_fast"})
    assert importers == []  # loki.entry names it as a string, imported only when a lane may take the command
    assert "loki.cli.output" in graph["loki.cli.fast"] and "loki.cli.output" in graph["loki.cli.app"]


def test_the_errors_command_group_is_not_called_errors() -> None:
    """loki.errors is the exception hierarchy and loki.text.errorscan the classifier; the `loki errors` group
    is loki.cli.errormemory, so no two modules answer to "errors"."""
    assert not (LOKI / "cli" / "errors.py").exists()
    group = typer.main.get_command(build_app("errors")).commands["errors"]  # type: ignore[attr-defined]
    modules = {command.callback.__module__ for command in group.commands.values()}
    assert modules == {"loki.cli.errormemory"}


SHARED_TOP_LEVEL = {"__init__.py", "__main__.py", "entry.py", "errors.py", "clock.py", "config.py", "wording.py",
                    "stopsignals.py", "regularfile.py", "argv.py"}
CONCEPTS = {"text", "tasks", "storage", "queue", "breakers", "signals", "strikes", "memory", "watch", "work", "hooks",
            "mcpserver", "admin", "cli", "spend", "metrics", "leases", "resident", "serve"}


def test_each_concept_is_a_folder_and_the_top_level_holds_only_what_they_share() -> None:
    """docs/design.md §5: a newcomer finds each concept in one folder named for it."""
    assert {path.name for path in LOKI.glob("*.py")} == SHARED_TOP_LEVEL
    assert {path.parent.name for path in LOKI.glob("*/__init__.py")} == CONCEPTS


def test_package_inits_import_nothing() -> None:
    """An ``__init__`` that imported its package's modules would make every hook pay for all of them
    (docs/STYLE.md); ``loki/__init__.py`` itself imports only importlib, for its lazy exports."""
    for path in [path for path in codebase.python_files(LOKI) if path.name == "__init__.py"]:
        imports = {alias.name if isinstance(node, ast.Import) else node.module or "."
                   for node in codebase.parsed(path).body  # top level: what importing runs
                   if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
        allowed = {"__future__", "importlib"} if path.parent == LOKI else {"__future__"}
        assert imports <= allowed, f"{path.relative_to(LOKI.parent)} imports {sorted(imports - allowed)}"
