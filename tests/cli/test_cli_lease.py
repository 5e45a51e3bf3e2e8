"""``loki lease acquire|renew|release|list|break`` through the CLI: exit codes, one-line errors, nothing
written on bad input, --json documents."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loki.storage import layout
from loki.storage.store import Store
from tests.helpers import Result, cli, snapshot_bytes

ENV = {"LOKI_NOW": "2026-01-25T10:00:00Z"}


def run(root: Path, *args: str, now: str | None = None) -> Result:
    return cli(list(args), root=root, env={"LOKI_NOW": now} if now else ENV)


def test_acquire_conflict_release_and_list(root: Path) -> None:
    got = run(root, "lease", "acquire", "src/auth/**", "--agent", "alice", "--ttl", "15m", "--json")
    assert got.code == 0, got.stderr
    assert got.json()["lease_id"] == "L1" and got.json()["expires_at"] == "2026-01-25T10:15:00Z"
    refused = run(root, "lease", "acquire", "src/auth/login.py", "--agent", "bob")
    assert refused.code == 4
    assert refused.stderr == ("error: src/auth/login.py is leased: src/auth/** is held by alice "
                              "(exclusive lease L1, until 2026-01-25T10:15:00Z)\n")
    assert run(root, "lease", "acquire", "docs/*.md", "--agent", "bob", "--shared").code == 0
    listed = run(root, "lease", "list", "--json").json()
    assert [(x["lease_id"], x["agent"], x["exclusive"]) for x in listed["leases"]] == [
        ("L1", "alice", True), ("L2", "bob", False)]
    assert run(root, "lease", "list", "-q").stdout == "L1\nL2\n"
    assert run(root, "lease", "release", "L1", "--agent", "alice").code == 0
    assert run(root, "lease", "acquire", "src/auth/login.py", "--agent", "bob").code == 0


def test_a_retried_acquire_with_the_same_key_does_not_double_book(root: Path) -> None:
    first = run(root, "lease", "acquire", "src/**", "--agent", "alice", "--key", "k1", "--json").json()
    again = run(root, "lease", "acquire", "src/**", "--agent", "alice", "--key", "k1", "--json").json()
    assert (first["lease_id"], first["reused"], again["lease_id"], again["reused"]) == ("L1", False, "L1", True)
    assert len(run(root, "lease", "list", "--json").json()["leases"]) == 1


def test_break_is_kept_in_history_and_expiry_frees(root: Path) -> None:
    run(root, "lease", "acquire", "src/**", "--agent", "alice", "--ttl", "60")
    broken = run(root, "lease", "break", "L1", "--by", "ops", "--reason", "session died")
    assert broken.code == 0, broken.stderr
    run(root, "lease", "acquire", "docs/**", "--agent", "bob", "--ttl", "60")
    later = run(root, "lease", "list", "--json", now="2026-01-25T10:01:00Z").json()
    assert later["leases"] == []
    assert run(root, "lease", "acquire", "docs/a.md", "--agent", "carol", now="2026-01-25T10:01:00Z").code == 0
    history = run(root, "lease", "list", "--history", "--json").json()["history"]
    assert [(h["lease_id"], h["ended"], h["ended_by"], h["end_reason"]) for h in history] == [
        ("L1", "broken", "ops", "session died"), ("L2", "expired", None, None)]


def test_renew(root: Path) -> None:
    run(root, "lease", "acquire", "src/**", "--agent", "alice", "--ttl", "60")
    renewed = run(root, "lease", "renew", "L1", "--agent", "alice", "--json", now="2026-01-25T10:00:30Z")
    assert renewed.code == 0 and renewed.json()["expires_at"] == "2026-01-25T10:01:30Z"


@pytest.mark.parametrize(("args", "code", "says"), [
    (["acquire", "../x", "--agent", "bob"], 2, "error: lease pattern '../x': climbs out of the repository ('..')\n"),
    (["acquire", "/nowhere/x", "--agent", "bob"], 2, "is outside the repository"),
    (["acquire", "", "--agent", "bob"], 2, "error: lease pattern '': is empty\n"),
    (["acquire", "a\x01b", "--agent", "bob"], 2, "control character U+0001"),
    (["acquire", "src/x", "--agent", "bob", "--ttl", "0"], 2, "a lease must live at least one second"),
    (["acquire", "src/x", "--agent", "bob", "--ttl", "-1"], 2, "a lease must live at least one second"),
    (["acquire", "src/x", "--agent", "bob", "--ttl", "400d"], 2, "over a week is absurd"),
    (["acquire", "src/x", "--agent", "bob", "--task", "ghost"], 1, "no task 'ghost' waiting or in progress"),
    (["release", "L1", "--agent", "bob"], 1, "lease L1 is held by 'alice', not 'bob'"),
    (["renew", "L1", "--agent", "bob"], 1, "lease L1 is held by 'alice', not 'bob'"),
    (["release", "L7", "--agent", "alice"], 1, "no live lease 'L7'"),
    (["break", "L1", "--by", "ops", "--reason", ""], 2, "reason"),
])
def test_bad_input_exits_with_one_line_and_writes_nothing(root: Path, args: list[str], code: int, says: str) -> None:
    assert run(root, "lease", "acquire", "keep/**", "--agent", "alice").code == 0
    before = snapshot_bytes(root)
    result = run(root, "lease", *args)
    assert result.code == code, result.stderr
    assert says in result.stderr
    assert result.stderr.count("\n") == 1
    assert snapshot_bytes(root) == before


def test_validate_names_a_broken_lease_file(root: Path) -> None:
    run(root, "lease", "acquire", "src/**", "--agent", "alice")
    path = root / layout.LEASES
    doc = json.loads(path.read_text())
    doc["leases"][0]["exclusive"] = "yes"
    path.write_text(json.dumps(doc))
    result = run(root, "validate")
    assert result.code == 1
    assert "state/path-leases.json at /leases/0/exclusive" in result.stdout + result.stderr
    assert Store(root).exists(layout.LEASES)


def test_tasks_declare_paths_through_the_cli(root: Path) -> None:
    added = run(root, "queue", "add", "auth", "--id", "t1", "--paths", "src/auth/**", "--paths", "tests/auth", "--json")
    assert added.code == 0, added.stderr
    assert added.json()["task"]["paths"] == ["src/auth/**", "tests/auth"]
    assert run(root, "queue", "add", "login", "--id", "t2", "--paths", "src/auth/login.py").code == 0
    bad = run(root, "queue", "add", "bad", "--id", "t3", "--paths", "../etc")
    assert (bad.code, bad.stderr) == (2, "error: lease pattern '../etc': climbs out of the repository ('..')\n")
    assert run(root, "queue", "claim", "--agent", "alice", "-q").stdout == "t1\n"
    refused = run(root, "queue", "claim", "--agent", "bob", "--id", "t2")
    assert refused.code == 3
    assert refused.stderr == ("t2 is not ready: its paths are held: src/auth/login.py is leased: src/auth/** is held "
                              "by alice for task t1 (its claim, until 2026-01-25T11:00:00Z)\n")
    explained = run(root, "queue", "ready", "--explain", "--json").json()
    assert explained["not_ready"][0]["reasons"][0]["holder"] == "alice"
    listed = run(root, "lease", "list", "--json").json()["leases"]
    assert [(x["lease_id"], x["agent"], x["patterns"]) for x in listed] == [
        ("task:t1", "alice", ["src/auth/**", "tests/auth"])]
    acquire = run(root, "lease", "acquire", "tests/auth/test_login.py", "--agent", "bob")
    assert acquire.code == 4 and "held by alice for task t1 (its claim" in acquire.stderr
    edited = run(root, "queue", "edit", "t2", "--paths", "lib/**", "--json")
    assert edited.code == 0 and edited.json()["task"]["paths"] == ["lib/**"]
    assert run(root, "queue", "claim", "--agent", "bob", "-q").stdout == "t2\n"
    assert run(root, "queue", "edit", "t1", "--clear-paths", "--force", "--json").json()["task"]["paths"] == []


def test_edit_of_a_held_tasks_paths_meets_the_other_holders_through_the_cli(root: Path) -> None:
    assert run(root, "queue", "add", "auth", "--id", "t1", "--paths", "src/auth/**").code == 0
    assert run(root, "queue", "add", "docs", "--id", "t2", "--paths", "docs/**").code == 0
    assert run(root, "queue", "claim", "--agent", "alice", "--id", "t1", "-q").stdout == "t1\n"
    assert run(root, "queue", "claim", "--agent", "bob", "--id", "t2", "-q").stdout == "t2\n"
    before = snapshot_bytes(root)
    refused = run(root, "queue", "edit", "t2", "--by", "bob", "--paths", "src/auth/login.py")
    assert refused.code == 4
    assert refused.stderr == ("error: cannot give t2 these paths: src/auth/login.py is leased: src/auth/** is held by "
                              "alice for task t1 (its claim, until 2026-01-25T11:00:00Z); nothing changed\n")
    assert snapshot_bytes(root) == before
    assert run(root, "queue", "edit", "t2", "--by", "bob", "--paths", "lib/**").code == 0


def test_status_and_agents_show_the_leases(root: Path) -> None:
    run(root, "lease", "acquire", "src/**", "--agent", "alice")
    assert "path leases: 1 live, 0 tasks holding paths\n" in run(root, "status").stdout
    [row] = run(root, "agents", "--json").json()["agents"]
    assert (row["agent"], row["paths"]) == ("alice", ["src/**"])


def test_lease_ids_complete_from_the_tree(root: Path) -> None:
    from loki.cli.completer import _from_tree
    from loki.cli.completion import value_kind
    from loki.clock import ManualClock

    run(root, "lease", "acquire", "src/**", "docs/*.md", "--agent", "alice")
    for command in ("lease renew", "lease release", "lease break"):
        assert value_kind(command, "lease_id") == "lease"
    assert _from_tree(Store(root, clock=ManualClock(ENV["LOKI_NOW"])), "lease") == {"L1": "alice: src/** docs/*.md"}


def test_a_full_format_task_from_a_file_has_its_paths_normalised_or_refused(root: Path, tmp_path: Path) -> None:
    assert run(root, "queue", "add", "model", "--id", "t1").code == 0
    full = {k: v for k, v in run(root, "queue", "show", "t1", "--json").json()["task"].items() if k != "history"}
    batch = tmp_path / "batch.json"
    batch.write_text(json.dumps([{**full, "id": "t2", "paths": ["./src//auth/", "lib/./x.py"]}]))
    assert run(root, "queue", "add", "--from-file", str(batch)).code == 0
    assert run(root, "queue", "show", "t2", "--json").json()["task"]["paths"] == ["src/auth", "lib/x.py"]
    batch.write_text(json.dumps([{**full, "id": "t3", "paths": ["../x"]}]))
    before = snapshot_bytes(root)
    refused = run(root, "queue", "add", "--from-file", str(batch))
    assert refused.code == 1 and len(refused.stderr.splitlines()) == 1
    assert "batch.json at /0: lease pattern '../x': climbs out of the repository" in refused.stderr
    assert snapshot_bytes(root) == before
