from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# Property tests are judged by their examples, not by how fast a shared 2-core machine runs them: under load
# (xdist workers, CI) hypothesis's 200 ms deadline and its too-slow health check fail tests that found nothing.
settings.register_profile("loki", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("loki")

# Every write in the test suite is validated in full (LOKI_VALIDATE_ALL), so a domain module
# that forgets to declare a changed record cannot sneak an invalid one past the tests.
os.environ["LOKI_VALIDATE_ALL"] = "1"
for name in ("LOKI_ROOT", "LOKI_NOW", "LOKI_CRASHPOINT", "LOKI_CRASH_AT", "LOKI_LOCK_TIMEOUT", "LOKI_FORCE_TTY"):
    os.environ.pop(name, None)

# Temporary files on a RAM file system where the machine has one: every commit a test makes still calls fsync,
# which there returns at once instead of waiting for the disk (~4.6 ms a file and its directory on this
# machine's disk; tests/cli and tests/storage alone waited 10.4 s in fsync). No test needs the bytes to outlive
# the machine: the crash tests kill processes, not the power. TMPDIR, not only pytest's tmp_path, so that
# tmp_path and what loki and its children put in $TMPDIR (`loki work`'s scratch directory) stay on one file
# system, as a hard link between them needs. A TMPDIR or --basetemp of one's own wins; a /dev/shm that is
# small or noexec (a container's default: 64 MB, noexec; the tests run scripts they write) is not used.
def _ram_tmpdir(path: str = "/dev/shm") -> bool:
    try:
        fs = os.statvfs(path)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK) and not fs.f_flag & os.ST_NOEXEC and fs.f_bavail * fs.f_frsize > 2**30


if "TMPDIR" not in os.environ and _ram_tmpdir():
    os.environ["TMPDIR"] = "/dev/shm"
    tempfile.tempdir = None  # gettempdir() asks TMPDIR again (the pytest workers inherit it)

from loki.clock import ManualClock  # noqa: E402
from loki.storage.memory import MemoryStore  # noqa: E402
from loki.storage.store import Store  # noqa: E402
from loki.storage.tree import init_tree  # noqa: E402


@pytest.fixture(scope="session")
def template_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ``loki init`` tree per session (per pytest-xdist worker): ``root`` copies it."""
    state = tmp_path_factory.mktemp("template") / ".loki"
    init_tree(str(state))
    return state


@pytest.fixture
def root(tmp_path: Path, template_tree: Path) -> Path:
    """A new tree: the session's template copied without fsync (init_tree fsyncs every file and directory,
    57 ms a test); the test's tmp_path is thrown away, so nothing here needs to survive a crash."""
    state = tmp_path / ".loki"
    shutil.copytree(template_tree, state, symlinks=True, copy_function=shutil.copyfile)
    return state


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock("2026-01-25T10:00:00Z")


@pytest.fixture
def store(root: Path, clock: ManualClock) -> Store:
    return Store(root, clock=clock)


