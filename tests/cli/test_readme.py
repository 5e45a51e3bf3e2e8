"""The README stays true: every command and option it shows exists, its Python example runs."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from loki.cli.app import build_app
from tests.helpers import cli

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def _readme_commands() -> list[str]:
    """Every `loki ...` command in the README's tables."""
    found = []
    for line in README.splitlines():
        if line.startswith("| `loki "):
            cell = re.split(r"(?<!\\)\|", line)[1].replace("\\|", "|")
            for command in re.findall(r"`(loki [^`]+)`", cell):
                found.extend(_expand(command))
    return found


def _expand(command: str) -> list[str]:
    """`loki queue heartbeat|complete ID` -> one command per alternative subcommand."""
    words = command.split()
    for index, word in enumerate(words):
        if word.startswith("-") or word.startswith("["):
            break
        if "|" in word and re.fullmatch(r"[a-z-]+(\|[a-z-]+)+", word):
            return [" ".join([*words[:index], alt, *words[index + 1:]]) for alt in word.split("|")]
    return [command]


def _path_and_options(command: str) -> tuple[list[str], list[str]]:
    words = command.split()[1:]
    path = []
    for word in words:
        if word.startswith("-") or word.startswith("[") or word.isupper() or "|" in word or word == "...":
            break
        path.append(word)
    return path, re.findall(r"(--[a-z][a-z-]*)", command)


COMMANDS = _readme_commands()


def test_the_readme_lists_commands() -> None:
    assert len(COMMANDS) > 30


@pytest.mark.parametrize("command", COMMANDS)
def test_every_readme_command_and_option_exists(command: str) -> None:
    path, options = _path_and_options(command)
    result = cli([*path, "--help"])
    assert result.code == 0, f"{command}: {result.stderr}"
    for option in options:
        if option in ("--help", "--json", "--root"):
            continue
        assert option in result.stdout, f"{command}: {option} is not an option of `loki {' '.join(path)}`"


def test_the_readme_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    block = README.split("```python\n", 1)[1].split("```", 1)[0]
    assert cli(["init", "--path", str(tmp_path)]).code == 0
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README.md", "exec"), {})
    assert cli(["queue", "show", "--json", cli(["queue", "list", "--state", "completed", "--json"],
                                               root=tmp_path / ".loki").json()["tasks"][0]["id"]],
               root=tmp_path / ".loki").json()["task"]["result"] == {"commit": "4f2a9c1"}


def _all_commands(group: object, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], object]]:
    found = []
    for info in getattr(group, "registered_commands", []):
        name = info.name or info.callback.__name__.replace("_", "-")
        found.append(((*prefix, name), info.callback))
    for info in getattr(group, "registered_groups", []):
        found.append(((*prefix, info.name), info.typer_instance))
        found.extend(_all_commands(info.typer_instance, (*prefix, info.name)))
    return found


def test_every_command_has_help_text() -> None:
    missing = []
    for path, target in _all_commands(build_app()):
        doc = getattr(target, "__doc__", None) if callable(target) else getattr(target.info, "help", None)
        if not doc or not str(doc).strip():
            missing.append(" ".join(path))
    assert missing == []


def test_the_bad_input_count_it_states_is_the_corpus_size() -> None:
    stated = re.search(r"a corpus of (\d+) bad inputs", README)
    assert stated is not None
    assert int(stated.group(1)) == len(list((REPO / "tests" / "bad_inputs").glob("*.json")))


def test_every_link_between_the_docs_resolves() -> None:
    """A relative Markdown link in README.md or docs/ names a file that exists (a missing STYLE.md once hid here)."""
    broken = []
    for doc in [REPO / "README.md", REPO / "BENCHMARKS.md", *sorted((REPO / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", doc.read_text()):
            if not re.match(r"[a-z]+:", target) and not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(REPO)} -> {target}")
    assert broken == []


def test_design_links_the_style_note() -> None:
    design = (REPO / "docs" / "design.md").read_text()
    assert "[STYLE.md](STYLE.md)" in design
    style = (REPO / "docs" / "STYLE.md").read_text()
    for topic in ("One concept per module", "The library decides", "Errors carry their exit code", "Time is injected",
                  "Lazy imports on the hot paths", "Docstrings and comments give reasons", "Short functions", "Tests"):
        assert f"## {topic}" in style, topic


@functools.cache
def _click_app() -> object:
    """The click tree, built once: building it per README command cost seconds a run."""
    import typer.main

    return typer.main.get_command(build_app())


def _click_command(path: list[str]) -> object:
    command: object = _click_app()
    for word in path:
        if not hasattr(command, "commands"):
            break  # a lower-case argument after the command (`loki completion bash`)
        command = command.commands[word]
    return command


def _repeatable_options(path: list[str]) -> set[str]:
    return {name for param in _click_command(path).params  # type: ignore[attr-defined]
            if getattr(param, "multiple", False) for name in param.opts if name.startswith("--")}


def test_repeatable_options_are_shown_repeated() -> None:
    """`[--depends-on ID ...]` reads as several values after one flag, which the parser refuses (exit 2): a
    repeatable option is shown with the flag repeated, `[--depends-on ID [--depends-on ID ...]]`."""
    wrong = []
    checked = 0
    for command in COMMANDS:
        path, _ = _path_and_options(command)
        for option in _repeatable_options(path):
            for shown in re.finditer(rf"\[{option} (\S+)(?P<rest>( \[{option} \1 (\.\.\.|…)\])| (\.\.\.|…))?\]",
                                     command):
                checked += 1
                # `--title T [--title T ...]`: a required first one, then more
                after_the_flag = command[:shown.start()].endswith(f"{option} {shown.group(1)} ")
                if not (shown.group("rest") or "").startswith(" [") and not after_the_flag:
                    wrong.append(f"loki {' '.join(path)}: {shown.group(0)}")
    assert checked >= 10
    assert wrong == []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = re.sub(r"\[?(--[a-z-]+) (\S+) \[\1 \2 (\.\.\.|…)\]", "", doc.read_text())
        assert not re.findall(r"\[--[a-z-]+ [A-Z]+ (?:\.\.\.|…)\]", text), doc.name


def test_the_readme_gives_no_unmeasured_suite_times_and_names_the_agent_download() -> None:
    """The suite times it once gave (~40 s, ~100-120 s) were 6-9 times too low, and the first `make test`
    installs three agent CLIs, not one: no time without a date, and the download named with its size."""
    assert not re.search(r"~\s?\d+(-\d+)? ?(s|min)\b", README)
    assert re.search(r"Claude Code,\s+Gemini CLI and Codex CLI", README) and "867 MB" in README


def test_the_readme_names_every_hook_event_and_how_many_are_installed() -> None:
    """`loki hook EVENT`'s row names every event the command takes, and `hooks install` says how many it
    installs (a new event, such as TaskCompleted, is added to both or the README is wrong)."""
    from loki.hooks.boundary import EVENTS

    row = next(line for line in README.splitlines() if line.startswith("| `loki hook "))
    shown = re.search(r"`loki hook ([a-z|\\-]+)`", row)
    assert shown is not None, row
    assert shown.group(1).replace("\\|", "|").split("|") == list(EVENTS)
    words = {5: "five", 6: "six", 7: "seven", 8: "eight"}
    assert f"merge loki's {words[len(EVENTS)]} hooks into" in README
