"""``loki work`` and text it did not write: a task's fields (titles, descriptions, labels, payloads from an
import or another agent) and the command's result file and output are attacker-controlled (issue 23).

The commands are real processes (``sh``, ``bash``, ``python -c``); the CLI is run in this process.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from loki.errors import UsageError
from loki.work import placeholders
from loki.work.loop import WorkOptions
from tests.helpers import cli

PY = sys.executable

HOSTILE = {
    "title": "x; touch PWNED1 #",
    "description": "first line\ntouch PWNED3\n$(touch PWNED4) `touch PWNED5`",
    "labels": ["a;touch PWNED6", "$(touch PWNED7)"],
    "payload": {"k": "'; touch PWNED8; '", "q": "\"; touch PWNED9; \""},
}


def pwned(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("PWNED"))


def add_hostile(root: Path, task_id: str = "t1", title: str = HOSTILE["title"]) -> None:
    args = ["queue", "add", title, "--id", task_id, "--description", HOSTILE["description"],
            "--payload", json.dumps(HOSTILE["payload"])]
    for label in HOSTILE["labels"]:
        args += ["--label", label]
    added = cli(args, root=root)
    assert added.code == 0, added.stderr


# -- command injection through placeholders -------------------------------------------------------------


def test_every_placeholder_reaches_the_safe_form_as_data_never_as_code(root: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``sh -c '... "$1"' sh {title}``: each value is one positional argument, whatever it holds."""
    work_dir = tmp_path / "cwd"
    work_dir.mkdir()
    monkeypatch.chdir(work_dir)
    add_hostile(root, "t1")
    add_hostile(root, "t2", "$(touch PWNED2)")
    names = list(placeholders.PLACEHOLDERS)
    script = 'for v in "$@"; do printf "%s\\0" "$v"; done >> seen; echo "title=$2 $LOKI_TASK_TITLE"'
    result = cli(["work", "--agent", "a", "--", "sh", "-c", script, "sh", *("{" + n + "}" for n in names)],
                 root=root)
    assert result.code == 0, result.stderr
    assert pwned(work_dir) == []
    seen = (work_dir / "seen").read_bytes().split(b"\0")[:-1]
    assert len(seen) == 2 * len(names)
    first = dict(zip(names, (v.decode() for v in seen[:len(names)]), strict=True))
    assert first["title"] == HOSTILE["title"] and first["description"] == HOSTILE["description"]
    assert first["labels"] == ",".join(HOSTILE["labels"])
    assert json.loads(first["payload"]) == HOSTILE["payload"]
    assert seen[len(names) + 1] == b"$(touch PWNED2)"
    assert result.stdout == "title=x; touch PWNED1 # x; touch PWNED1 #\ntitle=$(touch PWNED2) $(touch PWNED2)\n"


SHELL_FORMS = [
    ["sh", "-c", "echo title={NAME}"],
    ["sh", "-c", "echo \"title={NAME}\""],
    ["/bin/sh", "-ec", "echo '{NAME}'"],
    ["bash", "-lc", "echo {NAME}"],
    ["bash", "-o", "pipefail", "-c", "echo {NAME} | cat"],
    ["bash", "--norc", "-c", "echo {NAME}"],
    ["dash", "-c", "echo {NAME}"],
    ["zsh", "-c", "echo {NAME}"],
    ["env", "A=1", "sh", "-c", "echo {NAME}"],
    ["sh", "-c", "{NAME}", "sh"],
    ["bash", "-C", "-c", "echo {NAME}"],
    ["busybox", "sh", "-c", "echo {NAME}"],
    ["fish", "--command=echo {NAME}"],
]


@pytest.mark.parametrize("name", list(placeholders.PLACEHOLDERS))
@pytest.mark.parametrize("form", SHELL_FORMS, ids=lambda form: " ".join(form))
def test_a_placeholder_in_a_shell_script_is_refused_pointing_at_the_safe_form(name: str, form: list[str]) -> None:
    command = [arg.replace("NAME", name) for arg in form]
    with pytest.raises(UsageError) as info:
        WorkOptions(agent="a", command=command)
    message = info.value.message
    assert info.value.exit_code == 2
    assert f"{{{name}}}" in message and "shell script" in message
    assert f"sh -c '... \"$1\"' sh {{{name}}}" in message
    assert "\n" not in message


