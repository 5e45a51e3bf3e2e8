"""Reading Loki Mode's own queue format.

Loki Mode's runtime writes ``queue/pending.json`` as a bare JSON array of camelCase
tasks with a numeric priority. loki accepts that shape on read (so an existing
tree keeps working) and as input to ``loki queue add --from-file``; the first write
stores it in loki's format. Nothing is dropped: fields with no loki equivalent
are kept under ``payload.loki_mode``.

Mapping (documented in docs/loki-mode-compat.md):

* ``priority``: a string ``high|medium|low`` is kept (``critical`` -> high); a number
  follows Loki Mode's "higher is more urgent": >= 7 high, 4-6 medium, <= 3 low;
* ``title``: ``title``, else ``payload.title``, ``payload.action``, else ``<type> <id>``;
* ``createdAt`` -> ``created_at`` (and ``available_at``); ``claimedBy``/``claimedAt``
  -> the claim, with the lease ending ``timeout`` seconds (default 3600) after it;
* ``maxRetries`` -> ``max_attempts = maxRetries + 1`` (retries come after a first try);
* ``dependsOn``/``dependencies`` -> ``dependencies``; ``tags``/``labels`` -> ``labels``;
  ``lastError`` -> ``last_error``.
"""

from __future__ import annotations

from loki.clock import add_seconds, format_ts, parse_ts
from loki.tasks import DEFAULT_MAX_ATTEMPTS, DEFAULT_TYPE, PRIORITIES, make_task

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from typing import Any

_MAPPED = {
    "id", "type", "title", "description", "priority", "payload", "createdAt", "created_at", "claimedBy",
    "claimedAt", "timeout", "retries", "maxRetries", "lastError", "dependencies", "dependsOn", "depends_on",
    "labels", "tags", "status", "idempotency_key", "idempotencyKey",
}
_TASK_KEYS = frozenset(make_task(task_id="x", title="x", now="1970-01-01T00:00:00Z"))


def is_loki_task(raw: Any) -> bool:
    return isinstance(raw, dict) and {"id", "title", "status", "attempts", "max_attempts"} <= raw.keys()


def priority_from(value: Any) -> str:
    if isinstance(value, str):
        lowered = value.lower()
        if lowered in PRIORITIES:
            return lowered
        if lowered in ("critical", "urgent"):
            return "high"
        try:
            value = float(lowered)
        except ValueError:
            return "medium"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "high" if value >= 7 else "medium" if value >= 4 else "low"
    return "medium"


def _timestamp(value: Any, fallback: str) -> str:
    if isinstance(value, str):
        try:
            return format_ts(parse_ts(value))
        except ValueError:
            return fallback
    return fallback


def import_task(raw: dict[str, Any], now: str, status: str = "pending") -> dict[str, Any]:
    """One Loki Mode task -> one loki task (a loki task is returned unchanged)."""
    if is_loki_task(raw):
        return raw
    payload = dict(raw.get("payload") or {}) if isinstance(raw.get("payload"), dict) else {}
    raw_type = raw.get("type")
    type_ = raw_type if isinstance(raw_type, str) and raw_type else DEFAULT_TYPE
    task_id = str(raw["id"])
    title = raw.get("title") or payload.get("title") or payload.get("action") or f"{type_} {task_id}"
    created = _timestamp(raw.get("created_at", raw.get("createdAt")), now)
    max_retries = raw.get("maxRetries")
    max_attempts = max_retries + 1 if isinstance(max_retries, int) and max_retries >= 0 else DEFAULT_MAX_ATTEMPTS
    deps = raw.get("dependencies") or raw.get("dependsOn") or raw.get("depends_on") or []
    labels = raw.get("labels") or raw.get("tags") or []
    extra = {k: v for k, v in raw.items() if k not in _MAPPED and k not in _TASK_KEYS}
    for key in ("retries", "timeout"):
        if raw.get(key) is not None:
            extra[key] = raw[key]
    if extra:
        payload["loki_mode"] = extra
    task = make_task(
        task_id=task_id,
        title=str(title)[:500],
        now=created,
        description=str(raw.get("description") or payload.get("description") or ""),
        type=type_,
        priority=priority_from(raw.get("priority")),
        dependencies=[str(d) for d in deps] if isinstance(deps, list) else [],
        labels=[str(label) for label in labels] if isinstance(labels, list) else [],
        payload=payload,
        max_attempts=min(max_attempts, 1000),
        idempotency_key=raw.get("idempotency_key") or raw.get("idempotencyKey"),
        status=status,
    )
    if isinstance(raw.get("lastError"), str):
        task["last_error"] = raw["lastError"]
    if status == "in-progress" and isinstance(raw.get("claimedBy"), str):
        claimed_at = _timestamp(raw.get("claimedAt"), now)
        raw_timeout = raw.get("timeout")
        timeout = raw_timeout if isinstance(raw_timeout, (int, float)) else 3600
        task["claimed_by"] = raw["claimedBy"]
        task["claimed_at"] = claimed_at
        task["lease_until"] = format_ts(add_seconds(parse_ts(claimed_at), float(timeout)))
        task["claim_token"] = "imported"
    return task


def import_tasks(raws: list[Any], now: str | None = None, status: str = "pending") -> list[dict[str, Any]]:
    from loki.clock import SystemClock

    stamp = now or format_ts(SystemClock().now())
    return [import_task(raw, stamp, status) for raw in raws]
