"""What an error-memory record is, for every module that reads or writes one.

The log (:mod:`loki.memory.memory`), its index (:mod:`loki.memory.index`) and compaction
(:mod:`loki.memory.compact`) all need the record's schema and what makes two failures "the
same". Those names live here, in a leaf that imports nothing of loki at the top, so the three
modules depend on it rather than on each other: ``memory`` uses the index and compaction, and
they no longer reach back into ``memory`` (an import circle, even a lazy one, hides which
module is the head of the family).
"""

from __future__ import annotations

RECORD_SCHEMA = "memory-record.json"
"""The schema every line of ``memory/errors.jsonl`` matches (schemas/memory-record.json)."""


def content_hash(tool: str, prefix: str, message: str) -> str:
    """What makes two failures "the same": tool, command prefix and the normalised message."""
    from loki.strikes import key as strikekey
    from loki.text.errorscan import normalise_error

    return strikekey.text_hash(f"{tool}\n{prefix}\n{normalise_error(message)}")
