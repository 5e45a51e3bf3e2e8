"""Running totals of what was spent, by hour and by day: what a budget check reads (docs/spend.md).

A budget's spend is the usage entries of its scope in its window. Summing them at every claim reads every
task ever run, so the cost of a claim would grow with the archive. Instead the task store keeps one small
document, ``queue/spend.json`` (schemas/spend-file.json), updated in the same unit of work as each usage entry
(``Queue.complete``/``fail``/``release``): an entry is in the totals exactly when it is in its task, whatever
crashes. The document is an index, not the truth: when it is absent (a tree that had no budget yet, a tree just
migrated) it is built once from the tasks (:func:`build`), under the queue's lock.

Buckets are UTC hours (``2026-11-27T08``) and days (``2026-11-27``); in each, per scope key (``team``,
``type:X``, ``label:X``, ``agent:X``), ``[usd, tokens, attempts]``. An hour window is one hour bucket, a day one
day bucket, a week seven day buckets. Only the buckets a window of now can need are kept: the last
:data:`KEEP_HOURS` hours and :data:`KEEP_DAYS` days before the newest entry.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from loki.tasks.usage import total_tokens

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

VERSION = 1
KEEP_HOURS = 3
KEEP_DAYS = 8


def empty() -> dict[str, Any]:
    return {"version": VERSION, "hours": {}, "days": {}}


def keys_of(task: dict[str, Any], entry: dict[str, Any]) -> list[str]:
    """The scope keys an entry counts in: the team, its task's type, each label, the agent that spent it."""
    keys = ["team", f"type:{task.get('type') or 'general'}"]
    keys += [f"label:{label}" for label in dict.fromkeys(task.get("labels") or [])]
    if entry.get("agent"):
        keys.append(f"agent:{entry['agent']}")
    return keys


def add(doc: dict[str, Any], task: dict[str, Any], entry: dict[str, Any]) -> None:
    """Count ``entry`` (a usage entry of ``task``, with its ``at``) in ``doc``, in place, and drop the buckets
    no window of the entry's time needs any more."""
    at = str(entry.get("at") or "")
    if len(at) < 13:
        return  # no time: no window holds it (the queue always stamps one)
    usd = float(entry.get("usd") or 0.0)
    tokens = total_tokens(entry)
    for section, bucket in (("hours", at[:13]), ("days", at[:10])):
        counts = doc[section].setdefault(bucket, {})
        for key in keys_of(task, entry):
            row = counts.setdefault(key, [0.0, 0, 0])
            row[0] = round(row[0] + usd, 6)
            row[1] += tokens
            row[2] += 1
    _prune(doc, at)


def rescope(doc: dict[str, Any], before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Move the usage entries of a task from the scope keys of ``before`` to those of ``after`` (the same task,
    its type or labels edited), in place, in the buckets still kept; whether anything changed. A budget's spend is
    the entries of its scope as the task is now, as a rebuild from the tasks counts them."""
    changed = False
    for entry in after.get("usage") or []:
        at = str(entry.get("at") or "") if isinstance(entry, dict) else ""
        old, new = keys_of(before, entry), keys_of(after, entry)
        if len(at) < 13 or set(old) == set(new):
            continue
        usd, tokens = float(entry.get("usd") or 0.0), total_tokens(entry)
        for section, bucket in (("hours", at[:13]), ("days", at[:10])):
            counts = doc[section].get(bucket)
            if counts is None:
                continue  # pruned: no window of now reads it
            for key in [k for k in old if k not in new]:
                row = counts.get(key)
                if row is not None:
                    row[0], row[1], row[2] = round(row[0] - usd, 6), row[1] - tokens, row[2] - 1
                    if row[2] <= 0:
                        del counts[key]
            for key in [k for k in new if k not in old]:
                row = counts.setdefault(key, [0.0, 0, 0])
                row[0], row[1], row[2] = round(row[0] + usd, 6), row[1] + tokens, row[2] + 1
            changed = True
    return changed


def _prune(doc: dict[str, Any], at: str) -> None:
    try:
        newest = datetime.strptime(at[:13], "%Y-%m-%dT%H").replace(tzinfo=timezone.utc)
    except ValueError:
        return
    oldest_hour = (newest - timedelta(hours=KEEP_HOURS - 1)).strftime("%Y-%m-%dT%H")
    oldest_day = (newest - timedelta(days=KEEP_DAYS - 1)).strftime("%Y-%m-%d")
    for section, oldest in (("hours", oldest_hour), ("days", oldest_day)):
        for bucket in [b for b in doc[section] if b < oldest]:
            del doc[section][bucket]


def build(found: Iterable[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    """The totals of every ``(task, entry)`` given, in time order (what a tree without the document gets)."""
    doc = empty()
    for task, entry in sorted(found, key=lambda pair: str(pair[1].get("at") or "")):
        add(doc, task, entry)
    return doc


def spent(doc: dict[str, Any], key: str, per: str, start: datetime) -> tuple[float, int]:
    """``(usd, tokens)`` of scope ``key`` in the window of ``per`` starting at ``start`` (UTC)."""
    if per == "hour":
        buckets = [doc["hours"].get(start.strftime("%Y-%m-%dT%H"), {})]
    elif per == "day":
        buckets = [doc["days"].get(start.strftime("%Y-%m-%d"), {})]
    else:
        buckets = [doc["days"].get((start + timedelta(days=n)).strftime("%Y-%m-%d"), {}) for n in range(7)]
    rows = [bucket[key] for bucket in buckets if key in bucket]
    return round(float(sum(row[0] for row in rows)), 6), int(sum(row[1] for row in rows))
