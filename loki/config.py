"""Every default in one place, and how ``config/loki.json`` overrides them.

The config file is optional and every key in it is optional; ``docs/config.md``
documents each one. The values here are the reference documents' values.
"""

from __future__ import annotations

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

DEFAULTS: dict[str, dict[str, Any]] = {
    "queue": {
        "lease_seconds": 3600,
        "max_attempts": 5,
        "backoff_initial": 5,
        "backoff_multiplier": 2,
        "backoff_max": 300,
        "completed_hot_limit": 1000,
        "list_limit": 50,
    },
    "deadletter": {
        "review_interval_hours": 24,
        "abandon_after_attempts": 10,
        "same_error_approaches": 3,
        "systemic_root_cause_count": 3,
        "escalation_labels": ["security", "auth", "secrets", "permissions", "data-loss", "migration", "credentials"],
    },
    "breakers": {
        "defaults": {"threshold": 3, "window": 60, "cooldown": 300, "half_open_interval": 10, "recovery_threshold": 3},
        "per_breaker": {},
        "recovery_start_percent": 50,
        "recovery_step_percent": 25,
        "recovery_step_seconds": 60,
    },
    "signals": {"human_review_timeout_hours": 24, "drift_accumulated_threshold": 3, "legacy_strict_mode": False,
                # Signals another tool waits for, left where they are (docs/signals.md): what Loki Mode's
                # run.sh (and the streams it spawns) read in .loki/signals/. "X_*" matches X_ and a subject.
                "leave_for_others": ["PLAN_APPROVED", "POLICY_APPROVED", "POLICY_REJECTED", "TASK_COMPLETION_CLAIMED",
                                     "COMPLETION_REQUESTED", "BUDGET_EXCEEDED", "COUNCIL_REVIEW_REQUESTED",
                                     "GATE_ESCALATION", "RATE_LIMITED", "MERGE_REQUESTED_*",
                                     "SPAWN_QUEUED_*"]},
    "watch": {"rescan_seconds": 1.0, "tick_seconds": 5.0, "settle_seconds": 2.0, "observer": "auto"},
    # The "adr" preset's values; loki/strikes/tiers.py resolves preset + explicit keys (docs/hooks.md).
    "strikes": {"preset": "adr", "warn_at": 2, "stop_at": 3, "stop_decision": "deny", "escalate": True,
                "input_hash_chars": 200, "history": 50},
    # docs/memory.md: the compaction bound, the PreToolUse hint, resolution confidence.
    "memory": {"max_records": 100_000, "inject_max_chars": 300, "resolution_half_life": 3,
               "hint_min_confidence": 0.3},
    # docs/leases.md: the PreToolUse hook's answer to an edit of a file another agent holds.
    "leases": {"enforce": "deny"},
}


def setting(config: dict[str, Any], section: str, key: str, default: Any = None) -> Any:
    """``config[section][key]``, else the documented default."""
    value = (config.get(section) or {}).get(key)
    if value is not None:
        return value
    fallback = DEFAULTS.get(section, {}).get(key)
    return fallback if fallback is not None else default


def breaker_settings(config: dict[str, Any], name: str) -> dict[str, Any]:
    """A breaker's thresholds: the reference's defaults, then ``defaults``, then its own entry."""
    section = config.get("breakers") or {}
    merged = dict(DEFAULTS["breakers"]["defaults"])
    merged.update(section.get("defaults") or {})
    merged.update((section.get("per_breaker") or {}).get(name) or {})
    return merged


def lock_timeout_setting(read_config: Callable[[], dict[str, Any]], default: float) -> float:
    """How long to wait for a lock: ``LOKI_LOCK_TIMEOUT``, else the config's ``lock_timeout`` (a config
    that cannot be read gives the default: the error that matters is raised where it is read)."""
    import os

    from loki.errors import InvalidArgument, LokiError

    env = os.environ.get("LOKI_LOCK_TIMEOUT")
    if env:
        try:
            value = float(env)
        except ValueError:
            value = -1.0
        if not 0 < value <= 86400:
            raise InvalidArgument(f"LOKI_LOCK_TIMEOUT={env!r}: expected seconds, more than 0 and at most 86400",
                                  field="LOKI_LOCK_TIMEOUT")
        return value
    try:
        value = float(read_config().get("lock_timeout", default))
    except LokiError:
        value = default
    return min(value, 86400.0) if value > 0 else default
