"""The house in layers (docs/design.md, "Layers"): which package may import which, checked on every import.

Every ``import`` in loki/ is read with ``ast``: at the top of a module, inside a function, and under
``if TYPE_CHECKING:`` (a type-only import still ties the two modules together for whoever reads or moves
them). A package may import its own floor and the floors below it; an import that runs up a floor is a
failure unless it is one of the named exceptions below, and those may not grow past three.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from tests.architecture import codebase

LOKI = codebase.LOKI

LAYERS: list[tuple[str, ...]] = [
    ("shared",),    # errors clock config wording stopsignals regularfile argv: the ground every floor stands on
    ("text",),      # what loki does to text it did not write: redaction, error reading, escaping
    ("tasks",),     # the task record and its pure rules (readiness), below every store
    ("storage",),   # the two interfaces, the file, memory and PostgreSQL stores
    ("signals",),   # the bus: emit, types, outcomes
    ("breakers",),
    ("leases",),    # path leases: the pattern language and overlap test, leases as state
    ("queue",),     # emits signals (escalations, the dead-letter queue)
    ("spend",),     # the meter, the price table, the usage report (reads the queue)
    ("metrics",),   # OTLP export of counters and gauges (imported only with an endpoint)
    ("strikes",),   # emits signals, reads the queue
    ("memory",),
    ("watch",),     # the watcher and the live view: consumes signals, applies decisions to the queue
    ("resident",),  # loki serve's files and reaching it, standard library only (the hooks start it, work passes
                    # its token to the agents it runs)
    ("work",),      # the agent loop
    ("hooks",),     # the agents' edge only
    ("mcpserver",), # the MCP server: the holder verbs as tools (the mcp extra)
    ("serve",),     # loki serve: the ASGI app over the hooks' handlers (the serve extra)
    ("admin",),     # status, validate, doctor, migrate: across every concept
    ("cli",),
    ("entry",),     # loki/__init__.py, entry.py, __main__.py: the facade and the console script
]
"""Floors from the ground up. One package a floor: a strict order, so two packages never import each other
without one of the two imports counting as upward."""

ALLOWED_UPWARD: set[tuple[str, str]] = {
    # `loki --version` reads loki.__version__, which the facade defines (and the packaging reads).
    ("loki.cli.app", "loki"),
}
MAX_UPWARD = 3
MAX_TWO_WAY_PAIRS = 4

KNOWN_CIRCLES: list[set[str]] = []  # none: the storage-internal ones went with the role protocols (issue 24)


def module_names(package: Path) -> dict[str, Path]:
    found = {}
    for path in codebase.python_files(package):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    """Every module of the package that ``name`` imports, wherever the import stands (top level, in a
    function, under ``if TYPE_CHECKING:``). ``from loki.x import y`` counts ``loki.x.y`` when that is a module,
    else ``loki.x``; a name that is not a module counts its nearest enclosing module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in codebase.walked(path):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(package: Path) -> dict[str, set[str]]:
    paths = module_names(package)
    return {name: imports_of(name, path, set(paths)) for name, path in paths.items()}


def package_of(module: str, package: Path) -> str:
    """The floor's name for a module: its folder under loki/, "entry" for the facade and the console
    script, "shared" for the other top-level modules."""
    parts = module.split(".")
    if len(parts) > 1 and (package / parts[1]).is_dir():
        return parts[1]
    return "entry" if module in (package.name, f"{package.name}.entry", f"{package.name}.__main__") else "shared"


def floor_of(layers: list[tuple[str, ...]]) -> dict[str, int]:
    return {name: index for index, floor in enumerate(layers) for name in floor}


def upward_imports(graph: dict[str, set[str]], package: Path,
                   layers: list[tuple[str, ...]]) -> set[tuple[str, str]]:
    floors = floor_of(layers)
    return {(importer, imported) for importer, targets in graph.items() for imported in targets
            if floors[package_of(imported, package)] > floors[package_of(importer, package)]}


