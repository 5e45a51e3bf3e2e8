"""The strike key: which tool calls count as "the same call" (docs/design.md §4, Strikes and hooks).

A key is ``<tool_name>:<input_hash>``. The hash covers the first ``input_hash_chars`` (200, the
"tool error retry escalation" pattern) characters of the *normalised* tool input:

1. the top-level ``description`` is dropped: Claude Code's Bash and Task tools carry a label the
   model rewrites on every retry, which says nothing about what the call does;
2. every string has its whitespace runs collapsed to one space and is stripped, so ``npm  test``
   and ``npm test\\n`` are one call;
3. the value is serialised as compact JSON with object keys sorted (``{"command":"npm test"}``),
   so the key order the model happened to emit does not matter;
4. secrets are redacted (:func:`loki.text.redact.redact`, over the first ``input_hash_chars`` + 4096
   characters, so a secret running across the cut is still recognised) before the cut, so the
   stored preview never holds one and a weak password cannot be recovered by brute-forcing the
   hash against it;
5. the first ``input_hash_chars`` characters are hashed with BLAKE2b (8 bytes, 16 hex digits: the
   ADR's 8-character hash could collide within a busy branch, 64 bits will not).

The preview stored beside the key is exactly step 5's text, so a human can see what was compared.
Only that prefix is ever computed: a 1 MB ``Write`` costs what a short command does.

This module runs on the PreToolUse hot path: it imports ``json`` (which the hook has loaded to
read its stdin) and BLAKE2b straight from ``_blake2``, skipping ``hashlib``'s OpenSSL start-up
(~3 ms); :mod:`loki.text.redact` is imported only when a key is actually computed.
"""

from __future__ import annotations

import json

try:  # the same function hashlib.blake2b re-exports, without loading OpenSSL
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - a Python built without _blake2
    from hashlib import blake2b

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

DEFAULT_CHARS = 200
DIGEST_BYTES = 8
REDACT_MARGIN = 4096
"""Characters past the cut that redaction still sees (a PEM block is redacted from its first line)."""
IGNORED_TOP_LEVEL = frozenset({"description"})
"""Top-level input fields that are labels, not part of what the call does."""


def _collapse(text: str, need: int | None) -> str:
    """``" ".join(text.split())``, or a prefix of it at least ``need`` characters long.

    Splitting only a prefix of the raw string gives a prefix of the full result (a word cut at the
    end is a prefix of the whole word), so nothing past what is needed is ever scanned.
    """
    if need is None:
        return " ".join(text.split())
    size = 2 * need + 64
    while True:
        part = " ".join(text[:size].split())
        if size >= len(text) or len(part) > need:
            return part
        size *= 4


def _normalise_value(value: Any, need: int | None) -> Any:
    if isinstance(value, str):
        return _collapse(value, need)
    if isinstance(value, dict):
        return {str(key): _normalise_value(item, need) for key, item in value.items()}
    if isinstance(value, list):
        return [_normalise_value(item, need) for item in value]
    return value


def normalised_input(tool_input: Any, limit: int | None = None) -> str:
    """Steps 1-3: the canonical text of a tool input (not yet redacted or cut).

    With ``limit``, only its first ``limit`` characters are exact (each string is collapsed only as
    far as needed): what :func:`input_preview` uses.
    """
    if isinstance(tool_input, dict):
        tool_input = {key: item for key, item in tool_input.items() if key not in IGNORED_TOP_LEVEL}
    text = json.dumps(_normalise_value(tool_input, limit), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return text if limit is None else text[:limit]


def input_preview(tool_input: Any, chars: int = DEFAULT_CHARS) -> str:
    """Steps 1-4 and the cut: exactly the text that is hashed (secrets redacted)."""
    from loki.text.redact import redact

    chars = max(1, chars)
    return redact(normalised_input(tool_input, chars + REDACT_MARGIN))[:chars]


def text_hash(text: str) -> str:
    return blake2b(text.encode("utf-8"), digest_size=DIGEST_BYTES).hexdigest()


def input_hash(tool_input: Any, chars: int = DEFAULT_CHARS) -> str:
    return text_hash(input_preview(tool_input, chars))


def make_key(tool_name: str, hash_: str) -> str:
    return f"{tool_name}:{hash_}"


def strike_key(tool_name: str, tool_input: Any, chars: int = DEFAULT_CHARS) -> tuple[str, str, str]:
    """``(key, input_hash, preview)`` of one call."""
    preview = input_preview(tool_input, chars)
    hash_ = text_hash(preview)
    return make_key(tool_name, hash_), hash_, preview


def call_label(tool_name: str, tool_input: Any, limit: int = 120) -> str:
    """A short human label of a call for messages: ``Bash `npm test` ``, ``Edit app/main.py``.

    Redacted like everything loki shows or stores.
    """
    from loki.text.redact import redact

    window = limit + REDACT_MARGIN
    subject = ""
    if isinstance(tool_input, dict):
        for field in ("command", "file_path", "notebook_path", "path", "url", "pattern", "query", "prompt"):
            value = tool_input.get(field)
            if isinstance(value, str) and value.strip():
                subject = _collapse(value, window)[:window]
                break
    if not subject:
        subject = normalised_input(tool_input, window)
    subject = redact(subject)
    if len(subject) > limit:
        subject = subject[: limit - 3] + "..."
    return f"{tool_name} `{subject}`"
