"""Expected screens of ``loki watch`` kept as text files in tests/golden/watch/ (see its README).

``LOKI_UPDATE_GOLDEN=1 pytest tests/watch/test_watchscreen.py tests/watch/test_watch_tmux.py`` rewrites them
from what the code draws now; review the diff before committing it, as for any expected output.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "golden" / "watch"


def check(name: str, actual: str, *, folder: str = "watch", what: str = "screen") -> None:
    """``actual`` must equal ``golden/<folder>/<name>`` (a unified diff says where it does not). The CLI's
    tables (``folder="tables"``) are kept the same way."""
    path = GOLDEN.parent / folder / name
    text = actual.rstrip("\n") + "\n"
    if os.environ.get("LOKI_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    expected = path.read_text(encoding="utf-8") if path.exists() else ""
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                            f"golden/{folder}/{name}", "drawn now"))
        raise AssertionError(f"the {what} differs from golden/{folder}/{name} (LOKI_UPDATE_GOLDEN=1 rewrites it):\n"
                             f"{diff}")
