"""``loki signal ...`` and ``loki watch`` through the CLI; the fast lane of ``signal emit`` against typer."""

from __future__ import annotations

import contextlib
import io
import json
import os
from datetime import timedelta
from pathlib import Path

import pytest

from loki.cli.fast import parse_signal_emit, signal_emit
from loki.clock import format_ts, parse_ts
from loki.storage.store import Store
from loki.watch.consumer import ConsumerLock
from tests.helpers import Result, cli, loki_proc, snapshot_bytes

ENV = {"LOKI_NOW": "2026-01-25T10:00:00Z"}


def fast(args: list[str], root: Path) -> Result:
    """The fast lane in this process, as loki.entry calls it."""
    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    os.environ.update(ENV)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = signal_emit(["--root", str(root), *args])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert code is not None, "the fast lane declined"
    return Result(code, out.getvalue(), err.getvalue())


EMIT_CASES = [
    ["signal", "emit", "DOCS_NEEDED"],
    ["signal", "emit", "DOCS_NEEDED", "--json"],
    ["signal", "emit", "TESTS_PASSED", "--subject", "auth", "--task", "t1", "summary=42 passed", "passed:=42"],
    ["signal", "emit", "HUMAN_REVIEW_NEEDED", "reason=security_decision", "--severity=critical", "--agent", "a1",
     "--data", '{"blocking": true}', "--json"],
    ["signal", "emit", "DRIFT_DETECTED", "--task", "t1", "--severity", "low", "detected_drift=x"],
    ["signal", "emit", "HUMAN_REVIEW_NEEDED"],                        # schema violation: exit 1
    ["signal", "emit", "HUMAN_REVIEW_NEEDED", "--json"],
    ["signal", "emit", "hello"],                                      # bad type
    ["signal", "emit", "DOCS_NEEDED", "oops"],                        # bad field
    ["signal", "emit", "DOCS_NEEDED", "--data", "[1]"],
]


@pytest.mark.parametrize("args", EMIT_CASES, ids=[" ".join(a[2:]) for a in EMIT_CASES])
def test_the_fast_lane_and_typer_emit_the_same(tmp_path: Path, args: list[str]) -> None:
    roots = []
    for name in ("typer", "fast"):
        root = tmp_path / name / ".loki"
        assert cli(["init", "--path", str(tmp_path / name)]).code == 0
        roots.append(root)
    by_typer = cli(args, root=roots[0], env=ENV)
    by_fast = fast(args, roots[1])
    assert (by_fast.code, by_fast.stdout, by_fast.stderr) == (by_typer.code, by_typer.stdout, by_typer.stderr)
    assert sorted(os.listdir(roots[0] / "signals")) == sorted(os.listdir(roots[1] / "signals"))
    if by_typer.code == 0 and "--json" in args:
        assert by_typer.json()["signal"]["timestamp"] == ENV["LOKI_NOW"]


def test_emit_errors_have_exit_codes_and_name_the_problem(root: Path) -> None:
    # Fields that break the type's schema are a mistake of the command line alone: a usage error (exit 2).
    before = snapshot_bytes(root)
    result = cli(["signal", "emit", "HUMAN_REVIEW_NEEDED"], root=root)
    assert result.code == 2 and "'reason' is a required property" in result.stderr
    result = cli(["signal", "emit", "HUMAN_APPROVED", "--task", "t1", "decision=maybe", "--json"], root=root)
    assert result.code == 2 and json.loads(result.stderr)["pointer"] == "/decision"
    assert snapshot_bytes(root) == before
    assert cli(["signal", "emit"], root=root).code == 2


@pytest.mark.parametrize("args", [
    ["signal", "emit", "--help"], ["signal", "emit", "X", "--"], ["signal", "list"], ["signal", "emit"],
    ["signal", "emit", "X", "--task"], ["signal", "emit", "X", "--bogus"], ["signal", "emit", "X", "--task", "a",
                                                                          "--task", "b"],
    ["signal", "emit", "X", "-a=bob"],
])
def test_the_fast_lane_leaves_anything_unusual_to_typer(args: list[str]) -> None:
    assert parse_signal_emit(args) is None


def test_the_fast_lane_parses_options_anywhere() -> None:
    parsed = parse_signal_emit(["--root", "/r", "signal", "emit", "--json", "TESTS_PASSED_a", "k=v", "--task=t1"])
    assert parsed == {"root": "/r", "json": True, "fields": ["k=v"], "type": "TESTS_PASSED_a", "task_id": "t1"}


def test_a_short_option_with_equals_means_what_click_says(root: Path) -> None:
    # click reads ``-a=bob`` as the agent '=bob'; the fast lane must not make it 'bob'.
    result = loki_proc(["signal", "emit", "DOCS_NEEDED", "-a=bob", "--json"], root=root, env=ENV)
    assert result.code == 0, result.stderr
    assert result.json()["signal"]["agent"] == "=bob"


def test_emit_as_a_real_process_goes_through_the_fast_lane(root: Path) -> None:
    result = loki_proc(["signal", "emit", "FEATURE_READY_auth", "--json"], root=root, env=ENV)
    assert result.code == 0, result.stderr
    assert result.json()["file"] == "signals/FEATURE_READY_auth"