@pytest.mark.parametrize("form", SHELL_FORMS[:4], ids=lambda form: " ".join(form))
def test_the_cli_refuses_a_shell_script_placeholder_with_exit_2_and_runs_nothing(
        root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    add_hostile(root)
    command = [arg.replace("NAME", "title") for arg in form]
    result = cli(["work", "--agent", "a", "--", *command], root=root)
    assert result.code == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "{title}" in result.stderr
    assert pwned(tmp_path) == []
    assert cli(["queue", "show", "t1", "--json"], root=root).json()["state"] == "pending"


@pytest.mark.parametrize("command", [
    ["sh", "-c", 'echo "$1"', "sh", "{title}"],  # a positional argument: data
    ["sh", "-c", "echo {{title}}"],  # escaped: a literal {title}
    ["sh", "script.sh", "{title}"],  # no -c: a script file, the value an argument
    ["bash", "-c", 'echo "$0"', "{title}"],
    [PY, "-c", "import sys; print(sys.argv[1])", "{title}"],
    ["shellcheck", "{title}"],  # not a shell
])
def test_placeholders_outside_a_shell_script_are_allowed(command: list[str]) -> None:
    WorkOptions(agent="a", command=command)


@pytest.mark.parametrize("program", ["{title}", "./bin/{type}", "{{x}}{agent}"])
def test_a_placeholder_in_the_program_is_refused(program: str) -> None:
    with pytest.raises(UsageError) as info:
        WorkOptions(agent="a", command=[program, "arg"])
    assert info.value.exit_code == 2 and "program" in info.value.message


def test_the_cli_refuses_a_placeholder_as_the_program_and_claims_nothing(root: Path, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "evil"
    target.write_text("#!/bin/sh\ntouch PWNED\n")
    target.chmod(0o755)
    assert cli(["queue", "add", str(target), "--id", "t1"], root=root).code == 0
    result = cli(["work", "--agent", "a", "--", "{title}"], root=root)
    assert result.code == 2 and "program" in result.stderr
    assert pwned(tmp_path) == []
    assert cli(["queue", "show", "t1", "--json"], root=root).json()["state"] == "pending"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_refused_forms_would_have_run_the_title_as_code(tmp_path: Path) -> None:
    """Why the refusal: a value substituted into the script is code, even inside quotes."""
    import subprocess

    given = dict.fromkeys(placeholders.PLACEHOLDERS, "")
    given["title"] = "$(touch PWNED2)"
    expanded = placeholders.expand(["bash", "-c", 'echo "title={title}"'], given)
    subprocess.run(expanded, cwd=tmp_path, check=True, capture_output=True)
    assert pwned(tmp_path) == ["PWNED2"]



# -- the result file -------------------------------------------------------------------------------------


@pytest.mark.parametrize("link", ["ln -s", "ln"], ids=["symlink", "hardlink"])
def test_a_result_file_linked_to_a_file_outside_the_scratch_directory_is_not_read(root: Path, tmp_path: Path,
                                                                                   link: str) -> None:
    secret = tmp_path / "outside.json"
    secret.write_text('{"stolen": "the contents of a file outside the scratch directory"}')
    assert cli(["queue", "add", "t", "--id", "t1"], root=root).code == 0
    result = cli(["work", "--agent", "a", "--", "sh", "-c", f'{link} "$1" "$LOKI_RESULT_FILE"', "sh", str(secret)],
                 root=root)
    assert result.code == 1, result.stderr
    shown = cli(["queue", "show", "t1", "--json"], root=root).json()
    assert shown["state"] == "pending" and "stolen" not in json.dumps(shown)
    message = shown["task"]["attempts"][0]["error_message"]
    assert message.startswith("exit 0 (bad_result_file): result file ") and "result.json" in message
    assert ("is a symbolic link" if link == "ln -s" else "has other links") in message
    assert "write a regular file" in message
    assert secret.exists()


def test_the_library_refuses_a_symlinked_result_file(store: Any, tmp_path: Path) -> None:
    from loki.queue.queue import Queue
    from loki.work.loop import Worker

    (tmp_path / "outside.json").write_text('{"stolen": 1}')
    Queue(store).add("t", task_id="t1")
    notes: list[str] = []
    summary = Worker(store, WorkOptions(agent="a", command=["sh", "-c", 'ln -s "$1" "$LOKI_RESULT_FILE"', "sh",
                                                            str(tmp_path / "outside.json")]),
                     stdout=bytearray().extend, stderr=bytearray().extend, notify=notes.append).run_unguarded()
    assert summary.runs[0].outcome == "failed" and summary.runs[0].error_type == "validation"
    assert "is a symbolic link" in (summary.runs[0].error or "")


# -- honest records: the approach ------------------------------------------------------------------------


def _fail_by(root: Path, agent: str, now: str) -> None:
    result = cli(["work", "--agent", agent, "--max-tasks", "1", "--", "sh", "-c", "echo 'E: broken' >&2; exit 1"],
                 root=root, env={"LOKI_NOW": now})
    assert result.code == 1, result.stderr


def test_one_unchanged_script_run_by_three_agents_is_one_approach(root: Path) -> None:
    assert cli(["queue", "add", "t", "--id", "t1", "--max-attempts", "3"], root=root).code == 0
    for hour, agent in enumerate(("eng-001", "eng-002", "eng-003"), start=10):
        _fail_by(root, agent, f"2026-01-25T{hour}:00:00Z")
    entry = cli(["deadletter", "show", "t1", "--json"], root=root).json()
    approaches = {a["approach"] for a in entry["attempts"]}
    assert approaches == {"sh -c 'echo '\"'\"'E: broken'\"'\"' >&2; exit 1'"}
    assert {a["agent_id"] for a in entry["attempts"]} == {"eng-001", "eng-002", "eng-003"}
    assert "1 distinct approach)" in entry["error_summary"]
    review = cli(["deadletter", "review", "--force", "--json"], root=root, env={"LOKI_NOW": "2026-01-26T10:00:00Z"})
    assert review.code == 0, review.stderr
    decision = review.json()["decisions"][0]
    assert decision["action"] != "abandon", decision
    assert "distinct approaches" not in json.dumps(decision)


def test_a_proposed_approach_is_the_next_attempts_approach(root: Path) -> None:
    assert cli(["queue", "add", "t", "--id", "t1", "--max-attempts", "1"], root=root).code == 0
    _fail_by(root, "eng-001", "2026-01-25T10:00:00Z")
    assert cli(["deadletter", "propose", "t1", "--approach", "pin flask to 2.3 first"], root=root).code == 0
    review = cli(["deadletter", "review", "--force", "--json"], root=root, env={"LOKI_NOW": "2026-01-25T11:00:00Z"})
    assert review.json()["decisions"][0]["action"] == "retry", review.stdout
    _fail_by(root, "eng-002", "2026-01-25T12:00:00Z")
    entry = cli(["deadletter", "show", "t1", "--json"], root=root).json()
    assert [a["approach"] for a in entry["attempts"]][-1] == "pin flask to 2.3 first"
    assert "2 distinct approaches" in entry["error_summary"]


def test_a_retry_with_an_approach_is_the_next_attempts_approach_through_the_library(store: Any) -> None:
    from loki.queue.deadletter import DeadLetter
    from loki.queue.queue import Queue
    from loki.work.loop import Worker

    queue = Queue(store)
    queue.add("t", task_id="t1", max_attempts=1)

    def fail_once(agent: str) -> None:
        Worker(store, WorkOptions(agent=agent, command=["sh", "-c", "exit 3"], max_tasks=1),
               stdout=bytearray().extend, stderr=bytearray().extend).run_unguarded()

    fail_once("eng-001")
    DeadLetter(store).retry("t1", approach="run it on the big runner")
    fail_once("eng-002")
    attempts = DeadLetter(store).show("t1")["attempts"]
    assert [a["approach"] for a in attempts] == ["sh -c 'exit 3'", "run it on the big runner"]


# -- --until-empty: who waits, what it says, what it counts ----------------------------------------------


class Moves:
    """The loop's waits, moving the clock instead of sleeping; ``then(n)`` after the n-th."""

    def __init__(self, clock: Any, then: Any) -> None:
        self.clock, self.then = clock, then
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)
        self.clock.advance(seconds)
        self.then(len(self.calls))


def test_until_empty_waits_while_another_agent_holds_a_task_that_may_come_back(store: Any, clock: Any) -> None:
    """eng-002 holds t1 and fails it: eng-001, waiting meanwhile, runs it once its backoff is over."""
    from loki.queue.queue import Queue
    from loki.work.loop import Worker

    queue = Queue(store)
    queue.add("flaky", task_id="t1", max_attempts=3)
    held = queue.claim("eng-002", lease_seconds=60)

    def the_other_agent(calls: int) -> None:
        if calls == 3:
            queue.fail("t1", "eng-002", error="E: flaky", token=held["claim_token"])  # back at +20s

    moves = Moves(clock, the_other_agent)
    notes: list[str] = []
    summary = Worker(store, WorkOptions(agent="eng-001", command=["true"], until_empty=True), sleep=moves,
                     stdout=bytearray().extend, stderr=bytearray().extend, notify=notes.append).run_unguarded()
    assert [(r.task_id, r.outcome) for r in summary.runs] == [("t1", "completed")], notes
    assert (summary.stopped, summary.exit_code) == ("empty", 0)
    assert moves.calls == [5.0, 5.0, 5.0, 5.0]  # polled while held, then the backoff's end (10:00:20)
    waiting = [note for note in notes if "waiting until" in note]
    assert len(waiting) == 2 and len(set(waiting)) == 2, notes  # once per thing waited for, not every 5 s
    assert "waiting until 10:01:00 UTC" in waiting[0] and "1 held by another agent" in waiting[0]
    assert "waiting until 10:00:20 UTC" in waiting[1] and "1 backing off" in waiting[1]


def test_outlook_waits_for_held_backing_off_and_deferred_tasks(store: Any, clock: Any) -> None:
    from loki.queue.queue import Queue
    from loki.work.outlook import outlook

    queue = Queue(store)
    queue.add("held", task_id="h1")
    queue.claim("x", lease_seconds=600)
    queue.add("deferred", task_id="d1")
    queue.defer("d1", until="2026-01-25T10:03:00Z")
    ahead = outlook(queue, (), clock.now())
    assert (ahead.waiting, ahead.next_at) == (2, "2026-01-25T10:03:00Z")
    assert ahead.describe() == "1 held by another agent, 1 deferred"
    assert outlook(queue, ("docs",), clock.now()).waiting == 0  # neither is of its type


def test_a_wait_past_today_names_the_date(store: Any, clock: Any) -> None:
    from loki.queue.queue import Queue
    from loki.work.loop import Worker

    queue = Queue(store)
    queue.add("next week", task_id="d1")
    queue.defer("d1", until="2026-02-01T09:00:00Z")
    notes: list[str] = []
    workers: list[Any] = []

    def stop(seconds: float) -> None:
        import signal

        workers[0].request_stop(signal.SIGTERM)

    workers.append(Worker(store, WorkOptions(agent="a", command=["true"], until_empty=True), sleep=stop,
                          stdout=bytearray().extend, stderr=bytearray().extend, notify=notes.append))
    workers[0].run_unguarded()
    assert "waiting until 2026-02-01 09:00:00 UTC (--until-empty: 1 may become ready: 1 deferred)" in notes[0]


def test_the_closing_line_counts_distinct_tasks_and_claims(root: Path) -> None:
    (root / "config" / "loki.json").write_text(json.dumps({"queue": {"backoff_initial": 0, "backoff_max": 0}}))
    assert cli(["queue", "add", "flaky", "--id", "t1"], root=root).code == 0
    script = '[ "$LOKI_TASK_ATTEMPT" -ge 4 ] || { echo "E: flaky $LOKI_TASK_ATTEMPT" >&2; exit 1; }'
    result = cli(["work", "--agent", "a", "--until-empty", "--", "sh", "-c", script], root=root)
    assert result.code == 0, result.stderr
    assert result.stderr.splitlines()[-1] == ("loki work: nothing left that may become ready; 4 claims of 1 task "
                                              "(1 completed, 3 failed); exit 0")
    as_json = cli(["work", "--agent", "a", "--json", "--", "true"], root=root)
    assert json.loads(as_json.stderr)["tasks_claimed"] == 0


# -- the failure's summary ---------------------------------------------------------------------------------


def test_without_a_known_pattern_the_summary_is_stderrs_last_meaningful_line_not_stdouts_banner() -> None:
    from loki.work.failure import describe

    failure = describe(1, b"=== DeployTool 4.2 (c) ACME ===\nstarting\n",
                       b"warning: cache is cold\nconfig key 'db.url' is missing\n------\n\n")
    assert failure.headline == "exit 1 (exit_status): config key 'db.url' is missing"
    # Nothing on stderr: stdout's last line, as before; nothing at all: the exit status.
    assert describe(2, b"banner\nstep 3 of 4 failed\n", b"").headline == "exit 2 (exit_status): step 3 of 4 failed"
    assert describe(2, b"", b"").headline == "exit 2 (exit_status): exited with code 2"
    # A known pattern anywhere still names the class, from either stream.
    assert describe(1, b"FAILED tests/test_a.py::test_b - AssertionError\n", b"note: done\n").error_class == \
        "test_failure"


def test_the_cli_records_stderrs_meaningful_line_as_the_attempts_first_line(root: Path) -> None:
    assert cli(["queue", "add", "t", "--id", "t1"], root=root).code == 0
    script = "echo '*** MyTool v1.0 ***'; echo 'the staging host said no' >&2; echo '--' >&2; exit 1"
    result = cli(["work", "--agent", "a", "--", "sh", "-c", script], root=root)
    assert result.code == 1
    assert "failed t1: exit 1 (exit_status): the staging host said no; retry after" in result.stderr
    message = cli(["queue", "show", "t1", "--json"], root=root).json()["task"]["attempts"][0]["error_message"]
    assert message.splitlines()[0] == "exit 1 (exit_status): the staging host said no"


@pytest.mark.slow
def test_a_second_until_empty_agent_waits_while_the_first_holds_a_task_that_fails(root: Path, tmp_path: Path) -> None:
    """Real processes: eng-002 starts while eng-001 holds t1; it waits (once says until when) instead of
    exiting, and the team finishes t1 after its failure. (LOKI_NOW cannot move, so backoff is 0 s.)"""
    import subprocess

    (root / "config" / "loki.json").write_text(json.dumps({"queue": {"backoff_initial": 0, "backoff_max": 0}}))
    assert cli(["queue", "add", "fails once", "--id", "t1"], root=root).code == 0
    go, ran = tmp_path / "go", tmp_path / "ran"
    os.mkfifo(go)
    script = 'echo "$LOKI_AGENT" >> "$2"; [ -e "$2.failed" ] && exit 0; : > "$2.failed"; read x < "$1"; exit 1'

    def spawn(agent: str) -> subprocess.Popen[str]:
        return subprocess.Popen([PY, "-m", "loki", "--root", str(root), "work", "--agent", agent, "--until-empty",
                                 "--", "sh", "-c", script, "sh", str(go), str(ran)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    first = spawn("eng-001")
    second = None
    try:
        assert first.stderr is not None and "claimed t1" in first.stderr.readline()
        second = spawn("eng-002")
        assert second.stderr is not None
        line = second.stderr.readline()
        assert "waiting until" in line and "1 held by another agent" in line, line + second.stderr.read()
        with open(go, "w") as release:
            release.write("fail\n")
        _, first_err = first.communicate(timeout=120)
        _, second_err = second.communicate(timeout=120)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
    assert (first.returncode, second.returncode) == (0, 0), first_err + second_err
    assert "nothing left that may become ready" in first_err and "nothing left that may become ready" in second_err
    assert second_err.count("waiting until") <= 2  # said once per thing waited for, not every 5 s
    assert len(ran.read_text().split()) == 2  # the failed run and the one that completed it
    assert cli(["queue", "show", "t1", "--json"], root=root).json()["state"] == "completed"
