"""What a completion of a task with checks must carry, and what it keeps (docs/verify.md).

A task whose checks (loki/tasks/verify.py) nothing shows passed does not complete: ``loki work`` runs
them and hands their results over as evidence; a person's ``loki queue complete`` gives them in an
``--evidence FILE`` (every check passed, on the commit ``HEAD`` names in the caller's directory) or
overrides with ``--force --by NAME``, which the task's history keeps. The evidence goes into the
task's result under ``verification``: ``{"checks": [{"command", "exit_code", "duration_seconds",
"output_tail", "commit"}], "commit"}``, or ``{"forced_by", "checks_not_run"}``.
"""

from __future__ import annotations

from loki.tasks import verify

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

MAX_EVIDENCE_BYTES = 1024 * 1024
EVIDENCE_FIELDS = ("command", "exit_code", "duration_seconds", "output_tail", "commit", "started_at", "timed_out")


def verified_result(task: dict[str, Any], config: dict[str, Any], result: Any,
                    evidence: Sequence[dict[str, Any]] | None, head: str | None,
                    forced_by: str | None) -> tuple[Any, str | None]:
    """The result to store for ``task`` and the history's note of a forced completion; raises
    :class:`loki.tasks.verify.Unverified` when the task has checks and neither passes."""
    checks = verify.checks_for(task, config)
    if not checks:
        if evidence:  # kept all the same: it says what ran
            items = verify.evidence_checks(list(evidence), "the evidence")
            return _with(result, {"checks": [_kept(item) for item in items], "commit": head}), summary(items, head)
        return result, None
    if forced_by is not None:
        named = ", ".join(repr(check) for check in checks)
        return (_with(result, {"forced_by": forced_by, "checks_not_run": checks}),
                f"forced by {forced_by} without its checks' evidence ({named})")
    if evidence is None:
        raise verify.refusal(task["id"], checks)
    items = verify.evidence_checks(list(evidence), "the evidence")
    verify.judge(checks, items, head, "the evidence")
    return _with(result, {"checks": [_kept(item) for item in items], "commit": head}), summary(items, head)


def summary(items: Sequence[dict[str, Any]], head: str | None) -> str:
    """The history's words for a verified completion: ``2 checks passed on 94a0393f9d14: 'make test'
    (exit 0, 12.3s), 'ruff check src' (exit 0, 0.8s)``."""
    count = "1 check" if len(items) == 1 else f"{len(items)} checks"
    on = f" on {head[:12]}" if head else ""
    each = ", ".join(f"{item['command']!r} (exit {item['exit_code']}"
                     + (f", {item['duration_seconds']:g}s" if isinstance(item.get("duration_seconds"), (int, float))
                        else "") + ")" for item in items)
    return f"{count} passed{on}: {each}"


def signal_evidence(task: dict[str, Any], config: dict[str, Any], signal_type: str, signal_id: str,
                    agent: str | None, body: dict[str, Any]) -> dict[str, Any] | None:
    """What ``TESTS_PASSED_x`` records for a task with checks: the testing stream's report stands for
    them (the watcher applies it whoever holds the task); None for a task without checks."""
    checks = verify.checks_for(task, config)
    if not checks:
        return None
    commit = body.get("commit")
    reported: dict[str, Any] = {"signal": signal_id, "type": signal_type, "by": agent, "checks_reported": checks,
                                "commit": commit if isinstance(commit, str) else None}
    reported.update({key: body[key] for key in ("summary", "passed", "failed") if key in body})
    return reported


def signal_landing(task: dict[str, Any], config: dict[str, Any], body: dict[str, Any],
                   now_dt: Any) -> dict[str, Any] | None:
    """The ``landing`` record ``TESTS_PASSED_x`` gives a task that must land, when the signal names the
    commit the tests ran on (``commit``, hex); None otherwise: without a commit to wait for, the testing
    stream's word completes it as before (docs/verify.md, "Landing")."""
    import re

    from loki.clock import add_seconds, format_ts
    from loki.tasks.landing import deadline_seconds, land_branch

    branch = land_branch(task, config)
    commit = body.get("commit")
    if branch is None or not isinstance(commit, str) or not re.fullmatch(r"[0-9a-f]{7,64}", commit):
        return None
    from loki.errors import InvalidArgument
    from loki.tasks.landing import check_branch

    try:
        work: str | None = check_branch(body.get("branch"), "branch")
    except InvalidArgument:
        work = None  # none, or not a branch name: the deleted-branch rule does not apply
    return {"branch": branch, "commit": commit, "work_branch": work,
            "since": format_ts(now_dt), "deadline": format_ts(add_seconds(now_dt, deadline_seconds(config)))}


def read_evidence(path: str) -> tuple[list[dict[str, Any]], str | None]:
    """``--evidence FILE``: its check results and the commit ``HEAD`` names here now (what they must
    have run on). A file that is not strict JSON of the expected shape: :class:`InvalidInput`."""
    from loki.errors import InvalidInput, describe_os_error
    from loki.regularfile import NotRegularFile, read_regular
    from loki.storage import jsonio

    try:
        data = read_regular(path, MAX_EVIDENCE_BYTES + 1)
    except NotRegularFile as exc:
        raise InvalidInput(f"evidence file {exc}", file=path) from None
    except OSError as exc:
        raise InvalidInput(f"evidence file {path}: {describe_os_error(exc)}", file=path) from None
    if len(data) > MAX_EVIDENCE_BYTES:
        raise InvalidInput(f"evidence file {path}: over the {MAX_EVIDENCE_BYTES}-byte limit", file=path)
    try:
        doc = jsonio.loads_strict(data, max_depth=jsonio.INPUT_DEPTH)
    except jsonio.JsonError as exc:
        where = f" at {exc.pointer}" if exc.pointer else ""
        raise InvalidInput(f"evidence file {path}{where}: {exc.reason}", file=path) from None
    if isinstance(doc, dict) and isinstance(doc.get("verification"), dict):
        doc = doc["verification"]  # a task's result, as `queue show --json` prints it
    return verify.evidence_checks(doc, f"evidence file {path}"), verify.git_head()


def _kept(item: dict[str, Any]) -> dict[str, Any]:
    from loki.text.redact import redact

    kept = {key: item[key] for key in EVIDENCE_FIELDS if key in item}
    if isinstance(kept.get("output_tail"), str):
        kept["output_tail"] = verify.tail(redact(kept["output_tail"]))
    kept["command"] = redact(kept["command"])
    return kept


def _with(result: Any, verification: dict[str, Any]) -> dict[str, Any]:
    if result is None:
        return {"verification": verification}
    if isinstance(result, dict):
        return {**result, "verification": verification}
    return {"value": result, "verification": verification}
