"""Every free-text seam of the CLI redacts (docs/storage.md, "Secrets").

The test walks the typer app (:func:`loki.cli.app.build_app`) and lists every option and argument that takes
text. Each one is either a free-text seam, with a recipe below that feeds it a secret and then reads every
byte under ``.loki/`` and the command's own output, or is named in :data:`NOT_FREE_TEXT` with the reason it
holds no prose (an id, a name checked as one, an enum, a time, a path). A new text option in neither list
fails :func:`test_every_text_option_of_the_cli_is_classified`: whoever adds it says which it is.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

from loki.cli.app import build_app
from tests.helpers import Result, cli, snapshot_bytes
from tests.text.test_redact import GHP

# Secrets of two shapes, one the old rules knew and one the issue found stored in clear (a Vault token).
VAULT = "hvs.CAESIJlWh0mE3x8Kq2ZpT4vR9yBn7cUaLs5dFg1oHjQwEiM"
SECRET = f"deploy with {GHP} then vault login {VAULT}"
SECRETS = (GHP, VAULT)


def _text_params() -> Iterator[tuple[str, str]]:
    """(command path, parameter name) of every parameter that takes a string, walking the whole app."""
    def walk(command: Any, path: tuple[str, ...]) -> Iterator[tuple[str, str]]:
        subs = getattr(command, "commands", None)
        if subs:
            for name, sub in subs.items():
                yield from walk(sub, (*path, name))
            return
        for param in command.params:
            if type(param.type).__name__ == "StringParamType":
                yield " ".join(path), str(param.name)

    yield from walk(typer.main.get_command(build_app()), ())


# -- the seams that hold free text: each recipe runs on a prepared tree and returns the results ---------

class Tree:
    """A tree with a pending task (t-pend), a claimed one (t-claim, with its token), a dead-letter entry
    (t-dead) and an escalated, blocked task (t-esc, escalation id in ``escalation``)."""

    def __init__(self, root: Path, token: str = "", escalation: str = "") -> None:
        self.root = root
        self.results: list[Result] = []
        self.token = token
        self.escalation = escalation

    @classmethod
    def prepare(cls, root: Path) -> Tree:
        """Make ``root`` (a new tree) into the tree described above."""
        tree = cls(root)
        for task_id in ("t-pend", "t-claim", "t-dead", "t-esc"):
            tree.ok("queue", "add", f"task {task_id}", "--id", task_id, "--max-attempts", "1")
        tree.ok("queue", "claim", "--agent", "dev", "--id", "t-dead")
        tree.ok("queue", "fail", "t-dead", "--agent", "dev", "--error", "boom")
        claimed = tree.ok("queue", "claim", "--agent", "dev", "--id", "t-claim", "--json").json()
        tree.token = claimed["task"]["claim_token"]
        tree.ok("escalate", "t-esc", "--trigger", "needs_a_human")
        tree.escalation = tree.ok("escalations", "list", "--json").json()["escalations"][0]["id"]
        tree.results.clear()  # only what the recipe runs is checked for the secret in its output
        return tree

    def copy_to(self, root: Path) -> Tree:
        """The same tree at ``root`` (copied without fsync: the copy lives as long as its test)."""
        shutil.copytree(self.root, root, symlinks=True, copy_function=shutil.copyfile)
        return Tree(root, self.token, self.escalation)

    def run(self, *args: str, code: int = 0) -> Result:
        result = cli(list(args), root=self.root)
        assert result.code == code, (args, result.stdout, result.stderr)
        if args[0] == "work":
            # CMD's own output passes through as it printed it (the operator watches the agent); loki's
            # lines about it are the ones checked
            loki_lines = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("loki ")]
            result = Result(result.code, "\n".join(loki_lines), "")
        self.results.append(result)
        return result

    def ok(self, *args: str) -> Result:
        return self.run(*args)


S = SECRET
FREE_TEXT: dict[tuple[str, str], Callable[[Tree], Any]] = {
    ("queue add", "title"): lambda t: t.ok("queue", "add", S, "--id", "t-new"),
    ("queue add", "description"): lambda t: t.ok("queue", "add", "x", "--description", S),
    ("queue add", "label"): lambda t: t.ok("queue", "add", "x", "--label", GHP, "--label", VAULT),
    ("queue add", "payload"): lambda t: t.ok("queue", "add", "x", "--payload", f'{{"note": "{S}"}}'),
    ("queue edit", "title"): lambda t: t.ok("queue", "edit", "t-pend", "--title", S),
    ("queue edit", "description"): lambda t: t.ok("queue", "edit", "t-pend", "--description", S),
    ("queue edit", "add_label"): lambda t: t.ok("queue", "edit", "t-pend", "--add-label", GHP, "--add-label", VAULT),
    ("queue complete", "result"): lambda t: t.ok("queue", "complete", "t-claim", "--agent", "dev", "--token",
                                                 t.token, "--result", f'"{S}"'),
    ("queue fail", "error"): lambda t: t.ok("queue", "fail", "t-claim", "--agent", "dev", "--token", t.token,
                                            "--error", S),
    ("queue fail", "approach"): lambda t: t.ok("queue", "fail", "t-claim", "--agent", "dev", "--token", t.token,
                                               "--error", "x", "--approach", S),
    ("queue cancel", "reason"): lambda t: t.ok("queue", "cancel", "t-pend", "--reason", S),
    # a dead-letter entry closed as won't do: the reason is also the abandon reason (abandoned.json)
    ("queue close", "reason"): lambda t: (t.ok("queue", "close", "t-pend", "--reason", S),
                                          t.ok("queue", "close", "t-dead", "--wont-do", "--reason", S)),
    ("queue defer", "reason"): lambda t: t.ok("queue", "defer", "t-pend", "--until", "2h", "--reason", S),
    ("deadletter retry", "approach"): lambda t: t.ok("deadletter", "retry", "t-dead", "--approach", S),
    ("deadletter propose", "approach"): lambda t: t.ok("deadletter", "propose", "t-dead", "--approach", S),
    ("deadletter abandon", "reason"): lambda t: t.ok("deadletter", "abandon", "t-dead", "--reason", S),
    ("deadletter split", "title"): lambda t: t.ok("deadletter", "split", "t-dead", "--title", S),
    ("deadletter split", "description"): lambda t: t.ok("deadletter", "split", "t-dead", "--title", "x",
                                                        "--description", S),
    ("escalate", "trigger"): lambda t: t.ok("escalate", "t-pend", "--trigger", S),
    ("escalate", "analysis"): lambda t: t.ok("escalate", "t-pend", "--trigger", "x", "--analysis", S),
    ("escalate", "option"): lambda t: t.ok("escalate", "t-pend", "--trigger", "x", "--option", S),
    ("approve", "note"): lambda t: (t.ok("approve", "t-esc", "--decision", "approve", "--note", S),
                                    t.ok("watch", "--once", "--no-tui")),
    ("escalations close", "note"): lambda t: t.ok("escalations", "close", t.escalation, "--note", S),
    ("breaker failure", "error"): lambda t: t.ok("breaker", "failure", "api", "--error", S),
    ("signal emit", "fields"): lambda t: (t.ok("signal", "emit", "FEATURE_READY", "--subject", "auth", f"summary={S}"),
                                          t.ok("watch", "--once", "--no-tui")),
    ("signal emit", "data"): lambda t: (t.ok("signal", "emit", "FEATURE_READY", "--subject", "auth", "--data",
                                             f'{{"summary": "{S}"}}'), t.ok("watch", "--once", "--no-tui")),
    # the command is recorded as the attempt's approach (what the agent printed is its own output, and
    # the failure's summary of it is redacted where every attempt is made: tests/text/test_redact_e2e.py)
    ("work", "command"): lambda t: t.run("work", "--agent", "dev", "--max-tasks", "1", "--", "sh", "-c",
                                         f"exit 1 # {S}", code=1),
    ("lease acquire", "reason"): lambda t: t.ok("lease", "acquire", "src/**", "--agent", "dev", "--reason", S),
    ("lease break", "reason"): lambda t: t.ok("lease", "break", t.ok("lease", "acquire", "docs/**", "--agent", "dev",
                                                                   "--json").json()["lease_id"],
                                              "--by", "ops", "--reason", S),
    # not an option but the same text: what CMD prints (the failure's summary) and writes as its result
    ("work", "command output"): lambda t: (
        t.run("work", "--agent", "dev", "--max-tasks", "1", "--", "sh", "-c", f"echo '{S}' >&2; exit 1", code=1),
        t.ok("queue", "add", "second", "--id", "t-work"),
        t.ok("work", "--agent", "dev", "--max-tasks", "1", "--", "sh", "-c",
             f"""echo '{{"note": "{S}"}}' > "$LOKI_RESULT_FILE" """)),
}

# Text parameters that hold no prose, each with why. Ids and names are checked as such where they are used.
_ID = "an id, checked as one (check_id)"
_NAME = "a name (an agent, a type, a breaker), checked as one and shown as given"
_ENUM = "one of a fixed set of words, refused otherwise"
_FORMAT = "an output format (table, json ...), refused otherwise"
_CHECK = ("a check's command line: kept as given because loki runs it (a redacted command would not run), "
          "redacted wherever it is shown or kept as evidence (loki/queue/verified.py); secrets belong in the env")
_URL = "a database URL: saved and printed without any part that can hold a secret (tests/text/test_dburl_secrets.py)"
NOT_FREE_TEXT: dict[tuple[str, str], str] = {
    ("init", "path"): "a directory path, not stored",
    ("init", "database"): _URL,
    ("db upgrade", "database"): _URL,
    ("migrate", "to"): _URL,
    ("escalate", "task_id"): _ID,
    ("escalate", "agent"): _NAME,
    ("approve", "task_id"): _ID,
    ("approve", "decision"): _ENUM,
    ("approve", "approver"): _NAME,
    ("watch", "observer"): _NAME,
    ("run", "breaker"): _NAME,
    ("run", "command"): "run, not stored: the breaker records the exit status, the lock its redacted command line",
    ("work", "agent"): _NAME,
    ("work", "type_"): _NAME,
    ("work", "breaker"): _NAME,
    ("hook", "event"): _ENUM,
    ("hook", "agent"): _ENUM,
    ("agents", "fmt"): _FORMAT,
    ("completion", "shell"): _ENUM,
    ("queue add", "type_"): _NAME,
    ("queue add", "priority"): _ENUM,
    ("queue add", "depends_on"): _ID,
    ("queue add", "task_id"): _ID,
    ("queue add", "idempotency_key"): "a caller's key compared for equality, kept as given so a retry matches",
    ("queue add", "from_file"): "a file path; the tasks it holds go through the same checks as `add`'s",
    ("queue list", "state"): _ENUM,
    ("queue list", "type_"): "a filter, not stored",
    ("queue list", "label"): "a filter, not stored",
    ("queue list", "agent"): "a filter, not stored",
    ("queue list", "fmt"): _FORMAT,
    ("queue show", "task_id"): _ID,
    ("queue claim", "agent"): _NAME,
    ("queue claim", "type_"): "a filter, not stored",
    ("queue claim", "label"): "a filter, not stored",
    ("queue claim", "priority"): _ENUM,
    ("queue claim", "task_id"): _ID,
    ("queue claim", "fmt"): _FORMAT,
    ("queue heartbeat", "task_id"): _ID,
    ("queue heartbeat", "agent"): _NAME,
    ("queue heartbeat", "token"): "the claim's fencing token, compared, never stored from here",
    ("queue complete", "task_id"): _ID,
    ("queue complete", "agent"): _NAME,
    ("queue complete", "token"): "the claim's fencing token, compared, never stored from here",
    ("queue fail", "task_id"): _ID,
    ("queue fail", "agent"): _NAME,
    ("queue fail", "error_type"): _NAME,
    ("queue fail", "token"): "the claim's fencing token, compared, never stored from here",
    ("queue fail", "depends_on"): _ID,
    ("queue release", "task_id"): _ID,
    ("queue release", "agent"): _NAME,
    ("queue release", "token"): "the claim's fencing token, compared, never stored from here",
    ("queue cancel", "task_id"): _ID,
    ("queue cancel", "by"): _NAME,
    ("queue retry", "task_id"): _ID,
    ("queue retry", "by"): _NAME,
    ("queue ready", "type_"): "a filter, not stored",
    ("queue ready", "label"): "a filter, not stored",
    ("queue ready", "priority"): _ENUM,
    ("queue history", "task_id"): _ID,
    ("queue edit", "task_id"): _ID,
    ("queue edit", "type_"): _NAME,
    ("queue edit", "priority"): _ENUM,
    ("queue edit", "remove_label"): "a label to take away, not stored",
    ("queue edit", "add_dependency"): _ID,
    ("queue edit", "remove_dependency"): _ID,
    ("queue edit", "by"): _NAME,
    ("queue close", "task_id"): _ID,
    ("queue close", "by"): _NAME,
    ("queue defer", "task_id"): _ID,
    ("queue defer", "until"): "a time or a duration, parsed; refused otherwise",
    ("queue defer", "by"): _NAME,
    ("deadletter list", "fmt"): _FORMAT,
    ("deadletter show", "task_id"): _ID,
    ("deadletter retry", "task_id"): _ID,
    ("deadletter retry", "fix_commit"): "a commit id, checked as one (check_fix_commit)",
    ("deadletter retry", "by"): _NAME,
    ("deadletter propose", "task_id"): _ID,
    ("deadletter abandon", "task_id"): _ID,
    ("deadletter abandon", "by"): _NAME,
    ("deadletter split", "task_id"): _ID,
    ("deadletter split", "priority"): _ENUM,
    ("abandoned list", "fmt"): _FORMAT,
    ("escalations list", "fmt"): _FORMAT,
    ("escalations show", "escalation_id"): _ID,
    ("escalations close", "escalation_id"): _ID,
    ("escalations close", "by"): _NAME,
    ("breaker status", "name"): _NAME,
    ("breaker status", "fmt"): _FORMAT,
    ("breaker check", "name"): _NAME,
    ("breaker success", "name"): _NAME,
    ("breaker failure", "name"): _NAME,
    ("breaker reset", "name"): _NAME,
    ("breaker trip", "name"): _NAME,
    ("breaker capacity", "name"): _NAME,
    ("signal emit", "signal_type"): _NAME,
    ("signal emit", "subject"): _NAME,
    ("signal emit", "task_id"): _ID,
    ("signal emit", "severity"): _ENUM,
    ("signal emit", "agent"): _NAME,
    ("signal fields", "signal_type"): _NAME,
    ("signal list", "fmt"): _FORMAT,
    ("signal show", "name"): _NAME,
    ("signal log", "type_prefix"): "a filter, not stored",
    ("signal log", "fmt"): _FORMAT,
    ("hooks install", "agent_name"): _ENUM,
    ("hooks install", "settings"): "a path to the agent's settings file",
    ("hooks install", "command"): "the hook command written into the agent's own settings (outside .loki/)",
    ("hooks uninstall", "agent_name"): _ENUM,
    ("hooks uninstall", "settings"): "a path to the agent's settings file",
    ("errors list", "branch"): "a filter, not stored",
    ("errors list", "fmt"): _FORMAT,
    ("errors show", "key"): _ID,
    ("errors show", "branch"): "a filter, not stored",
    ("errors reset", "key"): _ID,
    ("errors reset", "branch"): "a filter, not stored",
    ("errors search", "query"): "a search query, not stored",
    ("errors search", "error_class"): "a filter, not stored",
    ("errors search", "fmt"): _FORMAT,
    ("budget list", "fmt"): _FORMAT,
    ("budget remove", "name"): _NAME,
    ("budget set", "name"): _NAME,
    ("budget set", "per"): _ENUM,
    ("budget set", "scope"): "a scope (team, type:T, label:L, agent:A), its name checked as one",
    ("budget set", "tokens"): "a number of tokens (5M), parsed; refused otherwise",
    ("budget show", "name"): _NAME,
    ("usage", "by"): _ENUM,
    ("usage", "fmt"): _FORMAT,
    ("usage", "since"): "a time or a duration, parsed; refused otherwise",
    ("hooks install", "mcp_agent"): _NAME,
    ("hooks install", "via"): _ENUM,
    ("mcp", "agent"): _NAME,
    ("serve", "host"): "an address to bind, not stored",
    ("lease acquire", "agent"): _NAME,
    ("lease acquire", "key"): "a caller's key compared for equality, kept as given so a retry matches",
    ("lease acquire", "patterns"): "file patterns, normalised and checked as such (loki/leases/patterns.py)",
    ("lease acquire", "task"): _ID,
    ("lease acquire", "ttl"): "a duration, parsed; refused otherwise",
    ("lease break", "by"): _NAME,
    ("lease break", "lease_id"): _ID,
    ("lease guard", "agent"): _NAME,
    ("lease guard", "paths"): "paths to check, not stored",
    ("lease list", "fmt"): _FORMAT,
    ("lease release", "agent"): _NAME,
    ("lease release", "lease_id"): _ID,
    ("lease renew", "agent"): _NAME,
    ("lease renew", "lease_id"): _ID,
    ("lease renew", "ttl"): "a duration, parsed; refused otherwise",
    ("queue add", "paths"): "file patterns, normalised and checked as such (loki/leases/patterns.py)",
    ("queue edit", "paths"): "file patterns, normalised and checked as such (loki/leases/patterns.py)",
    ("queue add", "verify"): _CHECK,
    ("queue edit", "verify"): _CHECK,
    ("queue complete", "by"): _NAME,
    ("queue add", "land"): "a branch name, checked as git allows one (loki/tasks/landing.py); refused otherwise",
    ("queue edit", "land"): "a branch name, checked as git allows one (loki/tasks/landing.py); refused otherwise",
    ("queue land-check", "repo"): "a path to a git repository, not stored",
    ("queue complete", "evidence"): "a file path; its results are judged and kept redacted (queue/verified.py)",
}


def test_every_text_option_of_the_cli_is_classified() -> None:
    found = set(_text_params())
    unclassified = sorted(found - set(FREE_TEXT) - set(NOT_FREE_TEXT))
    found.add(("work", "command output"))  # the one seam that is no option (see FREE_TEXT)
    assert unclassified == [], "a new text option: give it a redaction recipe in FREE_TEXT or a reason in NOT_FREE_TEXT"
    assert sorted((set(FREE_TEXT) | set(NOT_FREE_TEXT)) - found) == []  # no stale entries
    assert set(FREE_TEXT).isdisjoint(NOT_FREE_TEXT)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory, template_tree: Path) -> Tree:
    """The seams' starting tree, prepared once per module (per pytest-xdist worker) and copied for each seam:
    its eight commands, each of them fsyncing its writes, used to run again before every recipe. The claim
    in it holds for the default hour, far longer than the module runs."""
    root = tmp_path_factory.mktemp("seams") / ".loki"
    shutil.copytree(template_tree, root, symlinks=True, copy_function=shutil.copyfile)
    return Tree.prepare(root)


@pytest.mark.parametrize("seam", sorted(FREE_TEXT), ids=lambda seam: f"{seam[0]} {seam[1]}")
def test_a_free_text_seam_neither_stores_nor_prints_a_secret(tmp_path: Path, prepared: Tree,
                                                             seam: tuple[str, str]) -> None:
    tree = prepared.copy_to(tmp_path / ".loki")
    root = tree.root
    FREE_TEXT[seam](tree)
    stored = b"\n".join(snapshot_bytes(root).values())
    assert b"[REDACTED:" in stored  # the text did arrive, redacted
    assert [secret for secret in SECRETS if secret.encode() in stored] == []
    printed = "\n".join(result.stdout + result.stderr for result in tree.results)
    assert [secret for secret in SECRETS if secret in printed] == []


# -- the library, on every backend (files, memory, PostgreSQL): what the CLI calls redacts in the store ---


def test_the_library_redacts_free_text_on_every_backend(backend_store: Any, clock: Any) -> None:
    from loki.queue.deadletter import DeadLetter
    from loki.queue.queue import Queue
    from tests.helpers import state_snapshot

    queue = Queue(backend_store)
    queue.add(SECRET, task_id="t1", description=SECRET, labels=[GHP], payload={"note": SECRET}, max_attempts=1)
    queue.add("two", task_id="t2", max_attempts=1)
    queue.edit("t2", title=SECRET, description=SECRET, add_labels=[VAULT])
    for task_id in ("t1", "t2"):
        clock.advance(60)
        queue.claim("dev", task_id=task_id)
        queue.fail(task_id, "dev", error=SECRET, approach=SECRET)
    dead = DeadLetter(backend_store)
    dead.propose("t1", SECRET)
    dead.abandon("t2", SECRET)
    stored = repr(state_snapshot(backend_store))
    assert "[REDACTED:" in stored
    assert [secret for secret in SECRETS if secret in stored] == []


def test_a_task_imported_from_loki_modes_files_keeps_no_secret(root: Path) -> None:
    # A task Loki Mode (or its PRD and GitHub imports) wrote: loki reads it in place and writes it in its
    # own format from then on; nothing of it is kept in clear, not even under payload.loki_mode.
    import json

    long_title = f"{SECRET} " + "x" * 600  # longer than a title may be: the original goes to payload.loki_mode
    (root / "queue" / "pending.json").write_text(json.dumps([
        {"id": "t-1", "type": "eng", "priority": 5, "createdAt": "2026-01-25T09:00:00Z", "title": SECRET,
         "description": SECRET, "tags": [GHP], "payload": {"action": SECRET}, "sourceIssue": SECRET},
        {"id": "t-2", "type": "eng", "priority": 5, "createdAt": "2026-01-25T09:00:00Z", "title": long_title}]))
    assert cli(["queue", "add", "x", "--id", "t-3"], root=root).code == 0  # rewrites pending.json in loki's format
    stored = b"\n".join(snapshot_bytes(root).values())
    assert b"[REDACTED:" in stored and b'"loki_mode"' in stored
    assert [secret for secret in SECRETS if secret.encode() in stored] == []
    shown = cli(["queue", "show", "t-1", "--json"], root=root)
    assert shown.code == 0 and not [secret for secret in SECRETS if secret in shown.stdout]
