"""Lease patterns: gitignore-style globs relative to the repository root, and whether two of them overlap.

A pattern names a set of paths (docs/leases.md, "Patterns"):

* segments are separated by ``/``; ``*`` matches any run of characters inside one segment (not ``/``), ``?``
  one character, ``[abc]`` / ``[a-z]`` / ``[!a]`` / ``[^a]`` one character of (not of) a class, ``\\x`` the
  character ``x`` itself; a whole segment ``**`` matches zero or more segments (``**`` inside a segment is
  ``*``, as in git);
* a pattern is anchored at the repository root, with or without a slash in it (unlike ``.gitignore``, where
  ``Makefile`` would match at any depth: a lease on ``Makefile`` is the root one; write ``**/Makefile`` for all);
* a pattern covers what it matches *and everything under it*: ``tests/auth`` covers ``tests/auth/x.py``, so a
  plain directory name, ``tests/auth/`` and ``tests/auth/**`` all lease the same files.

Two patterns overlap when some path is covered by both. The test is exact over the glob language above (a
product automaton over segments, and over characters inside two segments), with one deliberate
over-approximation: the names ``.`` and ``..`` count as possible segment names, so ``.?`` and ``?.`` are said to
overlap (their only common name is ``..``). Nothing is ever answered "free" when a common path exists; the
property tests in tests/leases/test_patterns.py check symmetry, no false "free" against an independent regex
matcher, and that every "overlaps" answer comes with a witness path covered by both (:func:`witness`).
Matching is case-sensitive; on a case-insensitive file system ``README.md`` and ``readme.md`` are one file, and
the hook compares the path as the agent names it.

The library never prints: a refused pattern raises :class:`loki.errors.InvalidArgument` with one line naming
the pattern and what is wrong.
"""

from __future__ import annotations

import os
import unicodedata
from collections import deque, namedtuple
from functools import lru_cache

from loki.errors import InvalidArgument

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

MAX_PATTERN_CHARS = 1024
"""Longer patterns are refused: no real lease needs one, and the overlap test is quadratic in lengths."""

MAX_CHAR = 0x10FFFF
SLASH = ord("/")

# A set of characters: sorted, disjoint, inclusive (lo, hi) ranges, and whether it is the complement.
Ranges = tuple[tuple[int, int], ...]


class CharSet(namedtuple("CharSet", "ranges negated", defaults=(False,))):
    """A set of characters: sorted disjoint ranges, or (``negated``) their complement. A named tuple, not a
    dataclass: the PreToolUse hook imports this module, and ``dataclasses`` costs it milliseconds."""

    __slots__ = ()
    ranges: Ranges
    negated: bool

    def contains(self, ch: int) -> bool:
        inside = any(lo <= ch <= hi for lo, hi in self.ranges)
        return inside != self.negated and ch != SLASH

    def positive(self) -> Ranges:
        """The set as positive ranges, ``/`` excluded (a segment never holds one)."""
        base = _complement(self.ranges) if self.negated else self.ranges
        return _subtract(base, ((SLASH, SLASH),))


ANY = CharSet((), negated=True)


class Token(namedtuple("Token", "chars star", defaults=(False,))):
    """One step inside a segment: a character of ``chars``, or (``star``) any run of them."""

    __slots__ = ()
    chars: CharSet
    star: bool


STAR_TOKEN = Token(ANY, star=True)
GLOBSTAR = "**"

Segment = tuple[Token, ...]
"""A compiled segment; the globstar segment is the string ``"**"`` instead."""


