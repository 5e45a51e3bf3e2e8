"""The strike key: what counts as the same call (loki/strikes/key.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loki.strikes.key import REDACT_MARGIN, call_label, input_preview, normalised_input, strike_key

WHITESPACE_HEAVY = st.text(alphabet="ab \n\t\u00a0", max_size=200)
INPUTS = st.dictionaries(st.sampled_from(["command", "description", "path", "x"]),
                         st.one_of(WHITESPACE_HEAVY, st.lists(WHITESPACE_HEAVY, max_size=4), st.integers()), max_size=4)


def test_the_description_label_is_not_part_of_the_call() -> None:
    first = strike_key("Bash", {"command": "cargo build", "description": "Build it"})
    second = strike_key("Bash", {"command": "cargo build", "description": "Try the build again"})
    assert first == second


def test_whitespace_runs_and_key_order_do_not_matter() -> None:
    first = strike_key("Edit", {"file_path": "/a.py", "old_string": "x  =\n 1", "new_string": "x = 2"})
    second = strike_key("Edit", {"new_string": "x = 2 ", "old_string": "x = 1", "file_path": "/a.py"})
    assert first == second
    assert normalised_input({"b": "  two  words ", "a": [1, {"d": "x", "c": None}]}) == \
        '{"a":[1,{"c":null,"d":"x"}],"b":"two words"}'


def test_different_inputs_and_tools_get_different_keys() -> None:
    base = strike_key("Bash", {"command": "cargo build"})[0]
    assert strike_key("Bash", {"command": "cargo build --release"})[0] != base
    assert strike_key("Bash", {"command": "cargo build", "timeout": 600000})[0] != base  # a real change of approach
    assert strike_key("BashOutput", {"command": "cargo build"})[0] != base
    key, hash_, preview = strike_key("Bash", {"command": "cargo build"})
    assert key == f"Bash:{hash_}" and len(hash_) == 16 and preview == '{"command":"cargo build"}'


def test_only_the_first_chars_are_hashed() -> None:
    long_a = {"command": "echo " + "x" * 300 + " a"}
    long_b = {"command": "echo " + "x" * 300 + " b"}
    assert strike_key("Bash", long_a)[0] == strike_key("Bash", long_b)[0]  # the pattern doc's 200 characters
    assert strike_key("Bash", long_a, 400)[0] != strike_key("Bash", long_b, 400)[0]
    assert len(input_preview(long_a)) == 200


def test_secrets_are_redacted_before_hashing_and_never_in_the_preview() -> None:
    secret = "sk-proj-" + "a1B2c3D4e5F6g7H8i9J0" * 3
    _, _, preview = strike_key("Bash", {"command": f"curl -H 'Authorization: Bearer {secret}' https://api.x.io"})
    assert secret not in preview and "[REDACTED:" in preview
    label = call_label("Bash", {"command": "psql postgres://app:hunter2hunter2@db:5432/shop"})
    assert "hunter2hunter2" not in label and label.startswith("Bash `psql postgres://app:")


def test_call_labels_name_the_subject() -> None:
    assert call_label("Bash", {"command": "npm  test", "description": "x"}) == "Bash `npm test`"
    assert call_label("Edit", {"file_path": "/r/app.py", "old_string": "a", "new_string": "b"}) == "Edit `/r/app.py`"
    assert call_label("mcp__db__query", {"sql": "select 1"}) == 'mcp__db__query `{"sql":"select 1"}`'
    assert call_label("Bash", {"command": "x" * 500}).endswith("...`")


@given(INPUTS, st.integers(min_value=1, max_value=300))
def test_computing_only_the_prefix_gives_the_prefix_of_the_whole(value: dict[str, Any], limit: int) -> None:
    assert normalised_input(value, limit) == normalised_input(value)[:limit]


def test_a_huge_input_is_only_looked_at_up_to_the_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    import loki.text.redact

    seen: list[int] = []
    real = loki.text.redact.redact
    monkeypatch.setattr(loki.text.redact, "redact", lambda text: seen.append(len(text)) or real(text))
    huge = {"file_path": "/app.py", "content": "def f(x):\n    return x + 1\n" * 50_000}  # ~1.3 MB
    _, _, preview = strike_key("Write", huge)
    assert seen == [200 + REDACT_MARGIN]  # not 1.3 MB
    assert preview.startswith('{"content":"def f(x): return x + 1 def f(x):') and len(preview) == 200
