"""A check's process group is signalled only while the check is unreaped (loki/work/checks.py, by the rule of
breakers/runner.py: a reaped leader's group id may be reused by an unrelated process group)."""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

import pytest

from loki.breakers import runner
from loki.work.checks import Checks
from tests.helpers import unreaped

PY = sys.executable


def launcher(argv: list[str], cwd: str | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, cwd=cwd)


@pytest.mark.parametrize(("command", "timeout", "passed"), [
    (f"{PY} -c pass", 60.0, True),  # it exited: what it left of its group is killed, before it is reaped
    (f"{PY} -c 'import time; time.sleep(60)'", 0.0, False),  # timed out: killed while it runs
])
def test_the_group_is_signalled_only_while_the_check_is_unreaped(monkeypatch: pytest.MonkeyPatch, command: str,
                                                                 timeout: float, passed: bool) -> None:
    seen: list[tuple[int, bool, bool]] = []
    real = runner.signal_group

    def recording(child: Any, signum: int) -> None:
        seen.append((signum, child.returncode is None, unreaped(child.pid)))
        real(child, signum)

    monkeypatch.setattr(runner, "signal_group", recording)
    results = Checks(launcher, timeout=timeout).run([command])  # type: ignore[arg-type]
    assert results[0].passed is passed and results[0].timed_out is not passed
    assert seen and all(signum == signal.SIGKILL and not_reaped and zombie_or_alive
                        for signum, not_reaped, zombie_or_alive in seen), seen
