"""Shell completion, for real: the script ``loki completion SHELL`` prints, loaded into the shell, asks loki
for candidates (``loki __complete``) through the typer-free lane, which reads the committed table and the tree.

bash is driven the way readline drives it (COMP_LINE, COMP_POINT, COMP_WORDS split at COMP_WORDBREAKS, then
the function ``complete -p`` names); fish through ``complete -C``; zsh with ``_describe`` and ``_files``
standing in for the completion system (they print what they were given). zsh and fish run when installed.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from loki.breakers.breakers import Breakers
from loki.cli.app import build_app
from loki.cli.completion import render_table
from loki.clock import ManualClock
from loki.storage.store import Store
from loki.storage.tree import init_tree
from tests.helpers import NOW, cli, loki_proc

REPO = Path(__file__).resolve().parents[2]


def test_the_committed_table_is_the_apps() -> None:
    """loki/cli/completiontable.py is generated from the app: a new command or option shows up in Tab at once."""
    committed = (REPO / "loki" / "cli" / "completiontable.py").read_text()
    assert committed == render_table(build_app()), "run `make completion-table`"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tree for the module (Tab only reads it): built once, not once for each of the ~30 lines below."""
    root = tmp_path_factory.mktemp("completion") / ".loki"
    init_tree(str(root))
    for args in (["queue", "add", "Login endpoint", "--id", "login-1", "--type", "eng-backend", "-l", "auth"],
                 ["queue", "add", "Logout", "--id", "logout-2"],
                 ["queue", "add", "Docs", "--id", "docs-3", "--max-attempts", "1"],
                 ["queue", "claim", "--agent", "eng-001"],
                 ["queue", "claim", "--agent", "eng-002"],
                 ["queue", "claim", "--agent", "eng-003"],
                 ["queue", "fail", "docs-3", "--agent", "eng-003", "--error", "boom"],
                 ["escalate", "login-1", "--trigger", "security_decision"]):
        assert cli(args, root=root, env={"LOKI_NOW": NOW}).code == 0, args
    store = Store(root, clock=ManualClock(NOW))
    Breakers(store).record_failure("api/claude")
    Breakers(store).record_failure("api/codex")
    return root


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `loki` on PATH that runs this checkout, as the console script would."""
    directory = tmp_path_factory.mktemp("bin")
    (directory / "loki").write_text(f'#!/bin/sh\nexec {sys.executable} -m loki "$@"\n')
    (directory / "loki").chmod(0o755)
    return directory


def _env(bin_dir: Path, tree: Path) -> dict[str, str]:
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOKI_ROOT": str(tree)}


# One bash session serves every line, as one interactive shell serves every Tab: the script is sourced once
# (`loki completion bash` starts the full CLI, ~0.15 s of CPU), then for each line read from stdin the driver
# sets what readline sets and calls the function `complete -p` names, which starts `loki __complete` afresh.
BASH_DRIVER = r'''
source <(loki completion bash)
compopt() { NOSPACE="$1 $2"; }  # the builtin works only under readline: record what the function asks of it
while IFS= read -r COMP_LINE; do
    complete -p loki
    unset COMPREPLY NOSPACE  # bash starts every completion without the last one's answer
    COMP_POINT=${#COMP_LINE}
    # the words as bash splits them: at blanks, and around the characters of COMP_WORDBREAKS ('=' ':' ...)
    read -ra COMP_WORDS <<< "$(printf '%s' "$COMP_LINE" | sed -e 's/\([=:]\)/ \1 /g')"
    [[ "$COMP_LINE" == *" " ]] && COMP_WORDS+=("")
    COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
    _loki_completion </dev/null  # as under readline, the completer's stdin is not the line feed
    printf '%s\n' "${COMPREPLY[@]}"
    [[ "$NOSPACE" == "-o nospace" ]] && echo '(nospace)'
    echo "$END_OF_ANSWER"
done
'''
END_OF_ANSWER = "--- end of the answer ---"


class BashSession:
    """A bash running BASH_DRIVER: :meth:`complete` gives it one line and reads back what Tab would offer."""

    def __init__(self, bin_dir: Path, tree: Path, errors: Path) -> None:
        self.errors = errors
        self.pending = b""  # read from bash's stdout, not yet returned
        with errors.open("wb") as stderr:  # a file, not a pipe: nobody reads it until something failed
            self.proc = subprocess.Popen(["bash", "-c", BASH_DRIVER, "bash"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=stderr,
                                         env={**_env(bin_dir, tree), "END_OF_ANSWER": END_OF_ANSWER})

    def complete(self, line: str) -> list[str]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()
        lines = []
        while (got := self._readline()) != END_OF_ANSWER:
            assert got is not None, f"bash ended: {self.errors.read_text()}"
            lines.append(got)
        assert lines[0] == "complete -o default -o nosort -F _loki_completion loki"  # what `complete -p` shows
        return [line for line in lines[1:] if line]

    def _readline(self) -> str | None:
        """The next line bash printed (None once it has ended); a bash that hangs fails the test after 60 s."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.pending:
            if not select.select([fd], [], [], 60)[0]:
                raise TimeoutError(f"bash gave no answer in 60 s: {self.errors.read_text()}")
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0, self.errors.read_text()
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def bash(bin_dir: Path, tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BashSession]:
    session = BashSession(bin_dir, tree, tmp_path_factory.mktemp("bash") / "stderr")
    yield session
    session.close()


