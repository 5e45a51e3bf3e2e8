"""The 3-strike protocol as a library (loki/strikes/strikes.py, loki/strikes/tiers.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from loki.clock import ManualClock
from loki.errors import InvalidInput, NotFound, StateFileError
from loki.storage import layout
from loki.storage.store import Store
from loki.strikes import strikes as strikes_module
from loki.strikes.strikes import Strikes
from loki.strikes.tiers import PRESETS, Tiers
from tests.helpers import snapshot_bytes, tree_problems


@pytest.fixture
def store(backend_store: Store) -> Store:
    """Every test here runs on the files and on the memory store (tests/conftest.py: backend)."""
    return backend_store


CARGO = {"command": "cargo build", "description": "Build"}
NOT_FOUND = "Exit code 127\n/bin/bash: line 1: cargo: command not found"


def escalation_files(root: Path) -> list[str]:
    return sorted(os.listdir(root / layout.ESCALATIONS_DIR))


def review_signals(root: Path) -> list[str]:
    return sorted(n for n in os.listdir(root / layout.SIGNALS_DIR) if n.startswith("HUMAN_REVIEW_NEEDED"))


def set_config(root: Path, strikes: dict[str, object]) -> None:
    (root / layout.CONFIG).write_text(json.dumps({"version": 1, "strikes": strikes}))


@pytest.mark.files("looks at or edits the files themselves")
def test_the_three_tiers(store: Store, root: Path) -> None:
    strikes = Strikes(store, branch="main")
    first = strikes.record_failure("Bash", CARGO, NOT_FOUND, session="s1")
    assert (first.strike_count, first.tier, first.guidance, first.escalation) == (1, "record", None, None)

    second = strikes.record_failure("Bash", CARGO, NOT_FOUND, session="s1")
    assert (second.strike_count, second.tier, second.escalation) == (2, "warn", None)
    assert second.guidance is not None
    assert "MUST use a different approach" in second.guidance
    assert "Check the command name" in second.guidance  # errorscan's recovery suggestion for missing_command
    assert "cargo: command not found" in second.guidance  # the previous error
    assert escalation_files(root) == [] and review_signals(root) == []

    third = strikes.record_failure("Bash", CARGO, NOT_FOUND, session="s1")
    assert (third.strike_count, third.tier) == (3, "stop")
    assert third.escalation is not None and third.escalation in escalation_files(root)
    assert third.guidance is not None and "escalated to a human" in third.guidance
    assert third.escalation in third.guidance
    assert review_signals(root) == ["HUMAN_REVIEW_NEEDED"]
    signal = json.loads((root / layout.SIGNALS_DIR / "HUMAN_REVIEW_NEEDED").read_text())
    assert signal["blocking"] is True and signal["escalation"] == third.escalation and signal["severity"] == "high"
    assert signal["strike_key"] == third.key and "task_id" not in signal  # no queue task is blocked
    text = (root / layout.ESCALATIONS_DIR / third.escalation).read_text()
    assert "Bash `cargo build` keeps failing on branch main" in text and "**Failure Count:** 3" in text
    assert f"loki errors reset {third.key}" in text
    assert tree_problems(root) == []


@pytest.mark.files("looks at or edits the files themselves")
def test_the_escalation_happens_once_per_streak(store: Store, root: Path) -> None:
    strikes = Strikes(store, branch="main")
    for _ in range(5):
        last = strikes.record_failure("Bash", CARGO, NOT_FOUND)
    assert last.strike_count == 5 and last.tier == "stop" and last.escalation is None
    assert len(escalation_files(root)) == 1 and len(review_signals(root)) == 1
    assert last.entry["escalation"] == escalation_files(root)[0]
    strikes.record_success("Bash", CARGO)  # a new streak may escalate again
    for _ in range(3):
        again = strikes.record_failure("Bash", CARGO, NOT_FOUND)
    assert again.escalation is not None
    assert len(escalation_files(root)) == 2 and len(review_signals(root)) == 2


def test_a_success_of_the_same_call_resets_it(store: Store) -> None:
    strikes = Strikes(store, branch="main")
    strikes.record_failure("Bash", CARGO, NOT_FOUND)
    strikes.record_failure("Bash", CARGO, NOT_FOUND)
    other = strikes.record_failure("Bash", {"command": "npm test"}, "Exit code 1\nnpm ERR! missing script: test")
    cleared = strikes.record_success("Bash", {"command": "cargo  build", "description": "retry"})
    assert cleared is not None and cleared["strike_count"] == 2
    assert strikes.lookup("Bash", CARGO) is None
    assert strikes.lookup("Bash", {"command": "npm test"})["strike_count"] == 1  # another call is untouched
    state = strikes.state()
    assert [a["status"] for a in state["attempts"]] == ["resolved", "resolved", "unresolved"]
    assert state["strike_count"] == 1 and state["last_error_hash"] == other.entry["last_error_hash"]
    assert strikes.record_success("Bash", CARGO) is None  # nothing left to clear: no write at all
    assert strikes.record_failure("Bash", CARGO, NOT_FOUND).strike_count == 1


def test_a_different_input_has_its_own_count(store: Store) -> None:
    strikes = Strikes(store, branch="main")
    strikes.record_failure("Bash", CARGO, NOT_FOUND)
    strikes.record_failure("Bash", CARGO, NOT_FOUND)
    other = strikes.record_failure("Bash", {"command": "cargo build --offline"}, NOT_FOUND)
    assert other.strike_count == 1 and other.tier == "record"
    same_input_other_tool = strikes.record_failure("mcp__shell__run", {"command": "cargo build"}, "failed")
    assert same_input_other_tool.strike_count == 1


@pytest.mark.files("looks at or edits the files themselves")
def test_two_sessions_on_one_branch_share_the_count(store: Store, root: Path, clock: ManualClock) -> None:
    one = Strikes(Store(root, clock=clock), branch="main")
    two = Strikes(Store(root, clock=clock), branch="main")
    one.record_failure("Bash", CARGO, NOT_FOUND, session="session-a")
    one.record_failure("Bash", CARGO, NOT_FOUND, session="session-a")
    third = two.record_failure("Bash", CARGO, NOT_FOUND, session="session-b")
    assert third.strike_count == 3 and third.escalation is not None
    assert third.entry["sessions"] == ["session-a", "session-b"]
    assert "from 2 session(s)" in (root / layout.ESCALATIONS_DIR / third.escalation).read_text()


@pytest.mark.files("looks at or edits the files themselves")
def test_branches_are_kept_apart(store: Store, root: Path) -> None:
    Strikes(store, branch="main").record_failure("Bash", CARGO, NOT_FOUND)
    Strikes(store, branch="feature/login").record_failure("Bash", CARGO, NOT_FOUND)
    feature = Strikes(store, branch="feature/login").record_failure("Bash", CARGO, NOT_FOUND)
    assert feature.strike_count == 2
    assert Strikes(store, branch="main").lookup("Bash", CARGO)["strike_count"] == 1
    assert sorted(os.listdir(root / layout.STRIKES_DIR)) == [
        "feature%2Flogin.json", "feature%2Flogin.json.lock", "main.json", "main.json.lock"]
    assert [(b["branch"], b["strike_count"]) for b in Strikes.branches(store)] == [("feature/login", 2), ("main", 1)]


def test_the_branch_comes_from_the_working_directory(store: Store, tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    (checkout / ".git" / "HEAD").write_text("ref: refs/heads/fix/parser\n")
    assert Strikes(store, cwd=str(checkout)).branch == "fix/parser"
    assert Strikes(store, cwd=str(tmp_path)).branch == "no-git"


@pytest.mark.files("looks at or edits the files themselves")
def test_the_file_holds_the_adr_content(store: Store, root: Path, clock: ManualClock) -> None:
    strikes = Strikes(store, branch="main")
    strikes.record_failure("Bash", CARGO, NOT_FOUND, session="s1")
    clock.advance(30)
    outcome = strikes.record_failure("Bash", CARGO, NOT_FOUND, session="s1")
    doc = json.loads((root / layout.STRIKES_DIR / "main.json").read_text())
    assert doc["branch"] == "main" and doc["strike_count"] == 2 and doc["version"] == 1
    attempt = doc["attempts"][-1]
    assert attempt == {"timestamp": "2026-01-25T10:00:30Z", "tool": "Bash", "input_hash": outcome.entry["input_hash"],
                       "error": "/bin/bash: line 1: cargo: command not found", "error_hash": attempt["error_hash"],
                       "error_class": "missing_command", "strike": 2, "status": "unresolved", "session": "s1"}
    assert doc["last_error_hash"] == attempt["error_hash"]
    entry = doc["keys"][outcome.key]
    assert entry["first_at"] == "2026-01-25T10:00:00Z" and entry["last_at"] == "2026-01-25T10:00:30Z"
    assert entry["call"] == "Bash `cargo build`" and entry["input_preview"] == '{"command":"cargo build"}'


def test_an_unknown_error_is_still_a_strike(store: Store) -> None:
    outcome = Strikes(store, branch="main").record_failure("Read", {"file_path": "/x.rs"}, "File does not exist.")
    assert outcome.entry["error_class"] == "tool_error" and outcome.entry["last_error"] == "File does not exist."
    assert outcome.entry["suggestion"] == strikes_module.GENERIC_SUGGESTION


def test_reset_by_key_hash_prefix_or_all(store: Store) -> None:
    strikes = Strikes(store, branch="main")
    cargo = strikes.record_failure("Bash", CARGO, NOT_FOUND)
    npm = strikes.record_failure("Bash", {"command": "npm test"}, "boom")
    with pytest.raises(InvalidInput):
        strikes.reset()
    with pytest.raises(NotFound):
        strikes.reset("Bash:ffffffffffffffff")
    assert [e["key"] for e in strikes.reset(cargo.entry["input_hash"][:6])] == [cargo.key]
    assert [a["status"] for a in strikes.state()["attempts"]] == ["reset", "unresolved"]
    assert [e["key"] for e in strikes.reset(all_keys=True)] == [npm.key]
    assert strikes.state()["keys"] == {} and strikes.state()["strike_count"] == 0


def test_an_ambiguous_prefix_is_refused(store: Store) -> None:
    strikes = Strikes(store, branch="main")
    strikes.record_failure("Bash", CARGO, NOT_FOUND)
    strikes.record_failure("Bash", {"command": "npm test"}, "boom")
    with pytest.raises(InvalidInput, match="matches 2 strikes"):
        strikes.find_key("Bash:")


@pytest.mark.files("looks at or edits the files themselves")
def test_the_soft_hard_preset_is_one_config_change(store: Store, root: Path) -> None:
    set_config(root, {"preset": "soft-hard"})
    strikes = Strikes(Store(root), branch="main")
    tiers = [strikes.record_failure("Bash", CARGO, NOT_FOUND).tier for _ in range(6)]
    assert tiers == ["record", "record", "warn", "warn", "stop", "stop"]
    assert escalation_files(root) == [] and review_signals(root) == []  # the pattern doc does not escalate
    assert strikes.tiers.stop_decision == "context"


def test_explicit_keys_override_the_preset(root: Path) -> None:
    set_config(root, {"preset": "soft-hard", "escalate": True, "stop_at": 4})
    tiers = Tiers.from_config(Store(root).config)
    assert tiers.to_json() == {"preset": "soft-hard", "warn_at": 3, "stop_at": 4, "stop_decision": "context",
                               "escalate": True}
    assert Tiers.from_config({}).to_json() == {"preset": "adr", **PRESETS["adr"]}
    # The hot path reads the config unvalidated: nonsense falls back instead of blocking anyone.
    assert Tiers.from_config({"strikes": {"warn_at": "2", "stop_at": 0, "preset": "x"}}).to_json()["stop_at"] == 3


def test_an_invalid_strike_setting_is_refused(root: Path) -> None:
    set_config(root, {"stop_decision": "block"})
    with pytest.raises(StateFileError, match="stop_decision"):
        Strikes(Store(root), branch="main").record_failure("Bash", CARGO, NOT_FOUND)


@pytest.mark.files("looks at or edits the files themselves")
def test_history_and_keys_are_bounded(store: Store, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    set_config(root, {"history": 5})
    monkeypatch.setattr(strikes_module, "MAX_KEYS", 3)
    strikes = Strikes(Store(root), branch="main")
    for n in range(8):
        strikes.record_failure("Bash", {"command": f"step {n}"}, "boom")
    state = strikes.state()
    assert len(state["attempts"]) == 5 and len(state["keys"]) == 3
    assert sorted(e["input_preview"] for e in state["keys"].values()) == [
        '{"command":"step 5"}', '{"command":"step 6"}', '{"command":"step 7"}']


@pytest.mark.files("looks at or edits the files themselves")
def test_a_corrupt_strike_file_is_never_overwritten(store: Store, root: Path) -> None:
    Strikes(store, branch="main").record_failure("Bash", CARGO, NOT_FOUND)
    path = root / layout.STRIKES_DIR / "main.json"
    path.write_text('{"version": 1, "branch": "main", "keys": []}')
    before = snapshot_bytes(root)
    with pytest.raises(StateFileError, match=r"state/errors/main\.json"):
        Strikes(Store(root), branch="main").record_failure("Bash", CARGO, NOT_FOUND)
    assert snapshot_bytes(root) == before


@pytest.mark.files("looks at or edits the files themselves")
def test_secrets_never_reach_the_disk(store: Store, root: Path) -> None:
    secrets = ["sk-proj-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm" * 3, "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
               "hunter2hunter2", "AKIAIOSFODNN7EXAMPLE"]
    command = (f"OPENAI_API_KEY={secrets[0]} GITHUB_TOKEN={secrets[1]} psql postgres://app:{secrets[2]}@db/shop "
               f"&& AWS_ACCESS_KEY_ID={secrets[3]} aws s3 ls")
    error = f"Exit code 1\nfatal: could not connect to postgres://app:{secrets[2]}@db/shop (token {secrets[1]})"
    strikes = Strikes(store, branch="main")
    for _ in range(3):
        strikes.record_failure("Bash", {"command": command}, error, session="s1")
    everything = b"".join(snapshot_bytes(root).values())
    assert b"REDACTED" in everything
    for secret in secrets:
        assert secret.encode() not in everything, secret


@pytest.mark.files("looks at or edits the files themselves")
def test_a_secret_across_the_message_cut_is_redacted_whole(store: Store, root: Path) -> None:
    token = "ghp_" + "Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8"
    error = "remote: " + "x" * 280 + " " + token + " rejected"  # the token straddles the 300-character cut
    Strikes(store, branch="main").record_failure("Bash", {"command": "git push"}, error)
    everything = b"".join(snapshot_bytes(root).values())
    assert token[:8].encode() not in everything


@pytest.mark.files("looks at or edits the files themselves")
def test_clearing_a_streak_resolves_its_escalation(store: Store, root: Path, clock: ManualClock) -> None:
    from loki.queue.escalations import list_escalations

    strikes = Strikes(store, branch="main")
    for _ in range(3):
        strikes.record_failure("Bash", CARGO, NOT_FOUND)
    assert len(list_escalations(store, open_only=True)) == 1
    strikes.record_success("Bash", CARGO)
    assert list_escalations(store, open_only=True) == []
    text = (root / layout.ESCALATIONS_DIR / escalation_files(root)[0]).read_text()
    assert text.rstrip().endswith(f"(key {strikes.key_for('Bash', CARGO)[0]}, branch main).")
    clock.advance(60)
    for _ in range(3):
        strikes.record_failure("Bash", CARGO, NOT_FOUND)
    assert len(list_escalations(store, open_only=True)) == 1  # a new streak, a new escalation
    strikes.reset(all_keys=True)
    assert list_escalations(store, open_only=True) == []
    assert "reset by hand" in (root / layout.ESCALATIONS_DIR / escalation_files(root)[1]).read_text()


# -- streaks ending for error memory (docs/memory.md) ----------------------------------------------------


def memory_streak(strikes: Strikes, ids: list[str], *, command: str = "cargo build", first_call: int = 1) -> None:
    for n, memory_id in enumerate(ids):
        strikes.record_failure("Bash", {"command": command}, NOT_FOUND, memory_id=memory_id,
                               call_number=first_call + n)


@pytest.mark.files("looks at or edits the files themselves")
def test_a_streak_remembers_its_prefix_memory_records_and_last_call(store: Store, root: Path) -> None:
    strikes = Strikes(store, branch="main")
    memory_streak(strikes, [f"e{n:016x}" for n in range(25)], command="cargo build --release", first_call=7)
    (entry,) = strikes.active()
    assert entry["prefix"] == "cargo build" and entry["last_call"] == 31
    assert entry["memory_ids"] == [f"e{n:016x}" for n in range(5, 25)]  # the latest 20
    assert tree_problems(root) == []


def test_the_same_call_succeeding_ends_its_streak_for_memory(store: Store) -> None:
    strikes = Strikes(store, branch="main")
    memory_streak(strikes, ["e1", "e2"], first_call=1)  # last failure: call 2
    ended: list[dict[str, object]] = []
    cleared = strikes.record_success("Bash", {"command": "cargo build"}, call_number=6, on_resolved=ended.extend)
    assert cleared is not None and strikes.active() == []
    (streak,) = ended
    assert (streak["memory_ids"], streak["calls_between"], streak["same_input"]) == (["e1", "e2"], 3, True)
    assert streak["key"] == cleared["key"]


def test_a_success_of_the_same_kind_ends_the_streak_once_and_keeps_the_strikes(store: Store) -> None:
    strikes = Strikes(store, branch="main")
    memory_streak(strikes, ["e1", "e2"], first_call=1)
    memory_streak(strikes, ["e3"], command="cargo test", first_call=3)
    ended: list[dict[str, object]] = []
    assert strikes.record_success("Bash", {"command": "cargo build --offline"}, call_number=4,
                                  on_resolved=ended.extend) is None
    (streak,) = ended  # cargo test is another kind of command
    assert (streak["memory_ids"], streak["calls_between"], streak["same_input"]) == (["e1", "e2"], 1, False)
    assert sorted(e["strike_count"] for e in strikes.active()) == [1, 2]  # only the same call clears strikes
    again: list[dict[str, object]] = []
    strikes.record_success("Bash", {"command": "cargo build --locked"}, call_number=5, on_resolved=again.extend)
    assert again == []  # resolved once
    strikes.record_success("Bash", {"command": "cargo build"}, call_number=6, on_resolved=again.extend)
    assert again == [] and [e["prefix"] for e in strikes.active()] == ["cargo test"]


def test_a_streak_without_memory_records_is_only_cleared(store: Store) -> None:
    strikes = Strikes(store, branch="main")
    strikes.record_failure("Bash", CARGO, NOT_FOUND)
    ended: list[dict[str, object]] = []
    assert strikes.record_success("Bash", CARGO, on_resolved=ended.extend) is not None
    assert ended == [] and strikes.active() == []


def test_the_4th_strike_does_not_say_all_3_times(store: Store) -> None:
    strikes = Strikes(store, branch="main")
    for _ in range(3):
        strikes.record_failure("Bash", CARGO, NOT_FOUND, session="s1")
    fourth = strikes.record_failure("Bash", CARGO, NOT_FOUND, session="s1")
    assert fourth.guidance is not None and "has failed 4 times in a row" in fourth.guidance
    assert "all 3 times" not in fourth.guidance
    assert "Last 3 errors (the same each time): " in fourth.guidance
    other = Strikes(store, branch="other")
    for n in range(4):
        changed = other.record_failure("Bash", CARGO, f"{NOT_FOUND} #{n}", session="s1")
    assert changed.guidance is not None and "Last 3 errors: (1) " in changed.guidance
