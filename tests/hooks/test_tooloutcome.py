"""What counts as a failure in hook payloads (loki/hooks/tooloutcome.py), measured on the corpus.

The corpus (tests/corpus, real outputs, labelled) is replayed as the PostToolUse payloads Claude
Code would send, to measure the "no crying wolf" decisions in docs/hooks.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loki.hooks.tooloutcome import CONTENT_TOOLS, FAILURE, IGNORED, SUCCESS, after_failure, after_success

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def corpus() -> list[tuple[str, dict[str, object]]]:
    return [(p.stem, json.loads(p.read_text(encoding="utf-8"))) for p in sorted(CORPUS.glob("*.json"))]


def scores(pairs: list[tuple[bool, bool]]) -> tuple[float, float, int]:
    tp = sum(1 for expected, got in pairs if expected and got)
    fp = sum(1 for expected, got in pairs if not expected and got)
    fn = sum(1 for expected, got in pairs if expected and not got)
    return tp / ((tp + fp) or 1), tp / ((tp + fn) or 1), fp


def bash_response(output: str) -> dict[str, object]:
    return {"stdout": output, "stderr": "", "interrupted": False, "isImage": False, "noOutputExpected": False}


def test_bash_successes_on_the_corpus_are_exact() -> None:
    """PostToolUse only ever sees exit 0: only failures a pipe hid may count, and no content."""
    cases = [(name, c) for name, c in corpus() if c["exit_code"] == 0]
    assert len(cases) >= 40
    pairs = []
    for _, case in cases:
        outcome = after_success("Bash", {"command": case["command"]}, bash_response(str(case["output"])))
        pairs.append((bool(case["expected_error"]), outcome.kind == FAILURE))
    precision, recall, false_alarms = scores(pairs)
    print(f"\nPostToolUse Bash (n={len(cases)} exit-0 outputs): precision={precision:.3f} recall={recall:.3f} "
          f"false alarms={false_alarms}")
    assert false_alarms == 0 and precision == 1.0 and recall >= 0.95
    assert sum(expected for expected, _ in pairs) >= 5  # the corpus does hold hidden failures


def test_content_tools_never_cry_wolf() -> None:
    """Every corpus output, returned by Read or WebFetch (a log, a changelog, a traceback), is a success."""
    for name, case in corpus():
        read = {"type": "text", "file": {"filePath": f"/r/{name}.log", "content": case["output"]}}
        assert after_success("Read", {"file_path": f"/r/{name}.log"}, read).kind == SUCCESS, name
        assert after_success("WebFetch", {"url": "https://x.io"}, {"result": case["output"]}).kind == SUCCESS, name
    assert {"Read", "Grep", "Glob", "WebFetch", "Edit", "Write", "Task"} <= CONTENT_TOOLS


def test_other_tools_fail_only_when_their_reply_leads_with_an_error() -> None:
    cases = corpus()
    pairs = []
    for _, case in cases:
        reply = [{"type": "text", "text": case["output"]}]
        pairs.append((bool(case["expected_error"]), after_success("mcp__shell__run", {}, reply).kind == FAILURE))
    precision, recall, false_alarms = scores(pairs)
    print(f"\nPostToolUse other tools, first line (n={len(cases)}): precision={precision:.3f} recall={recall:.3f} "
          f"false alarms={false_alarms}")
    assert precision >= 0.95 and false_alarms <= 1


@pytest.mark.parametrize(("response", "kind"), [
    ([{"type": "text", "text": "Error: connect ECONNREFUSED 127.0.0.1:5432"}], FAILURE),
    ({"content": [{"type": "text", "text": "3 rows"}], "isError": True}, FAILURE),
    ({"success": False, "message": "quota"}, FAILURE),
    ({"is_error": True}, FAILURE),
    ([{"type": "text", "text": "id | total\n1 | 42\nnote: Error: messages are logged below\nError: x"}], SUCCESS),
    ({"content": [{"type": "text", "text": "Traceback (most recent call last):\n  in a quoted log"}]}, SUCCESS),
    ("ok", SUCCESS),
    (None, SUCCESS),
])
def test_other_tool_replies(response: object, kind: str) -> None:
    assert after_success("mcp__db__query", {"sql": "select"}, response).kind == kind


def test_bash_success_details() -> None:
    interrupted = {"stdout": "", "stderr": "", "interrupted": True, "isImage": False}
    assert after_success("Bash", {"command": "sleep 100"}, interrupted).kind == IGNORED
    piped = bash_response("FAILED tests/t.py::test_a - assert 1 == 2\n1 failed in 0.1s")
    outcome = after_success("Bash", {"command": "pytest | tail -2"}, piped)
    assert outcome.kind == FAILURE and outcome.exit_code == 0 and outcome.result is not None
    assert outcome.result.error_class == "test_failure"
    viewer = bash_response("Traceback (most recent call last):\n  File \"w.py\", line 1\nKeyError: 'x'")
    assert after_success("Bash", {"command": "cat logs/worker.log"}, viewer).kind == SUCCESS


def test_failures() -> None:
    bash = after_failure("Bash", {"command": "cargo build"}, "Exit code 127\nbash: line 1: cargo: command not found")
    assert bash.kind == FAILURE and bash.exit_code == 127 and bash.result is not None
    assert bash.result.error_class == "missing_command"
    assert after_failure("Bash", {"command": "sleep 9"}, "Exit code 130\n", is_interrupt=True).kind == IGNORED
    no_match = after_failure("Bash", {"command": "grep -rn TODO src"}, "Exit code 1\n")
    assert no_match.kind == IGNORED  # grep's "no match" is an answer, not a failure to repeat
    missing = after_failure("Bash", {"command": "grep -rn TODO src"}, "Exit code 2\ngrep: src: No such file")
    assert missing.kind == FAILURE
    read = after_failure("Read", {"file_path": "/x"}, "<tool_use_error>File does not exist.</tool_use_error>")
    assert read.kind == FAILURE and read.result is None and read.error == "File does not exist."
    odd = after_failure("Bash", {"command": "x"}, {"message": "not a string"})
    assert odd.kind == FAILURE
