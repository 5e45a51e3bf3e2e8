"""``loki breaker ...`` through the CLI: the typer commands in-process (``cli``), the fast lane of
``loki breaker check`` as a real process (``loki_proc``), and the two compared byte for byte.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loki.breakers.breakers import RECOVERY_LOG
from loki.cli.fast import parse_breaker_check
from loki.storage import layout
from loki.storage.store import Store
from tests.helpers import Result, cli, loki_proc, snapshot_bytes

NOW = "2026-01-25T10:00:00Z"
ENV = {"LOKI_NOW": NOW}
OPEN = {"state": "OPEN", "failure_count": 3, "success_count": 0, "last_failure_time": NOW,
        "last_state_change": NOW, "cooldown_until": "2026-01-25T10:05:00Z", "failure_window_start": NOW}
COOLED = {**OPEN, "cooldown_until": "2026-01-25T09:59:00Z", "last_state_change": "2026-01-25T09:54:00Z"}
PROBING = {"state": "HALF_OPEN", "failure_count": 0, "success_count": 1, "last_failure_time": NOW,
           "last_state_change": NOW, "probe_until": "2026-01-25T10:00:07Z"}


def put(root: Path, doc: dict[str, Any]) -> None:
    (root / layout.BREAKERS).write_text(json.dumps(doc, indent=2) + "\n")


def breaker(root: Path, name: str = "api/claude") -> dict[str, Any]:
    return Store(root).read(layout.BREAKERS)[name]  # type: ignore[no-any-return]


def run(args: list[str], root: Path, **env: str) -> Result:
    return cli(args, root=root, env={**ENV, **env})


# -- check: the typer command and the fast lane agree --------------------------------------------

CHECK_CASES: list[tuple[str, dict[str, Any] | bytes | None, list[str], int]] = [
    ("never used", {}, ["api/claude"], 0),
    ("never used, json", {}, ["api/claude", "--json"], 0),
    ("json before the name", {}, ["--json", "api/claude"], 0),
    ("open", {"api/claude": OPEN}, ["api/claude"], 75),
    ("open, json", {"api/claude": OPEN}, ["api/claude", "--json"], 75),
    ("cooldown over: claims the probe", {"api/claude": COOLED}, ["api/claude"], 0),
    ("cooldown over, json", {"api/claude": COOLED}, ["api/claude", "--json"], 0),
    ("probe slot taken", {"api/claude": PROBING}, ["api/claude"], 75),
    ("probe slot taken, json", {"api/claude": PROBING}, ["api/claude", "--json"], 75),
    ("control character in the name", {}, ["api\x01claude"], 2),
    ("empty name", {}, [""], 2),
    ("corrupt file", b'{"api/claude": ', ["api/claude"], 1),
    ("corrupt file, json", b'{"api/claude": ', ["api/claude", "--json"], 1),
    ("schema-invalid file", {"api/claude": {**OPEN, "failure_count": -1}}, ["api/claude"], 1),
]


@pytest.mark.parametrize("case, content, args, code", CHECK_CASES, ids=[c[0] for c in CHECK_CASES])
def test_check_fast_lane_and_typer_command_give_identical_results(
    tmp_path: Path, root: Path, case: str, content: dict[str, Any] | bytes | None, args: list[str], code: int,
) -> None:
    if isinstance(content, bytes):
        (root / layout.BREAKERS).write_bytes(content)
    elif content is not None:
        put(root, content)
    twin = tmp_path / "twin" / ".loki"
    shutil.copytree(root, twin)
    typer_result = cli(["breaker", "check", *args], root=root, env=ENV)
    fast_result = loki_proc(["breaker", "check", *args], root=twin, env=ENV)
    assert typer_result.code == code, typer_result.stderr
    assert (fast_result.code, fast_result.stdout, fast_result.stderr) == (
        typer_result.code, typer_result.stdout, typer_result.stderr)
    assert snapshot_bytes(twin) == snapshot_bytes(root)  # and they leave the same state behind


def test_check_output_for_people_and_for_agents(root: Path) -> None:
    put(root, {"api/claude": OPEN, "api/codex": COOLED})
    go = loki_proc(["breaker", "check", "api/new"], root=root, env=ENV)
    assert (go.code, go.stdout, go.stderr) == (0, "go: api/new is CLOSED\n", "")
    wait = loki_proc(["breaker", "check", "api/claude"], root=root, env=ENV)
    assert (wait.code, wait.stdout) == (75, "")
    assert wait.stderr == "circuit api/claude is OPEN; retry in 300s (at 2026-01-25T10:05:00Z)\n"
    wait_json = loki_proc(["breaker", "check", "api/claude", "--json"], root=root, env=ENV)
    assert wait_json.json() == {"name": "api/claude", "allowed": False, "state": "OPEN", "probe": False,
                                "retry_after": 300, "retry_at": "2026-01-25T10:05:00Z", "probe_until": None,
                                "cooldown_until": "2026-01-25T10:05:00Z", "now": NOW}
    assert json.loads(wait_json.stderr)["retry_after"] == 300
    probe = loki_proc(["breaker", "check", "api/codex", "--json"], root=root, env=ENV)
    assert probe.code == 0 and probe.json()["probe"] is True
    assert probe.json()["probe_until"] == "2026-01-25T10:00:10Z"
    assert breaker(root, "api/codex")["state"] == "HALF_OPEN"
    assert (root / RECOVERY_LOG).read_text() == (
        "2026-01-25T09:59:00Z Circuit half-open: api/codex (cooldown over; probing one call at a time)\n")


def test_check_accepts_root_anywhere_and_the_environment(root: Path) -> None:
    put(root, {"api/claude": OPEN})
    after = loki_proc(["breaker", "check", "api/claude", "--root", str(root)], env=ENV)
    equals = loki_proc(["breaker", "check", f"--root={root}", "api/claude"], env=ENV)
    from_env = loki_proc(["breaker", "check", "api/claude"], env={**ENV, "LOKI_ROOT": str(root)})
    assert after.code == equals.code == from_env.code == 75


def test_check_without_a_state_directory_says_so(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    fast = loki_proc(["breaker", "check", "api/claude"], root=missing, env=ENV)
    slow = cli(["breaker", "check", "api/claude"], root=missing, env=ENV)
    assert fast.code == slow.code == 1
    assert fast.stderr == slow.stderr and "does not exist; run `loki init` first" in fast.stderr


@pytest.mark.parametrize("args, expected", [
    (["breaker", "check", "api/claude"], (None, "api/claude", False, False)),
    (["--root", "R", "breaker", "check", "x", "--json"], ("R", "x", True, False)),
    (["breaker", "check", "x", "--root=R"], ("R", "x", False, False)),
    (["breaker", "check", "--new", "x"], (None, "x", False, True)),
    (["breaker", "check", "--help"], None),
    (["breaker", "check", "-h"], None),
    (["breaker", "check"], None),
    (["breaker", "check", "a", "b"], None),
    (["breaker", "check", "--", "-x"], None),
    (["breaker", "status", "x"], None),
    (["--root"], None),
    (["run", "--breaker", "x", "--", "breaker", "check", "x"], None),
])
def test_the_fast_lane_takes_only_the_plain_shape(args: list[str], expected: Any) -> None:
    assert parse_breaker_check(args) == expected


def test_anything_else_falls_through_to_typer(root: Path) -> None:
    result = loki_proc(["breaker", "check", "--help"], root=root)
    assert result.code == 0 and "Usage" in result.stdout and "probe slot" in result.stdout
    dashed = loki_proc(["breaker", "check", "--", "-odd-name"], root=root, env=ENV)
    assert dashed.code == 0 and dashed.stdout == "go: -odd-name is CLOSED\n"


HEAVY = ("typer", "click", "rich", "jsonschema", "portalocker")


def _imported(root: Path, name: str) -> set[str]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "loki", "--root", str(root), "breaker",
                           "check", name], capture_output=True, text=True, env={**ENV, "PATH": ""})
    return {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines() if "|" in line}


def test_the_common_checks_import_nothing_heavy(root: Path) -> None:
    Store(root)  # an initialised tree with a never-used breaker
    put(root, {"api/open": OPEN, "api/cooled": COOLED})
    assert _imported(root, "api/closed").isdisjoint(HEAVY)
    assert _imported(root, "api/open").isdisjoint(HEAVY)
    # Claiming the probe needs the lock, and only then is portalocker loaded (the check can see it).
    assert "portalocker" in _imported(root, "api/cooled")


# -- status ----------------------------------------------------------------------------------------


def test_status_of_one_breaker(root: Path) -> None:
    put(root, {"api/claude": OPEN})
    result = run(["breaker", "status", "api/claude"], root)
    assert result.code == 0, result.stderr
    assert result.stdout.splitlines() == [
        "api/claude: OPEN",
        "  failures: 3/3 in the window since 2026-01-25T10:00:00Z (total 0)",
        "  successes: 0/3 consecutive while HALF_OPEN (total 0)",
        "  cooldown: 300s left (until 2026-01-25T10:05:00Z)",
        "  next probe: 2026-01-25T10:05:00Z",
        "  last failure: 2026-01-25T10:00:00Z",
        "  last state change: 2026-01-25T10:00:00Z",
        "  settings: open after 3 failures within 60s, cooldown 300s, one probe per 10s, close after 3 successes",
    ]
    data = run(["breaker", "status", "api/claude", "--json"], root).json()
    assert (data["state"], data["cooldown_remaining"], data["next_probe_at"]) == ("OPEN", 300, "2026-01-25T10:05:00Z")
    assert data["settings"]["cooldown"] == 300


def test_status_shows_the_effective_state(root: Path) -> None:
    put(root, {"api/claude": COOLED})
    data = run(["breaker", "status", "api/claude", "--json"], root).json()
    assert (data["state"], data["stored_state"], data["next_probe_at"]) == ("HALF_OPEN", "OPEN", NOW)
    assert run(["breaker", "status", "api/claude"], root).stdout.startswith(
        "api/claude: HALF_OPEN (the file still says OPEN; the next check or record writes it)\n")
    unknown = run(["breaker", "status", "api/never", "--json"], root).json()
    assert (unknown["state"], unknown["recorded"]) == ("CLOSED", False)


def test_status_of_every_breaker(root: Path) -> None:
    empty = run(["breaker", "status"], root)
    assert (empty.stdout, empty.stderr) == ("", "no breakers recorded yet (every name is CLOSED until its first "
                                                "failure)\n")
    long_name = "api/" + "very-long-dependency-name-" * 3
    put(root, {"api/claude": OPEN, "api/codex": PROBING, long_name: {**OPEN, "state": "CLOSED",
                                                                       "cooldown_until": None}})
    rows = [line.split("\t") for line in run(["breaker", "status"], root).stdout.splitlines()]  # piped: no header
    assert rows[0][:6] == ["api/claude", "OPEN", "3/3", "0/3", "300s", "2026-01-25T10:05:00Z"]
    assert rows[1][:6] == ["api/codex", "HALF_OPEN", "0/3", "1/3", "", "2026-01-25T10:00:07Z"]
    assert rows[2][0] == long_name  # never truncated
    drawn = cli(["breaker", "status"], root=root, env={"LOKI_NOW": NOW, "LOKI_FORCE_TTY": "120"}).stdout.splitlines()
    assert drawn[0].split() == ["name", "state", "failures", "cooldown", "left"]
    assert long_name in drawn[-1] and max(map(len, drawn)) <= 120  # names whole; 3 columns gave way
    data = run(["breaker", "status", "--json"], root).json()
    assert data["now"] == NOW and [b["name"] for b in data["breakers"]] == ["api/claude", "api/codex", long_name]


# -- recording -------------------------------------------------------------------------------------


def test_failure_and_success_through_the_cli(root: Path) -> None:
    first = run(["breaker", "failure", "api/claude", "--error", "HTTP 529 overloaded"], root)
    assert first.code == 0
    assert first.stdout == "recorded a failure for api/claude: now CLOSED (failures 1, successes 0)\n"
    run(["breaker", "failure", "api/claude"], root)
    third = run(["breaker", "failure", "api/claude", "--json"], root)
    assert third.code == 0
    data = third.json()
    assert data["breaker"]["state"] == "OPEN"
    assert [(t["from"], t["to"], t["event"]) for t in data["transitions"]] == [("CLOSED", "OPEN", "opened")]
    assert breaker(root)["cooldown_until"] == "2026-01-25T10:05:00Z"
    assert breaker(root)["last_error"] is None  # the third failure gave no --error
    success = run(["breaker", "success", "api/claude"], root)
    assert success.stdout == "recorded a success for api/claude: now OPEN (failures 3, successes 0)\n"
    assert breaker(root)["total_successes"] == 1


def test_a_recovery_through_the_cli(root: Path) -> None:
    put(root, {"api/claude": COOLED})
    for second in ("00", "10"):
        env = {"LOKI_NOW": f"2026-01-25T10:00:{second}Z"}
        assert cli(["breaker", "check", "api/claude"], root=root, env=env).code == 0
        assert cli(["breaker", "success", "api/claude"], root=root, env=env).code == 0
    env = {"LOKI_NOW": "2026-01-25T10:00:20Z"}
    assert cli(["breaker", "check", "api/claude"], root=root, env=env).code == 0
    last = cli(["breaker", "success", "api/claude"], root=root, env=env)
    assert last.stdout == ("2026-01-25T10:00:20Z Circuit recovered: api/claude\n"
                           "recorded a success for api/claude: now CLOSED (failures 0, successes 0)\n")
    assert breaker(root)["state"] == "CLOSED"
    assert (root / RECOVERY_LOG).read_text().splitlines()[-1] == "2026-01-25T10:00:20Z Circuit recovered: api/claude"
    capacity = cli(["breaker", "capacity", "api/claude", "--max", "4"], root=root, env=env)
    assert capacity.stdout == ("2 of 4 agents (50 %): CLOSED: recovering since 2026-01-25T10:00:20Z; ramping up; "
                               "next step at 2026-01-25T10:01:20Z\n")


def test_trip_and_reset_through_the_cli(root: Path) -> None:
    trip = run(["breaker", "trip", "api/claude", "--for", "90"], root)
    assert trip.code == 0
    assert trip.stdout == ("2026-01-25T10:00:00Z Circuit tripped manually: api/claude (for 90s; cooldown until "
                           "2026-01-25T10:01:30Z)\ntripped api/claude: now OPEN (failures 0, successes 0)\n")
    assert run(["breaker", "check", "api/claude"], root).code == 75
    reset = run(["breaker", "reset", "api/claude", "--json"], root)
    assert reset.code == 0 and reset.json()["breaker"]["state"] == "CLOSED"
    assert run(["breaker", "check", "api/claude"], root).code == 0


@pytest.mark.parametrize("args, code, message", [
    (["breaker", "reset", "api/nope"], 1, "error: no breaker named 'api/nope' (known: none)\n"),
    (["breaker", "trip", "api/claude", "--for", "-5"], 2, "error: invalid --for -5.0: it must be a number of "
                                                          "seconds between 0 and 1000000000\n"),
    (["breaker", "capacity", "api/claude", "--max", "0"], 2, "error: invalid --max 0: it must be a whole number of "
                                                             "agents, at least 1\n"),
    (["breaker", "failure", "x" * 201], 2, "error: invalid breaker name 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'...: "
                                           "it is 201 characters long; the limit is 200\n"),
])
def test_bad_input_is_a_clear_message_and_changes_nothing(root: Path, args: list[str], code: int,
                                                          message: str) -> None:
    # 2 when the argument breaks its own rules, 1 when only the state says no.
    before = snapshot_bytes(root)
    result = run(args, root)
    assert (result.code, result.stdout, result.stderr) == (code, "", message)
    assert snapshot_bytes(root) == before


def test_every_breaker_command_has_help_text(root: Path) -> None:
    listing = cli(["breaker", "--help"])
    assert listing.code == 0
    for command in ("status", "check", "success", "failure", "reset", "trip", "capacity"):
        assert command in listing.stdout
        helped = cli(["breaker", command, "--help"])
        assert helped.code == 0 and "--json" in helped.stdout, command


# -- a broken state file: every command refuses, nothing is written ------------------------------

BROKEN = {
    "bad JSON": (b'{"api/claude": {"state": "OPEN",\n', "", "invalid JSON"),
    "schema-invalid": (json.dumps({"api/claude": {**OPEN, "state": "SHUT"}}).encode(), "/api~1claude/state",
                       '"SHUT" is not one of ["CLOSED", "OPEN", "HALF_OPEN"]'),
}
COMMANDS = {
    "status": (cli, ["breaker", "status"]),
    "status NAME": (cli, ["breaker", "status", "api/claude", "--json"]),
    "check (typer)": (cli, ["breaker", "check", "api/claude"]),
    "check (fast lane)": (loki_proc, ["breaker", "check", "api/claude"]),
    "check --json (fast lane)": (loki_proc, ["breaker", "check", "api/claude", "--json"]),
    "success": (cli, ["breaker", "success", "api/claude"]),
    "failure": (cli, ["breaker", "failure", "api/claude", "--error", "boom"]),
    "reset": (cli, ["breaker", "reset", "api/claude"]),
    "trip": (cli, ["breaker", "trip", "api/claude", "--for", "60"]),
    "capacity": (cli, ["breaker", "capacity", "api/claude", "--max", "4"]),
    "run --breaker": (cli, ["run", "--breaker", "api/claude", "--retries", "0", "--", sys.executable, "-c",
                            "open('ran', 'w')"]),
}


@pytest.mark.parametrize("broken", sorted(BROKEN))
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_broken_breakers_file_fails_every_command_and_stays_as_it_is(
    tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch, broken: str, command: str,
) -> None:
    content, pointer, reason = BROKEN[broken]
    (root / layout.BREAKERS).write_bytes(content)
    monkeypatch.chdir(tmp_path)
    before = snapshot_bytes(root)
    runner, args = COMMANDS[command]
    result = runner(args, root=root, env=ENV)
    assert result.code == 1, (result.stdout, result.stderr)
    if "--json" in args:
        error = json.loads(result.stderr)
        assert (error["file"], error["pointer"]) == ("state/circuit-breakers.json", pointer)
        assert reason in error["reason"]
    else:
        where = "state/circuit-breakers.json" + (f" at {pointer}" if pointer else "")
        assert result.stderr.startswith(f"error: {where}: {reason}"), result.stderr
    assert (root / layout.BREAKERS).read_bytes() == content
    assert snapshot_bytes(root) == before
    assert not (tmp_path / "ran").exists()


def test_a_misspelt_breaker_gets_a_did_you_mean(root: Path) -> None:
    put(root, {"api/claude": OPEN})
    status = cli(["breaker", "status", "api/cluade"], root=root)
    assert status.stdout.startswith("api/cluade: CLOSED (never recorded; did you mean api/claude?)\n")
    assert cli(["breaker", "status", "api/cluade", "--json"], root=root).json()["did_you_mean"] == "api/claude"
    # api/claude is not CLOSED: a typo of it is refused, never a go-ahead past it (tests/contract/test_breaker_names.py)
    for check in (loki_proc(["breaker", "check", "api/cluade"], root=root),  # the fast lane
                  cli(["breaker", "check", "api/cluade"], root=root)):  # typer
        assert check.code == 2 and check.stdout == "" and "did you mean api/claude?" in check.stderr
    put(root, {"api/claude": {**OPEN, "state": "CLOSED", "cooldown_until": None}})
    for check in (loki_proc(["breaker", "check", "api/cluade"], root=root),  # the fast lane
                  cli(["breaker", "check", "api/cluade"], root=root)):  # typer
        assert check.code == 0 and check.stdout == "go: api/cluade is CLOSED\n"
        assert check.stderr == ("note: no breaker 'api/cluade' was recorded before (did you mean api/claude?); "
                                "a new name starts CLOSED\n")
    unrelated = loki_proc(["breaker", "check", "db/postgres"], root=root)
    assert (unrelated.code, unrelated.stderr) == (0, "")
    assert cli(["breaker", "status", "api/claude", "--json"], root=root).json()["did_you_mean"] is None