@pytest.fixture
def project(root: Path) -> Path:
    """The directory holding .loki/: a checkout of branch main."""
    top = root.parent
    (top / ".git").mkdir()
    (top / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return top


@pytest.fixture
def stop_servers(tmp_path: Path) -> Any:
    """Stops every ``loki serve`` the test started for a tree in its ``tmp_path`` (by hand, ``--detach``, or the
    SessionStart hook): autouse in tests/serve/ and tests/agents/, used by name elsewhere."""
    from tests.helpers import stop_servers_under

    yield
    stop_servers_under(tmp_path)


# -- one suite, each backend (huey's StorageTests pattern) ----------------------------------------------
# API-level tests ask for `backend_store` (or override `store` with it in their module): they run once on
# the files, once on the memory store and once on PostgreSQL (this worker's schema, emptied before each
# test, in the server tests/pgserver.py gives: skipped with the reason when there is none). Tests about the
# file format (crash, fuzz, torture, bad inputs, CLI tests that look at files) keep the file-only `store`.


BACKENDS = ("file", "memory", "postgres")


# The long poles of `make test` (minutes each under load: 100 rounds of killed clients, a restarted server under a
# team): run first. pytest-xdist's `load` scheduling hands each worker a first chunk of consecutive tests in
# collection order, so a long pole collected late (tests/storage/ is near the end) ran alone at the tail while the
# other worker was idle; at the front it runs beside the rest of the suite. Order only: nothing is added or dropped.
LONG_POLES = (
    "tests/storage/postgres/test_postgres_faults.py::test_clients_killed_mid_transaction_lose_nothing",
    "tests/storage/postgres/test_postgres_faults.py::test_a_server_restart_under_a_running_team",
    # over 60 s each in `pytest -m slow -n 2 --durations` at load ~10-14 (BENCHMARKS.md, "Test suite"): collected in
    # the second half, any of them could be the last test running while the other worker has nothing left
    "tests/storage/files/test_torture.py::test_crash_harness_finds_no_violation",
    "tests/storage/files/test_torture.py::test_crash_harness_with_loki_serve_killed_too_finds_no_violation",
    "tests/admin/test_migrate_crashpoints.py::test_a_kill_at_every_step_to_postgresql",
    "tests/storage/postgres/test_postgres_machines.py::test_eight_processes_on_two_machines_complete_2000_tasks_each_once",
    "tests/storage/files/test_crash.py::test_random_sigkill_during_multi_file_transactions_never_loses_or_duplicates",
    "tests/admin/test_migrate_crashpoints.py::test_a_kill_at_every_step_to_files",
    "tests/architecture/test_install.py::test_the_readme_install_lines_work_in_a_fresh_venv",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    first = sorted((item for item in items if item.nodeid in LONG_POLES),
                   key=lambda item: LONG_POLES.index(item.nodeid))  # the longest first
    if first:
        items[:] = first + [item for item in items if item.nodeid not in LONG_POLES]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "files(reason): a test of a backend-run module that is about the files "
                                       "(or drives the CLI, which works on a tree): it runs on the file backend only")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        files_only = metafunc.definition.get_closest_marker("files") is not None
        metafunc.parametrize("backend", ["file"] if files_only else list(BACKENDS))


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_store(backend: str, clock: ManualClock, request: pytest.FixtureRequest) -> Callable[..., Any]:
    """A store of this backend over the test's tree; ``config``: the tree's config/loki.json (on PostgreSQL,
    the team's config document). Each call opens the same state again (memory: a new, empty store).

    The memory store gets no tree (a test that asks for ``root`` itself still has one); PostgreSQL gets this
    worker's migrated schema, emptied before the test (tests/pgserver.py: worker_schema_url)."""
    if backend == "memory":
        return lambda config=None: MemoryStore(clock=clock, config=config)
    root: Path = request.getfixturevalue("root")
    url = None
    if backend == "postgres":
        from tests.pgserver import worker_schema_url

        url = worker_schema_url()

    def make(config: dict[str, Any] | None = None) -> Any:
        if url is not None:
            from loki.storage.postgres.store import PgStore

            # one clock for the machine and the database (leases are judged by the database's)
            store = PgStore.open(url, root=str(root), clock=clock, lease_clock=clock, config=config)
            request.addfinalizer(store.close)
            return store
        if config is not None:
            (root / "config" / "loki.json").write_text(json.dumps(config))
        return Store(root, clock=clock)

    return make


@pytest.fixture
def backend_store(make_store: Callable[..., Any]) -> Any:
    return make_store()


def postgres_store(root: Path, clock: ManualClock, config: dict[str, Any] | None = None) -> Any:
    """A PgStore over this worker's migrated schema, emptied (a fresh one when the test already has it), with
    ``root`` as this machine's tree (for tests that need a PostgreSQL store outside the backend fixture:
    tests/storage/postgres/test_postgres_state.py, *_processes.py)."""
    from loki.storage.postgres.store import PgStore
    from tests.pgserver import worker_schema_url

    return PgStore.open(worker_schema_url(), root=str(root), clock=clock, lease_clock=clock, config=config)


# -- the real agents (tests/agents/) -------------------------------------------------------------------
# Tests that run a real agent CLI carry the `agent` marker. Without node/npm (or when the pinned install
# fails) they skip, saying why; with LOKI_REQUIRE_AGENTS=1 (CI sets it) that is a failure instead, and so
# is a run in which not one of them passed (deselected, skipped by some other route): .ci/run must not go
# green on the strength of tests that never started an agent.

REQUIRE_AGENTS = "LOKI_REQUIRE_AGENTS"
_agent_tests_passed = 0


def agents_required() -> bool:
    return os.environ.get(REQUIRE_AGENTS) == "1"


def agent_unavailable(reason: str) -> None:
    if agents_required():
        pytest.fail(f"{reason} ({REQUIRE_AGENTS}=1: the end-to-end tests with the real agents must run)",
                    pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def claude_code() -> Path:
    """The pinned Claude Code binary, installed once into .cache/agents/ (tests/agents/claude.py)."""
    from tests.agents.claude import AgentUnavailable, claude_binary

    try:
        return claude_binary()
    except AgentUnavailable as exc:
        agent_unavailable(str(exc))
        raise  # not reached: skip and fail raise


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Count the agent tests that passed. Under pytest-xdist this runs on the controller too, for every report
    a worker sends (collection happens on the workers only): the marker is read from the report's keywords,
    which travel with it, so the count is the same serial or on workers."""
    global _agent_tests_passed
    if report.when == "call" and report.passed and "agent" in report.keywords:
        _agent_tests_passed += 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):
        return  # a pytest-xdist worker saw only its share of the tests: the controller decides for the run
    if agents_required() and _agent_tests_passed == 0 and exitstatus in (0, 5):
        session.exitstatus = 1
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"{REQUIRE_AGENTS}=1 but no test with a real agent passed (marker `agent`)",
                                red=True)
