"""`loki migrate` killed at every step, both ways: nothing acknowledged is lost, nothing is split.

``LOKI_CRASH_AT=N`` makes the N-th crash point a process passes die as ``kill -9`` would
(loki/storage/store.py ``crashpoint``): a migration passes one before each durable step (the marker,
every section it writes, the commit, the switch, every rename that sets the files aside, the marker's
removal). Each round kills the migration at the next point; then every command must refuse the tree
(exit 5, naming the command that finishes the job), a re-run of the same `loki migrate` must finish it,
and the live backend must hold exactly what the source held. The rounds end when the migration passes
every point without dying. Random points, and a writer during the run, are in
tests/storage/postgres/test_postgres_migrate.py and below.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from loki.admin.migrate import content, digest
from loki.storage.opening import open_store
from loki.storage.store import Store
from loki.storage.tree import init_tree
from tests import pgserver
from tests.admin.test_migrate import populate
from tests.helpers import cli, loki_proc

pgserver.driver()
pytestmark = pytest.mark.slow  # a process per crash point: about a minute each way

REFUSING = (["queue", "add", "late"], ["status"], ["validate"], ["doctor"], ["queue", "list"])


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    top = tmp_path_factory.mktemp("base")
    root = top / ".loki"
    init_tree(str(root))
    (top / ".git").mkdir()
    (top / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    populate(root)
    assert cli(["signal", "emit", "DRIFT_DETECTED", "--task", "fragile", "--severity", "low",
                "detected_drift=x"], root=root).code == 0
    return root


def _fresh(base: Path, tmp_path: Path, n: int) -> Path:
    top = tmp_path / f"round-{n}"
    shutil.copytree(base.parent, top, symlinks=True)
    return top / ".loki"


def _killed_then_finished(root: Path, target: str, point: int, expected: dict[str, object]) -> bool:
    """Kill `loki migrate --to target` at crash point ``point``; check the tree; finish it. False when
    the migration passed every point (there was no point ``point``)."""
    killed = loki_proc(["migrate", "--to", target], root=root, env={"LOKI_CRASH_AT": str(point)}, timeout=120)
    if killed.code == 0:
        return False
    assert killed.code == 137, (point, killed.stderr)
    for args in REFUSING:
        refused = cli(args, root=root)
        assert refused.code == 5, (point, args, refused.stdout, refused.stderr)
        assert "loki migrate --to" in refused.stderr, (point, args, refused.stderr)
    finished = loki_proc(["migrate", "--to", target], root=root, timeout=120)
    assert finished.code == 0, (point, finished.stderr)
    live = open_store(str(root))
    assert live.backend == ("files" if target == "files" else "postgresql")
    assert digest(content(live)) == expected, f"crash point {point}: the live backend differs from the source"
    checked = cli(["validate"], root=root)
    assert checked.code == 0, (point, checked.stdout, checked.stderr)
    return True


def test_a_kill_at_every_step_to_postgresql(base: Path, tmp_path: Path) -> None:
    expected = digest(content(Store(base)))
    point = 1
    while True:
        root = _fresh(base, tmp_path, point)
        url = pgserver.fresh_schema_url(migrate=False)
        if not _killed_then_finished(root, url, point, expected):
            break
        point += 1
    assert point > 15, f"only {point - 1} crash points: the harness missed the migration's steps"
    print(f"to PostgreSQL: killed at {point - 1} crash points, each finished by a re-run")


def test_a_kill_at_every_step_to_files(base: Path, tmp_path: Path) -> None:
    expected = digest(content(Store(base)))
    on_database = _fresh(base, tmp_path, 0)
    url = pgserver.fresh_schema_url(migrate=False)
    assert cli(["migrate", "--to", url], root=on_database).code == 0
    point = 1
    while True:
        root = _fresh(on_database, tmp_path, point)
        if not _killed_then_finished(root, "files", point, expected):
            break
        point += 1
        assert not list(root.glob("queue/*.json.*")), "a stale partial copy is left beside the files"
    assert point > 15, f"only {point - 1} crash points: the harness missed the migration's steps"
    print(f"to the files: killed at {point - 1} crash points, each finished by a re-run")


def test_random_kills_both_ways_then_a_clean_round_trip(base: Path, tmp_path: Path) -> None:
    """Kills at random points, several in a row, alternating directions: each re-run finishes what
    the killed one began, whichever step it had reached."""
    expected = digest(content(Store(base)))
    rng = random.Random(20261127)
    root = _fresh(base, tmp_path, 1000)
    url = pgserver.fresh_schema_url(migrate=False)
    kills = 0
    for round_number in range(8):
        target = url if round_number % 2 == 0 else "files"
        for _ in range(rng.randint(1, 3)):
            killed = loki_proc(["migrate", "--to", target], root=root,
                               env={"LOKI_CRASH_AT": str(rng.randint(1, 20))}, timeout=120)
            if killed.code == 0:
                break
            assert killed.code == 137, killed.stderr
            kills += 1
        else:
            finished = loki_proc(["migrate", "--to", target], root=root, timeout=120)
            assert finished.code == 0, (round_number, finished.stderr)
        live = open_store(str(root))
        assert digest(content(live)) == expected, f"round {round_number}"
        if target != "files":
            # the database keeps its rows after a move back to the files: the next move to it needs an empty one
            url = pgserver.fresh_schema_url(migrate=False)
    assert kills >= 8, kills
    print(f"random: {kills} kills in 8 rounds")