def test_list_show_log_and_rules(root: Path) -> None:
    assert cli(["signal", "emit", "DOCS_NEEDED", "message=write it"], root=root).code == 0
    listing = cli(["signal", "list", "--json"], root=root).json()
    assert [s["name"] for s in listing["signals"]] == ["DOCS_NEEDED"]
    assert "1 waiting" in cli(["signal", "list"], root=root).stderr  # piped: rows on stdout, the count on stderr
    shown = cli(["signal", "show", "DOCS_NEEDED", "--json"], root=root).json()
    assert shown["place"] == "waiting" and shown["signal"]["message"] == "write it"
    assert cli(["watch", "--once"], root=root).code == 0
    shown = cli(["signal", "show", "DOCS_NEEDED", "--json"], root=root).json()
    assert shown["place"] == "consumed" and shown["outcomes"][0]["outcome"] == "logged"
    log = cli(["signal", "log", "--json"], root=root).json()
    assert [r["name"] for r in log["outcomes"]] == ["DOCS_NEEDED"]
    logged = cli(["signal", "log"], root=root).stdout.split("\t")  # piped: one tab-separated row
    assert logged[0].startswith("DOCS_NEEDED.") and logged[2] == "logged"
    rules = cli(["signal", "rules", "--json"], root=root).json()["rules"]
    assert {"signal": "TESTS_PASSED_x", "rule": "complete_task"}.items() <= rules[3].items()
    assert cli(["signal", "show", "NOPE"], root=root).code == 1


def test_watch_once_prints_one_line_per_event_and_a_summary(root: Path) -> None:
    cli(["queue", "add", "login", "--id", "t1"], root=root)
    cli(["queue", "claim", "--agent", "eng-1"], root=root)
    cli(["signal", "emit", "TESTS_PASSED_auth", "--task", "t1"], root=root)
    result = cli(["watch", "--once", "--no-tui"], root=root, env=ENV)
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("10:00:00 started: consuming signals in ")
    assert "TESTS_PASSED_auth applied: t1: in-progress -> completed (held by eng-1)" in lines[1]
    assert lines[-1] == "1 signal handled: 1 applied"


def test_watch_once_json_is_one_document(root: Path) -> None:
    cli(["signal", "emit", "DOCS_NEEDED"], root=root)
    result = cli(["watch", "--once", "--json"], root=root)
    doc = result.json()
    assert doc["consuming"] is True and doc["signals"] == 1 and doc["outcomes"] == {"logged": 1}


def test_watch_once_while_another_watcher_consumes_does_nothing(root: Path) -> None:
    cli(["signal", "emit", "DOCS_NEEDED"], root=root)
    lock = ConsumerLock(Store(root))
    assert lock.try_acquire()
    try:
        result = cli(["watch", "--once"], root=root)
        assert result.code == 3 and "another watcher is consuming" in result.stderr
        assert "display-only" in result.stdout
        status = cli(["status", "--json"], root=root).json()
        assert status["watcher"]["consuming"] is True and status["watcher"]["holder"]["pid"] == os.getpid()
        assert "watcher: consuming (pid" in cli(["status"], root=root).stdout
    finally:
        lock.release()
    assert os.listdir(root / "signals").count("DOCS_NEEDED") == 1
    assert cli(["status", "--json"], root=root).json()["watcher"]["consuming"] is False


def test_watch_refuses_an_unknown_observer(root: Path) -> None:
    result = cli(["watch", "--once", "--observer", "magic"], root=root)
    assert result.code == 2 and "--observer" in result.stderr


def test_watch_once_exits_1_when_a_signal_cannot_be_applied_now(root: Path) -> None:
    from loki.storage.locks import FileLock

    cli(["queue", "add", "t", "--id", "t1"], root=root)
    cli(["signal", "emit", "HUMAN_REVIEW_NEEDED", "reason=r", "--task", "t1"], root=root)
    with FileLock(str(root / "queue" / ".lock"), timeout=1):
        result = cli(["watch", "--once"], root=root, env={"LOKI_LOCK_TIMEOUT": "0.05"})
    assert result.code == 1 and "timed out" in result.stderr and "kept in signals/.processing/" in result.stderr
    assert len(os.listdir(root / "signals" / ".processing")) == 1
    assert cli(["watch", "--once"], root=root).code == 0
    assert os.listdir(root / "signals" / ".processing") == []
    assert cli(["queue", "show", "t1", "--json"], root=root).json()["state"] == "blocked"


def _at(seconds: int) -> dict[str, str]:
    """LOKI_NOW ``seconds`` after ENV's."""
    return {"LOKI_NOW": format_ts(parse_ts(ENV["LOKI_NOW"]) + timedelta(seconds=seconds))}


def _half_open_lines(root: Path) -> list[str]:
    log = root / "logs" / "circuit-recovery.log"
    return [line for line in log.read_text().splitlines() if "half-open" in line] if log.exists() else []


