"""Fuzzing every parser with hypothesis: no input ever makes loki crash with a traceback.

State files, signal files, hook stdin, the config, and the JSON arguments (--payload, --result,
--data, key:=JSON). Each failure must be one of loki's own errors, with its exit code: for the
CLI, exit 0/1 (2 for a value its option refuses, 3/4 where the state says so) and never "internal error".
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loki.errors import LokiError
from loki.hooks.boundary import run as run_hook
from loki.storage import layout
from loki.storage.store import Store
from loki.storage.tree import init_tree
from tests.helpers import cli, task

pytestmark = pytest.mark.slow  # hypothesis over every parser: ~20 s (make test-fast skips it)

FUZZ = settings(max_examples=int(os.environ.get("LOKI_FUZZ_EXAMPLES", "150")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# Text that is often almost-JSON: the interesting inputs are near the valid ones.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
SEEDS = [json.dumps({"version": 1, "tasks": [task("t1")]}), '{"tasks": [], "metadata": {"last_reviewed": null, '
         '"total_abandoned": 0, "total_recovered": 0}}', '{"api/x": {"state": "CLOSED", "failure_count": 0, '
         '"last_failure_time": null, "last_state_change": "2026-01-25T10:00:00Z"}}', '{"version": 1}']


@st.composite
def mutated_text(draw: st.DrawFn) -> bytes:
    """A valid document with bytes flipped, cut, duplicated or replaced; or arbitrary JSON; or noise."""
    kind = draw(st.sampled_from(["mutate", "json", "bytes"]))
    if kind == "json":
        return json.dumps(draw(json_values)).encode()
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    data = bytearray(draw(st.sampled_from(SEEDS)).encode())
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        op = draw(st.sampled_from(["flip", "cut", "dup", "insert"]))
        if op == "flip":
            data[at] = draw(st.integers(0, 255))
        elif op == "cut":
            del data[at:at + draw(st.integers(1, 20))]
        elif op == "dup":
            data[at:at] = data[at:at + draw(st.integers(1, 30))]
        else:
            data[at:at] = draw(st.sampled_from([b"NaN", b"Infinity", b",", b'"x":1,', b"\xff", b"\xef\xbb\xbf", b"}",
                                                b"[", b'"status":"done",', b"null"]))
    return bytes(data)


class Tree:
    """A fresh initialised tree per example (hypothesis reuses the test function's fixtures)."""

    def __enter__(self) -> Path:
        self.tmp = tempfile.mkdtemp(prefix="loki-fuzz-")
        root = Path(self.tmp) / ".loki"
        init_tree(str(root))
        return root

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def assert_clean(result: Any, allowed: tuple[int, ...] = (0, 1)) -> None:
    assert result.code in allowed, (result.code, result.stderr)
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr, result.stderr


@FUZZ
@given(rel=st.sampled_from([layout.queue_file("pending"), layout.queue_file("in-progress"), layout.DEADLETTER,
                            layout.ABANDONED, layout.BREAKERS, layout.CONFIG]), data=mutated_text())
def test_state_files(rel: str, data: bytes) -> None:
    with Tree() as root:
        (root / rel).write_bytes(data)
        with contextlib.suppress(LokiError):
            Store(root).read(rel)
        for args in (["status", "--json"], ["queue", "list", "--state", "all"], ["deadletter", "list"],
                     ["breaker", "status"], ["validate"]):
            assert_clean(cli(args, root=root))
        claim = cli(["queue", "claim", "--agent", "a"], root=root)
        assert_clean(claim, (0, 1, 3))
        # A mutation can leave a valid queue file (a cut "version"): a successful claim then rewrites it.
        claimed_from = claim.code == 0 and rel == layout.queue_file("pending")
        assert (root / rel).read_bytes() == data or rel == layout.queue_file("in-progress") or claimed_from


@FUZZ
@given(name=st.sampled_from(["HUMAN_REVIEW_NEEDED", "HUMAN_APPROVED", "TESTS_PASSED_auth", "FRICTION_DETECTED",
                             "DRIFT_DETECTED", "CUSTOM_THING", "DOCS_NEEDED.3"]), data=mutated_text())
def test_signal_files(name: str, data: bytes) -> None:
    from loki.watch.consumer import consume_pending

    with Tree() as root:
        (root / "signals" / name).write_bytes(data)
        os.utime(root / "signals" / name, (0, 0))  # not "being written right now"
        store = Store(root)
        with contextlib.suppress(LokiError):
            consume_pending(store)
        assert_clean(cli(["signal", "list"], root=root))
        assert_clean(cli(["watch", "--once", "--no-tui"], root=root))


@FUZZ
@given(event=st.sampled_from(["pre-tool-use", "post-tool-use", "post-tool-use-failure", "session-start", "stop"]),
       data=st.one_of(st.binary(max_size=300), json_values.map(lambda v: json.dumps(v).encode()),
                      st.fixed_dictionaries({"hook_event_name": st.text(max_size=20), "tool_name": json_values,
                                             "tool_input": json_values, "error": json_values,
                                             "tool_response": json_values, "cwd": st.text(max_size=10)},
                                            ).map(lambda v: json.dumps(v).encode()),
                      # JSON.stringify's own output for a string cut inside a surrogate pair
                      st.tuples(json_values, st.integers(0xD800, 0xDFFF)).map(
                          lambda v: json.dumps({"tool_name": "Bash", "tool_input": {"command": "x@"},
                                                "error": "Exit code 1\n@", "other": v[0]}
                                               ).replace("@", f"\\u{v[1]:04x}").encode())))
def test_hook_stdin(event: str, data: bytes) -> None:
    with Tree() as root:
        out, err = io.StringIO(), io.StringIO()
        code = run_hook(event, str(root), io.BytesIO(data), out, err)
        assert code in (0, 1), (code, err.getvalue())
        assert "Traceback" not in err.getvalue() and "internal error" not in err.getvalue(), err.getvalue()
        if code == 1:
            assert err.getvalue().count("\n") == 1  # one line on stderr
        if out.getvalue():
            json.loads(out.getvalue())  # whatever it answers is Claude Code's JSON


@FUZZ
@given(value=st.one_of(st.text(max_size=60), json_values.map(json.dumps)))
def test_json_arguments(value: str) -> None:
    with Tree() as root:
        # A value its option refuses is a usage error (2); a signal breaking its type's schema is 1.
        assert_clean(cli(["queue", "add", "x", "--payload", value], root=root), (0, 2))
        assert_clean(cli(["signal", "emit", "DOCS_NEEDED", "--data", value], root=root), (0, 1, 2))
        assert_clean(cli(["signal", "emit", "DOCS_NEEDED", f"message:={value}"], root=root), (0, 1, 2))
        cli(["queue", "add", "y", "--id", "t1"], root=root)
        cli(["queue", "claim", "--agent", "a"], root=root)
        assert_clean(cli(["queue", "complete", "t1", "--agent", "a", "--result", value], root=root), (0, 2, 4))
