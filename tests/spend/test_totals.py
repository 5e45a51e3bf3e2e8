"""The running totals the budgets read (loki/tasks/totals.py, docs/spend.md): by UTC hour and day, per scope
key; a window's spend from its buckets; only the buckets a window of now can need are kept; built from the
entries they count, in any order, to the same totals."""

from __future__ import annotations

import random
from datetime import datetime, timezone
from typing import Any

from loki.tasks import totals


def entry(at: str, usd: float | None = 0.5, tokens: int = 10, agent: str = "a") -> dict[str, Any]:
    return {"input_tokens": tokens, "output_tokens": 0, "cache_read_tokens": 0, "cache_creation_tokens": 0,
            "usd": usd, "agent": agent, "at": at}


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)


def test_an_entry_counts_in_the_team_its_type_each_label_once_and_its_agent() -> None:
    doc = totals.empty()
    task = {"type": "docs", "labels": ["auth", "api", "auth"]}
    totals.add(doc, task, entry("2026-11-27T08:15:00Z", usd=0.25, tokens=7, agent="eng-1"))
    totals.add(doc, {"labels": []}, entry("2026-11-27T08:59:59Z", usd=None, tokens=3, agent="eng-2"))
    assert doc["hours"]["2026-11-27T08"] == {
        "team": [0.25, 10, 2], "type:docs": [0.25, 7, 1], "label:auth": [0.25, 7, 1], "label:api": [0.25, 7, 1],
        "agent:eng-1": [0.25, 7, 1], "type:general": [0.0, 3, 1], "agent:eng-2": [0.0, 3, 1]}
    assert doc["days"]["2026-11-27"] == doc["hours"]["2026-11-27T08"]


def test_a_window_sums_its_buckets() -> None:
    doc = totals.empty()
    for at in ("2026-11-23T00:00:00Z", "2026-11-24T09:00:00Z", "2026-11-27T07:59:59Z", "2026-11-27T08:00:00Z",
               "2026-11-29T23:59:59Z", "2026-11-30T00:00:00Z"):
        totals.add(doc, {}, entry(at))
        if at == "2026-11-27T08:00:00Z":  # before later hours pass it out of the kept ones
            assert totals.spent(doc, "team", "hour", utc("2026-11-27T08:00:00Z")) == (0.5, 10)
            assert totals.spent(doc, "team", "hour", utc("2026-11-27T07:00:00Z")) == (0.5, 10)
    assert totals.spent(doc, "team", "day", utc("2026-11-27T00:00:00Z")) == (1.0, 20)
    # Monday 2026-11-30 starts a new week: the one before holds five entries
    assert totals.spent(doc, "team", "week", utc("2026-11-23T00:00:00Z")) == (2.5, 50)
    assert totals.spent(doc, "team", "week", utc("2026-11-30T00:00:00Z")) == (0.5, 10)
    assert totals.spent(doc, "label:none", "day", utc("2026-11-27T00:00:00Z")) == (0.0, 0)


def test_only_the_buckets_a_window_of_now_can_need_are_kept() -> None:
    doc = totals.empty()
    totals.add(doc, {}, entry("2026-11-01T05:00:00Z"))
    totals.add(doc, {}, entry("2026-11-27T08:00:00Z"))
    totals.add(doc, {}, entry("2026-11-27T10:30:00Z"))
    assert sorted(doc["hours"]) == ["2026-11-27T08", "2026-11-27T10"]  # the last three hours
    assert sorted(doc["days"]) == ["2026-11-27"]  # the last eight days: a week's window and today
    totals.add(doc, {}, entry("2026-11-27T11:00:00Z"))
    assert sorted(doc["hours"]) == ["2026-11-27T10", "2026-11-27T11"]


def test_built_from_entries_in_any_order_is_the_totals_kept_one_by_one() -> None:
    rng = random.Random(7)
    found = [({"type": rng.choice(["docs", "feature"]), "labels": rng.sample(["a", "b", "c"], rng.randrange(3))},
              entry(f"2026-11-{rng.randrange(20, 28):02d}T{rng.randrange(24):02d}:00:00Z",
                    usd=rng.choice([None, 0.125, 0.25]), tokens=rng.randrange(100), agent=rng.choice("xyz")))
             for _ in range(300)]
    kept = totals.empty()
    for task, one in sorted(found, key=lambda pair: pair[1]["at"]):
        totals.add(kept, task, one)
    rng.shuffle(found)
    assert totals.build(found) == kept


def test_an_entry_without_a_time_counts_nowhere() -> None:
    doc = totals.empty()
    totals.add(doc, {}, {**entry("x"), "at": None})
    assert doc == totals.empty()


def test_a_task_rescoped_counts_as_if_built_with_its_new_type_and_labels_in_the_buckets_kept() -> None:
    spent = [entry("2026-11-17T08:00:00Z", usd=1.0), entry("2026-11-27T07:00:00Z", usd=0.25, tokens=5),
             entry("2026-11-27T08:30:00Z", usd=0.5, tokens=7, agent="b")]
    before = {"type": "docs", "labels": ["ui", "api"], "usage": spent}
    after = {"type": "security", "labels": ["api", "auth"], "usage": spent}
    other = {"type": "docs", "labels": ["ui"], "usage": [entry("2026-11-27T08:45:00Z", usd=2.0)]}
    doc = totals.build([*((before, e) for e in spent), (other, other["usage"][0])])
    assert "2026-11-17" not in doc["days"]  # pruned: moving it there would bring back a bucket no window reads
    assert totals.rescope(doc, before, after)
    assert doc == totals.build([*((after, e) for e in spent), (other, other["usage"][0])])
    assert not totals.rescope(doc, after, {**after, "labels": ["auth", "api"]})  # the same scopes: nothing moves
