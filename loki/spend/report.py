"""``loki usage``: what the team spent, summed from the usage entries every task keeps (docs/spend.md).

Every entry is read once: the hot queue files, the dead-letter queue, the abandoned tasks and the archive
(a completed task rotated out of ``completed.json`` still cost what it cost). Grouped ``by`` agent, task
type, label (a task with two labels counts in both rows: the rows of ``--by label`` may sum to more than the
total, which is said), day (UTC) or model; ``since`` keeps the entries recorded at or after a time.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from loki.errors import UsageError
from loki.spend.prices import VERSION
from loki.tasks.usage import sum_entries

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    from loki.storage.state import StateStore as Store

GROUPS = ("agent", "type", "label", "day", "model")
_STATES = ("pending", "in-progress", "landing", "blocked", "completed", "failed", "cancelled", "dead-letter",
           "abandoned")
NO_LABEL = "(no label)"
NO_MODEL = "(unknown)"


def parse_since(text: str, now: datetime) -> str:
    """``--since``: a date (``2026-11-01``), a UTC timestamp, or a span back from now (``90m``, ``24h``,
    ``7d``); the canonical timestamp it means (:class:`UsageError`, exit 2, otherwise)."""
    from loki.clock import format_ts, parse_ts

    span = re.fullmatch(r"(\d{1,6})([mhd])", text.strip())
    if span:
        unit = {"m": 60, "h": 3600, "d": 86400}[span.group(2)]
        return format_ts(now - timedelta(seconds=int(span.group(1)) * unit))
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text.strip()):
        try:
            day = datetime.strptime(text.strip(), "%Y-%m-%d").replace(tzinfo=timezone.utc)
        except ValueError:
            pass
        else:
            return format_ts(day)
    try:
        return format_ts(parse_ts(text.strip()))
    except (ValueError, TypeError):
        pass
    raise UsageError(f"invalid --since {text!r}: give a date (2026-11-01), a UTC timestamp "
                     "(2026-11-01T09:00:00Z) or a span back from now (90m, 24h, 7d)", field="since")


def entries(store: Store) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Every (task, usage entry) the state holds, each once."""
    seen: set[str] = set()
    for state, records in store.tasks().view(_STATES).items():
        for record in records:
            task = record.get("task_data") if state in ("dead-letter", "abandoned") else record
            if isinstance(task, dict) and task.get("id") not in seen:
                seen.add(str(task.get("id")))
                yield from _of(task)
    for _state, task in store.tasks().archived():
        if task.get("id") not in seen:
            seen.add(str(task.get("id")))
            yield from _of(task)


def _of(task: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for entry in task.get("usage") or []:
        if isinstance(entry, dict):
            yield task, entry


def _keys(by: str, task: dict[str, Any], entry: dict[str, Any]) -> list[str]:
    if by == "agent":
        return [str(entry.get("agent") or "(unknown)")]
    if by == "type":
        return [str(task.get("type") or "general")]
    if by == "label":
        return [str(label) for label in task.get("labels") or []] or [NO_LABEL]
    if by == "day":
        return [str(entry.get("at") or "")[:10] or "(unknown)"]
    return [str(entry.get("model") or NO_MODEL)]


def report(store: Store, *, by: str | None = None, since: str | None = None) -> dict[str, Any]:
    """``{"since", "by", "prices_version", "total": {...}, "rows": [{"key", ...sums}]}``; each sum is
    ``{input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens, tokens, usd, unpriced, attempts}``
    (``unpriced``: entries with tokens but no dollar figure: an unknown model)."""
    if by is not None and by not in GROUPS:
        raise UsageError(f"invalid --by {by!r}: one of {', '.join(GROUPS)}", field="by")
    start = parse_since(since, store.clock.now()) if since is not None else None
    chosen: list[tuple[dict[str, Any], dict[str, Any]]] = [
        (task, entry) for task, entry in entries(store) if start is None or str(entry.get("at") or "") >= start]
    groups: dict[str, list[dict[str, Any]]] = {}
    if by is not None:
        for task, entry in chosen:
            for key in _keys(by, task, entry):
                groups.setdefault(key, []).append(entry)
    rows = [{by or "key": key, **sum_entries(group)} for key, group in groups.items()]
    rows.sort(key=lambda row: (-row["usd"], -row["tokens"], str(row[by or "key"])))
    if by == "day":
        rows.sort(key=lambda row: str(row["day"]))
    return {"since": start, "by": by, "prices_version": VERSION,
            "total": sum_entries([entry for _task, entry in chosen]), "rows": rows}


def team(store: Store) -> dict[str, Any]:
    """The team's spend for ``loki status``: ``{"today": sums, "total": sums}`` (UTC day), in one pass."""
    from loki.clock import format_ts

    today = format_ts(store.clock.now())[:10]
    every = [entry for _task, entry in entries(store)]
    return {"today": sum_entries([e for e in every if str(e.get("at") or "").startswith(today)]),
            "total": sum_entries(every)}
