"""Resolving an escalation reads its file once (loki/queue/escalations.py, ``mark_resolved``): the header it
rewrites and the open/resolved state it checks come from the same read."""

from __future__ import annotations

from typing import Any

import pytest

from loki.queue.escalations import escalate, list_escalations, mark_resolved
from loki.queue.queue import Queue


def test_marking_an_escalation_resolved_reads_its_file_once(backend_store: Any,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    Queue(backend_store).add("Deploy", task_id="t1")
    made = escalate(backend_store, "t1", "security_decision", agent="eng-1")
    [row] = list_escalations(backend_store, open_only=True)
    reads: list[str] = []
    read_text = backend_store.read_text

    def counted(rel: str, *args: Any, **kwargs: Any) -> Any:
        reads.append(rel)
        return read_text(rel, *args, **kwargs)

    monkeypatch.setattr(backend_store, "read_text", counted)
    mark_resolved(backend_store, row["file"], "approve by alice: go")
    assert reads == [made["file"]]
    monkeypatch.undo()
    [after] = list_escalations(backend_store)
    assert (after["state"], after["resolution"]) == ("resolved", "approve by alice: go")
    # resolved once: a second answer changes nothing (and reads the file once to see it)
    text = backend_store.read_text(made["file"])
    monkeypatch.setattr(backend_store, "read_text", counted)
    reads.clear()
    mark_resolved(backend_store, row["file"], "cancel by bob")
    assert reads == [made["file"]]
    monkeypatch.undo()
    assert backend_store.read_text(made["file"]) == text
