"""``loki errors list|show|reset``: the strike state from the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from loki.storage.store import Store
from loki.strikes.strikes import Strikes
from tests.helpers import cli

CARGO = {"command": "cargo build"}
NOT_FOUND = "bash: line 1: cargo: command not found"


def seed(store: Store) -> tuple[str, str]:
    main = Strikes(store, branch="main")
    for _ in range(3):
        cargo = main.record_failure("Bash", CARGO, NOT_FOUND, session="s1")
    npm = main.record_failure("Bash", {"command": "npm test"}, "npm ERR! missing script: test")
    Strikes(store, branch="feature/x").record_failure("Read", {"file_path": "/a.rs"}, "File does not exist.")
    return cargo.key, npm.key


def test_list(store: Store, root: Path) -> None:
    cargo, npm = seed(store)
    result = cli(["errors", "list", "--branch", "main", "--json"], root=root)
    assert result.code == 0, result.stderr
    report = result.json()
    assert report["branch"] == "main" and report["tiers"]["stop_at"] == 3
    assert [(e["key"], e["strike_count"], e["tier"]) for e in report["strikes"]] == [(cargo, 3, "stop"),
                                                                                     (npm, 1, "record")]
    everywhere = cli(["errors", "list", "--all-branches", "--json"], root=root).json()
    assert [(b["branch"], len(b["strikes"])) for b in everywhere["branches"]] == [("feature/x", 1), ("main", 2)]
    people = cli(["errors", "list", "--branch", "main"], root=root)
    assert "Bash `cargo build`" in people.stdout and "2 failing calls on branch main" in people.stderr


def test_list_defaults_to_the_current_branch(store: Store, root: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    seed(store)
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/feature/x\n")
    monkeypatch.chdir(tmp_path)
    report = cli(["errors", "list", "--json"], root=root).json()
    assert report["branch"] == "feature/x" and len(report["strikes"]) == 1


def test_show(store: Store, root: Path) -> None:
    cargo, _ = seed(store)
    one = cli(["errors", "show", cargo.split(":")[1][:8], "--branch", "main", "--json"], root=root).json()
    assert one["key"] == cargo and one["tier"] == "stop" and len(one["attempts"]) == 3
    assert one["entry"]["escalation"].endswith(f"strike-{cargo.split(':')[1]}.md")
    whole = cli(["errors", "show", "--branch", "main", "--json"], root=root).json()
    assert whole["branch"] == "main" and len(whole["attempts"]) == 4 and whole["strike_count"] == 3
    people = cli(["errors", "show", cargo, "--branch", "main"], root=root)
    assert "3 strikes, tier stop" in people.stdout and "escalations/" in people.stdout
    missing = cli(["errors", "show", "Bash:0000", "--branch", "main"], root=root)
    assert missing.code == 1 and "no strike 'Bash:0000' on branch main" in missing.stderr


def test_reset(store: Store, root: Path) -> None:
    cargo, npm = seed(store)
    usage = cli(["errors", "reset", "--branch", "main"], root=root)
    assert usage.code == 2 and "--all" in usage.stderr
    one = cli(["errors", "reset", cargo, "--branch", "main", "--json"], root=root).json()
    assert one == {"branch": "main", "reset": [{"key": cargo, "strike_count": 3}]}
    rest = cli(["errors", "reset", "--all", "--branch", "main"], root=root)
    assert f"reset {npm} (1 strike: Bash `npm test`) on branch main" in rest.stdout
    assert Strikes(store, branch="main").active() == []
    assert len(Strikes(store, branch="feature/x").active()) == 1
    assert "nothing to reset" in cli(["errors", "reset", "--all", "--branch", "main"], root=root).stdout


def test_every_errors_command_has_help() -> None:
    for command in ("list", "show", "reset"):
        result = cli(["errors", command, "--help"])
        assert result.code == 0 and "--branch" in result.stdout
