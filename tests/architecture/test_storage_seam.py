"""The storage seam is a rule a test checks, not a promise (docs/storage.md, "The two interfaces").

Every module of ``loki/`` is parsed; outside the storage layer, the folder ``loki/storage/``, none may
open files, list, link, rename, replace or unlink them, take portalocker locks, connect to SQLite or ask
the store for a path. The few exceptions are listed by name, each with its reason; a new one must be added here,
on purpose, with its own.
"""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from tests.architecture import codebase

LOKI = Path(os.environ.get("LOKI_SEAM_TREE") or codebase.LOKI)

STORAGE_LAYER = "storage/"
"""The layer is a folder, loki/storage/: the file store, its locks, strict JSON, the file kinds, the paths, the
schemas it validates with, the tree's administration (init, validate, doctor) and both implementations of the
two interfaces. A module added there is inside the layer; one added anywhere else is outside it."""


def in_storage_layer(rel: str) -> bool:
    """``rel`` is a path relative to loki/, as the checks below name modules."""
    return rel.startswith(STORAGE_LAYER)


EXCEPTIONS = {
    ("strikes/view.py", "os.listdir"): "the PreToolUse hot path reads strike and hint files itself, read only "
                                       "(docs/storage.md, 'The one reader outside the store')",
    ("memory/index.py", "sqlite3.connect"): "error memory's SQLite index is a cache beside the log, not state "
                                            "(docs/storage.md, 'Error memory's search index is a cache'); the "
                                            "store says where it lives (Store.index_database)",
    ("hooks/agentsettings.py", "os.replace"): "the agents' settings (.claude/, .gemini/) are outside .loki/ "
                                              "(the hooks' install)",
    ("hooks/agentsettings.py", "os.unlink"): "the same file's temp copy, and the file once uninstall emptied it",
    ("queue/escalations.py", "open"): "the shipped escalation template, in the package (the tree's copy goes "
                                      "through the store)",
    ("strikes/view.py", "os.open"): "the same hot path's read of a strike file: O_NOFOLLOW, bounded, read only "
                                    "(docs/storage.md, 'The one reader outside the store')",
    ("strikes/callcount.py", "os.open"): "the tool-call counter: one byte appended per call with O_APPEND, "
                                         "unlocked and unsynced because it is a hint (docs/storage.md, 'The "
                                         "call counter')",
    ("strikes/callcount.py", "os.lstat"): "the same counter read back: its size is the count",
    ("regularfile.py", "os.open"): "bounded reads of regular files outside .loki/ (the agents' settings, "
                                   ".git/HEAD, `loki work`'s result file): O_NONBLOCK, regular files only",
    ("queue/queue.py", "os.open"): "`loki queue add --from-file`: the batch file a person names, outside "
                                   ".loki/",
    ("leases/guard.py", "open"): "`loki hooks install --git` reads and writes the git pre-commit hook, outside "
                                 ".loki/ (docs/leases.md)",
    ("leases/guard.py", "os.replace"): "the same hook, written by a rename of its temp copy",

    ("resident/files.py", "open"): "`loki serve`'s machine-local files in .loki/serve/ (token, port, run record, "
                                   "log): this process's own, never shared state, like cache/ (docs/serve.md)",
    ("resident/files.py", "os.replace"): "the same files, each written to a temp file and renamed",
    ("resident/files.py", "os.open"): "the token, written to a temp file created 0600 (never readable by others)",
    ("resident/files.py", "os.link"): "the token, linked into place: a racer that published first keeps its token",
    ("resident/files.py", "os.unlink"): "the same files: the run record a stopping server removes, a temp copy",
    ("serve/server.py", "open"): "the server's lock file in .loki/serve/, held with flock for its life",
    ("leases/hotcopy.py", "open"): "the PreToolUse hook's index of the path holders (and a database tree's copy "
                                   "of them): derived from state/path-leases.json, read by its identity, read by "
                                   "the hot path without the store (docs/leases.md, 'The hook's index')",
    ("leases/hotcopy.py", "os.open"): "the same index read by the hot path: O_NOFOLLOW, the header line only",
    ("hooks/leasegate.py", "os.open"): "the edits the hook refused, one line appended with O_APPEND to "
                                       "logs/path-leases.jsonl (on a database tree this machine's cache): the hot "
                                       "path never opens the store (docs/leases.md, 'Visible')",
    ("work/scratch.py", "open"): "`loki work` writes the claimed task for the agent's command into a temporary "
                                 "directory outside .loki/ (the command may write there; nothing but loki writes "
                                 "inside the tree)",
}