def _tick_events(root: Path, action: str) -> list[dict[str, object]]:
    path = root / "logs" / "events.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [e for e in map(json.loads, lines) if e["action"] == action]


def test_a_cooldown_ending_is_logged_once_across_watch_once_runs_and_checks(root: Path) -> None:
    assert cli(["breaker", "trip", "api/claude"], root=root, env=ENV).code == 0
    first = cli(["watch", "--once", "--no-tui"], root=root, env=_at(300))
    assert first.code == 0, first.stderr
    assert "tick breaker_half_open: api/claude: cooldown over" in first.stdout
    # Saved by the tick, under the breakers lock: HALF_OPEN is now the stored state.
    stored = cli(["breaker", "status", "api/claude", "--json"], root=root, env=_at(301)).json()
    assert stored["stored_state"] == "HALF_OPEN"
    for later in (305, 320):  # a new watcher (a new process) does not report it again
        again = cli(["watch", "--once", "--no-tui"], root=root, env=_at(later))
        assert again.code == 0 and "breaker_half_open" not in again.stdout
    assert cli(["breaker", "check", "api/claude"], root=root, env=_at(330)).code == 0
    assert len(_half_open_lines(root)) == 1
    assert _half_open_lines(root)[0].startswith("2026-01-25T10:05:00Z Circuit half-open: api/claude")
    assert len(_tick_events(root, "breaker_half_open")) == 1


def test_a_cooldown_ending_seen_first_by_a_check_is_not_logged_again_by_the_watcher(root: Path) -> None:
    assert cli(["breaker", "trip", "api/claude"], root=root, env=ENV).code == 0
    assert cli(["breaker", "check", "api/claude"], root=root, env=_at(310)).code == 0
    for later in (311, 400):
        result = cli(["watch", "--once", "--no-tui"], root=root, env=_at(later))
        assert result.code == 0 and "breaker_half_open" not in result.stdout
    assert len(_half_open_lines(root)) == 1
    assert _tick_events(root, "breaker_half_open") == []


def test_an_escalations_own_signal_is_not_reported_as_skipped(root: Path) -> None:
    assert cli(["queue", "add", "deploy", "--id", "t1"], root=root, env=ENV).code == 0
    assert cli(["escalate", "t1", "--trigger", "security_decision"], root=root, env=ENV).code == 0
    result = cli(["watch", "--once", "--no-tui"], root=root, env=ENV)
    assert result.code == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if "HUMAN_REVIEW_NEEDED" in line)
    assert "skipped" not in line
    assert line.startswith("10:00:00 HUMAN_REVIEW_NEEDED already_applied: t1 already waits for a human until "
                           "2026-01-26T10:00:00Z (security_decision, escalations/20260125T100000Z-t1.md)")
    assert result.stdout.splitlines()[-1] == "1 signal handled: 1 already_applied"


# -- what an operator needs to emit a signal right the first time --------------------------------------------


def test_signal_fields_lists_each_types_fields_and_how_to_give_them(root: Path) -> None:
    drift = cli(["signal", "fields", "DRIFT_DETECTED", "--json"], root=root).json()
    assert [f["name"] for f in drift["fields"] if f["required"]] == ["timestamp", "task_id", "severity",
                                                                      "detected_drift"]
    assert {f["name"]: f["option"] for f in drift["fields"]}["task_id"] == "--task"
    rows = [line.split("\t") for line in cli(["signal", "fields", "TESTS_PASSED_auth"], root=root).stdout.splitlines()]
    assert ["passed", "", "integer", "passed:=JSON"] in rows and ["summary", "", "text", "summary=TEXT"] in rows
    refused = cli(["signal", "emit", "DRIFT_DETECTED", "--task", "t1"], root=root)
    assert refused.code == 2 and "`loki signal fields DRIFT_DETECTED` lists the fields it takes" in refused.stderr
    assert cli(["signal", "fields", "not a type"], root=root).code == 2


@pytest.mark.parametrize("lane", ["fast", "typer"])
def test_a_signal_about_a_task_that_does_not_exist_is_refused(root: Path, lane: str) -> None:
    cli(["queue", "add", "real", "--id", "t1"], root=root)
    before = snapshot_bytes(root)
    args = ["signal", "emit", "TESTS_PASSED_auth", "--task", "nope"]
    done = fast(args, root) if lane == "fast" else cli(args, root=root)
    assert done.code == 1 and "no task 'nope'" in done.stderr and "nothing was emitted" in done.stderr
    assert snapshot_bytes(root) == before
    ok = fast([*args[:-1], "t1"], root) if lane == "fast" else cli([*args[:-1], "t1"], root=root)
    assert ok.code == 0, ok.stderr


def test_a_drift_report_says_where_it_went_in_words(root: Path) -> None:
    cli(["queue", "add", "real", "--id", "t1"], root=root)
    done = cli(["signal", "emit", "DRIFT_DETECTED", "--task", "t1", "--severity", "low", "detected_drift=x"], root=root)
    assert done.stdout == "appended to the drift log (signals/DRIFT_DETECTED); the watcher applies it\n"
