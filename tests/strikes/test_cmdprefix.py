"""The command prefix (loki/strikes/cmdprefix.py): what "the same kind of command" means to error memory."""

from __future__ import annotations

import pytest

from loki.strikes.cmdprefix import call_prefix, command_prefix


@pytest.mark.parametrize(("command", "prefix"), [
    ("cargo build", "cargo build"),
    ("cargo build --release", "cargo build"),
    ("cargo  build   --offline\n", "cargo build"),
    ("pytest tests/test_a.py", "pytest tests/test_a.py"),
    ("pytest -q -p no:cacheprovider tests/test_a.py::test_x", "pytest tests/test_a.py::test_x"),
    ("python -m pytest -x tests/test_a.py", "pytest tests/test_a.py"),
    ("python3.11 app.py --port 80", "python app.py"),
    ("/usr/bin/python3 -c 'print(1)'", "python -c"),
    ("cd web && FORCE=1 npx jest src/a.test.ts --ci", "jest src/a.test.ts"),
    ("git -C repo push origin main", "git push"),
    ("git commit -m 'fix: the build'", "git commit"),
    ("make", "make"),
    ("make -C build -j 4 install", "make install"),
    ("timeout 60 pytest -x tests", "pytest tests"),
    ("sudo -u deploy make install", "make install"),
    ("uv run pytest tests", "pytest tests"),
    ("npm test 2>&1 | tail -20", "npm test"),
    ("npm run build", "npm run build"),
    ("yarn run -s lint", "yarn run lint"),
    ("tsc -p . --noEmit", "tsc"),
    ("source .venv/bin/activate && pytest", "pytest"),
    ("export A=1; cd x", "export"),
    ("ls -la | grep foo", "ls"),
    ("echo 'a && b' > out.txt", "echo"),
    ('"$HOME/bin/tool" run', ""),
    ("", ""),
    ("   ", ""),
])
def test_the_prefix_of_a_command(command: str, prefix: str) -> None:
    assert command_prefix(command) == prefix


def test_bash_prefixes_are_redacted() -> None:
    password = "s3cr3t-Pa55word"
    prefix = call_prefix("Bash", {"command": f"curl -sf https://admin:{password}@db.internal/health"})
    assert prefix.startswith("curl https://admin:") and password not in prefix and "REDACTED" in prefix


def test_other_tools_use_the_path_they_work_on() -> None:
    assert call_prefix("Edit", {"file_path": "src/app.py", "old_string": "a", "new_string": "b"}) == "src/app.py"
    assert call_prefix("WebFetch", {"url": "https://example.com/docs", "prompt": "x"}) == "https://example.com/docs"
    assert call_prefix("mcp__db__query", {"sql": "select 1"}) == ""
    assert call_prefix("Bash", "not a dict") == "" and call_prefix("Bash", {"command": 3}) == ""


def test_a_huge_command_costs_what_its_start_costs() -> None:
    assert command_prefix("pytest tests " + "x " * 5_000_000) == "pytest tests"
