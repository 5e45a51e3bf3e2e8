"""``loki queue ...``: a thin layer over :class:`loki.queue.queue.Queue`."""

from __future__ import annotations

from typing import Any

import typer

from loki.cli.common import (
    BY_HELP,
    JSON_HELP,
    footer,
    format_option,
    print_json,
    print_listing,
    quiet_option,
    report_notes,
    say,
    store_from,
    table,
    who,
)
from loki.cli.output import resolve_format
from loki.tasks.record import attempt_failed
from loki.wording import plural, shorten

app = typer.Typer(help="The task queue: add, list, ready, claim, heartbeat, complete, fail, release, edit, close, "
                       "defer, cancel, retry, history.", no_args_is_help=True)

AGENT_HELP = "The agent's name (the holder of the claim)."
TOKEN_HELP = "The claim token printed by claim; when given it must match the current claim."


def _queue(ctx: typer.Context) -> Any:
    from loki.queue.queue import Queue

    return Queue(store_from(ctx))


def _one_line(task: dict[str, Any]) -> str:
    return f"{task['id']} [{task['priority']}] {task['title']}"


@app.command("add")
def add(
    ctx: typer.Context,
    title: str | None = typer.Argument(None, help="What the task is (omit with --from-file)."),
    description: str = typer.Option("", "--description", "-d", help="Longer description."),
    type_: str | None = typer.Option(None, "--type", help="Task type, e.g. eng-backend (default: general)."),
    priority: str = typer.Option("medium", "--priority", "-p", help="high, medium or low."),
    depends_on: list[str] | None = typer.Option(None, "--depends-on", help="A task this one waits for (repeatable)."),
    label: list[str] | None = typer.Option(None, "--label", "-l", help="A label (repeatable)."),
    payload: str | None = typer.Option(None, "--payload", help="A JSON object handed to whoever claims the task."),
    paths: list[str] | None = typer.Option(None, "--paths", help="A file pattern the task will touch, leased by its "
                                           "claim (repeatable; docs/leases.md)."),
    task_id: str | None = typer.Option(None, "--id", help="Choose the id (default: task-<random>)."),
    idempotency_key: str | None = typer.Option(None, "--idempotency-key",
                                               help="Adding the same key again returns the existing task."),
    max_attempts: int | None = typer.Option(None, "--max-attempts", help="Failures before dead-letter (default 5)."),
    verify: list[str] | None = typer.Option(None, "--verify", help="A check loki work runs after the agent exits 0, "
                                            "e.g. 'make test' (repeatable; default: the type's, docs/verify.md)."),
    land: str | None = typer.Option(None, "--land", help="The branch its commit must reach before it is completed "
                                    "(default: the type's, docs/verify.md)."),
    from_file: str | None = typer.Option(None, "--from-file",
                                         help="Add a JSON array, {tasks: [...]} or JSONL batch in one transaction."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Add a task (or a whole batch with --from-file)."""
    from loki.errors import UsageError
    from loki.queue.queue import parse_json_option

    queue = _queue(ctx)
    if from_file is not None:
        if title is not None:
            raise UsageError("give either TITLE or --from-file, not both")
        results = queue.add_from_file(from_file)
        created = [r["task"] for r in results if r["created"]]
        existing = [r["task"] for r in results if not r["created"]]
        if json_output:
            from loki.tasks.record import summary

            print_json({"added": len(created), "existing": len(existing),
                        "tasks": [summary(r["task"]) | {"created": r["created"]} for r in results]})
        else:
            say(f"added {plural(len(created), 'task')} from {from_file}" + (f", {len(existing)} already present "
                                                                     "(same idempotency key)" if existing else ""))
        return
    if title is None:
        raise UsageError("missing TITLE (or --from-file FILE)")
    task = queue.add(
        title, description=description, type=type_, priority=priority.lower(), depends_on=depends_on or [],
        labels=label or [], payload=parse_json_option(payload, "--payload", want_object=True), task_id=task_id,
        idempotency_key=idempotency_key, max_attempts=max_attempts, verify=verify, paths=paths or [], land=land,
    )
    if json_output:
        print_json({"created": task.created, "task": task})
    elif task.created:
        say(f"added {_one_line(task)}")
    else:
        say(f"exists {_one_line(task)} (idempotency key {idempotency_key!r}); nothing added")


@app.command("list")
def list_(
    ctx: typer.Context,
    state: str = typer.Option("pending", "--state", "-s", help="A queue state, dead-letter, abandoned, or all."),
    type_: str | None = typer.Option(None, "--type", help="Only tasks of this type."),
    label: str | None = typer.Option(None, "--label", "-l", help="Only tasks with this label."),
    limit: int | None = typer.Option(None, "--limit", "-n", help="At most this many (default 50; the total is shown)."),
    agent: str | None = typer.Option(None, "--agent", "-a", help="Only the tasks this agent holds (and, completed, "
                                                                 "those it completed)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
    fmt: str | None = format_option(),
    quiet: bool = quiet_option(),
) -> None:
    """List tasks, with the total count. Pending: in claim order, the ready ones first, with why the rest wait."""
    output = resolve_format(fmt, quiet, json_output)
    queue = _queue(ctx)
    result = queue.list_tasks(state, type=type_, label=label, limit=limit, agent=agent)
    report_notes(queue.store, result)

    def people() -> None:
        rows = [[t["id"], t["state"], t["priority"], t["type"], t["title"], t["attempts"], t["claimed_by"] or "",
                 t["lease_until"] or "", _status_cell(t)] for t in result["tasks"]]
        # at 80 columns the type, then the state (one state listed: the footer names it; with --state all it is
        # what tells the rows apart, and stays) give way to the title; why a task waits (ready / why) stays: it
        # is what the list is read for. Columns empty in every row (no holder while nothing is claimed) go first.
        droppable = ["type", "state", "tries", "lease until", "holder"]
        table(None, ["id", "state", "priority", "type", "title", "tries", "holder", "lease until", "ready / why"],
              rows, droppable=[c for c in droppable if not (state == "all" and c == "state")])
        more = " (use --limit to see more)" if result["total"] > result["shown"] else ""
        noun = "task" if state == "all" else f"{state} task"  # never "36 all tasks"
        footer(f"{result['shown']} of {plural(result['total'], noun)}{more}")

    print_listing(output, result, result["tasks"], "id", people)


@app.command("show")
def show(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., help="The task id."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Everything about one task, wherever it is (including dead-letter, abandoned and the archive)."""
    queue = _queue(ctx)
    result = queue.show(task_id)
    report_notes(queue.store, result)
    if json_output:
        print_json(result)
        return
    task = result["task"]
    say(f"{task['id']}: {task['title']}")
    fields = ["state", "priority", "type", "labels", "dependencies", "created_at", "available_at", "deferred",
              "blocked", "claimed_by", "lease_until", "max_attempts", "last_error", "completed_at", "completed_by",
              "verify", "land", "landing", "payload", "result"]
    values = {**task, "state": result["state"] + (" (archived)" if result.get("archived") else ""),
              "completed_by": result.get("completed_by"), "blocked": _blocked_text(task.get("blocked")),
              "deferred": _deferred_text(task.get("deferred")), "landing": _landing_text(task.get("landing")),
              "land": "no (--no-land)" if task.get("land") is False else task.get("land"),
              "payload": _json_text(task.get("payload")) if task.get("payload") else None,
              "result": _json_text(task["result"]) if task.get("result") is not None else None}
    table(None, ["field", "value"], [[f, _text(values.get(f))] for f in fields if values.get(f) not in (None, [], "")])
    if task.get("description"):
        say(task["description"])
    _show_checks(task)
    if task.get("attempts"):
        table("attempts", ["#", "when", "agent", "approach", "type", "error"],
              [[a["attempt_number"], a["timestamp"], a["agent_id"], a["approach"], a["error_type"],
                shorten(a["error_message"], 160)] for a in task["attempts"]])
    if result.get("spent"):
        from loki.cli.usage import dollars, one_line
        from loki.tasks.usage import total_tokens

        table("spent (docs/spend.md)", ["#", "when", "agent", "outcome", "model", "dollars", "tokens"],
              [[u.get("attempt", ""), u.get("at", ""), u.get("agent", ""), u.get("outcome", ""), u.get("model", ""),
                dollars({"usd": u["usd"] or 0.0, "unpriced": int(u.get("usd") is None)}),
                f"{total_tokens(u):,}"] for u in task["usage"]])
        say(f"spent in all: {one_line(result['spent'])}")
    for note in task.get("notes", []):
        say(f"note {note['timestamp']}{' ' + note['author'] if note.get('author') else ''}: {note['text']}")
    if task.get("history"):
        say(f"history: {plural(len(task['history']), 'event')} (`loki queue history {task['id']}`)")


def _landing_text(landing: dict[str, Any] | None) -> str | None:
    """Where a task must land and how it stands (docs/verify.md, "Landing")."""
    if not isinstance(landing, dict):
        return None
    parts = [f"{str(landing.get('commit'))[:12]} -> {landing.get('branch')}",
             f"from {landing.get('work_branch') or 'a detached HEAD'}", f"since {landing.get('since')}"]
    if landing.get("landed_at"):
        parts.append(f"landed {landing['landed_at']} on {landing.get('ref')}")
    else:
        parts.append(f"a human is asked after {landing.get('deadline')}")
    if landing.get("escalation"):
        parts.append(f"escalations/{landing['escalation']}")
    return "; ".join(parts)


def _show_checks(task: dict[str, Any]) -> None:
    """The evidence a completion kept (docs/verify.md): each check's command, exit, duration, commit and
    its output's last line."""
    result = task.get("result")
    verification = result.get("verification") if isinstance(result, dict) else None
    if not isinstance(verification, dict):
        return
    if verification.get("forced_by"):
        say(f"checks: not run; completed by --force --by {verification['forced_by']}")
    rows = []
    for item in verification.get("checks") or []:
        if not isinstance(item, dict):
            continue
        lines = [line for line in str(item.get("output_tail") or "").splitlines() if line.strip()]
        rows.append([item.get("command"), item.get("exit_code"), item.get("duration_seconds"),
                     str(item.get("commit") or "")[:12], shorten(lines[-1], 120) if lines else ""])
    if rows:
        table("checks", ["check", "exit", "seconds", "commit", "output (last line)"], rows)


def _blocked_text(blocked: dict[str, Any] | None) -> str | None:
    if not blocked:
        return None
    parts = [str(blocked.get("reason") or "blocked"), f"since {blocked.get('since')}"]
    if blocked.get("deadline"):
        parts.append(f"a human decides by {blocked['deadline']} (then dead-letter)")
    if blocked.get("escalation"):
        parts.append(f"escalations/{blocked['escalation']}")
    return "; ".join(parts)


def _deferred_text(deferred: dict[str, Any] | None) -> str | None:
    if not deferred:
        return None
    by = f" by {deferred['by']}" if deferred.get("by") else ""
    why = f": {deferred['reason']}" if deferred.get("reason") else ""
    return f"until {deferred['until']}{by}{why}"


def _json_text(value: Any) -> str:
    import json

    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 300 else text[:297] + "..."


def _status_cell(task: dict[str, Any]) -> str:
    """A listing's last column: ready, or why not (pending); a blocked task's reason and deadline."""
    if task["ready"]:
        return "ready"
    return str(task.get("why") or "")


def _value(value: Any) -> str:
    """A changed value in words: an empty list is "none"."""
    return "none" if value in ([], None, "") else _text(value)


def _text(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


@app.command("claim")
def claim(
    ctx: typer.Context,
    agent: str = typer.Option(..., "--agent", "-a", help=AGENT_HELP),
    type_: list[str] | None = typer.Option(None, "--type", help="Only tasks of this type (repeatable: any of them)."),
    label: list[str] | None = typer.Option(None, "--label", "-l", help="Only tasks with this label (repeatable: all "
                                                                       "of them)."),
    priority: list[str] | None = typer.Option(None, "--priority", "-p", help="Only tasks of this priority "
                                                                             "(repeatable: any of them)."),
    task_id: str | None = typer.Option(None, "--id", help="Claim this task (exit 3 saying why if it is not ready)."),
    reuse: bool = typer.Option(False, "--reuse", help="If you already hold a live claim that fits, get it back "
                                                      "(its token and lease unchanged) instead of a second task."),
    lease: float | None = typer.Option(None, "--lease", help="Lease in seconds (default 3600)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
    fmt: str | None = format_option(),
    quiet: bool = quiet_option(),
) -> None:
    """Take the best ready task. Exit 3, with the reason, when nothing is ready (with --id: that task, or why not).

    `id=$(loki queue claim --agent a1 -q)` gives the id alone; --format jsonl the task on one line.
    """
    from loki.cli.output import print_claim

    # `loki queue claim` usually runs through the fast lane (loki/cli/fast.py); both print the same.
    output = resolve_format(fmt, quiet, json_output)  # a bad format claims nothing
    from loki.spend.budgets import claim as budget_claim

    print_claim(budget_claim(_queue(ctx), agent, types=type_ or [], labels=label or [],
                             priorities=[p.lower() for p in priority or []], task_id=task_id, reuse=reuse,
                             lease_seconds=lease), output)


@app.command("heartbeat")
def heartbeat(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., help="The task id."),
    agent: str = typer.Option(..., "--agent", "-a", help=AGENT_HELP),
    token: str | None = typer.Option(None, "--token", help=TOKEN_HELP),
    lease: float | None = typer.Option(None, "--lease",
                                       help="New lease from now, in seconds (default: as long as the claim's lease)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Extend the lease of a task you hold. Exit 4 if you no longer hold it."""
    task = _queue(ctx).heartbeat(task_id, agent, token=token, lease_seconds=lease)
    if json_output:
        print_json({"task": task})
    else:
        say(f"{task['id']}: lease until {task['lease_until']}")


@app.command("complete")
def complete(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., help="The task id."),
    agent: str = typer.Option(..., "--agent", "-a", help=AGENT_HELP),
    token: str | None = typer.Option(None, "--token", help=TOKEN_HELP),
    result: str | None = typer.Option(None, "--result", help="Any JSON value to store as the result."),
    evidence: str | None = typer.Option(None, "--evidence", help="A JSON file of the task's checks' results, "
                                        "passed on the current HEAD (docs/verify.md)."),
    force: bool = typer.Option(False, "--force", help="Complete a task with checks without their evidence "
                                                      "(needs --by; kept in its history)."),
    by: str | None = typer.Option(None, "--by", help="With --force: the person who decided."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Mark a task you hold as completed. Exit 4 if you no longer hold it; 1 if its checks did not pass."""
    from loki.errors import UsageError
    from loki.queue.queue import parse_json_option

    if force and not by:
        raise UsageError("--force needs --by NAME: the person who decided to complete it without its checks")
    if by and not force:
        raise UsageError("--by goes with --force")
    if force and evidence is not None:
        raise UsageError("give either --evidence or --force, not both")
    value = parse_json_option(result, "--result")
    from loki.queue.landing import complete_here

    checked = None
    if evidence is not None:
        from loki.queue.verified import read_evidence

        checked = read_evidence(evidence)
    task = complete_here(_queue(ctx), task_id, agent, evidence=checked, token=token, result=value,
                         forced_by=by if force else None)
    if json_output:
        print_json({"task": task})
    elif task["status"] == "landing":
        say(f"verified {_one_line(task)}: landing, waiting for {task['landing']['commit'][:12]} to reach "
            f"{task['landing']['branch']}")
    else:
        say(f"completed {_one_line(task)}")


@app.command("fail")
def fail(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., help="The task id."),
    agent: str = typer.Option(..., "--agent", "-a", help=AGENT_HELP),
    error: str = typer.Option(..., "--error", "-e", help="What went wrong."),
    error_type: str = typer.Option("other", "--error-type",
                                   help="test_failure, timeout, dependency, validation or other."),
    approach: str = typer.Option("", "--approach", help="What was tried (the next attempt should differ)."),
    token: str | None = typer.Option(None, "--token", help=TOKEN_HELP),
    final: bool = typer.Option(False, "--final", help="Do not retry: move the task to failed."),
    depends_on: list[str] | None = typer.Option(None, "--depends-on",
                                                help="A task this attempt found it needs (repeatable)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Record a failed attempt: retry with backoff, or dead-letter at max attempts, or failed with --final."""
    outcome = _queue(ctx).fail(task_id, agent, error=error, error_type=error_type.lower(), approach=approach,
                               token=token, final=final, depends_on=depends_on or [])
    if json_output:
        print_json({"task": outcome["task"], "state": outcome["state"], "retry_at": outcome["retry_at"]})
        return
    task = outcome["task"]
    attempts = attempt_failed(task)
    if outcome["state"] == "pending":
        say(f"{task['id']}: {attempts}; retry after {outcome['retry_at']}")
    elif outcome["state"] == "dead-letter":
        say(f"{task['id']}: {attempts}; moved to the dead-letter queue "
            f"(strategy {outcome['entry']['recovery_strategy']})")
    else:
        say(f"{task['id']}: failed for good (--final)")


@app.command("release")
def release(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., help="The task id."),
    agent: str = typer.Option(..., "--agent", "-a", help=AGENT_HELP),
    token: str | None = typer.Option(None, "--token", help=TOKEN_HELP),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Give back a task you hold, without recording a failure."""
    task = _queue(ctx).release(task_id, agent, token=token)
    if json_output:
        print_json({"task": task})
    else:
        say(f"released {_one_line(task)}")


@app.command("requeue-stale")
def requeue_stale(ctx: typer.Context, json_output: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Requeue in-progress tasks whose lease expired (each gets a timeout attempt)."""
    outcome = _queue(ctx).requeue_stale()
    if json_output:
        print_json(outcome)
        return
    say(f"requeued {len(outcome['requeued'])}: {', '.join(outcome['requeued']) or '-'}")
    if outcome["dead_lettered"]:
        say(f"moved to dead-letter (max attempts): {', '.join(outcome['dead_lettered'])}")


@app.command("land-check")
def land_check(
    ctx: typer.Context,
    repo: str | None = typer.Option(None, "--repo", help="The git repository to ask (default: the one holding "
                                    ".loki/)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Resolve the tasks in landing now, as the watcher does: completed once their commit reached their branch."""
    events = _queue(ctx).land_check(repo=repo)
    if json_output:
        print_json({"tasks": events})
        return
    if not events:
        say("no task is landing")
    for event in events:
        say(event["detail"])


@app.command("cancel")
def cancel(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., help="The task id."),
    cascade: bool = typer.Option(False, "--cascade", help="Also cancel every task that depends on it."),
    reason: str | None = typer.Option(None, "--reason", help="Why (kept in the task's notes)."),
    force: bool = typer.Option(False, "--force", help="Cancel even a task an agent holds (its claim ends)."),
    by: str | None = typer.Option(None, "--by", help=BY_HELP),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Cancel a task; tasks that depend on it are reported (and cancelled with --cascade)."""
    outcome = _queue(ctx).cancel(task_id, cascade=cascade, reason=reason, force=force, by=who(by))
    if json_output:
        print_json(outcome)
        return
    say(f"cancelled {', '.join(outcome['cancelled'])}")
    if outcome["dependents"] and not cascade:
        say(f"warning: these tasks depend on {task_id} and can no longer become ready: "
            f"{', '.join(outcome['dependents'])} (cancel them too with --cascade)")


@app.command("retry")
def retry(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., help="The task id."),
    by: str | None = typer.Option(None, "--by", help=BY_HELP),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Move a failed, dead-letter or cancelled task back to pending, keeping its attempts."""
    outcome = _queue(ctx).retry(task_id, by=who(by))
    if json_output:
        print_json(outcome)
    else:
        say(f"{_one_line(outcome['task'])}: back to pending from {outcome['from']}")


@app.command("ready")
def ready(
    ctx: typer.Context,
    type_: list[str] | None = typer.Option(None, "--type", help="Only tasks of this type (repeatable: any of them)."),
    label: list[str] | None = typer.Option(None, "--label", "-l", help="Only tasks with this label (repeatable: all "
                                                                       "of them)."),
    priority: list[str] | None = typer.Option(None, "--priority", "-p", help="Only tasks of this priority "
                                                                             "(repeatable: any of them)."),
    explain: bool = typer.Option(False, "--explain", help="Also say, for every pending task that is not ready, why."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP + " Always carries the reasons."),
) -> None:
    """What `claim` would hand out next, in order; with --explain, why each other pending task waits."""
    queue = _queue(ctx)
    result = queue.ready(types=type_ or [], labels=label or [], priorities=[p.lower() for p in priority or []])
    report_notes(queue.store, result)
    if json_output:
        print_json(result)
        return
    if result["ready"]:
        table(None, ["#", "id", "priority", "type", "title", "labels"],
              [[t["position"], t["id"], t["priority"], t["type"], t["title"], _text(t["labels"])]
               for t in result["ready"]])
    waiting = result["not_ready"]
    if explain and waiting:
        table("not ready", ["id", "priority", "type", "title", "why"],
              [[t["id"], t["priority"], t["type"], t["title"], "; ".join(r["text"] for r in t["reasons"])]
               for t in waiting])
    noun = "matching pending task" if result["matching"] != result["pending"] else "pending task"
    say(f"{len(result['ready'])} ready, {len(waiting)} not ready, of {plural(result['matching'], noun)}")
    if waiting and not explain:
        say("`loki queue ready --explain` says why each of the others is not ready")
    if result["expired_leases"]:
        say(f"{plural(len(result['expired_leases']), 'claim')} with an expired lease "
            f"({', '.join(result['expired_leases'])}): the next claim or the watcher requeues "
            f"{'it' if len(result['expired_leases']) == 1 else 'them'} first")


@app.command("history")
def history_(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., help="The task id."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Every change to a task, oldest first: added, claimed, heartbeats, failures, retries, decisions, edits."""
    queue = _queue(ctx)
    result = queue.history(task_id)
    report_notes(queue.store, result)
    if json_output:
        print_json(result)
        return
    archived = ", archived" if result["archived"] else ""
    say(f"{result['task_id']}: {result['title']} ({result['state']}{archived})")
    table(None, ["when", "event", "by", "to", "detail"],
          [[e["at"], e["event"], e.get("by") or "", e.get("to") or "", _event_detail(e)] for e in result["events"]])
    if not result["recorded"]:
        say("note: this task predates its history: these events are rebuilt from its attempts and completion")
    if result.get("spent"):
        from loki.cli.usage import one_line

        say(f"spent: {one_line(result['spent'])}")


def _event_detail(event: dict[str, Any]) -> str:
    """An event's sentence and the facts it carries, in words."""
    parts = []
    if event["event"] == "heartbeat":
        gap = float(event.get("longest_gap_seconds", 0))
        parts.append(f"{plural(int(event.get('count', 1)), 'heartbeat')} until {event.get('last_at')}, longest "
                     f"silence {gap:g}s")
    if event.get("attempt"):
        parts.append(f"attempt {event['attempt']}")
    if event.get("changes"):
        parts.append("; ".join(f"{field}: {_value(c['from'])} -> {_value(c['to'])}"
                               for field, c in event["changes"].items()))
    if event.get("until"):
        parts.append(f"until {event['until']}")
    if event.get("detail"):
        parts.append(str(event["detail"]))
    return "; ".join(parts)


@app.command("edit")
def edit(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., help="The task id."),
    title: str | None = typer.Option(None, "--title", help="The new title."),
    description: str | None = typer.Option(None, "--description", "-d", help="The new description."),
    type_: str | None = typer.Option(None, "--type", help="The new type."),
    priority: str | None = typer.Option(None, "--priority", "-p", help="high, medium or low."),
    add_label: list[str] | None = typer.Option(None, "--add-label", help="Add a label (repeatable)."),
    remove_label: list[str] | None = typer.Option(None, "--remove-label", help="Remove a label (repeatable)."),
    add_dependency: list[str] | None = typer.Option(None, "--add-dependency",
                                                    help="A task this one must wait for (repeatable; no cycles)."),
    remove_dependency: list[str] | None = typer.Option(None, "--remove-dependency",
                                                       help="Stop waiting for this task (repeatable)."),
    max_attempts: int | None = typer.Option(None, "--max-attempts", help="Failures before the dead-letter queue."),
    verify: list[str] | None = typer.Option(None, "--verify", help="The task's checks, replacing its list "
                                            "(repeatable; docs/verify.md)."),
    no_verify: bool = typer.Option(False, "--no-verify", help="No checks for this task, whatever its type's default."),
    paths: list[str] | None = typer.Option(None, "--paths", help="The file patterns the task will touch, replacing "
                                           "the ones it declares (repeatable; docs/leases.md)."),
    clear_paths: bool = typer.Option(False, "--clear-paths", help="The task declares no paths any more."),
    land: str | None = typer.Option(None, "--land", help="The branch its commit must reach before it is completed "
                                    "(docs/verify.md)."),
    no_land: bool = typer.Option(False, "--no-land", help="It need not land, whatever its type's default."),
    force: bool = typer.Option(False, "--force", help="Edit even a task another agent holds (its claim stays)."),
    by: str | None = typer.Option(None, "--by", "--agent", "-a", help=BY_HELP),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Change a task's title, description, type, priority, labels, dependencies or max attempts."""
    result = _queue(ctx).edit(
        task_id, by=who(by), force=force, title=title, description=description, type=type_,
        priority=None if priority is None else priority.lower(), add_labels=add_label or [],
        remove_labels=remove_label or [], add_dependencies=add_dependency or [],
        remove_dependencies=remove_dependency or [], max_attempts=max_attempts,
        verify=_verify_edit(verify, no_verify), paths=[] if clear_paths else (paths or None),
        land=_land_edit(land, no_land))
    if json_output:
        print_json(result)
    elif not result["changed"]:
        say(f"{task_id}: nothing changed (every value was already so)")
    else:
        changes = "; ".join(f"{field}: {_value(c['from'])} -> {_value(c['to'])}"
                            for field, c in result["changed"].items() if field != "description")
        if "description" in result["changed"]:
            changes = "; ".join(p for p in (changes, "description changed") if p)
        say(f"edited {task_id} ({result['state']}): {changes}")


def _land_edit(land: str | None, no_land: bool) -> str | bool | None:
    from loki.errors import UsageError

    if land is not None and no_land:
        raise UsageError("give either --land or --no-land, not both")
    return False if no_land else land


def _verify_edit(verify: list[str] | None, no_verify: bool) -> list[str] | None:
    from loki.errors import UsageError

    if verify and no_verify:
        raise UsageError("give either --verify or --no-verify, not both")
    return [] if no_verify else (verify or None)


@app.command("close")
def close(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., help="The task id."),
    reason: str = typer.Option(..., "--reason", help="Why it is closed (kept in its history and notes)."),
    wont_do: bool = typer.Option(False, "--wont-do", help="Close as won't do: cancelled (from the dead-letter "
                                                          "queue: abandoned). Default: done, i.e. completed."),
    force: bool = typer.Option(False, "--force", help="Close even a task an agent holds (its claim ends)."),
    by: str | None = typer.Option(None, "--by", help=BY_HELP),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """A person closes a task: done (completed) or, with --wont-do, won't do (cancelled)."""
    result = _queue(ctx).close(task_id, reason=reason, wont_do=wont_do, by=who(by), force=force)
    if json_output:
        print_json(result)
        return
    outcome = "won't do" if wont_do else "done"
    say(f"closed {task_id} as {outcome}: {result['from']} -> {result['state']}")
    if result["dependents"]:
        say(f"warning: these tasks depend on {task_id} and can no longer become ready: "
            f"{', '.join(result['dependents'])} (cancel them with `loki queue cancel {task_id} --cascade`)")
    for name in result["resolved"]:
        say(f"resolved escalations/{name}")


@app.command("defer")
def defer(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., help="The task id."),
    until: str = typer.Option(..., "--until", help="An ISO 8601 time (2026-01-26T09:00:00Z), a date, a duration "
                                                   "from now (90s, 30m, 2h, 3d, 1w), or `now` to lift a deferral."),
    reason: str | None = typer.Option(None, "--reason", help="Why it waits (shown by ready --explain)."),
    force: bool = typer.Option(False, "--force", help="Defer even a task an agent holds (its claim ends)."),
    by: str | None = typer.Option(None, "--by", help=BY_HELP),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Keep a pending task from being claimed until a time (`--until now` lifts it)."""
    result = _queue(ctx).defer(task_id, until=until, by=who(by), reason=reason, force=force)
    if json_output:
        print_json(result)
        return
    released = f" (the claim of {result['released']} ended)" if result["released"] else ""
    if result["deferred_until"]:
        say(f"{task_id} deferred until {result['deferred_until']}{released}")
    elif result["changed"]:
        say(f"{task_id} is no longer deferred{released}")
    else:
        say(f"{task_id} was not deferred; nothing changed")
