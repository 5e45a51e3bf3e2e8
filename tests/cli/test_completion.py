"""Shell completion, for real: the script ``loki completion SHELL`` prints, loaded into the shell, asks loki
for candidates (``loki __complete``) through the typer-free lane, which reads the committed table and the tree.

bash is driven the way readline drives it (COMP_LINE, COMP_POINT, COMP_WORDS split at COMP_WORDBREAKS, then
the function ``complete -p`` names); fish through ``complete -C``; zsh with ``_describe`` and ``_files``
standing in for the completion system (they print what they were given). zsh and fish run when installed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loki.breakers.breakers import Breakers
from loki.cli.app import build_app
from loki.cli.completion import render_table
from loki.storage.store import Store
from tests.helpers import NOW, cli, loki_proc

REPO = Path(__file__).resolve().parents[2]


def test_the_committed_table_is_the_apps() -> None:
    """loki/cli/completiontable.py is generated from the app: a new command or option shows up in Tab at once."""
    committed = (REPO / "loki" / "cli" / "completiontable.py").read_text()
    assert committed == render_table(build_app()), "run `make completion-table`"


@pytest.fixture
def tree(root: Path, store: Store) -> Path:
    for args in (["queue", "add", "Login endpoint", "--id", "login-1", "--type", "eng-backend", "-l", "auth"],
                 ["queue", "add", "Logout", "--id", "logout-2"],
                 ["queue", "add", "Docs", "--id", "docs-3", "--max-attempts", "1"],
                 ["queue", "claim", "--agent", "eng-001"],
                 ["queue", "claim", "--agent", "eng-002"],
                 ["queue", "claim", "--agent", "eng-003"],
                 ["queue", "fail", "docs-3", "--agent", "eng-003", "--error", "boom"],
                 ["escalate", "login-1", "--trigger", "security_decision"]):
        assert cli(args, root=root, env={"LOKI_NOW": NOW}).code == 0, args
    Breakers(store).record_failure("api/claude")
    Breakers(store).record_failure("api/codex")
    return root


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """A `loki` on PATH that runs this checkout, as the console script would."""
    directory = tmp_path / "bin"
    directory.mkdir()
    (directory / "loki").write_text(f'#!/bin/sh\nexec {sys.executable} -m loki "$@"\n')
    (directory / "loki").chmod(0o755)
    return directory


def _env(bin_dir: Path, tree: Path) -> dict[str, str]:
    import os

    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOKI_ROOT": str(tree)}


BASH_DRIVER = r'''
source <(loki completion bash)
complete -p loki
COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}
# the words as bash splits them: at blanks, and around the characters of COMP_WORDBREAKS ('=' ':' ...)
read -ra COMP_WORDS <<< "$(printf '%s' "$COMP_LINE" | sed -e 's/\([=:]\)/ \1 /g')"
[[ "$COMP_LINE" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
compopt() { NOSPACE="$1 $2"; }  # the builtin works only under readline: record what the function asks of it
_loki_completion
printf '%s\n' "${COMPREPLY[@]}"
[[ "$NOSPACE" == "-o nospace" ]] && echo '(nospace)'
exit 0
'''


def bash_complete(line: str, bin_dir: Path, tree: Path) -> list[str]:
    done = subprocess.run(["bash", "-c", BASH_DRIVER, "bash", line], capture_output=True, text=True,
                          env=_env(bin_dir, tree), timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "complete -o default -o nosort -F _loki_completion loki"  # what `complete -p` shows
    return [line for line in lines[1:] if line]


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
def test_bash_completes_from_the_app_and_the_tree(line: str, expected: list[str], bin_dir: Path,
                                                   tree: Path) -> None:
    got = bash_complete(line, bin_dir, tree)
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
