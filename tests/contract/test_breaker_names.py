"""A mistyped breaker name never goes past an open breaker (issue 23).

``loki breaker check api/cluade`` while ``api/claude`` is OPEN used to answer "go" (exit 0): a name never
recorded is a new, CLOSED breaker, and the did-you-mean note went to stderr after the go-ahead. Now a name
never recorded that is close to a recorded breaker which is not CLOSED is refused (exit 2, one line naming
both); ``--new`` says the name is meant. Close to a CLOSED breaker, or to none, a new name still goes ahead.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import Any

import pytest

from loki.breakers.breakers import Breakers
from loki.errors import InvalidArgument
from tests.helpers import NOW, cli, snapshot_bytes

ENV = {"LOKI_NOW": NOW}


def _open(breakers: Breakers, name: str = "api/claude") -> None:
    breakers.trip(name, 300)
    assert not breakers.check(name).allowed


def test_a_typo_of_an_open_breaker_is_refused_naming_it(backend_store: Any) -> None:
    breakers = Breakers(backend_store)
    _open(breakers)
    with pytest.raises(InvalidArgument) as caught:
        breakers.check("api/cluade")
    message = caught.value.message
    assert "'api/cluade'" in message and "api/claude" in message and "OPEN" in message and "--new" in message
    assert caught.value.exit_code == 2
    assert backend_store.read("state/circuit-breakers.json").keys() == {"api/claude"}  # nothing recorded
    assert breakers.check("api/cluade", new=True).allowed  # meant: a new dependency, CLOSED


def test_a_new_name_close_to_a_closed_breaker_or_to_none_goes_ahead(backend_store: Any) -> None:
    breakers = Breakers(backend_store)
    assert breakers.check("api/claude").allowed  # nothing recorded at all
    breakers.record_failure("api/claude", "429")  # recorded, CLOSED
    decision = breakers.check("api/cluade")
    assert decision.allowed and breakers.similar("api/cluade") == "api/claude"
    _open(breakers, "db/main")
    assert breakers.check("api/codex").allowed  # nothing close to the open one


def _fast(args: list[str], env: dict[str, str]) -> tuple[int | None, str, str]:
    from loki.cli.fast import breaker_check

    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = breaker_check(args)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.files
def test_breaker_check_through_the_cli_and_the_fast_lane(root: Path) -> None:
    assert cli(["breaker", "trip", "api/claude", "--for", "300"], root=root, env=ENV).code == 0
    before = snapshot_bytes(root)
    typo = cli(["breaker", "check", "api/cluade"], root=root, env=ENV)
    assert typo.code == 2 and typo.stdout == ""
    assert typo.stderr.count("\n") == 1 and "did you mean api/claude" in typo.stderr and "--new" in typo.stderr
    fast = _fast(["--root", str(root), "breaker", "check", "api/cluade"], ENV)
    assert fast == (2, "", typo.stderr)  # the fast lane answers the same, byte for byte
    assert snapshot_bytes(root) == before
    meant = cli(["breaker", "check", "api/cluade", "--new"], root=root, env=ENV)
    assert meant.code == 0 and meant.stdout.startswith("go: ")
    assert _fast(["--root", str(root), "breaker", "check", "api/cluade", "--new"], ENV)[0] == 0
    as_json = cli(["breaker", "check", "api/cluade", "--json"], root=root, env=ENV)
    assert as_json.code == 2 and '"did_you_mean": "api/claude"' in as_json.stderr