class Pattern(namedtuple("Pattern", "text segments")):
    """A normalised pattern: ``text`` is what is stored and shown; ``segments`` what is matched."""

    __slots__ = ()
    text: str
    segments: tuple[Segment | str, ...]

    @property
    def literal_prefix(self) -> str:
        """The leading segments without a wildcard, joined: every covered path starts with it (the hook's
        cheap first filter)."""
        parts: list[str] = []
        for segment in self.segments:
            if isinstance(segment, str) or any(t.star or t.chars.negated or len(t.chars.ranges) != 1
                                               or t.chars.ranges[0][0] != t.chars.ranges[0][1] for t in segment):
                break
            parts.append("".join(chr(t.chars.ranges[0][0]) for t in segment))
        return "/".join(parts)


def _refuse(raw: str, why: str) -> InvalidArgument:
    return InvalidArgument(f"lease pattern {_shown(raw)}: {why}", pattern=raw)


def _shown(raw: str) -> str:
    """The pattern quoted for a message, control characters made visible (it may be hostile)."""
    text = raw if len(raw) <= 80 else raw[:77] + "..."
    return repr(text)


def normalise(raw: str, root: str | None = None) -> Pattern:
    """The pattern ``raw`` checked and compiled, or :class:`InvalidArgument` naming what is wrong.

    ``root`` is the repository root as an absolute path: an absolute pattern inside it is made relative to
    it; one outside it (or any absolute pattern when ``root`` is None) is refused, as is an empty pattern,
    one with a NUL or control character, a negation (``!``), one that climbs out of the root with ``..``,
    a ``..`` after a wildcard, and a trailing lone ``\\``."""
    if not isinstance(raw, str):
        raise _refuse(str(raw), "a pattern is text")
    if raw.strip() == "":
        raise _refuse(raw, "is empty")
    if len(raw) > MAX_PATTERN_CHARS:
        raise _refuse(raw, f"is longer than {MAX_PATTERN_CHARS} characters")
    for ch in raw:
        if ch == "\0" or unicodedata.category(ch) in ("Cc", "Zl", "Zp"):
            raise _refuse(raw, f"holds the control character U+{ord(ch):04X}")
    text = raw.strip()
    if text.startswith("!"):
        raise _refuse(raw, "negation ('!') is not a lease: lease what you will edit")
    if text.startswith("/"):
        if root is None:
            raise _refuse(raw, "an absolute path needs the repository root to be made relative")
        base = os.path.normpath(root)
        if not (text == base or text.startswith(base.rstrip("/") + "/")):
            raise _refuse(raw, f"is outside the repository {base}")
        text = text[len(base):].lstrip("/") or "**"
    parts: list[str] = []
    wild_seen = False
    for part in text.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if wild_seen:
                raise _refuse(raw, "'..' after a wildcard cannot be resolved")
            if not parts:
                raise _refuse(raw, "climbs out of the repository ('..')")
            parts.pop()
            continue
        if part.endswith("\\") and not part.endswith("\\\\"):
            raise _refuse(raw, "ends with a lone '\\'")
        if part == GLOBSTAR and parts and parts[-1] == GLOBSTAR:
            continue
        wild_seen = wild_seen or _has_wildcard(part)
        parts.append(part)
    if not parts:
        raise _refuse(raw, "names the repository root itself: write '**' to lease everything")
    segments: list[Segment | str] = [GLOBSTAR if part == GLOBSTAR else _compile_segment(part) for part in parts]
    if segments[-1] != GLOBSTAR:
        segments.append(GLOBSTAR)  # a pattern covers everything under what it matches
    shown = "/".join(parts)
    return Pattern(shown, tuple(segments))


def normalise_all(raws: Iterable[str], root: str | None = None) -> list[Pattern]:
    return [normalise(raw, root) for raw in raws]


def _has_wildcard(part: str) -> bool:
    escaped = False
    for ch in part:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in "*?[":
            return True
    return False


