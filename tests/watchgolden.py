"""Expected screens of ``loki watch`` kept as text files in tests/golden/watch/ (see its README).

``LOKI_UPDATE_GOLDEN=1 pytest tests/watch/test_watchscreen.py tests/watch/test_watch_tmux.py`` rewrites them
from what the code draws now; review the diff before committing it, as for any expected output.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "golden" / "watch"


def check(name: str, actual: str) -> None:
    """``actual`` must equal ``golden/watch/<name>`` (a unified diff says where it does not)."""
    path = GOLDEN / name
    text = actual.rstrip("\n") + "\n"
    if os.environ.get("LOKI_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    expected = path.read_text(encoding="utf-8") if path.exists() else ""
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                            f"golden/watch/{name}", "drawn now"))
        raise AssertionError(f"the screen differs from golden/watch/{name} (LOKI_UPDATE_GOLDEN=1 rewrites it):\n"
                             f"{diff}")
