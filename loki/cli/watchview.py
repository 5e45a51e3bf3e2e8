"""The live view of ``loki watch`` drawn with rich: the lines :mod:`loki.watch.screen` composed, coloured.

What is shown where, and how it fits the terminal, is decided by the library; this module only
gives each tone a style.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from loki.watch.screen import lease_left

if TYPE_CHECKING:
    from loki.watch.screen import Line

__all__ = ["STYLES", "lease_left", "to_text"]

STYLES = {"": "", "title": "bold", "head": "bold", "dim": "dim", "ok": "green", "warn": "yellow", "bad": "bold red",
          "key": "bold cyan"}


def to_text(lines: list[Line]) -> Text:
    """The screen as one rich Text, never wrapped (every line already fits the terminal)."""
    text = Text(no_wrap=True, overflow="crop", end="")
    for index, line in enumerate(lines):
        if index:
            text.append("\n")
        for segment, tone in line:
            text.append(segment, STYLES.get(tone, ""))
    return text
