"""``loki init``, ``status``, ``validate``, ``doctor`` and root discovery, through the CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from loki.storage import layout
from loki.storage.store import Store
from tests.helpers import cli, loki_proc, put_tasks, snapshot_bytes, task

REPO = Path(__file__).resolve().parents[2]


def test_init_creates_the_tree_and_is_idempotent(tmp_path: Path) -> None:
    result = cli(["init", "--path", str(tmp_path), "--json"])
    assert result.code == 0, result.stderr
    created = result.json()["created"]
    assert "queue/pending.json" in created and "state/circuit-breakers.json" in created
    root = tmp_path / ".loki"
    for rel in layout.initial_files():
        assert (root / rel).is_file(), rel
    (root / "queue" / "pending.json").write_text('{"version":1,"tasks":[]}\n')
    (root / "config" / "loki.json").write_text('{"version": 1, "queue": {"lease_seconds": 60}}\n')
    before = snapshot_bytes(root)
    again = cli(["init", "--path", str(tmp_path), "--json"])
    assert again.code == 0 and again.json()["created"] == []
    assert snapshot_bytes(root) == before  # nothing overwritten


def test_init_fills_in_missing_files_only(tmp_path: Path) -> None:
    root = tmp_path / ".loki"
    cli(["init", "--path", str(tmp_path)])
    os.unlink(root / "queue" / "blocked.json")
    (root / "CONTINUITY.md").write_text("my notes\n")
    result = cli(["init", "--path", str(tmp_path), "--json"])
    assert result.json()["created"] == ["queue/blocked.json"]
    assert (root / "CONTINUITY.md").read_text() == "my notes\n"


def test_root_is_found_like_git_finds_dot_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cli(["init", "--path", str(tmp_path)])
    deep = tmp_path / "src" / "pkg"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    result = cli(["status", "--json"])
    assert result.code == 0, result.stderr
    assert result.json()["root"] == str(tmp_path / ".loki")


def test_root_from_environment_and_option(tmp_path: Path) -> None:
    cli(["init", "--path", str(tmp_path)])
    state = str(tmp_path / ".loki")
    assert cli(["status", "--json"], env={"LOKI_ROOT": state}).json()["root"] == state
    assert cli(["status", "--json"], root=state).json()["root"] == state


def test_no_tree_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = cli(["status"])
    assert result.code == 1
    assert "no .loki/ directory" in result.stderr and "loki init" in result.stderr


def test_status_counts(store: Store) -> None:
    put_tasks(store, "pending", [task("a"), task("b")])
    report = cli(["status", "--json"], root=store.root).json()
    assert report["queue"]["pending"] == 2 and report["queue"]["completed"] == 0
    assert report["dead_letter"] == {"size": 0, "last_reviewed": None}
    assert report["breakers"] == {"CLOSED": 0, "OPEN": 0, "HALF_OPEN": 0}
    human = cli(["status"], root=store.root)
    assert human.code == 0 and "pending" in human.stdout


def test_validate_lists_every_problem_and_exits_1(store: Store) -> None:
    pending = Path(store.path("queue/pending.json"))
    pending.write_text(json.dumps({"version": 1, "tasks": [task("a", priority="urgent")]}))
    Path(store.path("state/circuit-breakers.json")).write_text("{broken")
    put_tasks(store, "completed", [task("b", status="pending")])
    before = snapshot_bytes(store.root)
    result = cli(["validate", "--json"], root=store.root)
    assert result.code == 1
    problems = result.json()["problems"]
    where = {(p["file"], p["pointer"]) for p in problems}
    assert ("queue/pending.json", "/tasks/0/priority") in where
    assert ("queue/completed.json", "/tasks/0/status") in where
    assert any(p["file"] == "state/circuit-breakers.json" and "invalid JSON" in p["message"] for p in problems)
    assert snapshot_bytes(store.root) == before
    human = cli(["validate"], root=store.root)
    assert human.code == 1 and "queue/pending.json at /tasks/0/priority" in human.stderr


def test_validate_and_a_reading_command_count_the_same_problems(store: Store) -> None:
    bad = {"priority": "urgent", "max_attempts": 0, "title": ""}
    Path(store.path("queue/pending.json")).write_text(
        json.dumps({"version": 1, "tasks": [task("a", **bad), task("b", **bad)]}))
    result = cli(["validate", "--json"], root=store.root)
    assert result.code == 1
    where = sorted(p["pointer"] for p in result.json()["problems"])
    assert where == [f"/tasks/{n}/{field}" for n in (0, 1) for field in ("max_attempts", "priority", "title")]
    assert cli(["validate"], root=store.root).stderr.splitlines()[-1].startswith("6 problems in ")
    listed = cli(["queue", "list"], root=store.root)
    assert listed.code == 1 and "(and 5 more problems)" in listed.stderr
    Path(store.path("queue/pending.json")).write_text(
        json.dumps({"version": 1, "tasks": [task("a", priority="urgent", title="")]}))
    assert "(and 1 more problem)\n" in cli(["queue", "list"], root=store.root).stderr
    assert len(cli(["validate", "--json"], root=store.root).json()["problems"]) == 2


def test_validate_finds_a_task_in_two_files(store: Store) -> None:
    put_tasks(store, "pending", [task("dup")])
    put_tasks(store, "failed", [task("dup", status="failed")])
    problems = cli(["validate", "--json"], root=store.root).json()["problems"]
    assert any("'dup' is also in queue/pending.json" in p["message"] for p in problems)


def test_commands_refuse_a_corrupt_file_and_leave_it_byte_for_byte(store: Store) -> None:
    pending = Path(store.path("queue/pending.json"))
    pending.write_bytes(b'{"version": 1, "tasks": [], "tasks": []}')
    before = snapshot_bytes(store.root)
    for args in (["status"], ["status", "--json"], ["validate"], ["doctor"]):
        result = cli(args, root=store.root)
        assert result.code == 1, args
        assert "queue/pending.json" in result.stderr and "duplicate key 'tasks'" in result.stderr, args
    assert snapshot_bytes(store.root) == before


def test_validate_reports_a_journal_and_leaves_it_for_doctor(store: Store) -> None:
    # Mid-change the task is in both files; the journal, not validate, decides which one wins.
    put_tasks(store, "pending", [task("a")])
    put_tasks(store, "in-progress", [task("a", status="in-progress")])
    journal = {"version": 1, "created_at": "2026-01-25T10:00:00Z",
               "files": {"queue/pending.json": {"version": 1, "tasks": []},
                         "queue/in-progress.json": {"version": 1, "tasks": [task("a", status="in-progress")]}}}
    Path(store.path("queue/.journal.json")).write_text(json.dumps(journal))
    before = snapshot_bytes(store.root)
    result = cli(["validate", "--json"], root=store.root)
    assert result.code == 1
    problems = result.json()["problems"]
    assert [p["file"] for p in problems] == ["queue/.journal.json"]
    assert snapshot_bytes(store.root) == before  # validate only looks: the journal is doctor's to finish


def test_validate_takes_a_journal_under_a_held_lock_for_a_commit_in_flight(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    # An agent is mid-commit while a human runs validate: its journal is not a crash's leftover.
    import threading

    from loki.storage import locks, treecheck  # validate_tree's module (loki.storage.tree re-exports it)
    from loki.storage.locks import FileLock

    put_tasks(store, "pending", [task("a")])
    journal = Path(store.path("queue/.journal.json"))
    journal.write_text(json.dumps({"version": 1, "created_at": "2026-01-25T10:00:00Z", "files": {}}))
    holder = FileLock(store.path(layout.QUEUE_LOCK)).acquire()
    probed = threading.Event()

    def finish_commit() -> None:
        probed.wait(timeout=30)  # a guard against a hang, not a delay: set as soon as validate looks
        journal.unlink()
        holder.release()

    def in_use(path: str) -> bool:
        held = locks.in_use(path)
        probed.set()
        return held

    monkeypatch.setattr(treecheck, "in_use", in_use)
    committer = threading.Thread(target=finish_commit)
    committer.start()
    try:
        result = cli(["validate", "--json"], root=store.root)
    finally:
        probed.set()
        committer.join()
    assert result.code == 0, result.stdout + result.stderr


def test_a_journal_names_its_lock() -> None:
    for lock in (layout.QUEUE_LOCK, layout.lock_for(layout.BREAKERS), layout.lock_for(layout.MEMORY_LOG)):
        assert layout.lock_of_journal(layout.journal_for(lock)) == lock


def test_doctor_finishes_a_journal(store: Store) -> None:
    put_tasks(store, "pending", [task("a")])
    journal = {"version": 1, "created_at": "2026-01-25T10:00:00Z",
               "files": {"queue/pending.json": {"version": 1, "tasks": []},
                         "queue/in-progress.json": {"version": 1, "tasks": [task("a", status="in-progress")]}}}
    Path(store.path("queue/.journal.json")).write_text(json.dumps(journal))
    result = cli(["doctor", "--json"], root=store.root)
    assert result.code == 0, result.stderr
    assert result.json()["journals_finished"] == ["queue/.journal.json"]
    assert Store(store.root).read("queue/in-progress.json")["tasks"][0]["id"] == "a"


def test_doctor_sweeps_only_stale_temp_files_and_only_with_repair(store: Store) -> None:
    # Both writers are alive (this process): only age decides.
    stale = Path(store.path(f"queue/.pending.json.{os.getpid()}.deadbeef.tmp"))
    fresh = Path(store.path(f"queue/.pending.json.{os.getpid()}.cafebabe.tmp"))
    stale.write_text("partial")
    fresh.write_text("partial")
    now = store.clock.now().timestamp()
    os.utime(stale, (now - 301, now - 301))
    os.utime(fresh, (now - 10, now - 10))
    env = {"LOKI_NOW": "2026-01-25T10:00:00Z"}
    report = cli(["doctor", "--json"], root=store.root, env=env).json()
    assert sorted(report["temp_files"]) == sorted([str(p.relative_to(store.root)) for p in (stale, fresh)])
    assert stale.exists() and fresh.exists()
    report = cli(["doctor", "--repair", "--json"], root=store.root, env=env).json()
    assert report["temp_removed"] == [f"queue/.pending.json.{os.getpid()}.deadbeef.tmp"]
    assert not stale.exists() and fresh.exists()


def test_doctor_sweeps_a_fresh_temp_file_whose_writer_died(store: Store) -> None:
    import subprocess
    import sys

    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(child.stdout)  # that process has exited
    orphan = Path(store.path(f"queue/.pending.json.{dead_pid}.0badf00d.tmp"))
    orphan.write_text("partial")
    report = cli(["doctor", "--repair", "--json"], root=store.root).json()
    assert report["temp_removed"] == [str(orphan.relative_to(store.root))] and not orphan.exists()


def test_doctor_repair_moves_a_corrupt_file_aside_and_never_deletes_it(store: Store) -> None:
    corrupt = b'{"api/x": {"state": "BROKEN"'
    Path(store.path("state/circuit-breakers.json")).write_bytes(corrupt)
    report = cli(["doctor", "--repair", "--json"], root=store.root, env={"LOKI_NOW": "2026-01-25T10:00:00Z"})
    assert report.code == 0, report.stderr
    moved = report.json()["moved_aside"]
    assert moved == [{"file": "state/circuit-breakers.json",
                      "moved_to": "state/circuit-breakers.json.corrupt.2026-01-25T100000Z"}]
    assert Path(store.path(moved[0]["moved_to"])).read_bytes() == corrupt
    assert cli(["validate"], root=store.root).code == 0


def test_example_tree_validates_and_shows_every_part() -> None:
    example = REPO / ".loki.example"
    before = snapshot_bytes(example)
    result = loki_proc(["validate", "--root", str(example)])  # the spelling the README uses
    assert result.code == 0, result.stdout + result.stderr
    # At the example's own time: its OPEN breaker is still cooling down.
    report = cli(["status", "--json"], root=example, env={"LOKI_NOW": "2025-01-20T10:36:00Z"}).json()
    assert all(count > 0 for count in report["queue"].values()), report["queue"]
    assert report["breakers"] == {"CLOSED": 1, "OPEN": 1, "HALF_OPEN": 1}
    assert report["signals_waiting"] > 0 and report["escalations"] == {"open": 1, "total": 1}
    dead = Store(example).read(layout.DEADLETTER)["tasks"][0]
    assert len(dead["attempts"]) == dead["failure_count"] == 5
    assert snapshot_bytes(example) == before


def test_root_option_is_accepted_after_the_command(store: Store) -> None:
    assert cli(["status", "--json", "--root", str(store.root)]).json()["root"] == str(store.root)
    assert cli(["status", f"--root={store.root}", "--json"]).json()["root"] == str(store.root)


def test_version_and_module_entry_point() -> None:
    result = loki_proc(["--version"])
    assert result.code == 0 and result.stdout.startswith("loki ")


def test_unknown_command_is_a_usage_error() -> None:
    result = loki_proc(["frobnicate"])
    assert result.code == 2


def test_status_counts_breakers_by_their_effective_state(store: Store) -> None:
    env = {"LOKI_NOW": "2026-01-25T10:00:00Z"}
    for _ in range(3):
        cli(["breaker", "failure", "api/x"], root=store.root, env=env)
    assert cli(["status", "--json"], root=store.root, env=env).json()["breakers"]["OPEN"] == 1
    later = cli(["status", "--json"], root=store.root, env={"LOKI_NOW": "2026-01-25T10:05:00Z"}).json()
    assert later["breakers"] == {"CLOSED": 0, "OPEN": 0, "HALF_OPEN": 1}


def test_doctor_repair_sets_aside_only_the_bad_lines_of_a_log(store: Store) -> None:
    log = Path(store.path("logs/events.jsonl"))
    log.write_text('{"n": 1}\n{"n": 2, "torn":\n{"n": 3}\n')
    archive = Path(store.path("archive/completed-2026-01.jsonl"))
    archive.write_text(json.dumps(task("a", status="completed")) + "\n" + '{"id": "b"}\n')
    report = cli(["doctor", "--repair", "--json"], root=store.root, env={"LOKI_NOW": "2026-01-25T10:00:00Z"})
    assert report.code == 0, report.stdout + report.stderr
    moved = {m["file"]: m for m in report.json()["moved_aside"]}
    assert moved["logs/events.jsonl"]["lines"] == [2]
    assert [json.loads(line) for line in log.read_text().splitlines()] == [{"n": 1}, {"n": 3}]
    aside = Path(store.path(moved["logs/events.jsonl"]["moved_to"]))
    assert aside.read_text() == '{"n": 2, "torn":\n'  # nothing deleted
    assert [json.loads(line)["id"] for line in archive.read_text().splitlines()] == ["a"]
    assert moved["archive/completed-2026-01.jsonl"]["lines"] == [2]
    assert cli(["validate"], root=store.root).code == 0


def test_root_pointed_at_the_project_uses_its_dot_loki_and_a_stranger_is_refused(tmp_path: Path) -> None:
    cli(["init", "--path", str(tmp_path / "proj")])
    assert cli(["status", "--json"], root=tmp_path / "proj").json()["root"] == str(tmp_path / "proj" / ".loki")
    (tmp_path / "other").mkdir()
    result = cli(["queue", "add", "x"], root=tmp_path / "other")
    assert result.code == 1 and "is not a loki state directory" in result.stderr
    assert list((tmp_path / "other").iterdir()) == []  # nothing created in a stranger directory


def test_init_below_an_existing_tree_is_refused_unless_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cli(["init", "--path", str(tmp_path)])
    sub = tmp_path / "src"
    sub.mkdir()
    monkeypatch.chdir(sub)
    refused = cli(["init"])
    assert refused.code == 1 and "already exists above this directory" in refused.stderr
    assert not (sub / ".loki").exists()
    assert cli(["init", "--path", "."]).code == 0 and (sub / ".loki").is_dir()


def test_doctor_repair_sets_aside_only_the_invalid_tasks_of_a_queue_file(store: Store) -> None:
    good, bad = task("good"), task("bad", priority="urgent")
    Path(store.path("queue/pending.json")).write_text(json.dumps({"version": 1, "tasks": [good, bad]}))
    report = cli(["doctor", "--repair", "--json"], root=store.root, env={"LOKI_NOW": "2026-01-25T10:00:00Z"})
    assert report.code == 0, report.stdout + report.stderr
    (moved,) = report.json()["moved_aside"]
    assert moved["file"] == "queue/pending.json" and moved["records"] == 1
    assert [t["id"] for t in Store(store.root).read("queue/pending.json")["tasks"]] == ["good"]
    aside = json.loads(Path(store.path(moved["moved_to"])).read_text())
    assert [t["id"] for t in aside["tasks"]] == ["bad"]  # kept, not deleted


def test_init_in_a_subdirectory_of_a_repository_goes_to_its_top(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    deep = tmp_path / "src" / "pkg"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    result = cli(["init"])
    assert result.code == 0, result.stderr
    assert (tmp_path / ".loki" / "queue" / "pending.json").is_file() and not (deep / ".loki").exists()
    assert str(tmp_path / ".loki") in result.stdout and "top of the git repository" in result.stdout
    assert "--path ." in result.stdout  # and how to put it here instead
    document = cli(["init", "--json"]).json()
    assert {k: document[k] for k in ("root", "created", "location")} == {"root": str(tmp_path / ".loki"), "created": [],
                                                                        "location": "git_top"}
    # A worktree (.git is a file) has its own top.
    wt = tmp_path / "wt"
    (wt / "sub").mkdir(parents=True)
    (wt / ".git").write_text("gitdir: ../.git\n")
    monkeypatch.chdir(wt / "sub")
    assert cli(["init", "--path", str(wt / "sub"), "--json"]).json()["location"] == "path"
    assert (wt / "sub" / ".loki").is_dir() and not (wt / ".loki").exists()


def test_init_root_and_path_together_are_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for args in (["--root", str(tmp_path / "a"), "init", "--path", str(tmp_path / "b")],
                 ["init", "--path", str(tmp_path / "b"), "--root", str(tmp_path / "a")]):
        result = cli(args)
        assert result.code == 2 and "either --root" in result.stderr and "--path" in result.stderr, result
    assert list(tmp_path.iterdir()) == []
    # LOKI_ROOT is the environment's default: an explicit --path on the command line wins over it.
    chosen = cli(["init", "--path", str(tmp_path / "b"), "--json"], env={"LOKI_ROOT": str(tmp_path / "a")})
    assert chosen.code == 0 and chosen.json()["root"] == str(tmp_path / "b" / ".loki")
    assert not (tmp_path / "a").exists()


def test_init_path_at_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    result = cli(["init", "--path", str(tmp_path / "notes.txt")])
    assert result.code == 2 and "is not a directory" in result.stderr and "internal error" not in result.stderr
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / ".loki").write_text("not a tree")
    taken = cli(["init", "--path", str(tmp_path / "p")])
    assert taken.code == 1 and "exists and is not a directory" in taken.stderr, taken
    assert (tmp_path / "notes.txt").read_text() == "x" and (tmp_path / "p" / ".loki").read_text() == "not a tree"


def test_where_init_goes_is_decided_by_the_library(tmp_path: Path) -> None:
    """`loki init`'s rules hold for a Python caller too: no second tree below a first, no tree over a file."""
    from loki.errors import InvalidInput
    from loki.storage.paths import init_directory
    from loki.storage.tree import init_tree

    init_tree(str(tmp_path / ".loki"))
    sub = tmp_path / "src"
    sub.mkdir()
    with pytest.raises(InvalidInput, match="already exists above this directory"):
        init_directory(None, str(sub))
    assert init_directory(".", str(sub)) == (os.path.abspath("."), "path")  # named: the caller's choice
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidInput, match="exists and is not a directory") as refused:
        init_tree(str(tmp_path / "file"))
    assert refused.value.exit_code == 1 and (tmp_path / "file").read_text() == "x"


