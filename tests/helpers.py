"""Shared test helpers: run the CLI in-process or as a real process, build tasks, check trees."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import json
import os
import select
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loki.storage import layout
from loki.storage.store import Store
from loki.storage.tree import validate_tree
from loki.tasks.record import make_task

NOW = "2026-01-25T10:00:00Z"


class LazyModule:
    """A module imported at its first attribute use, not when the test file is collected.

    Every pytest worker imports every test file to collect it, slow lane included: importing the MCP SDK (or
    anyio) at a test file's top cost each worker ~1.2 s of CPU that the fast lane never used."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):  # collecting, pytest asks every module global for __test__, _pytestfixturefunction...
            raise AttributeError(attr)
        return getattr(importlib.import_module(self._name), attr)


def lazy_module_or_skip(name: str, reason: str) -> Any:
    """``pytest.importorskip(name)`` at a module's top without the import: the module is skipped when ``name`` is
    not installed, and imported on first use otherwise."""
    import pytest  # here, not at the top: the torture harness's worker processes import this module

    if importlib.util.find_spec(name) is None:
        pytest.skip(reason, allow_module_level=True)
    return LazyModule(name)


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@contextlib.contextmanager
def _env(extra: dict[str, str] | None):
    saved = dict(os.environ)
    os.environ.update(extra or {})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def cli(args: list[str], *, root: Path | str | None = None, env: dict[str, str] | None = None) -> Result:
    """Run ``loki ARGS`` in this process (through the same entry as the console script)."""
    from loki.cli.app import run

    full = (["--root", str(root)] if root is not None else []) + list(args)
    out, err = io.StringIO(), io.StringIO()
    with _env(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(full)
    return Result(code, out.getvalue(), err.getvalue())


def loki_proc(
    args: list[str],
    *,
    root: Path | str | None = None,
    env: dict[str, str] | None = None,
    input: str | bytes | None = None,
    timeout: float = 60,
) -> Result:
    """Run ``python -m loki ARGS`` as a real process (forked from a warm interpreter: tests/forkstart.py)."""
    from tests import forkstart

    full = (["--root", str(root)] if root is not None else []) + list(args)
    proc_env = dict(os.environ)
    proc_env.update(env or {})
    data = input.encode() if isinstance(input, str) else input
    done = forkstart.run(full, input=data, env=proc_env, timeout=timeout)
    return Result(done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace"))


def task(task_id: str, **fields: Any) -> dict[str, Any]:
    base = make_task(task_id=task_id, title=fields.pop("title", f"task {task_id}"), now=NOW)
    base.update(fields)
    return base


def put_tasks(store: Store, state: str, tasks: list[dict[str, Any]]) -> None:
    """Make ``tasks`` the whole content of ``state`` (on the files: write the queue file as given)."""
    if not isinstance(store, Store):  # memory or PostgreSQL: through its task store
        with store.tasks().transaction() as unit:
            for old in list(unit.tasks(state)):
                unit.remove(state, old)
            for task in tasks:
                unit.put(state, dict(task))
        return
    with store.transaction(layout.QUEUE_LOCK) as txn:
        txn.write(layout.queue_file(state), {"version": 1, "tasks": tasks})


def tree_problems(root: Path | str) -> list[str]:
    return [str(p) for p in validate_tree(Store(root))]


QUEUE_STATES = layout.QUEUE_STATES  # landing too (docs/verify.md)


def store_problems(store: Any) -> list[str]:
    """What is invalid in a store of either backend: `loki validate` of the tree, or in memory every
    queue state checked as the document the file store would write."""
    if isinstance(store, Store):
        return tree_problems(store.root)
    found = []
    states = [*QUEUE_STATES, "dead-letter", "abandoned"]
    for state, records in store.tasks().view(states).items():
        rel = {"dead-letter": layout.DEADLETTER, "abandoned": layout.ABANDONED}.get(state) or layout.queue_file(state)
        kind = layout.kind_for(rel)
        doc = store.tasks().dead_letter_doc() if state == "dead-letter" else {**kind.empty(), "tasks": records}
        found += [f"{rel}{pointer}: {reason}" for pointer, reason in store.schemas.problems(kind.schema, doc)]
    return found


def state_snapshot(store: Any) -> Any:
    """Everything a store holds, to compare before and after (on the files: every file's bytes; on
    PostgreSQL: every row, archived tasks included)."""
    if isinstance(store, Store):
        return snapshot_bytes(store.root)
    if getattr(store, "backend", None) == "postgresql":
        return (store.rows("SELECT name, data FROM loki_documents ORDER BY name"),
                store.rows("SELECT id, state, archived, doc::text FROM loki_tasks ORDER BY id"),
                store.rows("SELECT key, value::text FROM loki_queue_meta ORDER BY key"))
    return (dict(store._items), store.tasks().view([*QUEUE_STATES, "dead-letter", "abandoned"]),
            store.tasks().dead_letter_doc())


def tasks_in(store: Any, state: str) -> list[dict[str, Any]]:
    """The tasks in one queue state (entries for dead-letter and abandoned), on either backend."""
    tasks: list[dict[str, Any]] = store.tasks().view([state])[state]
    return tasks


def snapshot_bytes(root: Path | str) -> dict[str, bytes]:
    """Every regular file under root (lock files excluded: they carry holder bookkeeping)."""
    files = {}
    for path in sorted(Path(root).rglob("*")):
        if path.is_file() and not path.is_symlink() and not path.name.endswith(".lock"):
            files[str(path.relative_to(root))] = path.read_bytes()
    return files


def unreaped(pid: int) -> bool:
    """Running or a zombie (its group id still taken); False once it has been reaped."""
    try:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)  # looks, reaps nothing
    except ChildProcessError:
        return False
    return True


def process_gone(pid: int, within: float = 30.0) -> bool:
    """The process has exited, or exits within ``within`` seconds (a zombie waiting for a reaper -- an
    orphan in a container whose init does not reap -- has exited too).

    Waited for through a pidfd, which becomes readable when the process exits: no polling, no sleep. One
    that does not exit in time (a grandchild a signal did not reach) is False.
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], within)[0])
    finally:
        os.close(fd)


def servers_under(top: Path | str) -> list[int]:
    """The pids of the ``loki serve`` processes running for a tree under ``top`` (their command line names it:
    ``python -m loki --root ROOT serve``, as ``loki serve --detach`` and the SessionStart hook start them)."""
    prefixes = {str(top), os.path.realpath(top)}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                args = handle.read().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        if "serve" in args and any(arg == prefix or arg.startswith(prefix + os.sep) for arg in args
                                   for prefix in prefixes) and any(
                arg == "loki" or arg.endswith("/loki") for arg in args):
            found.append(int(entry))
    return found


def stop_servers_under(top: Path | str) -> list[int]:
    """SIGTERM every ``loki serve`` a test started for a tree under ``top`` (SIGKILL one that outlives it): no
    test leaves a server behind. Returns the pids it stopped."""
    import signal

    pids = servers_under(top)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    for pid in pids:
        if not process_gone(pid, within=10.0):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            process_gone(pid)
    return pids
