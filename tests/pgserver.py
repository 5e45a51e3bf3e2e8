"""A real PostgreSQL server for the tests: the one LOKI_TEST_DATABASE_URL names, else a throwaway cluster.

The throwaway cluster is ``initdb`` + ``pg_ctl`` in a temporary directory, listening only on a Unix
socket there (as the ``postgres`` user when the tests run as root, which initdb refuses). Each test
gets a schema of its own in that server (``search_path`` in the URL's ``options``), so tests never see
each other's rows and no database is created per test (CREATE DATABASE costs ~0.25 s here).

When neither is possible the tests that need PostgreSQL skip with the reason; with
``LOKI_REQUIRE_POSTGRES=1`` (set by .ci/run) that skip is a failure instead.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pytest

URL_ENV = "LOKI_TEST_DATABASE_URL"
REQUIRE_ENV = "LOKI_REQUIRE_POSTGRES"


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    return candidates[0] if candidates else None


def unavailable(reason: str) -> None:
    """Skip with a visible reason, or fail when PostgreSQL is mandatory (CI)."""
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(f"PostgreSQL is required ({REQUIRE_ENV} is set) but {reason}", pytrace=False)
    pytest.skip(f"no PostgreSQL: {reason} (set {URL_ENV} or install initdb/pg_ctl)", allow_module_level=True)


@dataclass
class Cluster:
    """A throwaway PostgreSQL cluster the tests own: they may stop and restart it, or kill it (for good: a killed
    postmaster stays a zombie where no init reaps it, and pg_ctl will not start over its pid file)."""

    directory: str
    port: int
    owner: str | None
    log: str = ""
    pid: int | None = None
    _env: dict[str, str] = field(default_factory=dict)

    @property
    def socket_dir(self) -> str:
        return self.directory

    def url(self, database: str = "postgres", options: str = "") -> str:
        user = self.owner or os.environ.get("USER", "postgres")
        query = f"host={quote(self.socket_dir, safe='')}&port={self.port}"
        if options:
            query += "&options=" + quote(options, safe="")
        return f"postgresql://{user}@/{database}?{query}"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = list(args)
        if self.owner:
            cmd = ["runuser", "-u", self.owner, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=120)

    def start(self) -> None:
        pg_ctl = _binary("pg_ctl")
        assert pg_ctl
        # dynamic_shared_memory_type=mmap: the segments live in the data directory, removed with the cluster. As
        # POSIX shared memory (the default) a killed server's stayed in /dev/shm: 2 a kill, 108 after a day's runs.
        opts = (f"-k {self.socket_dir} -p {self.port} -c listen_addresses='' -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200 "
                "-c dynamic_shared_memory_type=mmap")
        self._run(pg_ctl, "-D", f"{self.directory}/data", "-l", self.log, "-o", opts, "-w", "-t", "60", "start")
        with open(f"{self.directory}/data/postmaster.pid") as handle:
            self.pid = int(handle.readline())

    def stop(self, mode: str = "fast") -> None:
        pg_ctl = _binary("pg_ctl")
        assert pg_ctl
        self._run(pg_ctl, "-D", f"{self.directory}/data", "-m", mode, "-w", "stop", check=False)

    def kill(self) -> None:
        """The server dies at once, the postmaster and every backend: a network drop, as a client sees it.

        Each backend is in a session of its own (PostgreSQL's children call setsid), so the postmaster is
        stopped first (it forks no new one), its children are killed, then it is. Killing the postmaster
        alone left each backend to notice its death by itself, and one slow to notice (a loaded machine)
        still answered the next statement: a test expecting a dead server saw it answer."""
        if self.pid and self._postmaster_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGSTOP)
            subprocess.run(["pkill", "-KILL", "-P", str(self.pid)], check=False)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        subprocess.run(["pkill", "-KILL", "-f", f"{self.directory}/data"], check=False)

    def _postmaster_alive(self) -> bool:
        """Whether :attr:`pid` is still this cluster's postmaster (not a process that reused a gone one's pid)."""
        try:
            with open(f"/proc/{self.pid}/cmdline", "rb") as handle:
                return f"{self.directory}/data".encode() in handle.read()
        except OSError:
            return False

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.directory, ignore_errors=True)


PASSWORD_ROLE = "loki_pw"
PASSWORD = "s3cret-Pw-for-tests"
"""A role of every throwaway cluster that must give this password (scram-sha-256)."""

_ports = itertools.count(55432 + (os.getpid() % 500) * 8)


def start_cluster(*, removed_at_exit: bool = True) -> Cluster:
    """initdb + pg_ctl start in a new temporary directory; removed at this process's exit (unless told not:
    the cluster a run's workers share, see :func:`_run_cluster`)."""
    initdb = _binary("initdb")
    if initdb is None or _binary("pg_ctl") is None:
        unavailable("initdb and pg_ctl were not found on PATH or under /usr/lib/postgresql")
    owner = None
    if os.geteuid() == 0:
        owner = "postgres"
        try:
            import pwd

            pwd.getpwnam(owner)
        except KeyError:
            unavailable("running as root and there is no 'postgres' user to run initdb as")
    directory = tempfile.mkdtemp(prefix="loki-pg-")
    if owner:
        shutil.chown(directory, owner)
        os.chmod(directory, 0o755)
    cluster = Cluster(directory=directory, port=next(_ports), owner=owner, log=f"{directory}/server.log")
    cluster._run(initdb, "-D", f"{directory}/data", "-A", "trust", "-U", owner or os.environ.get("USER", "postgres"),
                 "--no-sync", "-E", "UTF8", "--locale", "C")
    # One role logs in with a password (scram), so a refused password can be tested; everyone else: trust.
    hba = f"{directory}/data/pg_hba.conf"
    with open(hba) as handle:
        rules = handle.read()
    with open(hba, "w") as handle:
        handle.write(f"local all {PASSWORD_ROLE} scram-sha-256\n{rules}")
    cluster.start()
    if removed_at_exit:
        atexit.register(cluster.remove)
    import psycopg

    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {PASSWORD_ROLE} LOGIN SUPERUSER PASSWORD '{PASSWORD}'")
    return cluster


