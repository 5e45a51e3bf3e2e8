"""Documents under lock domains on PostgreSQL (loki/storage/postgres/documents.py).

The domain modules reach documents through the API suites (breakers, rules, the consumer ...) on every
backend; this file checks what the store itself promises there: one transaction per lock domain, the
file store's validation and size rules on write, consistent reads without the lock, and the team's
settings as a document of the database.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from loki.breakers.breakers import new_entry
from loki.clock import ManualClock, parse_ts
from loki.errors import FileTooLarge, InvalidInput, LockTimeout, SchemaViolation, StateFileError
from loki.storage import jsonio, layout
from loki.storage.postgres.store import PgStore

REPO = Path(__file__).resolve().parents[3]
BREAKER = new_entry(parse_ts("2026-01-25T10:00:00Z"))


@pytest.fixture
def url() -> str:
    from tests.pgserver import worker_schema_url

    return worker_schema_url()  # migrated and emptied: as a fresh schema, without migrating one per test


@pytest.fixture
def opened() -> Iterator[list[PgStore]]:
    stores: list[PgStore] = []
    yield stores
    for store in stores:
        store.close()


@pytest.fixture
def store(url: str, clock: ManualClock, opened: list[PgStore]) -> PgStore:
    opened.append(PgStore.open(url, clock=clock))
    return opened[-1]


def reopen(url: str, opened: list[PgStore], **kwargs: object) -> PgStore:
    opened.append(PgStore.open(url, **kwargs))  # type: ignore[arg-type]
    return opened[-1]


def test_a_domain_commits_all_its_documents_or_none(url: str, store: PgStore, opened: list[PgStore]) -> None:
    with pytest.raises(RuntimeError), store.transaction(layout.MEMORY_LOG):  # a domain's lock held as a lock:
        store.write_text("memory/hints/a.json", "{}\n")  # what is written inside is in its transaction
        raise RuntimeError("the unit fails")
    assert store.read_text("memory/hints/a.json") is None
    with pytest.raises(RuntimeError), store.transaction(layout.BREAKERS) as txn:
        txn.write(layout.BREAKERS, {"deploy": BREAKER})
        txn.commit()  # written, inside the transaction: still undone when the block fails
        raise RuntimeError("the unit fails after its write")
    assert reopen(url, opened).read(layout.BREAKERS) == {}  # the empty form: nothing was committed
    with store.transaction(layout.BREAKERS) as txn:
        assert txn.read(layout.BREAKERS) == {}
        txn.write(layout.BREAKERS, {"deploy": BREAKER}, changed=[BREAKER])
        assert txn.read(layout.BREAKERS) == {"deploy": BREAKER}  # its own write, before commit
    assert reopen(url, opened).read(layout.BREAKERS) == {"deploy": BREAKER}
    with pytest.raises(Exception, match="not guarded by"), store.transaction(layout.BREAKERS) as txn:
        txn.write(layout.FRICTION_MAP, {"version": 1, "frictions": []})


def test_writes_are_validated_as_the_file_store_validates_them(url: str, opened: list[PgStore]) -> None:
    broken = dict(BREAKER, state="SIDEWAYS")
    lenient = reopen(url, opened, validate_all=False)
    refused = r"state/circuit-breakers.json at /deploy/state: \"SIDEWAYS\" is not one of"
    with pytest.raises(SchemaViolation, match=refused), lenient.transaction(layout.BREAKERS) as txn:
        txn.write(layout.BREAKERS, {"deploy": broken}, changed=[broken])
    assert lenient.read(layout.BREAKERS) == {}
    # Only the records said to have changed are checked (the cheap path the file store takes) ...
    with lenient.transaction(layout.BREAKERS) as txn:
        txn.write(layout.BREAKERS, {"deploy": broken, "ok": BREAKER}, changed=[BREAKER])
    # ... unless every write is checked in full (LOKI_VALIDATE_ALL, which the tests set).
    strict = reopen(url, opened, validate_all=True)
    with pytest.raises(SchemaViolation), strict.transaction(layout.BREAKERS) as txn:
        txn.write(layout.BREAKERS, {"deploy": broken, "ok": BREAKER, "new": BREAKER}, changed=[BREAKER])
    # The refused write changed nothing. (Read as bytes: a read checks the document in full, as the file store
    # checks a file it has no digest for, and the undeclared broken record above is refused by name.)
    assert set(jsonio.loads_strict(strict.read_bytes(layout.BREAKERS) or b"")) == {"deploy", "ok"}
    with pytest.raises(StateFileError, match=r"state/circuit-breakers\.json at /deploy/state"):
        strict.read(layout.BREAKERS)


def test_no_write_makes_a_document_loki_would_refuse_to_read(store: PgStore) -> None:
    store.max_file_bytes = 1000
    with pytest.raises(InvalidInput, match=r"CONTINUITY\.md: this change would make it 2000 bytes, over the 1000-byte"):
        store.write_text(layout.CONTINUITY, "x" * 2000)
    with pytest.raises(InvalidInput, match="over the 1000-byte"), store.transaction(layout.BREAKERS) as txn:
        txn.write(layout.BREAKERS, {f"b{n}": BREAKER for n in range(20)})
    assert store.read_text(layout.CONTINUITY) is None and not store.exists(layout.BREAKERS)
    store.max_file_bytes = 10_000
    store.write_text(layout.CONTINUITY, "x" * 2000)
    store.max_file_bytes = 1000
    with pytest.raises(FileTooLarge, match="is 2000 bytes, over the 1000-byte limit"):
        store.read_text(layout.CONTINUITY)


def test_names_behave_like_the_tree(store: PgStore) -> None:
    assert store.list("memory/hints") == [] and store.read_text("memory/hints/x.json") is None
    for name in ("memory/hints/b.json", "memory/hints/a.json", "memory/hints/sub/c.json", "memory/hintsX.json"):
        store.write_text(name, "{}")
    assert store.list("memory/hints") == ["a.json", "b.json", "sub"]
    assert store.exists("memory/hints") and store.exists("memory/hints/sub") and not store.exists("memory/hint")
    token = store.change_token("memory/hints/a.json")
    assert token is not None and store.change_token("memory/hints/a.json") == token
    store.write_text("memory/hints/a.json", "{}")
    assert store.change_token("memory/hints/a.json") != token  # every write, even of the same text
    assert store.remove("memory/hints/a.json") is True and store.remove("memory/hints/a.json") is False
    assert store.change_token("memory/hints/a.json") is None
    assert store.read_bytes("memory/hints/b.json") == b"{}"


def test_a_snapshot_reads_several_documents_as_of_one_instant(store: PgStore) -> None:
    with store.transaction(layout.BREAKERS) as txn:
        txn.write(layout.BREAKERS, {"deploy": BREAKER})
    docs = store.snapshot([layout.BREAKERS, layout.WATCH_STATE])
    assert docs == {layout.BREAKERS: {"deploy": BREAKER}, layout.WATCH_STATE: {"version": 1}}


def test_the_config_is_the_teams_document(url: str, clock: ManualClock, opened: list[PgStore]) -> None:
    first = PgStore.open(url, clock=clock, config={"version": 1, "queue": {"lease_seconds": 120}})
    opened.append(first)
    other_machine = reopen(url, opened)
    assert other_machine.setting("queue", "lease_seconds", 3600) == 120
    assert other_machine.setting("queue", "max_attempts", 5) == 5
    with pytest.raises(SchemaViolation, match=r"config/loki\.json"):
        other_machine.write_config({"version": 1, "queue": {"lease_seconds": "soon"}})
    assert reopen(url, opened).config == {"version": 1, "queue": {"lease_seconds": 120}}


def test_a_domain_waits_for_its_holder_and_names_it(url: str, store: PgStore, opened: list[PgStore]) -> None:
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys; from loki.storage.postgres.store import PgStore\n"
        "store = PgStore.open(sys.argv[1])\n"
        "with store.transaction('state/circuit-breakers.json'):\n"
        "    print(store.db.conn.info.backend_pid, flush=True); sys.stdin.readline()\n"), url], cwd=REPO,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    pid = int(holder.stdout.readline())
    impatient = reopen(url, opened, lock_timeout=0.2)
    # The holder's client as the server sees it: the throwaway cluster's Unix socket, or a TCP address when
    # LOKI_TEST_DATABASE_URL names one.
    client = "local socket" if urlsplit(url).hostname in (None, "") else r"[0-9a-f.:]+"
    waited = (rf"timed out after 0\.2s waiting for the lock state/circuit-breakers\.json\.lock in .*; held by "
              rf"PostgreSQL backend pid {pid} \(loki, from {client}\)")
    with pytest.raises(LockTimeout, match=waited) as raised, impatient.transaction(layout.BREAKERS):
        pass
    assert raised.value.exit_code == 5
    with impatient.transaction(layout.FRICTION_MAP) as txn:  # another domain: no wait
        txn.write(layout.FRICTION_MAP, {"version": 1, "frictions": []})
    holder.communicate("\n", timeout=60)
    with impatient.transaction(layout.BREAKERS) as txn:  # free again
        txn.write(layout.BREAKERS, {})
