"""`loki migrate`: a whole team's state moves between stores, verified record by record.

The library is backend-neutral (it reads and writes through the two interfaces): files -> memory
and back proves the copy and the verification here; tests/storage/postgres/test_postgres_migrate.py moves a tree to
PostgreSQL and back through the CLI.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from loki.admin.migrate import content, digest, migrate
from loki.errors import InvalidInput
from loki.storage import layout
from loki.storage.memory import MemoryStore
from loki.storage.store import Store
from loki.storage.tree import init_tree
from tests.helpers import cli, loki_proc

NOW = "2026-01-25T10:00:00Z"


def populate(root: Path) -> None:
    """A tree that has seen a day of work: every section a migration moves holds something."""
    env = {"LOKI_NOW": NOW}

    def run(*args: str) -> Any:
        result = cli(list(args), root=root, env=env)
        assert result.code in (0, 3), (args, result.stdout, result.stderr)
        return result

    (root / "config" / "loki.json").write_text(json.dumps({"version": 1, "queue": {"completed_hot_limit": 2}}))
    ids = [run("queue", "add", f"task {n}", "--json").json()["task"]["id"] for n in range(6)]
    run("queue", "add", "waits", "--depends-on", ids[0])
    run("queue", "add", "fragile", "--id", "fragile", "--max-attempts", "1", "--label", "security",
        "--priority", "high")
    for _ in range(5):  # the fragile one fails, four complete over a hot limit of 2: the oldest go to the archive
        claimed = run("queue", "claim", "--agent", "a1", "--json").json()["task"]
        if claimed["id"] == "fragile":
            run("queue", "fail", "fragile", "--agent", "a1", "--error", "boom")
            continue
        run("queue", "complete", claimed["id"], "--agent", "a1")
    run("queue", "add", "doomed", "--id", "doomed", "--max-attempts", "1", "--priority", "high")
    run("queue", "claim", "--agent", "a2")
    run("queue", "fail", "doomed", "--agent", "a2", "--error", "gone for good")
    run("deadletter", "abandon", "doomed", "--reason", "obsolete")
    run("queue", "claim", "--agent", "a2")
    run("breaker", "failure", "api/claude", "--error", "429")
    run("breaker", "trip", "api/github")
    run("budget", "set", "daily", "--usd", "50", "--per", "day")  # budgets (docs/spend.md) move too
    run("lease", "acquire", "src/auth/**", "--agent", "a2", "--task", ids[5])
    run("lease", "acquire", "docs/*.md", "--agent", "a1", "--shared")
    run("lease", "release", "L2", "--agent", "a1")  # one live lease, one in the history
    run("signal", "emit", "TESTS_RESULT", "--task", ids[5], "passed:=true", "failed_count:=0")
    run("escalate", ids[4], "--trigger", "needs a human")
    payload = {"session_id": "s1", "hook_event_name": "PostToolUseFailure", "tool_name": "Bash",
               "tool_input": {"command": "make build"}, "error": "make: *** [build] Error 2", "cwd": str(root.parent)}
    for _ in range(2):
        hooked = loki_proc(["hook", "post-tool-use-failure"], root=root, env=env, input=json.dumps(payload))
        assert hooked.code == 0, hooked.stderr


@pytest.fixture(scope="session")
def populated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The day of work, done once per session (per pytest-xdist worker): ``populated`` copies it."""
    top = tmp_path_factory.mktemp("populated")
    root = top / ".loki"
    init_tree(str(root))
    (top / ".git").mkdir()
    (top / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    populate(root)
    return top


@pytest.fixture
def populated(tmp_path: Path, populated_template: Path) -> Path:
    """A populated tree of the test's own: the template copied (times kept, no fsync: thrown away after)."""
    for name in (".loki", ".git"):
        shutil.copytree(populated_template / name, tmp_path / name, symlinks=True)
    return tmp_path / ".loki"


def test_every_section_moves_and_is_verified(populated: Path) -> None:
    source = Store(populated)
    held = content(source)
    counts = {name: info["records"] for name, info in digest(held).items()}
    for section in ("tasks", "dead_letter", "abandoned", "archive", "documents", "texts", "logs", "items"):
        assert counts[section] > 0, f"the populated tree has nothing in {section}: {counts}"
    target = MemoryStore()
    report = migrate(source, target)
    assert report["sections"] == digest(content(target))
    assert content(target) == held
    moved = target.read(layout.LEASES)  # the path leases moved too (docs/leases.md)
    assert [lease["lease_id"] for lease in moved["leases"]] == ["L1"]
    assert [(h["lease_id"], h["ended"]) for h in moved["history"]] == [("L2", "released")]


def test_and_back_into_a_new_file_tree(populated: Path, tmp_path: Path) -> None:
    memory = MemoryStore()
    migrate(Store(populated), memory)
    again = tmp_path / "again" / ".loki"
    init_tree(str(again))
    migrate(memory, Store(again))
    assert digest(content(Store(again))) == digest(content(Store(populated)))
    assert cli(["validate"], root=again).code == 0


def test_a_target_that_holds_state_is_refused_and_unchanged(populated: Path, tmp_path: Path) -> None:
    other = tmp_path / "other" / ".loki"
    init_tree(str(other))
    assert cli(["queue", "add", "theirs"], root=other).code == 0
    before = digest(content(Store(other)))
    with pytest.raises(InvalidInput, match=r"already holds state \(1 tasks\)"):
        migrate(Store(populated), Store(other))
    assert digest(content(Store(other))) == before


def test_a_difference_after_the_copy_is_an_error(populated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The verification reads the target back: a store that lost a record on the way is caught."""
    import loki.admin.migrate as migrating

    real = migrating._copy

    def lossy(held: dict[str, Any], target: Any) -> None:
        held = {**held, "items": {}}  # the items never arrive
        real(held, target)

    monkeypatch.setattr(migrating, "_copy", lossy)
    with pytest.raises(InvalidInput, match=r"differs from .* in items"):
        migrate(Store(populated), MemoryStore())


# -- a migration under way holds every writer out (loki/storage/moving.py) ----------------------------


def _mark(root: Path, target: str = "postgresql://db/team") -> None:
    from loki.admin.migrate import write_marker

    write_marker(str(root), {"version": 1, "target": target, "step": "holding", "started_at": NOW})


def test_a_marked_tree_refuses_every_command_naming_the_one_that_finishes(root: Path) -> None:
    from loki.errors import MigrationUnderWay
    from loki.storage.opening import open_store

    before = (root / "queue" / "pending.json").read_bytes()
    _mark(root)
    with pytest.raises(MigrationUnderWay, match=r"run `loki migrate --to postgresql://db/team` again"):
        open_store(str(root))
    for args in (["queue", "add", "late"], ["status"], ["validate"], ["doctor"], ["signal", "emit", "TESTS_RESULT",
                                                                              "passed:=true", "failed_count:=0"]):
        refused = cli(args, root=root)
        assert refused.code == 5, (args, refused.stderr)
        assert "loki migrate --to postgresql://db/team" in refused.stderr and refused.stderr.count("\n") == 1
    assert (root / "queue" / "pending.json").read_bytes() == before


def test_a_store_opened_before_the_migration_writes_nothing_during_or_after_it(root: Path) -> None:
    """`loki work` and `loki watch` hold their store for hours: each unit checks again."""
    from loki.admin.migrate import remove_marker
    from loki.errors import MigrationUnderWay
    from loki.queue.queue import Queue
    from loki.storage.opening import open_store

    queue = Queue(open_store(str(root)))
    queue.add("before", task_id="before")
    _mark(root)
    with pytest.raises(MigrationUnderWay, match="has not finished"):
        queue.add("during", task_id="during")
    store = queue.store
    with pytest.raises(MigrationUnderWay):
        store.append_lines("logs/outcomes.jsonl", [{"x": 1}])
    with pytest.raises(MigrationUnderWay):
        store.create_unique("signals", "TESTS_RESULT-1.json", b"{}")
    remove_marker(str(root))
    config = json.loads((root / "config" / "loki.json").read_text())
    (root / "config" / "loki.json").write_text(json.dumps({**config, "storage": {
        "backend": "postgresql", "database": "postgresql://db/team"}}))
    with pytest.raises(MigrationUnderWay, match="moved its state to the database"):
        queue.add("after", task_id="after")
    assert [t["id"] for t in Store(root).read("queue/pending.json")["tasks"]] == ["before"]
    assert not (root / "logs" / "outcomes.jsonl").exists()


def test_the_drift_lock_and_journals_are_not_state(populated: Path) -> None:
    """What is state comes from the layout: a permanent lock, a journal, a temp file are never copied."""
    assert cli(["signal", "emit", "DRIFT_DETECTED", "--task", "fragile", "--severity", "low", "detected_drift=x"],
               root=populated).code == 0
    (populated / "signals" / ".TESTS_RESULT.123.abcdef01.tmp").write_text("{}")
    held = content(Store(populated))
    assert list(held["logs"]).count("signals/DRIFT_DETECTED") == 1
    names = [name for section in held.values() for name in section]
    assert not [n for n in names if n.endswith((".lock", ".tmp", ".journal.json"))], names
    target = MemoryStore()
    migrate(Store(populated), target)
    assert content(target) == held


def test_the_watchers_drift_position_moves_as_lines_applied(populated: Path) -> None:
    """A byte offset means nothing to another store: the copy keeps how many lines were applied."""
    for _ in range(3):
        assert cli(["signal", "emit", "DRIFT_DETECTED", "--task", "fragile", "--severity", "low",
                    "detected_drift=x"], root=populated).code == 0
    assert cli(["watch", "--once"], root=populated).code == 0
    assert cli(["signal", "emit", "DRIFT_DETECTED", "--task", "fragile", "--severity", "low",
                "detected_drift=y"], root=populated).code == 0
    held = content(Store(populated))
    assert held["documents"]["state/watch.json"][0]["drift_applied_lines"] == 3
    target = MemoryStore()
    migrate(Store(populated), target)
    position = target.read("state/watch.json")["drift_offset"]
    lines, _ = target.read_after("signals/DRIFT_DETECTED", position)
    assert [json.loads(line.data or b"")["detected_drift"] for line in lines] == ["y"]


def test_a_source_written_during_the_copy_is_not_switched(populated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The source read again must be the source first read: a write that was under way is caught."""
    import loki.admin.migrate as migrating
    from loki.errors import MigrationUnderWay

    real = migrating._copy

    def and_a_late_write(held: dict[str, Any], target: Any) -> None:
        real(held, target)
        late = Store(populated)
        late.guarded = False  # a writer that passed its check before the marker was written
        from loki.queue.queue import Queue

        Queue(late).add("late", task_id="late")

    monkeypatch.setattr(migrating, "_copy", and_a_late_write)
    with pytest.raises(MigrationUnderWay, match=r"changed during the migration \(in tasks: "):
        migrate(Store(populated), MemoryStore())


def test_two_migrations_of_one_tree_do_not_run_at_once(root: Path) -> None:
    from loki.admin.migrate import MIGRATION_LOCK
    from loki.storage.locks import FileLock

    before = (root / "queue" / "pending.json").read_bytes()
    with FileLock(str(root / MIGRATION_LOCK), 1, MIGRATION_LOCK):
        refused = cli(["migrate", "--to", "postgresql://localhost/elsewhere"], root=root)
    assert refused.code == 5, refused.stderr
    assert "another `loki migrate` is running" in refused.stderr
    assert not (root / "config" / "migration.json").exists()
    assert (root / "queue" / "pending.json").read_bytes() == before