_shared: dict[str, object] = {}


def server_url() -> str:
    """The URL of the database the tests use (LOKI_TEST_DATABASE_URL, else a run-wide cluster)."""
    url = os.environ.get(URL_ENV)
    if url:
        return url
    if "cluster" not in _shared:
        _shared["cluster"] = _run_cluster() if os.environ.get(RUN_ENV) else start_cluster()
    cluster = _shared["cluster"]
    assert isinstance(cluster, Cluster)
    return cluster.url()


# -- one throwaway cluster for all pytest-xdist workers of a run -----------------------------------------
# Each worker used to initdb and start a cluster of its own (~1-2 s each, two servers' background processes
# on 2 cores). The first worker that needs PostgreSQL starts it, under a file lock in a directory named by
# the run (PYTEST_XDIST_TESTRUNUID); the others find it there. Every worker using it holds a shared lock on
# ``users`` until its exit; the last to leave (it gets that lock exclusively) stops and removes it. A run
# killed before that (SIGKILL of pytest) is cleaned up by a watchdog process that waits for the run's
# controller (the workers' parent) to end. Each worker still has its own schemas in it (the names carry the
# pid); tests that stop or kill a server start a cluster of their own (start_cluster), never this one.

RUN_ENV = "PYTEST_XDIST_TESTRUNUID"

_WATCHDOG = """
import json, os, select, shutil, subprocess, sys, time
controller, home = sys.argv[1:]
try:
    select.select([os.pidfd_open(int(controller))], [], [])
except (AttributeError, OSError):  # no pidfd: ask every second
    while os.path.exists(f"/proc/{controller}"):
        time.sleep(1)
try:
    with open(os.path.join(home, "cluster.json")) as handle:
        cluster = json.load(handle)
except OSError:
    cluster = None  # never started, or the last worker removed it
if cluster is not None:
    runuser = ["runuser", "-u", cluster["owner"], "--"] if cluster["owner"] else []
    subprocess.run([*runuser, cluster["pg_ctl"], "-D", cluster["directory"] + "/data", "-m", "immediate", "-w",
                    "stop"], capture_output=True, check=False)
    shutil.rmtree(cluster["directory"], ignore_errors=True)
shutil.rmtree(home, ignore_errors=True)
"""


