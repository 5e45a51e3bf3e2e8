"""A regex compiled on first use.

The error scanner and the redactor each hold dozens of patterns. Compiling them all at import costs
~15 ms, more than the rest of a hook run, while most calls only ever need a few of them.
"""

from __future__ import annotations

import re


class LazyRegex:
    __slots__ = ("_compiled", "flags", "source")

    def __init__(self, source: str, flags: int = 0) -> None:
        self.source = source
        self.flags = flags
        self._compiled: re.Pattern[str] | None = None

    def get(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self.source, self.flags)
        return self._compiled
