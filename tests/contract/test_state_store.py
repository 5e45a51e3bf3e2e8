"""The storage verbs' contract (huey's ``StorageTests``), below the domain suites: every backend keeps it.

Each test runs on files, memory and PostgreSQL through the ``backend`` fixture (tests/conftest.py). The
domain suites (queue, signals, breakers ...) test what the verbs add up to; these test the verbs one by
one: what ``create_unique``, ``claim_into``, ``finish``, a log position, a change token and a held lock
promise, whatever holds them, and that each capability flag says what the backend really does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from loki.errors import LockTimeout
from loki.storage import layout

SIGNALS = layout.SIGNALS_DIR
PROCESSING = f"{layout.SIGNALS_DIR}/.processing"
LOG = f"{layout.LOGS_DIR}/contract.jsonl"


def other_opener(backend: str, store: Any, make_store: Callable[..., Any]) -> Any:
    """A second opening of the same state (another process's store); memory has one store per state."""
    return store if backend == "memory" else make_store()


# -- published items -----------------------------------------------------------------------------------


def test_create_unique_never_overwrites_and_numbers_the_next_name(backend_store: Any) -> None:
    first = backend_store.create_unique(SIGNALS, "note", b'{"n": 1}', suffix=".json")
    second = backend_store.create_unique(SIGNALS, "note", b'{"n": 2}', suffix=".json")
    third = backend_store.create_unique(SIGNALS, "note", b'{"n": 3}', suffix=".json", separator=".")
    assert (first, second, third) == (f"{SIGNALS}/note.json", f"{SIGNALS}/note-2.json", f"{SIGNALS}/note.2.json")
    assert [backend_store.read_bytes(rel) for rel in (first, second, third)] == [b'{"n": 1}', b'{"n": 2}',
                                                                                 b'{"n": 3}']
    assert backend_store.list(SIGNALS) == ["note-2.json", "note.2.json", "note.json"]


def test_create_unique_refuses_an_item_over_the_limit_and_writes_nothing(backend_store: Any,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from loki.errors import InvalidInput

    if isinstance(getattr(type(backend_store), "max_file_bytes", None), property):  # the file store's is fixed
        monkeypatch.setattr(type(backend_store), "max_file_bytes", property(lambda self: 8))
    else:
        monkeypatch.setattr(backend_store, "max_file_bytes", 8)
    with pytest.raises(InvalidInput, match=r"signals/big: .*over the 8-byte limit"):
        backend_store.create_unique(SIGNALS, "big", b"x" * 9)
    assert backend_store.list(SIGNALS) == []
    assert backend_store.create_unique(SIGNALS, "big", b"x" * 9, state_file=False) == f"{SIGNALS}/big"


def test_claim_into_gives_an_item_to_exactly_one_claimer(backend: str, backend_store: Any,
                                                           make_store: Callable[..., Any]) -> None:
    rel = backend_store.create_unique(SIGNALS, "task-done", b"{}")
    rival = other_opener(backend, backend_store, make_store)
    assert backend_store.claim_into(rel, PROCESSING, "task-done.a") is True
    assert rival.claim_into(rel, PROCESSING, "task-done.b") is False
    assert backend_store.list(PROCESSING) == ["task-done.a"]
    assert not backend_store.exists(rel)
    assert backend_store.read_bytes(f"{PROCESSING}/task-done.a") == b"{}"


def test_a_claim_of_an_item_that_is_gone_is_false(backend_store: Any) -> None:
    assert backend_store.claim_into(f"{SIGNALS}/never-published", PROCESSING, "x") is False
    assert backend_store.list(PROCESSING) == []


def test_finish_deletes_or_moves_a_claimed_item(backend_store: Any) -> None:
    for name in ("done", "kept"):
        backend_store.claim_into(backend_store.create_unique(SIGNALS, name, name.encode()), PROCESSING, name)
    backend_store.finish(f"{PROCESSING}/done", None)
    backend_store.finish(f"{PROCESSING}/kept", f"{SIGNALS}/.quarantine")
    assert backend_store.list(PROCESSING) == []
    assert backend_store.list(f"{SIGNALS}/.quarantine") == ["kept"]
    assert backend_store.read_bytes(f"{SIGNALS}/.quarantine/kept") == b"kept"
    backend_store.finish(f"{PROCESSING}/done", None)  # finishing twice (a retry after a crash) is harmless
    assert backend_store.list(PROCESSING) == []


# -- documents and change tokens -----------------------------------------------------------------------


def test_a_change_token_is_equal_until_the_item_changes(backend_store: Any) -> None:
    rel = "state/contract-note.md"
    assert backend_store.change_token(rel) is None
    backend_store.write_text(rel, "one\n")
    before = backend_store.change_token(rel)
    assert before is not None and backend_store.change_token(rel) == before
    backend_store.write_text(rel, "two, longer\n")
    after = backend_store.change_token(rel)
    assert after is not None and after != before
    assert backend_store.remove(rel) is True and backend_store.change_token(rel) is None
    assert backend_store.remove(rel) is False


def breaker(failures: int) -> dict[str, Any]:
    from loki.breakers.breakers import new_entry
    from loki.clock import parse_ts

    return {**new_entry(parse_ts("2026-01-25T10:00:00Z")), "state": "OPEN", "failure_count": failures,
            "last_failure_time": "2026-01-25T10:00:00Z", "cooldown_until": "2026-01-25T10:05:00Z"}


def test_a_document_written_in_a_transaction_is_read_back_by_another_opener(
        backend: str, backend_store: Any, make_store: Callable[..., Any]) -> None:
    breakers = {"build": breaker(3)}
    with backend_store.transaction(layout.BREAKERS) as txn:
        txn.write(layout.BREAKERS, breakers, changed=breakers.values())
    rival = other_opener(backend, backend_store, make_store)
    assert rival.read(layout.BREAKERS)["build"]["state"] == "OPEN"
    assert rival.snapshot([layout.BREAKERS])[layout.BREAKERS]["build"]["failure_count"] == 3


def test_a_transaction_that_raises_writes_nothing(backend_store: Any) -> None:
    with pytest.raises(RuntimeError), backend_store.transaction(layout.BREAKERS) as txn:
        txn.write(layout.BREAKERS, {"build": breaker(1)})
        raise RuntimeError("before the commit")
    assert backend_store.read(layout.BREAKERS) == {}


# -- logs and positions --------------------------------------------------------------------------------


def test_a_log_is_read_after_the_position_the_reader_kept(backend: str, backend_store: Any,
                                                          make_store: Callable[..., Any]) -> None:
    backend_store.append_lines(LOG, [{"n": 1}, {"n": 2}])
    lines, position = backend_store.read_after(LOG, None)
    assert [line.data for line in lines] == [b'{"n":1}', b'{"n":2}']
    assert backend_store.read_line(LOG, lines[1].position) == b'{"n":2}'
    assert position == backend_store.log_end(LOG) and backend_store.log_valid(LOG, position)
    assert backend_store.read_after(LOG, position) == ([], position)  # nothing new: the same position
    other_opener(backend, backend_store, make_store).append_lines(LOG, [{"n": 3}])
    more, after = backend_store.read_after(LOG, position)
    assert [line.data for line in more] == [b'{"n":3}'] and after != position
    assert backend_store.read_tail(LOG, 1 << 20) == [b'{"n":1}', b'{"n":2}', b'{"n":3}']


def test_a_position_past_a_rewritten_log_is_no_longer_valid(backend_store: Any) -> None:
    backend_store.append_lines(LOG, [{"n": n} for n in range(5)])
    end = backend_store.log_end(LOG)
    with backend_store.transaction(LOG):
        backend_store.rewrite_lines(LOG, [{"n": 0}])
    assert not backend_store.log_valid(LOG, end)
    assert [line.data for line in backend_store.read_after(LOG, None)[0]] == [b'{"n":0}']


# -- held locks ----------------------------------------------------------------------------------------


def test_a_held_lock_has_one_holder_at_a_time_and_names_it(backend: str, backend_store: Any,
                                                          make_store: Callable[..., Any]) -> None:
    import os

    rel = "state/contract.lock"
    assert backend_store.lock_holder(rel) is None
    mine = backend_store.lock(rel, 0.1)
    mine.acquire()
    try:
        assert mine.held and mine.confirm()
        with pytest.raises(LockTimeout):
            other_opener(backend, backend_store, make_store).lock(rel, 0.1).acquire()
        holder = backend_store.lock_holder(rel)
        assert holder is not None and holder["pid"] == os.getpid()
    finally:
        mine.release()
    assert backend_store.lock_holder(rel) is None
    again = other_opener(backend, backend_store, make_store).lock(rel, 0.1)
    again.acquire()
    again.release()


# -- capability flags: each says what the backend does ---------------------------------------------------


def test_the_backend_names_itself(backend: str, backend_store: Any) -> None:
    assert backend_store.backend == {"file": "files", "memory": "memory", "postgres": "postgresql"}[backend]


def test_each_flag_says_what_the_backend_does(backend: str, backend_store: Any) -> None:
    """The flags are the backend's word (huey's ``blocking``): a method only the flag calls for is there
    only where the flag says it is, never a method that quietly does nothing."""
    expected = {"file": (False, True, False), "memory": (True, False, False), "postgres": (True, False, True)}
    flags = (backend_store.claims_in_one_step, backend_store.keys_need_dirs, backend_store.keeps_local_copies)
    assert flags == expected[backend]
    assert hasattr(backend_store, "drop_twin") is not backend_store.claims_in_one_step
    assert hasattr(backend_store, "ensure_dir") is backend_store.keys_need_dirs
    assert hasattr(backend_store, "keep_local") is backend_store.keeps_local_copies


def test_a_key_that_needs_no_directory_takes_an_item_at_once(backend_store: Any) -> None:
    rel = f"{layout.MEMORY_HINTS_DIR}/fresh/hint.json"
    if backend_store.keys_need_dirs:
        with pytest.raises(Exception, match="fresh"):
            backend_store.write_text(rel, "{}\n")
        backend_store.ensure_dir(rel.rsplit("/", 1)[0])
    backend_store.write_text(rel, "{}\n")
    assert backend_store.read_text(rel) == "{}\n"


def test_a_claim_in_two_steps_leaves_a_twin_that_drop_twin_removes(backend_store: Any) -> None:
    """A crash between the link and the unlink of a file claim leaves one item under both names; a store
    that claims in one step cannot get there, and so has no ``drop_twin``."""
    import os

    rel = backend_store.create_unique(SIGNALS, "task-done", b"{}")
    if backend_store.claims_in_one_step:
        assert backend_store.claim_into(rel, PROCESSING, "task-done.a")
        assert (backend_store.exists(rel), backend_store.list(PROCESSING)) == (False, ["task-done.a"])
        return
    backend_store.ensure_dir(PROCESSING)
    os.link(backend_store.path(rel), backend_store.path(f"{PROCESSING}/task-done.a"))  # the crash's leftover
    backend_store.drop_twin(f"{PROCESSING}/task-done.a", rel)
    assert (backend_store.exists(rel), backend_store.list(PROCESSING)) == (False, ["task-done.a"])


def test_local_copies_are_kept_only_where_the_state_is_elsewhere(backend_store: Any, root: Any) -> None:
    if not backend_store.keeps_local_copies:
        return
    rel = f"{layout.MEMORY_HINTS_DIR}/npm.json"
    backend_store.write_text(rel, "{}\n")
    assert backend_store.keep_local([], [layout.MEMORY_HINTS_DIR]) == [rel]
    assert (root / layout.LOCAL_CACHE_DIR / rel).read_text() == "{}\n"


# -- administration: each backend checks its own state -----------------------------------------------------


def test_each_backend_validates_its_own_state(backend_store: Any) -> None:
    from loki.admin import status as admin

    assert admin.validate(backend_store) == []
    assert admin.doctor(backend_store).healthy
    from loki.queue.queue import Queue

    task_id = Queue(backend_store).add("checked", type="build")["id"]
    problems = admin.validate(backend_store)
    assert problems == [], [str(p) for p in problems]
    records = backend_store.stored_records(["pending", "blocked"])
    assert [t["id"] for t in records["pending"]] == [task_id] and records["blocked"] == []