FORBIDDEN_OS = {"listdir", "scandir", "link", "rename", "replace", "unlink", "open", "lstat"}


def file_calls(source: str) -> list[tuple[str, int]]:
    """(what, line) for every filesystem call of the kinds the seam forbids."""
    return calls_among(ast.walk(ast.parse(source)))


@functools.cache
def file_calls_in(path: Path) -> tuple[tuple[str, int], ...]:
    """:func:`file_calls` of a module of loki/, found once: two tests below ask it of every module."""
    return tuple(calls_among(codebase.walked(path)))


def calls_among(nodes: Iterable[ast.AST]) -> list[tuple[str, int]]:
    found = []
    for node in nodes:
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "open":
                found.append(("open", node.lineno))
            elif isinstance(func, ast.Attribute):
                owner = func.value
                owner_name = owner.id if isinstance(owner, ast.Name) else \
                    owner.attr if isinstance(owner, ast.Attribute) else ""
                if owner_name == "os" and func.attr in FORBIDDEN_OS:
                    found.append((f"os.{func.attr}", node.lineno))
                elif owner_name == "sqlite3" and func.attr == "connect":
                    found.append(("sqlite3.connect", node.lineno))
                elif func.attr == "path" and owner_name.endswith("store"):
                    found.append(("store.path", node.lineno))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(name.split(".")[0] == "portalocker" for name in names):
                found.append(("portalocker", node.lineno))
    return found


def test_no_module_outside_the_storage_layer_touches_the_files() -> None:
    offences = []
    for path in codebase.python_files(LOKI):
        rel = path.relative_to(LOKI).as_posix()
        if in_storage_layer(rel):
            continue
        for what, line in file_calls_in(path):
            if (rel, what) not in EXCEPTIONS:
                offences.append(f"loki/{rel}:{line}: {what}")
    assert offences == [], "state I/O outside the storage layer (go through the store, or add a documented " \
                           "exception here):\n" + "\n".join(offences)


def test_the_storage_layer_is_everything_under_loki_storage_and_nothing_else() -> None:
    """The rule reads "no module outside loki/storage/ touches the filesystem for .loki/ state": a new backend
    needs no entry here, and no single file elsewhere can be let in."""
    assert all(in_storage_layer(path.relative_to(LOKI).as_posix()) for path in (LOKI / "storage").rglob("*.py"))
    assert in_storage_layer("storage/sqlitebackend.py")
    assert not any(in_storage_layer(rel) for rel in ("store.py", "queue/queue.py", "hooks/boundary.py",
                                                      "storagehelpers.py", "cli/storage.py"))


def test_the_checker_sees_each_kind_of_call() -> None:
    source = ("import os, sqlite3\nimport portalocker\nopen('x')\nos.listdir('.')\nos.rename('a', 'b')\n"
              "sqlite3.connect('d')\nself.store.path('q')\nstore.path('q')\nos.open('f', os.O_RDONLY)\n"
              "os.lstat('f')\n")
    assert sorted(what for what, _ in file_calls(source)) == [
        "open", "os.listdir", "os.lstat", "os.open", "os.rename", "portalocker", "sqlite3.connect", "store.path",
        "store.path"]


def test_every_exception_is_still_needed() -> None:
    """An exception whose call is gone is removed, so the list stays the true list."""
    used = set()
    for path in codebase.python_files(LOKI):
        rel = path.relative_to(LOKI).as_posix()
        used.update((rel, what) for what, _ in file_calls_in(path))
    assert sorted(set(EXCEPTIONS) - used) == []


