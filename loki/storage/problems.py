"""What ``validate`` and ``doctor`` report, on every backend: a problem, and a doctor's report.

Apart from the checks (:mod:`loki.storage.checks`) so that the storage interfaces (:mod:`loki.storage.state`)
can name them without importing the checks, which read through those interfaces.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Problem:
    file: str
    pointer: str
    message: str
    whole_file: bool = True
    """The file itself is broken (it does not parse or breaks its schema). False for a problem that
    only shows across files (a task in two files, a status that does not match its file): moving
    the file aside would not fix it, it would take good records out of the queue."""

    def __str__(self) -> str:
        where = f"{self.file}{' at ' + self.pointer if self.pointer else ''}"
        return f"{where}: {self.message}"


@dataclass
class DoctorReport:
    journals_finished: list[str] = field(default_factory=list)
    temp_files: list[str] = field(default_factory=list)
    temp_removed: list[str] = field(default_factory=list)
    detached: list[str] = field(default_factory=list)
    """State files that had other hard links and were given their own copy (``--repair``)."""
    problems: list[Problem] = field(default_factory=list)
    moved_aside: list[dict[str, str]] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["healthy"] = self.healthy
        return data
