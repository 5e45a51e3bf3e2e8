"""Control characters: refused in names, escaped on the way to a terminal.

A title, an error message or a name can carry bytes a terminal acts on: ESC sequences that move the
cursor, clear the screen or set the window title, C1 controls (U+0080-U+009F, which some terminals
treat like ESC), DEL, a carriage return that overwrites the start of a line, and the bidirectional
overrides and isolates (U+202A-U+202E, U+2066-U+2069) that make text display in another order than
it reads ("Trojan Source"). So:

* **names** (agent ids, breaker names, task types, labels) may not contain any of them:
  :func:`check_name` refuses them with the character and its position;
* **free text** (titles, descriptions, errors, notes) is stored as given, and every human-facing
  printer passes it through :func:`for_terminal`, which shows each such character as a visible
  escape (``\\x1b``, ``\\u202e``) and keeps newlines and tabs;
* **JSON output** escapes them too (:func:`json_for_terminal`): ``json.dumps(ensure_ascii=False)``
  escapes C0 controls but writes DEL, C1 controls and bidi overrides raw.

No imports: this sits on the path of ``queue claim`` and ``breaker check``.
"""

from __future__ import annotations

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

_BIDI = [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_UNSAFE = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), *_BIDI]
_SURROGATES = range(0xD800, 0xE000)

_TERMINAL = {cp: (f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}") for cp in _UNSAFE if cp not in (0x09, 0x0A)}
_JSON = {cp: f"\\u{cp:04x}" for cp in (0x7F, *range(0x80, 0xA0), *_BIDI)}


def for_terminal(text: str) -> str:
    """``text`` with every character a terminal would act on (but newline and tab) made visible."""
    return text.translate(_TERMINAL)


def json_for_terminal(document: str) -> str:
    """A JSON document (from ``json.dumps``) with DEL, C1 controls and bidi overrides escaped.

    Outside strings JSON is ASCII, so each of them is inside a string, where ``\\uXXXX`` means the
    same character: the document parses to the same value.
    """
    return document.translate(_JSON)


def unsafe_char(text: str) -> tuple[int, str] | None:
    """The position and character of the first control, bidi or surrogate character in ``text``."""
    for index, char in enumerate(text):
        cp = ord(char)
        if cp < 0x20 or 0x7F <= cp < 0xA0 or 0x202A <= cp <= 0x202E or 0x2066 <= cp <= 0x2069 or cp in _SURROGATES:
            return index, char
    return None


def check_name(value: Any, what: str, max_length: int = 200) -> str:
    """Return ``value`` if it can name something (1-``max_length`` characters, not only spaces, no
    control, bidi or surrogate character); else raise :class:`~loki.errors.InvalidArgument`."""
    from loki.errors import InvalidArgument

    field = what.replace(" ", "_")
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"invalid {what} {value!r}: it is empty", field=field)
    if len(value) > max_length:
        raise InvalidArgument(f"invalid {what} {value[:40]!r}...: it is {len(value)} characters long; the limit is "
                              f"{max_length}", field=field)
    bad = unsafe_char(value)
    if bad is not None:
        index, char = bad
        kind = "bidirectional override" if 0x202A <= ord(char) <= 0x2069 else "control character"
        raise InvalidArgument(f"invalid {what} {value!r}: it contains the {kind} {char!r} at position {index}; "
                              "names may not contain control characters or bidi overrides", field=field)
    return value
