"""The exit-code rule for bad input (README, "Exit codes"): a value that breaks its option's or
argument's own rules is a usage error, exit 2, whatever command it goes to; what only the state or a
file's content can refute is exit 1. Nothing is written either way."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import cli, loki_proc, snapshot_bytes

USAGE = [
    ["approve", "t1", "--decision", "yes"],
    ["queue", "add", ""],
    ["queue", "add", "x", "--priority", "urgent"],
    ["queue", "add", "x", "--max-attempts", "0"],
    ["queue", "add", "x", "--id", "../x"],
    ["queue", "claim", "--agent", "a\x1b[2J"],
    ["queue", "claim", "--agent", "a", "--lease", "-1"],
    ["queue", "fail", "t1", "--agent", "a", "--error", "e", "--error-type", "flaky"],
    ["queue", "fail", "t1", "--agent", "a", "--error", ""],
    ["queue", "list", "--state", "done"],
    ["run", "--breaker", "x"],
    ["run"],
    ["run", "--retries", "-1", "--", "true"],
    ["breaker", "trip", "api", "--for", "-1"],
    ["breaker", "check", "a\x07b"],
    ["breaker", "capacity", "api", "--max", "0"],
    ["signal", "emit", "not a type"],
    ["signal", "emit", "DOCS_NEEDED", "--data", "[1]"],
    ["signal", "emit", "DOCS_NEEDED", "oops"],
    ["deadletter", "retry", "t1", "--fix-commit", "main"],
    ["deadletter", "abandon", "t1", "--reason", ""],
    ["escalate", "t1", "--trigger", ""],
    ["errors", "search", "***"],
    ["errors", "reset"],
    ["watch", "--once", "--observer", "magic"],
    ["usage", "--by", "colour"],
    ["budget", "set", "b", "--usd", "-5", "--per", "day"],
    ["budget", "set", "b", "--usd", "5", "--per", "day", "--scope", "planet:mars"],
    ["budget", "set", "b", "--tokens", "lots", "--per", "hour"],
    ["budget", "set", "b", "--usd", "5", "--tokens", "5M", "--per", "hour"],
    ["budget", "set", "b", "--usd", "5", "--per", "fortnight"],
    ["work", "--agent", "a", "--reserve", "-1", "--", "true"],
    ["usage", "--since", "last tuesday"],
]


@pytest.mark.parametrize("args", USAGE, ids=[" ".join(a)[:40] for a in USAGE])
def test_a_value_its_option_refuses_is_exit_2(root: Path, args: list[str]) -> None:
    cli(["queue", "add", "x", "--id", "t1"], root=root)
    before = snapshot_bytes(root)
    result = cli(args, root=root)
    assert result.code == 2, (result.code, result.stderr)
    assert result.stderr.startswith("error: ") and "internal error" not in result.stderr, result.stderr
    # (errors search may build its index, a cache of memory/errors.jsonl, before reading the query)
    after = {k: v for k, v in snapshot_bytes(root).items() if not k.startswith("memory/errors.db")}
    assert after == before
    as_json = cli([*args, "--json"], root=root) if args[0] != "run" else None
    if as_json is not None and as_json.stderr.startswith("{"):
        assert '"exit_code": 2' in as_json.stderr and '"error": "usage"' in as_json.stderr


@pytest.mark.parametrize("args", [["queue", "claim", "--agent", "a\x1b[2J"], ["breaker", "check", "a\x07b"]])
def test_the_fast_lanes_say_2_as_well(root: Path, args: list[str]) -> None:
    result = loki_proc(args, root=root)
    assert result.code == 2 and "names may not contain control characters" in result.stderr, result


def test_what_only_the_state_refutes_stays_exit_1(root: Path, tmp_path: Path) -> None:
    assert cli(["queue", "add", "x", "--depends-on", "ghost"], root=root).code == 1
    assert cli(["deadletter", "show", "nope"], root=root).code == 1
    batch = tmp_path / "batch.json"
    batch.write_text('[{"title": "ok"}, {"title": "", "priority": "urgent"}]')
    from_file = cli(["queue", "add", "--from-file", str(batch)], root=root)
    assert from_file.code == 1 and str(batch) in from_file.stderr, from_file  # a bad file, not a bad option


def test_choices_are_case_blind_on_the_command_line(root: Path) -> None:
    added = cli(["queue", "add", "x", "--id", "t1", "-p", "HIGH", "--json"], root=root)
    assert added.code == 0, added.stderr
    assert cli(["queue", "show", "t1", "--json"], root=root).json()["task"]["priority"] == "high"
    cli(["queue", "claim", "--agent", "a"], root=root)
    failed = cli(["queue", "fail", "t1", "--agent", "a", "--error", "e", "--error-type", "Timeout", "--approach",
                  "x"], root=root)
    assert failed.code == 0, failed.stderr