def _compile_segment(part: str) -> Segment:
    tokens: list[Token] = []
    i = 0
    while i < len(part):
        ch = part[i]
        if ch == "\\" and i + 1 < len(part):
            tokens.append(_literal(part[i + 1]))
            i += 2
        elif ch == "*":
            if not tokens or tokens[-1] != STAR_TOKEN:  # "**" inside a segment is "*"
                tokens.append(STAR_TOKEN)
            i += 1
        elif ch == "?":
            tokens.append(Token(ANY))
            i += 1
        elif ch == "[":
            parsed = _parse_class(part, i)
            if parsed is None:  # an unclosed '[' is itself, as in fnmatch and git
                tokens.append(_literal("["))
                i += 1
            else:
                charset, i = parsed
                tokens.append(Token(charset))
        else:
            tokens.append(_literal(ch))
            i += 1
    return tuple(tokens)


def _literal(ch: str) -> Token:
    return Token(CharSet(((ord(ch), ord(ch)),)))


def _parse_class(part: str, start: int) -> tuple[CharSet, int] | None:
    i = start + 1
    negated = i < len(part) and part[i] in "!^"
    if negated:
        i += 1
    ranges: list[tuple[int, int]] = []
    first = True
    while i < len(part):
        ch = part[i]
        if ch == "]" and not first:
            return CharSet(_merge(ranges), negated), i + 1
        first = False
        if ch == "\\" and i + 1 < len(part):
            i += 1
            ch = part[i]
        lo = ord(ch)
        if i + 2 < len(part) and part[i + 1] == "-" and part[i + 2] != "]":
            hi_ch = part[i + 2]
            if hi_ch == "\\" and i + 3 < len(part):
                hi_ch = part[i + 3]
                i += 1
            hi = ord(hi_ch)
            if lo <= hi:  # a reversed range matches nothing, as in fnmatch
                ranges.append((lo, hi))
            i += 3
        else:
            ranges.append((lo, lo))
            i += 1
    return None


def _merge(ranges: Iterable[tuple[int, int]]) -> Ranges:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def _complement(ranges: Ranges) -> Ranges:
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CHAR:
        out.append((nxt, MAX_CHAR))
    return tuple(out)


def _subtract(base: Ranges, minus: Ranges) -> Ranges:
    return _intersect(base, _complement(_merge(minus)))


def _intersect(a: Ranges, b: Ranges) -> Ranges:
    out: list[tuple[int, int]] = []
    for alo, ahi in a:
        for blo, bhi in b:
            lo, hi = max(alo, blo), min(ahi, bhi)
            if lo <= hi:
                out.append((lo, hi))
    return _merge(out)


def _common_char(a: CharSet, b: CharSet) -> int | None:
    """A character both sets hold (never ``/``), a printable one when there is a choice, or None."""
    both = _intersect(a.positive(), b.positive())
    if not both:
        return None
    for preferred in (ord("a"), ord("0"), ord("_")):
        if any(lo <= preferred <= hi for lo, hi in both):
            return preferred
    for lo, hi in both:
        if hi >= 0x21:
            return max(lo, 0x21)
    return both[0][0]


def _segment_witness(a: Segment, b: Segment) -> str | None:
    """A non-empty name (no ``/``) both segments match, or None: a search over the product automaton."""
    start = (0, 0, False)
    parent: dict[tuple[int, int, bool], tuple[tuple[int, int, bool], int | None] | None] = {start: None}
    todo = deque([start])
    dist = {start: 0}
    while todo:
        state = todo.popleft()
        i, j, consumed = state
        if i == len(a) and j == len(b) and consumed:
            chars: list[str] = []
            back: tuple[int, int, bool] | None = state
            while back is not None and parent[back] is not None:
                prev, ch = parent[back]  # type: ignore[misc]
                if ch is not None:
                    chars.append(chr(ch))
                back = prev
            return "".join(reversed(chars))
        moves: list[tuple[tuple[int, int, bool], int | None]] = []
        if i < len(a) and a[i].star:
            moves.append(((i + 1, j, consumed), None))
        if j < len(b) and b[j].star:
            moves.append(((i, j + 1, consumed), None))
        if i < len(a) and j < len(b):
            ch = _common_char(a[i].chars, b[j].chars)
            if ch is not None:
                moves.append(((i if a[i].star else i + 1, j if b[j].star else j + 1, True), ch))
        for nxt, ch in moves:  # 0-1 search: a move that consumes nothing is free, so the witness is shortest
            cost = dist[state] + (0 if ch is None else 1)
            if cost < dist.get(nxt, cost + 1):
                dist[nxt] = cost
                parent[nxt] = (state, ch)
                todo.append(nxt) if ch is not None else todo.appendleft(nxt)
    return None


