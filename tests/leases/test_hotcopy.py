"""The hook's index of the path holders (loki/leases/hotcopy.py): the groups a path is looked up in hold
every holder that may cover it (the same answer as the linear scan, never a missed holder), and an index
that names another version of the document is not used."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loki.clock import ManualClock
from loki.hooks import leasegate
from loki.leases import hotcopy
from loki.leases.leases import PathLeases
from loki.leases.patterns import normalise
from loki.storage import layout
from loki.storage.store import Store
from tests.leases.test_patterns import NAMES, PATTERNS, UNIVERSE

NOW = "2026-01-25T10:00:00Z"
LATER = "2026-01-25T11:00:00Z"
PATHS = st.sampled_from([*UNIVERSE, *(f"src/{p}" for p in UNIVERSE[:40])])
WIDE = st.one_of(PATTERNS, st.lists(st.sampled_from([*NAMES, "src", "*", "**"]), min_size=1, max_size=3).map("/".join))


def holder(n: int, text: str, agent: str = "x") -> dict[str, object]:
    return {"lease_id": f"L{n}", "agent": f"{agent}{n}", "patterns": [normalise(text).text], "exclusive": n % 3 != 0,
            "task": None, "expires_at": LATER}


def index_of(tmp: Path, holders: list[dict[str, object]]) -> hotcopy.Index:
    """The index of ``holders``, built and opened the way the hook opens it. Written without hotcopy.write's
    temp file and fsync: these tests are about what the index answers (hotcopy.write is the leases' own,
    tested through PathLeases below), and the property test writes one per example."""
    path = tmp / hotcopy.INDEX
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(hotcopy.build(holders, source=None, claims=True, refreshed_at=NOW))
    index = hotcopy.open_index(str(tmp), None)
    assert index is not None
    return index


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One directory for every example's index (each example writes its own over the last one and reads it
    back before the next begins): no directory made and removed per example."""
    return tmp_path_factory.mktemp("index")


@settings(max_examples=300, deadline=None)
@given(patterns=st.lists(WIDE, min_size=1, max_size=12), path=PATHS)
def test_the_index_answers_as_the_linear_scan_does(index_dir: Path, patterns: list[str], path: str) -> None:
    """No false "free": whatever holder the linear scan finds for a path, the index's candidates find it too
    (the same decision, the same holder)."""
    holders = [holder(n, text) for n, text in enumerate(patterns)]
    index = index_of(index_dir, holders)
    candidates = index.candidates(path)
    linear = leasegate.blocking(holders, path, "nobody")
    indexed = leasegate.blocking(candidates, path, "nobody")
    assert (linear is None) == (indexed is None)
    if linear is not None:
        assert indexed is not None and indexed["exclusive"] == linear["exclusive"]
    covering = {h["lease_id"] for h in holders if leasegate.blocking([h], path, None) is not None}
    assert covering <= {h["lease_id"] for h in candidates}
    assert sorted(h["lease_id"] for h in index.everything()) == sorted(h["lease_id"] for h in holders)


def test_a_path_reads_three_groups_not_every_holder(tmp_path: Path) -> None:
    holders = [holder(n, f"area{n}/**") for n in range(1, 2001)]
    holders.append(holder(9001, "**/*.lock"))
    index = index_of(tmp_path, holders)
    found = index.candidates("area7/x.py")
    assert {h["lease_id"] for h in found} >= {"L7", "L9001"}
    assert len(found) < 40  # 2,000 holders in 256 groups: the path's groups, not all of them
    assert hotcopy.path_keys("src/auth/x.py") == ["", "src", "src/auth"]
    assert hotcopy.key_of("src/auth/**") == "src/auth" and hotcopy.key_of("src/*.py") == "src"
    assert hotcopy.key_of("**/x") == "" and hotcopy.key_of("a/b/c/d") == "a/b" and hotcopy.key_of(r"a\*b/c") == ""


def test_every_lease_write_rewrites_the_index_and_a_stale_one_is_not_used(project: Path, root: Path) -> None:
    leases = PathLeases(Store(root, clock=ManualClock(NOW)), root=str(project))
    lease = leases.acquire(["src/auth/**"], agent="alice")
    document = hotcopy.document_path(str(root))
    index = hotcopy.open_index(str(root), document)
    assert index is not None and [h["lease_id"] for h in index.candidates("src/auth/a.py")] == [lease["lease_id"]]
    assert index.header["source"] == hotcopy.source_of(document) and index.claims is False

    # The document changed behind the index's back (written by hand, by an older loki): the index names
    # another version, so the hook reads the document itself and still finds bob's lease.
    doc = json.loads(Path(document).read_text())
    doc["leases"].append({**doc["leases"][0], "lease_id": "L9", "agent": "bob", "patterns": ["docs/**"]})
    Path(document).write_text(json.dumps(doc))
    assert hotcopy.open_index(str(root), document) is None
    known = leasegate.Known(str(root), NOW)
    assert known.index is None
    assert leasegate.blocking(known, "docs/a.md", "carol")["agent"] == "bob"

    leases.release(lease["lease_id"], agent="alice")  # the next write builds it again, from what is there now
    index = hotcopy.open_index(str(root), document)
    assert index is not None and [h["lease_id"] for h in index.everything()] == ["L9"]


def test_an_unusable_index_is_no_index(tmp_path: Path) -> None:
    path = tmp_path / hotcopy.INDEX
    path.parent.mkdir(parents=True)
    for content in (b"", b"not json\n", b'{"version": 99, "count": 0, "offsets": []}\n',
                    b'{"version": 1, "count": 0, "offsets": [0]}\n'):
        path.write_bytes(content)
        assert hotcopy.open_index(str(tmp_path), None) is None
    os.unlink(path)
    os.symlink(tmp_path / "elsewhere", path)
    assert hotcopy.open_index(str(tmp_path), None) is None
    assert layout.is_state_name(os.path.basename(hotcopy.INDEX)) is False  # never moved by loki migrate
