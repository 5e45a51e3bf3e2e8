"""Strict JSON in, deterministic JSON out.

Python's ``json`` module is lenient where a state file must not be: it accepts
duplicate keys (the last one silently wins), ``NaN``/``Infinity`` and, given
bytes, UTF-16. Every state file loki did not write itself goes through
:func:`loads_strict`; files whose digest proves loki wrote them take the fast
:func:`loads_trusted` path (loki's own writer never produces any of those).
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

MAX_DEPTH_ERROR = "nesting is too deep"
MAX_DEPTH = 512
"""Levels of nesting a document may have: shallow enough that nothing recursive (the encoder, the schema
check) overflows on it with the stack a command has already used (Python's limit is 1,000 frames), deep
enough for every file loki could write before values from outside were bounded (a payload ~900 deep
was written then), so no existing tree is locked out."""
INPUT_DEPTH = 64
"""Levels a value from outside (``--payload``, ``--result``, a batch, signal fields, a result file, a hook's
stdin) may have: stored inside a record (a task in a file, its dead-letter entry), it gains a few levels,
and the file must stay within :data:`MAX_DEPTH` to be read back."""


class JsonError(ValueError):
    """A document is not strict JSON. ``pointer`` locates the problem when known."""

    def __init__(self, reason: str, pointer: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.pointer = pointer


def _reject_constant(name: str) -> Any:
    raise JsonError(f"{name} is not valid JSON (NaN and Infinity are not allowed)")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise JsonError(f"duplicate key {key!r}")
        result[key] = value
    return result


def decode_utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonError(f"not valid UTF-8 (byte {exc.start}: {data[exc.start:exc.start + 1]!r})") from None


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        # 1e400 would come back as Infinity, which no JSON writer may write again.
        raise JsonError(f"number {text[:40]} is too large for a JSON float")
    return value


STRICT_HOOKS: dict[str, Any] = {"object_pairs_hook": _no_duplicates, "parse_constant": _reject_constant,
                                "parse_float": _finite_float}
"""``json.loads`` keyword arguments refusing duplicate keys, NaN/Infinity and overflowing floats; a
:class:`JsonError` says which (for parsers that keep their own error wording, such as hook stdin)."""


def loads_strict(data: bytes | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse JSON, refusing duplicate keys, NaN/Infinity (spelled or overflowing), non-UTF-8 (lone
    surrogates included), a BOM, trailing data and nesting over ``max_depth`` levels: whatever it
    accepts, loki can write back."""
    text = decode_utf8(data) if isinstance(data, bytes) else data
    if text.startswith("\ufeff"):
        raise JsonError("starts with a byte-order mark (BOM); save it as UTF-8 without BOM")
    try:
        value = json.loads(text, **STRICT_HOOKS)
    except JsonError:
        raise
    except json.JSONDecodeError as exc:
        raise JsonError(f"invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise JsonError(MAX_DEPTH_ERROR) from None
    except ValueError as exc:  # an integer longer than Python converts
        raise JsonError(f"invalid JSON: {exc}") from None
    if "\\u" in text:  # escapes are the only way a lone surrogate gets in (the text itself is UTF-8)
        _check_encodable(value)
    check_depth(value, max_depth, text)
    return value


def check_depth(value: Any, limit: int = MAX_DEPTH, text: str | None = None) -> None:
    """Refuse ``value`` nested deeper than ``limit`` levels (a JsonError naming the limit). Python's parser
    takes up to ~1,000 levels, but writing such a value back (json.dumps, the schema check) overflows the
    stack: the bound is checked where the value comes in, not found at the write."""
    if text is not None and text.count("[") + text.count("{") <= limit:
        return  # cannot nest deeper than it has brackets: no walk for the common small document
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise JsonError(f"{MAX_DEPTH_ERROR} (more than {limit} levels of arrays and objects)")
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def _check_encodable(value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise JsonError(f"text {item[:40]!r} holds a lone surrogate escape, which is not Unicode") from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def replace_lone_surrogates(value: Any) -> tuple[Any, int]:
    """``value`` with every lone surrogate in its strings (keys too) replaced by U+FFFD, and how many
    strings changed. JavaScript's ``JSON.stringify`` writes a string cut inside a surrogate pair (an
    emoji cut in half) as a ``\\ud83d`` escape, so documents from JS programs may hold them."""
    changed = 0

    def fix(item: Any) -> Any:
        nonlocal changed
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                changed += 1
                # Through UTF-16 a valid pair stays one character and a lone half becomes U+FFFD.
                return item.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
            return item
        if isinstance(item, dict):
            return {fix(k): fix(v) for k, v in item.items()}
        if isinstance(item, list):
            return [fix(v) for v in item]
        return item

    return fix(value), changed


NUL_STAND_IN = "\ufffd"
"""What a NUL in error memory's text becomes (U+FFFD, the replacement character)."""
NUL_REASON = ("holds a NUL character (\\u0000), which PostgreSQL's text cannot store: error memory's search "
              "on a database tree reads it as U+FFFD (loki writes U+FFFD in its place since)")


def without_nul(value: Any) -> Any:
    """``value`` with every NUL character in its strings (keys too) replaced by U+FFFD.

    A tool's output may hold NUL bytes (a binary file cat'ed, a C string printed whole). JSON keeps one
    as ``\\u0000``, but PostgreSQL's text cannot hold it: one such line in error memory's log made every
    ``errors search|stats|reindex|compact`` of a database tree fail, on every machine. So a record loses
    its NULs where it is written (loki/memory/memory.py), and the search drops them again from lines
    already stored (loki/storage/postgres/memorysearch.py)."""
    if isinstance(value, str):
        return value.replace("\x00", NUL_STAND_IN) if "\x00" in value else value
    if isinstance(value, dict):
        return {without_nul(k): without_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_nul(item) for item in value]
    return value


def nul_pointer(value: Any, at: str = "") -> str | None:
    """The JSON pointer of the first string (or key) holding a NUL character; None when none does."""
    if isinstance(value, str):
        return at if "\x00" in value else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        where = f"{at}/{str(key).replace('~', '~0').replace('/', '~1')}"
        found = where if "\x00" in str(key) else nul_pointer(item, where)
        if found is not None:
            return found
    return None


def loads_trusted(data: bytes) -> Any:
    """Parse a document loki itself wrote (checked by digest): plain, fast ``json.loads``."""
    return json.loads(data.decode("utf-8"))


def dumps_compact(value: Any) -> str:
    """One line, no spaces, keys in insertion order; refuses NaN/Infinity."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def dumps_document(value: Any, records_key: str | None = None) -> bytes:
    """Serialise a state file: readable, diffable and cheap to produce.

    Files holding a list of records (``{"version": 1, "tasks": [...]}``) are written
    with one record per line: ``grep`` and ``git diff`` work on them, and it costs
    far less than ``indent=2``. Other documents are written indented.
    """
    if records_key is not None and isinstance(value, dict) and isinstance(value.get(records_key), list):
        head = {k: v for k, v in value.items() if k != records_key}
        records = value[records_key]
        head_text = dumps_compact(head)[1:-1]
        prefix = "{" + (head_text + "," if head_text else "") + json.dumps(records_key) + ":["
        if not records:
            return (prefix + "]}\n").encode("utf-8")
        body = ",\n".join(dumps_compact(record) for record in records)
        return (prefix + "\n" + body + "\n]}\n").encode("utf-8")
    return (json.dumps(value, ensure_ascii=False, indent=2, allow_nan=False) + "\n").encode("utf-8")