def _walk(a: tuple[Segment | str, ...], b: tuple[Segment | str, ...]) -> list[str] | None:
    """Segment names of a path covered by both compiled patterns, or None: the same search one floor up,
    where a globstar may end or swallow one segment the other side matches."""
    start = (0, 0)
    parent: dict[tuple[int, int], tuple[tuple[int, int], str | None] | None] = {start: None}
    todo = deque([start])
    dist = {start: 0}
    while todo:
        state = todo.popleft()
        i, j = state
        if i == len(a) and j == len(b):
            names: list[str] = []
            back: tuple[int, int] | None = state
            while back is not None and parent[back] is not None:
                prev, name = parent[back]  # type: ignore[misc]
                if name is not None:
                    names.append(name)
                back = prev
            return list(reversed(names))
        moves: list[tuple[tuple[int, int], str | None]] = []
        sa = a[i] if i < len(a) else None
        sb = b[j] if j < len(b) else None
        if sa == GLOBSTAR:
            moves.append(((i + 1, j), None))
        if sb == GLOBSTAR:
            moves.append(((i, j + 1), None))
        if sa is not None and sb is not None:
            if sa == GLOBSTAR and sb == GLOBSTAR:
                moves.append(((i + 1, j + 1), "a"))
            elif sa == GLOBSTAR:
                name = _segment_witness(sb, sb)  # type: ignore[arg-type]
                if name is not None:
                    moves.append(((i, j + 1), name))
            elif sb == GLOBSTAR:
                name = _segment_witness(sa, sa)  # type: ignore[arg-type]
                if name is not None:
                    moves.append(((i + 1, j), name))
            else:
                name = _segment_witness(sa, sb)  # type: ignore[arg-type]
                if name is not None:
                    moves.append(((i + 1, j + 1), name))
        for nxt, name in moves:  # 0-1 search: a move that consumes nothing is free, so the witness is shortest
            cost = dist[state] + (0 if name is None else 1)
            if cost < dist.get(nxt, cost + 1):
                dist[nxt] = cost
                parent[nxt] = (state, name)
                todo.append(nxt) if name is not None else todo.appendleft(nxt)
    return None


def witness(a: Pattern, b: Pattern) -> str | None:
    """A path covered by both patterns, or None when they are disjoint."""
    names = _walk(a.segments, b.segments)
    if names is None:
        return None
    return "/".join(names) or "a"  # both were only "**": any path will do


@lru_cache(maxsize=4096)
def _overlaps_cached(a: Pattern, b: Pattern) -> bool:
    return _walk(a.segments, b.segments) is not None


def overlaps(a: Pattern, b: Pattern) -> bool:
    """Whether some path is covered by both: symmetric, and never False when one is (module docstring)."""
    if a.text <= b.text:  # order the pair so (a, b) and (b, a) share one cache entry
        return _overlaps_cached(a, b)
    return _overlaps_cached(b, a)


def covers(pattern: Pattern, path: str) -> bool:
    """Whether ``pattern`` covers the repository-relative ``path`` (a file or directory, taken literally)."""
    segments = tuple(_literal_segment(name) for name in path.strip("/").split("/") if name not in ("", "."))
    if not segments:
        return False
    return _walk(pattern.segments, segments) is not None


def _literal_segment(name: str) -> Segment:
    return tuple(_literal(ch) for ch in name)
