"""What error memory's search keeps of each line of the log, for both engines that search it.

The SQLite cache (:mod:`loki.memory.index`) and PostgreSQL's tables
(:mod:`loki.storage.postgres.memorysearch`) read the same log the same way: a line is a record or is
skipped with its reason; errors with one ``content_hash`` are one *pattern* whose fields are those of
its latest occurrence; a resolution's text joins the searchable text of the patterns it resolves.
Only the SQL differs, so the rules live here once.
"""

from __future__ import annotations

import json
import re

from loki.memory.record import RECORD_SCHEMA

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

    from loki.storage.schema import Registry

RESOLUTION_TEXT_CHARS = 2000
"""A pattern's searchable resolution text keeps its last this many characters."""
SKIPPED_KEPT = 100
COLUMNS = ("content_hash", "tool", "prefix", "command", "error_message", "error_class", "exit_code",
           "file_references", "stack_trace", "cwd", "branch", "session_id", "first_seen", "last_seen",
           "occurrences", "resolutions")
"""What a search hit and a frequent pattern show (plus ``resolution``), in this order."""
_WORD = re.compile(r"\w+")


def query_words(query: str, limit: int) -> list[str]:
    """The words of a search query (never its syntax: both engines match words, nothing else)."""
    from loki.errors import InvalidArgument

    words = _WORD.findall(query)
    if not words:
        raise InvalidArgument("the search query has no words in it", field="query")
    if limit < 1:
        raise InvalidArgument("--limit must be at least 1", field="limit")
    return words


def read_line(schemas: Registry, raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """``(record, None)`` for a line of the log, or ``(None, why it is skipped)``."""
    from loki.storage import jsonio

    try:
        record = jsonio.loads_strict(raw)
    except jsonio.JsonError as exc:
        return None, exc.reason
    found = schemas.problems(RECORD_SCHEMA, record)
    if found:
        pointer, reason = found[0]
        return None, f"does not match {RECORD_SCHEMA} at {pointer or '/'} ({reason})"
    return record, None


def error_fields(record: dict[str, Any], line: int) -> dict[str, Any]:
    """A pattern's fields from its latest occurrence (``file_references`` as JSON text)."""
    return {
        "tool": record["tool"], "prefix": record.get("prefix") or "", "command": record["command"],
        "error_message": record["error_message"], "error_class": record.get("error_class"),
        "exit_code": record.get("exit_code"), "file_references": json.dumps(record.get("file_references") or []),
        "stack_trace": record.get("stack_trace"), "output": record.get("output") or "",
        "cwd": record.get("cwd") or "", "branch": record.get("branch") or "",
        "session_id": record.get("session_id"), "last_id": record["id"], "last_line": line,
    }


def refs_text(file_references: str) -> str:
    """The searchable form of a pattern's file references: ``path:line`` words."""
    return " ".join(f"{ref['file']}:{ref['line']}" for ref in json.loads(file_references))


def with_resolution(text: str, resolution: str) -> str:
    """A pattern's searchable resolution text with one more fix (kept once, the latest last)."""
    joined = text if resolution in text else f"{text} {resolution}".strip()
    return joined[-RESOLUTION_TEXT_CHARS:]


def hit(row: dict[str, Any], best: dict[str, Any] | None) -> dict[str, Any]:
    """A pattern as a search or stats row shows it."""
    shown = {name: row[name] for name in COLUMNS}
    shown["file_references"] = json.loads(shown["file_references"])
    shown["resolution"] = best if shown["resolutions"] else None
    return shown