def _run_cluster() -> Cluster:
    """The cluster this run's workers share, started by the first that asks (see above)."""
    import fcntl
    import json
    import sys

    home = os.path.join(tempfile.gettempdir(), f"loki-pg-run-{os.environ[RUN_ENV]}")
    try:
        os.mkdir(home)
    except FileExistsError:
        pass
    else:  # the first worker here: whatever happens next, the directory goes when the run ends
        subprocess.Popen([sys.executable, "-c", _WATCHDOG, str(os.getppid()), home], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    found = os.path.join(home, "cluster.json")
    with open(os.path.join(home, "lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        users = open(os.path.join(home, "users"), "a")  # noqa: SIM115 (held until this process ends)
        fcntl.flock(users, fcntl.LOCK_SH)
        atexit.register(_leave_run_cluster, home, users)
        if os.path.exists(found):
            with open(found) as handle:
                saved = json.load(handle)
            saved.pop("pg_ctl")
            return Cluster(**saved)
        cluster = start_cluster(removed_at_exit=False)
        with open(found + ".new", "w") as handle:
            json.dump({"directory": cluster.directory, "port": cluster.port, "owner": cluster.owner,
                       "log": cluster.log, "pid": cluster.pid, "pg_ctl": _binary("pg_ctl")}, handle)
        os.replace(found + ".new", found)
        return cluster


def _leave_run_cluster(home: str, users: Any) -> None:
    """At a worker's exit: the last worker using the run's cluster stops and removes it."""
    import fcntl
    import json

    with open(os.path.join(home, "lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        fcntl.flock(users, fcntl.LOCK_UN)
        try:
            fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # another worker still uses it
        found = os.path.join(home, "cluster.json")
        if os.path.exists(found):
            with open(found) as handle:
                saved = json.load(handle)
            saved.pop("pg_ctl")
            Cluster(**saved).remove()
            os.remove(found)


_schemas = itertools.count(1)
_made_on_the_shared_server: list[str] = []


@atexit.register
def _drop_schemas_made_on_the_shared_server() -> None:
    """A throwaway cluster goes whole at exit; on the server LOKI_TEST_DATABASE_URL names, the schemas this
    process made are dropped (a server already gone, or a killed run, leaves them: nothing to wait for)."""
    if not _made_on_the_shared_server:
        return
    try:
        import psycopg

        with psycopg.connect(os.environ[URL_ENV], autocommit=True, connect_timeout=3) as conn:
            for name in _made_on_the_shared_server:
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    except Exception:  # best effort at exit: a leftover schema harms no test
        pass


def fresh_schema_url(base_url: str | None = None, *, migrate: bool = True, schema: str | None = None) -> str:
    """A URL whose search_path is a new, empty schema of the test server (migrated unless told not)."""
    try:
        import psycopg
    except ImportError:
        unavailable("psycopg is not installed (pip install -e '.[dev]')")
    base = base_url or server_url()
    name = schema or f"t_{os.getpid()}_{next(_schemas)}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        conn.execute(f'CREATE SCHEMA "{name}"')
    if base == os.environ.get(URL_ENV):
        _made_on_the_shared_server.append(name)
    separator = "&" if "?" in base else "?"
    url = f"{base}{separator}options={quote(f'-csearch_path={name}', safe='')}"
    if migrate:
        from loki.storage.postgres import migrations

        with psycopg.connect(url, autocommit=True) as conn:
            migrations.upgrade(conn)
    return url


def at_database_time(url: str, when: str) -> str:
    """``url`` whose sessions read ``when`` as the database's clock (the ``loki.now`` setting, see
    loki/storage/postgres/session.py): how a test moves the database's time, as LOKI_NOW moves a machine's."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query["options"] = f"{query.get('options', '')} -c loki.now={when}".strip()
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query, quote_via=quote), parts.fragment))


def driver() -> object:
    """psycopg, or the skip (a failure when PostgreSQL is required) saying how to install it."""
    try:
        import psycopg
    except ImportError:
        unavailable("psycopg is not installed (pip install -e '.[dev]')")
    return psycopg


# -- one migrated schema per worker, emptied between tests ---------------------------------------------
# A fresh migrated schema costs ~0.3 s (CREATE SCHEMA + every migration); the contract suites ask for one
# per PostgreSQL test. Instead each process (the run, or each pytest-xdist worker: the schema's name
# carries the pid) migrates one schema once and, before each test, empties it back to what the migrations
# left (huey's ``flush_all`` in setUp): every table truncated, the rows the migrations insert copied back
# from a pristine twin, every sequence set back. When a test changed the schema's shape (dropped or altered
# a table or a function) or a connection it left holds a lock, the reset refuses and a fresh schema is made
# instead, so no test sees another's leftovers.


@dataclass
class _Worker:
    url: str
    conn: Any
    reset: str


_worker: dict[str, _Worker] = {}


def _oids(oids: Any) -> str:
    return "'{" + ",".join(str(oid) for oid in [0, *oids]) + "}'::oid[]"


def _new_worker() -> _Worker:
    import psycopg

    base = server_url()
    schema = f"w_{os.getpid()}_{next(_schemas)}"
    seed = schema + "_seed"
    url = fresh_schema_url(base, schema=schema)
    fresh_schema_url(base, schema=seed)  # never used by a test: what a just-migrated schema holds
    conn = psycopg.connect(base, autocommit=True)
    # The catalogs of a server many test runs share are large and pg_class has no index on the schema
    # alone: the names are read once here, and each reset only looks objects up by oid.
    relations = {kind: dict(conn.execute(
        "SELECT relname, oid::int FROM pg_class WHERE relnamespace = %s::regnamespace AND relkind = %s",
        (name, kind)).fetchall()) for name, kind in ((schema, "r"), (schema, "S"))}
    functions = [row[0] for row in conn.execute(
        "SELECT oid::int FROM pg_proc WHERE pronamespace = %s::regnamespace", (schema,))]
    tables, sequences = relations["r"].values(), relations["S"].values()
    shape_of = (f"(SELECT count(*) FROM pg_class WHERE oid = ANY({_oids([*tables, *sequences])})), "
                "(SELECT md5(string_agg(attrelid::text || attname || atttypid::text, ',' ORDER BY attrelid, attnum)) "
                f"FROM pg_attribute WHERE attrelid = ANY({_oids(tables)}) AND attnum > 0 AND NOT attisdropped), "
                f"(SELECT md5(string_agg(prosrc, ',' ORDER BY oid)) FROM pg_proc WHERE oid = ANY({_oids(functions)}))")
    seeded = [table for table in relations["r"]
              if conn.execute(f'SELECT EXISTS (SELECT FROM "{seed}"."{table}")').fetchone()[0]]
    count, columns, sources = conn.execute(f"SELECT {shape_of}").fetchone()
    # One round trip: the shape checked first (a division by zero when it changed: the reset fails and a
    # fresh schema is made), no commit fsync to wait for, no foreign-key order to keep (replica role: the
    # rows go and come back as a whole), a leftover lock fails it at once instead of hanging it.
    digests = ", ".join("NULL" if digest is None else f"'{digest}'" for digest in (columns, sources))  # md5 hex
    steps = [f"SELECT 1 / (ROW({shape_of}) IS NOT DISTINCT FROM ROW({int(count)}::bigint, {digests}))::int",
             "SET LOCAL synchronous_commit = off", "SET LOCAL session_replication_role = replica",
             "SET LOCAL lock_timeout = '2s'"]
    steps += [f'DELETE FROM "{schema}"."{table}"' for table in relations["r"]]
    steps += [f'INSERT INTO "{schema}"."{table}" SELECT * FROM "{seed}"."{table}"' for table in seeded]
    steps += [f"SELECT setval('\"{schema}\".\"{sequence}\"', last_value, is_called) FROM \"{seed}\".\"{sequence}\""
              for sequence in relations["S"]]
    reset = "BEGIN; " + "; ".join(steps) + "; COMMIT"
    return _Worker(url=url, conn=conn, reset=reset)


def _reset(worker: _Worker) -> bool:
    """Empty the worker's schema back to its just-migrated rows; False when it cannot be (a new one is due)."""
    import psycopg

    try:
        worker.conn.execute(worker.reset)
    except psycopg.Error:
        with contextlib.suppress(psycopg.Error):
            worker.conn.execute("ROLLBACK")
        return False
    return True


_worker_taken_by: list[str] = []
"""The test the worker's schema was last handed to: a second ask of the same test gets a schema of its own."""


def worker_schema_url() -> str:
    """The URL of this process's migrated schema, emptied back to its just-migrated state (see above).

    Once per test: a test that asks again (``make_store`` and ``postgres_store`` in one test) is given a fresh
    schema, never the one it already uses emptied under it."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]  # "<nodeid> (setup|call|teardown)"
    if test and _worker_taken_by == [test]:
        return fresh_schema_url()
    _worker_taken_by[:] = [test]
    worker = _worker.get("worker")
    if worker is not None and _reset(worker):
        return worker.url
    if worker is not None:
        worker.conn.close()
    try:
        _worker["worker"] = _new_worker()
    except ImportError:
        unavailable("psycopg is not installed (pip install -e '.[dev]')")
    return _worker["worker"].url
