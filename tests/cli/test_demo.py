"""The front door's `make demo` scenario (demo/demo.sh) runs to the end, and a log of it is plain text.

A new user ran `make demo > demo.log` and found raw bold escape sequences in the file: the headings are bold on
a terminal only.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_demo_runs_to_the_end_and_its_log_has_no_escape_sequences(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "TMPDIR": str(tmp_path)}
    env.pop("NO_COLOR", None)
    done = subprocess.run(["bash", str(REPO / "demo" / "demo.sh")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1. A fresh .loki/ tree" in done.stdout and "Done. The tree lived in" in done.stdout
    assert "\x1b" not in done.stdout, [line for line in done.stdout.splitlines() if "\x1b" in line][:3]