def test_init_says_what_to_do_next_and_offers_gitignore(tmp_path: Path) -> None:
    project = tmp_path / "repo"
    (project / ".git").mkdir(parents=True)
    (project / ".gitignore").write_text("node_modules/")  # no final newline: ours starts on a line of its own
    first = cli(["init", "--path", str(project)])
    lines = first.stdout.splitlines()
    assert lines[0].endswith("(24 new files and directories)") and len(lines[0]) < 200  # not 24 paths on a line
    assert "`loki init --gitignore` adds it" in first.stdout and "next:" in lines
    assert any(line.strip().startswith("loki queue add") for line in lines)
    assert (project / ".gitignore").read_text() == "node_modules/"  # only offered
    added = cli(["init", "--path", str(project), "--gitignore", "--json"]).json()
    assert added["gitignore"] == {"repository": True, "file": str(project / ".gitignore"), "ignored": True,
                                  "added": True}
    assert (project / ".gitignore").read_text().splitlines()[1:] == [
        "# loki's live state of the agents on this machine (loki init)", ".loki/"]
    again = cli(["init", "--path", str(project), "--gitignore"])
    assert "added" not in again.stdout and "not in" not in again.stdout and "next:" not in again.stdout
    assert (project / ".gitignore").read_text().count(".loki/") == 1
    outside = cli(["init", "--path", str(tmp_path / "plain")])
    assert "gitignore" not in outside.stdout  # no repository: nothing to offer
