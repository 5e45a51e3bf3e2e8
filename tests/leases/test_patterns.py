"""Lease patterns (loki/leases/patterns.py): normalisation, refusals, and the overlap test.

The properties are checked against an independent matcher written here (fnmatch per segment, a recursive
walk for ``**``), over a small alphabet where collisions are likely: symmetry, no false "free" (a path both
patterns cover means they overlap), and no false "overlaps" beyond the documented ``.``/``..`` names (every
"overlaps" comes with a witness both cover).
"""

from __future__ import annotations

import fnmatch
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loki.errors import ExitCode, InvalidArgument
from loki.leases.patterns import covers, normalise, overlaps, witness


def oracle_full(parts: list[str], names: list[str]) -> bool:
    if not parts:
        return not names
    if parts[0] == "**":
        return any(oracle_full(parts[1:], names[k:]) for k in range(len(names) + 1))
    return bool(names) and fnmatch.fnmatchcase(names[0], parts[0]) and oracle_full(parts[1:], names[1:])


def oracle_covers(text: str, path: str) -> bool:
    """What the docs say: a pattern covers a path when it matches the path or one of its parent folders."""
    parts, names = text.split("/"), path.split("/")
    return any(oracle_full(parts, names[:k]) for k in range(1, len(names) + 1))


SEGMENTS = st.sampled_from(["a", "b", "ab", ".a", "*", "?", "a*", "*b", "[ab]", "[!a]", "**", "?b", "a?"])
PATTERNS = st.lists(SEGMENTS, min_size=1, max_size=4).map("/".join)
NAMES = ["a", "b", "ab", "ba", "aa", ".a", "bb", "c"]
UNIVERSE = ["/".join(p) for depth in (1, 2, 3) for p in itertools.product(NAMES, repeat=depth)]


@settings(max_examples=300, deadline=None)
@given(PATTERNS, PATTERNS)
def test_overlap_is_symmetric(a: str, b: str) -> None:
    assert overlaps(normalise(a), normalise(b)) == overlaps(normalise(b), normalise(a))


@settings(max_examples=150, deadline=None)
@given(PATTERNS, PATTERNS)
def test_no_false_free_a_path_both_cover_means_overlap(a: str, b: str) -> None:
    pa, pb = normalise(a), normalise(b)
    common = next((path for path in UNIVERSE if oracle_covers(pa.text, path) and oracle_covers(pb.text, path)), None)
    if common is not None:
        assert overlaps(pa, pb), f"{a!r} and {b!r} both cover {common!r}"


@settings(max_examples=300, deadline=None)
@given(PATTERNS, PATTERNS)
def test_every_overlap_has_a_witness_both_cover(a: str, b: str) -> None:
    pa, pb = normalise(a), normalise(b)
    found = witness(pa, pb)
    assert (found is not None) == overlaps(pa, pb)
    if found is not None:
        assert oracle_covers(pa.text, found) and oracle_covers(pb.text, found), (a, b, found)
        assert covers(pa, found) and covers(pb, found)


@settings(max_examples=300, deadline=None)
@given(PATTERNS, st.sampled_from(UNIVERSE))
def test_covers_agrees_with_the_independent_matcher(a: str, path: str) -> None:
    assert covers(normalise(a), path) == oracle_covers(normalise(a).text, path)


# A corpus of pairs in the spirit of Agent Mail's symmetry fuzz corpus: each is checked both ways.
CORPUS = [
    ("src/**", "src/a.py", True),
    ("src/**", "src", True),
    ("src", "src/auth/x.py", True),
    ("tests/auth/", "tests/auth/test_x.py", True),
    ("docs/*.md", "docs/a.md", True),
    ("docs/*.md", "docs/a.txt", False),
    ("docs/*.md", "docs/x/y.md", False),
    ("docs/*.md", "docs/**/*.md", True),
    ("*.py", "src/a.py", False),  # anchored at the root, unlike .gitignore
    ("**/*.py", "src/a.py", True),
    ("**/test_*.py", "src/**/*_x.py", True),  # src/test_x.py
    ("src/auth/**", "src/billing/**", False),
    ("src/a*/x", "src/*b/x", True),  # src/ab/x
    ("[ab]*", "c*", False),
    ("[!a]", "a", False),
    ("[a-c]x", "bx", True),
    ("[a-c]x", "dx", False),
    ("a?c", "abc", True),
    ("a?c", "ac", False),
    ("src/a\\*", "src/ab", False),  # an escaped star is a star
    ("src/a\\*", "src/a*", True),
    ("a/**/b", "a/b", True),  # ** may match no folder
    ("a/**/b", "a/x/y/b/z", True),
    ("**", "anything/at/all", True),
    (".?", "?.", True),  # the documented over-approximation: their only common name is ".."
    ("README.md", "readme.md", False),  # case-sensitive
]


@pytest.mark.parametrize(("a", "b", "expected"), CORPUS)
def test_the_corpus_both_ways(a: str, b: str, expected: bool) -> None:
    assert overlaps(normalise(a), normalise(b)) is expected
    assert overlaps(normalise(b), normalise(a)) is expected


@pytest.mark.parametrize(("raw", "shown"), [
    ("src/auth/**", "src/auth/**"),
    ("./src//auth/", "src/auth"),
    ("src/./a/../b", "src/b"),
    ("src/**/**/x", "src/**/x"),
    ("  docs/*.md ", "docs/*.md"),
])
def test_normalised_text(raw: str, shown: str) -> None:
    assert normalise(raw).text == shown


def test_an_absolute_path_inside_the_repository_is_made_relative(tmp_path: object) -> None:
    assert normalise("/repo/src/a.py", "/repo").text == "src/a.py"
    assert normalise("/repo", "/repo").text == "**"


@pytest.mark.parametrize(("raw", "says"), [
    ("", "is empty"),
    ("   ", "is empty"),
    ("../x", "climbs out of the repository"),
    ("src/../../x", "climbs out of the repository"),
    ("/etc/passwd", "is outside the repository /repo"),
    ("/repository-next-door/x", "is outside the repository /repo"),
    ("a\x00b", "control character U+0000"),
    ("a\nb", "control character U+000A"),
    ("a\x1b[31mb", "control character U+001B"),
    ("!src/x", "negation"),
    ("src/*/../x", "'..' after a wildcard"),
    ("src\\", "lone '\\'"),
    (".", "names the repository root itself"),
    ("x" * 1025, "longer than 1024"),
])
def test_bad_patterns_are_refused_with_one_line(raw: str, says: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        normalise(raw, "/repo")
    message = caught.value.message
    assert says in message
    assert message.startswith("lease pattern ")
    assert "\n" not in message and "\x00" not in message and "\x1b" not in message
    assert caught.value.exit_code == ExitCode.USAGE


def test_literal_prefix_is_the_part_before_the_first_wildcard() -> None:
    assert normalise("src/auth/*.py").literal_prefix == "src/auth"
    assert normalise("src/a.py").literal_prefix == "src/a.py"
    assert normalise("**/x").literal_prefix == ""


@settings(max_examples=300, deadline=None)
@given(PATTERNS, PATTERNS)
def test_the_cheap_literal_test_never_hides_an_overlap(a: str, b: str) -> None:
    """loki/leases/holders.py skips a holder when the leading literal segments differ: never when they overlap."""
    from loki.leases.holders import _literally_apart

    pa, pb = normalise(a), normalise(b)
    if _literally_apart(pa.text, pb.text):
        assert not overlaps(pa, pb)