def test_the_interfaces_cost_the_hot_paths_nothing() -> None:
    """The protocols import typing; the modules a claim, an emit or a hook loads must not import them."""
    code = ("import sys\nfrom loki.storage.store import Store\nfrom loki.queue import queue\n"
            "from loki.signals import emit\nfrom loki.strikes import strikes\nfrom loki.breakers import breakers\n"
            "from loki.hooks import boundary, handlers\nfrom loki.storage import filetasks\n"
            "print(','.join(m for m in ('loki.storage.state', 'loki.storage.tasks', 'loki.storage.memory', "
            "'typing') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=LOKI.parent).stdout.strip()
    assert out == ""


# Log positions are opaque outside the storage layer (docs/storage.md, "Log positions") ----------------------------

BYTE_OFFSET_READS = {"read_from", "iter_lines"}
"""The stores' byte-offset reads: only the storage layer calls them; the rest read after opaque positions."""
POSITION_CALLS = {"log_end"}
"""Calls that return a position."""
EQUALITY = (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)


def _is_position(node: ast.expr) -> bool:
    """A position, as far as the source shows: a ``LogLine``'s ``.position`` or what ``log_end()`` returns."""
    if isinstance(node, ast.Attribute) and node.attr == "position":
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in POSITION_CALLS


def _computes(node: ast.AST) -> str | None:
    """What ``node`` does with a position beyond keeping it and comparing it for equality, if anything."""
    if isinstance(node, ast.BinOp):
        operands = [node.left, node.right]
    elif isinstance(node, ast.AugAssign):
        operands = [node.target, node.value]
    elif isinstance(node, ast.UnaryOp):
        operands = [node.operand]
    elif isinstance(node, ast.Compare):
        if all(isinstance(op, EQUALITY) for op in node.ops):
            return None
        return "ordering" if any(_is_position(side) for side in [node.left, *node.comparators]) else None
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"int", "min", "max"}:
        return node.func.id if any(_is_position(arg) for arg in node.args) else None
    else:
        return None
    return "arithmetic" if any(_is_position(operand) for operand in operands) else None


def position_arithmetic(source: str) -> list[tuple[str, int]]:
    """(what, line) for every byte-offset read and every computation with a position (beyond equality)."""
    return arithmetic_among(ast.walk(ast.parse(source)))


def arithmetic_among(nodes: Iterable[ast.AST]) -> list[tuple[str, int]]:
    found = []
    for node in nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in BYTE_OFFSET_READS:
            found.append((node.func.attr, node.lineno))
        elif (what := _computes(node)) is not None:
            found.append((what, getattr(node, "lineno", 0)))
    return found


def test_no_module_outside_the_storage_layer_computes_with_a_log_position() -> None:
    offences = []
    for path in codebase.python_files(LOKI):
        rel = path.relative_to(LOKI).as_posix()
        if not in_storage_layer(rel):
            offences += [f"loki/{rel}:{line}: {what}" for what, line in arithmetic_among(codebase.walked(path))]
    assert offences == [], "a log position used as a number outside the storage layer (keep it, hand it back, " \
                           "compare it for equality; ask the store the rest):\n" + "\n".join(offences)


def test_the_position_checker_sees_each_kind_of_use() -> None:
    source = ("store.read_from(LOG, 0, 0)\nstore.iter_lines(LOG)\nline.position + 1\nx -= line.position\n"
              "store.log_end(LOG) < saved\nint(line.position)\nline.position == saved\nstore.log_end(LOG) != p\n")
    assert sorted(what for what, _ in position_arithmetic(source)) == [
        "arithmetic", "arithmetic", "int", "iter_lines", "ordering", "read_from"]


def test_the_state_store_protocol_hands_out_no_byte_offsets() -> None:
    tree = codebase.parsed(LOKI / "storage" / "state.py")
    # StateStore is the union of the role protocols (Documents, Logs, Items ...): every one of them counts.
    methods = {n.name for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body
               if isinstance(n, ast.FunctionDef)}
    assert methods & BYTE_OFFSET_READS == set()
    assert {"log_end", "log_valid", "read_after", "read_line", "read_tail", "log_windows"} <= methods
