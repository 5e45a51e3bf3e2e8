"""Tables give the width to the text (issue 23): golden tables at 80, 120 and 200 columns.

At 80 columns 15 pending tasks took 45 lines beside empty ``holder`` and ``lease until`` columns; ``--state
all`` dropped ``state``; the attempts table cut an error mid-word. The expected tables are kept in
tests/golden/tables/; ``LOKI_UPDATE_GOLDEN=1`` rewrites them from what the code draws now (review the diff).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loki.clock import ManualClock
from loki.queue.queue import Queue
from loki.storage.store import Store
from loki.wording import shorten
from tests.helpers import NOW, cli
from tests.watchgolden import check

WIDTHS = ["80", "120", "200"]
ERROR = ("ConnectionRefusedError: [Errno 111] Connection refused while connecting to the staging database at "
         "db.internal:5432 after 3 retries; the migration step 0042_add_index never started, so nothing was "
         "rolled back and the schema is unchanged")


def check_golden(name: str, actual: str) -> None:
    check(name, actual, folder="tables", what="table")


def _fifteen(root: Path) -> Queue:
    queue = Queue(Store(root, clock=ManualClock(NOW)))
    for n in range(1, 16):
        queue.add(f"Implement step {n} of the onboarding flow, with its tests and docs", task_id=f"task-{n}")
    return queue


@pytest.mark.files
@pytest.mark.parametrize("width", WIDTHS)
def test_fifteen_pending_tasks_give_the_width_to_the_titles(root: Path, width: str) -> None:
    _fifteen(root)
    drawn = cli(["queue", "list"], root=root, env={"LOKI_NOW": NOW, "LOKI_FORCE_TTY": width})
    assert drawn.code == 0, drawn.stderr
    header = drawn.stdout.splitlines()[0].split()
    assert "holder" not in header and "until" not in header  # empty in every row: left out
    assert all(len(line) <= int(width) for line in drawn.stdout.splitlines())
    assert len(drawn.stdout.splitlines()) <= 2 + 15 * 2 + 1  # header, rule, at most two lines a task, footer
    if width != "80":
        assert len(drawn.stdout.splitlines()) == 2 + 15 + 1  # one line each
    check_golden(f"queue-list-pending-{width}.txt", drawn.stdout)
    piped = cli(["queue", "list"], root=root, env={"LOKI_NOW": NOW})
    assert {len(line.split("\t")) for line in piped.stdout.splitlines()} == {9}  # a pipe keeps every field


@pytest.mark.files
@pytest.mark.parametrize("width", WIDTHS)
def test_every_state_listed_keeps_the_state_column(root: Path, width: str) -> None:
    env = {"LOKI_NOW": NOW}
    queue = _fifteen(root)
    queue.claim("eng-1", task_id="task-2")
    queue.complete("task-2", "eng-1")
    queue.claim("eng-2", task_id="task-3")
    assert cli(["queue", "cancel", "task-4", "--reason", "not needed"], root=root, env=env).code == 0
    drawn = cli(["queue", "list", "--state", "all"], root=root, env={**env, "LOKI_FORCE_TTY": width})
    assert drawn.code == 0, drawn.stderr
    assert drawn.stdout.splitlines()[0].split()[:2] == ["id", "state"]
    states = {line.split()[1] for line in drawn.stdout.splitlines()[2:] if line.startswith("task-")}
    assert {"pending", "in-progress", "completed", "cancelled"} <= states
    check_golden(f"queue-list-all-{width}.txt", drawn.stdout)


@pytest.mark.files
@pytest.mark.parametrize("width", WIDTHS)
def test_the_attempts_table_never_cuts_an_error_mid_word(root: Path, width: str) -> None:
    env = {"LOKI_NOW": NOW}
    cli(["queue", "add", "Migrate the staging database", "--id", "t1"], root=root, env=env)
    cli(["queue", "claim", "--agent", "eng-1"], root=root, env=env)
    cli(["queue", "fail", "t1", "--agent", "eng-1", "--error", ERROR], root=root, env=env)
    drawn = cli(["queue", "show", "t1"], root=root, env={**env, "LOKI_FORCE_TTY": width})
    assert drawn.code == 0, drawn.stderr
    attempts = drawn.stdout[drawn.stdout.index("\nattempts"):drawn.stdout.index("\nhistory:")]
    lines = attempts.splitlines()[4:]  # after the title, the header and its rule
    error = " ".join(line[line.index("ConnectionRefusedError"):] if n == 0 else line for n, line in enumerate(lines))
    shown = " ".join(error.split())
    assert shown.endswith("…") and len(shown) <= 160
    assert ERROR.startswith(shown.removesuffix("…"))
    assert ERROR[len(shown) - 1] == " "  # cut where a word ends
    check_golden(f"queue-show-attempts-{width}.txt", drawn.stdout)


def test_shorten_cuts_on_a_word_boundary() -> None:
    assert shorten(ERROR, 50) == "ConnectionRefusedError: [Errno 111] Connection…"
    assert shorten("short  text\nhere", 50) == "short text here"
    assert shorten("x" * 60, 10) == "x" * 9 + "…"  # one word longer than the limit: nothing else to cut at
    assert shorten("hello world foo", 12) == "hello world…"