def two_way_pairs(graph: dict[str, set[str]], package: Path) -> set[tuple[str, str]]:
    arrows = {(package_of(a, package), package_of(b, package)) for a, targets in graph.items() for b in targets}
    return {tuple(sorted((a, b))) for a, b in arrows if a != b and (b, a) in arrows}  # type: ignore[misc]


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (by reachability: the graph is small)."""
    reach: dict[str, set[str]] = {}
    for start in graph:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        reach[start] = seen
    found = {frozenset({start} | {other for other in reach[start] if start in reach.get(other, set())})
             for start in graph if start in reach[start]}
    return sorted((set(c) for c in found), key=sorted)


@functools.cache
def loki_graph() -> dict[str, set[str]]:
    """loki's import graph, parsed on first use (not at collection: every pytest-xdist worker collects this
    module, and only the one that runs these tests needs the graph)."""
    return import_graph(LOKI)


def test_every_package_and_top_level_module_has_a_floor() -> None:
    """A new folder must be given its floor here (and in docs/design.md) before anything can import it."""
    floors = floor_of(LAYERS)
    unplaced = sorted({package_of(module, LOKI) for module in loki_graph()} - floors.keys())
    assert unplaced == []
    assert all(len(floor) == 1 for floor in LAYERS)  # a strict order: no two packages share a floor


def test_no_import_runs_up_a_floor_but_the_named_exceptions() -> None:
    upward = upward_imports(loki_graph(), LOKI, LAYERS)
    assert upward - ALLOWED_UPWARD == set(), "imports that run up a floor (docs/design.md, Layers)"
    assert ALLOWED_UPWARD - upward == set(), "an allowed exception is gone: take it off the list"
    assert len(upward) <= MAX_UPWARD


def test_at_most_four_pairs_of_packages_import_each_other() -> None:
    pairs = two_way_pairs(loki_graph(), LOKI)
    assert pairs == {("cli", "entry")}  # exactly the allowed upward import
    assert len(pairs) <= MAX_TWO_WAY_PAIRS


def test_no_import_circle_of_any_kind() -> None:
    """Type-only and function-level imports count: a circle through them still means neither module is
    the head of its family. The storage-internal ones engineer "storage" is cutting are named above."""
    found = circles(loki_graph())
    assert [c for c in found if c not in KNOWN_CIRCLES] == []
    assert all(all(m.startswith("loki.storage.") for m in c) for c in KNOWN_CIRCLES)


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for rel, text in {"__init__.py": "", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


LOW_HIGH: list[tuple[str, ...]] = [("shared",), ("low",), ("high",), ("entry",)]


@pytest.mark.parametrize("importing", [
    "from pkg.high import thing\n",
    "def f():\n    from pkg.high import thing\n",
    "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from pkg.high import thing\n",
    "import typing\nif typing.TYPE_CHECKING:\n    import pkg.high.thing\n",
    "from ..high import thing\n",
    "class C:\n    def f(self):\n        from pkg.high.thing import x\n",
])
def test_the_check_sees_an_upward_import_wherever_it_stands(tmp_path: Path, importing: str) -> None:
    """The rule's own test: an upward import at the top, in a function, a method, under TYPE_CHECKING or
    relative is counted; the same import downward is not."""
    root = _package(tmp_path, {"low/__init__.py": "", "low/user.py": importing,
                               "high/__init__.py": "", "high/thing.py": "x = 1\n"})
    graph = import_graph(root)
    assert upward_imports(graph, root, LOW_HIGH) == {("pkg.low.user", "pkg.high.thing")}
    assert upward_imports(graph, root, [("shared",), ("high",), ("low",), ("entry",)]) == set()


def test_the_check_finds_a_circle_through_a_type_only_import(tmp_path: Path) -> None:
    root = _package(tmp_path, {"low/__init__.py": "", "low/a.py": "from pkg.low import b\n",
                               "low/b.py": "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from pkg.low.a import A\n"})
    assert circles(import_graph(root)) == [{"pkg.low.a", "pkg.low.b"}]
    assert two_way_pairs(import_graph(root), root) == set()


def test_the_signal_file_rules_storage_keeps_name_the_bus_types() -> None:
    """storage/layout.py spells out the signal types whose files have their own schema (storage may not
    import signals/); the bus's names must be the same strings."""
    from loki.signals import types
    from loki.storage import layout

    assert layout.DRIFT_SIGNAL == types.DRIFT
    assert layout.SIGNAL_SCHEMAS.keys() <= set(types.FIXED_TYPES) | set(types.SUBJECT_PREFIXES)
    assert types.SUBJECT_PREFIXES == ("FEATURE_READY_", types.TESTS_PASSED, types.TESTS_FAILED, "MERGE_REQUESTED_")
    assert types.schema_for("TESTS_FAILED_auth") == "signal-tests-result.json"
    assert types.schema_for(types.DRIFT) == "signal-drift-detected.json"