@pytest.mark.parametrize(("line", "expected"), [
    ("loki qu", ["queue"]),
    ("loki queue cl", ["claim", "close"]),
    ("loki queue claim --ag", ["--agent"]),
    ("loki queue claim -", ["--agent", "--format", "--help", "--id", "--json", "--label", "--lease", "--priority",
                            "--quiet", "--reuse", "--type", "-a", "-h", "-l", "-p", "-q"]),
    ("loki queue show ", ["login-1", "logout-2", "docs-3"]),
    ("loki queue show lo", ["login-1", "logout-2"]),
    ("loki queue complete ", ["logout-2"]),  # only in-progress tasks can be completed
    ("loki deadletter retry ", ["docs-3"]),
    ("loki approve ", ["login-1", "docs-3", "20260125T100000Z-login-1"]),  # waiting tasks and escalations
    ("loki escalations close ", ["20260125T100000Z-login-1"]),
    ("loki queue claim --agent eng-00", ["eng-002", "eng-003"]),  # eng-001's task went to a human: no trace
    ("loki breaker status api/c", ["api/claude", "api/codex"]),
    ("loki run --breaker api/cl", ["api/claude"]),
    ("loki queue list --format=js", ["json", "jsonl"]),  # after the '=' bash splits at: the value alone
    ("loki queue list --format ", ["table", "id", "json", "jsonl"]),
    ("loki queue add x -p ", ["high", "medium", "low"]),
    ("loki queue claim --type eng", ["eng-backend"]),
    ("loki queue list --label a", ["auth"]),
    ("loki signal emit TESTS_", ["TESTS_PASSED_", "TESTS_FAILED_"]),
    ("loki signal emit DRIFT_DETECTED d", ["detected_drift=", "drift_distance=", "(nospace)"]),
    ("loki --root /x st", ["status"]),
    ("loki hook ", ["pre-tool-use", "post-tool-use", "post-tool-use-failure", "session-start", "stop",
                    "task-completed"]),
    ("loki completion ", ["bash", "zsh", "fish"]),
    ("loki queue add --from-file ", []),  # nothing: `-o default` offers file names
    ("loki run -- ", []),
])
def test_bash_completes_from_the_app_and_the_tree(line: str, expected: list[str], bash: BashSession) -> None:
    got = bash.complete(line)
    assert sorted(got) == sorted(expected), got


def test_a_tab_outside_any_tree_offers_commands_and_never_an_error(tmp_path: Path) -> None:
    done = loki_proc(["__complete", "bash", "--line", "loki queue show "], env={"LOKI_ROOT": str(tmp_path / "no")})
    assert (done.code, done.stdout, done.stderr) == (0, "", "")
    words = loki_proc(["__complete", "fish", "--", "agen"], env={"LOKI_ROOT": str(tmp_path / "no")})
    assert words.stdout.split("\t")[0] == "agents"


def test_the_completion_lane_loads_no_typer_rich_or_jsonschema(tree: Path) -> None:
    code = ("import sys; from loki.entry import main\n"
            "try:\n    main(['__complete', 'bash', '--line', 'loki queue show '])\nexcept SystemExit: pass\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'typer', 'click', 'rich', 'jsonschema'}),"
            " file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**_env(Path("/nonexistent"), tree)})
    assert sorted(done.stdout.split()) == ["docs-3", "login-1", "logout-2"] and done.stderr.strip() == "[]"


def test_completion_of_an_unknown_shell_is_a_usage_error() -> None:
    done = cli(["completion", "tcsh"])
    assert done.code == 2 and "bash, zsh, fish" in done.stderr
    assert loki_proc(["__complete", "tcsh"]).code == 2


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed on this machine")
def test_fish_completes_with_descriptions(bin_dir: Path, tree: Path, tmp_path: Path) -> None:
    script = tmp_path / "loki.fish"
    script.write_text(cli(["completion", "fish"]).stdout)

    def fish(line: str) -> list[str]:
        done = subprocess.run(["fish", "--no-config", "-c", f"source {script}; complete -C'{line}'"],
                              capture_output=True, text=True, env=_env(bin_dir, tree), timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    assert "claim\tTake the best ready task" in fish("loki queue cl")
    assert {line.split("\t")[0] for line in fish("loki queue show lo")} == {"login-1", "logout-2"}
    assert "login-1\tLogin endpoint" in fish("loki queue show lo")
    assert {line.split("\t")[0] for line in fish("loki queue list --format=js")} == {"--format=json",
                                                                                     "--format=jsonl"}
    assert [line.split("\t")[0] for line in fish("loki signal emit DRIFT_DETECTED det")] == ["detected_drift="]


ZSH_DRIVER = r'''
_describe() { print -l -- "${(@P)3}"; [[ "$4" == -S ]] && print -- "(no space after)"; }
_files() { print -- "(files)"; }
compdef() { :; }
source <(loki completion zsh)
words=(loki "$@"); CURRENT=${#words}
_loki
'''


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed on this machine")
def test_zsh_completes_with_descriptions(bin_dir: Path, tree: Path) -> None:
    def zsh(*words: str) -> list[str]:
        done = subprocess.run(["zsh", "-f", "-c", ZSH_DRIVER, "zsh", *words], capture_output=True, text=True,
                              env=_env(bin_dir, tree), timeout=60)
        assert done.returncode in (0, 1), done.stderr
        return done.stdout.splitlines()

    assert "claim:Take the best ready task" in zsh("queue", "cl")
    assert sorted(zsh("queue", "show", "lo")) == ["login-1:Login endpoint", "logout-2:Logout"]
    assert zsh("queue", "add", "--from-file", "") == ["(files)"]
    assert zsh("signal", "emit", "DRIFT_DETECTED", "det") == ["detected_drift=:required text", "(no space after)"]


def test_help_is_h_everywhere() -> None:
    for args in (["-h"], ["queue", "-h"], ["queue", "claim", "-h"], ["run", "-h"], ["agents", "-h"],
                 ["completion", "-h"], ["breaker", "check", "-h"], ["signal", "emit", "-h"], ["hook", "-h"]):
        short, long = cli(args), cli([*args[:-1], "--help"])
        assert short.code == 0 and short.stdout == long.stdout and "Usage:" in short.stdout, args
