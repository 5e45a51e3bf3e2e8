"""``loki queue ...``: a thin layer over :class:`loki.queue.queue.Queue`."""

from __future__ import annotations

from typing import Any

import typer

from loki.cli.common import (
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
)
from loki.cli.output import resolve_format
from loki.wording import attempt_failed, plural

app = typer.Typer(help="The task queue: add, list, claim, heartbeat, complete, fail, release, cancel, retry.",
                  no_args_is_help=True)

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
    task_id: str | None = typer.Option(None, "--id", help="Choose the id (default: task-<random>)."),
    idempotency_key: str | None = typer.Option(None, "--idempotency-key",
                                               help="Adding the same key again returns the existing task."),
    max_attempts: int | None = typer.Option(None, "--max-attempts", help="Failures before dead-letter (default 5)."),
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
            from loki.queue.tasks import summary

            print_json({"added": len(created), "existing": len(existing),
                        "tasks": [summary(r["task"]) | {"created": r["created"]} for r in results]})
        else:
            say(f"added {plural(len(created), 'task')} from {from_file}" + (f", {len(existing)} already present "
                                                                     "(same idempotency key)" if existing else ""))
        return
    if title is None:
        raise UsageError("missing TITLE (or --from-file FILE)")
    result = queue.add(
        title, description=description, type=type_, priority=priority.lower(), depends_on=depends_on or [],
        labels=label or [], payload=parse_json_option(payload, "--payload", want_object=True), task_id=task_id,
        idempotency_key=idempotency_key, max_attempts=max_attempts,
    )
    if json_output:
        print_json(result)
    elif result["created"]:
        say(f"added {_one_line(result['task'])}")
    else:
        say(f"exists {_one_line(result['task'])} (idempotency key {idempotency_key!r}); nothing added")


@app.command("list")
def list_(
    ctx: typer.Context,
    state: str = typer.Option("pending", "--state", "-s", help="A queue state, dead-letter, abandoned, or all."),
    type_: str | None = typer.Option(None, "--type", help="Only tasks of this type."),
    label: str | None = typer.Option(None, "--label", "-l", help="Only tasks with this label."),
    limit: int | None = typer.Option(None, "--limit", "-n", help="At most this many (default 50; the total is shown)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
    fmt: str | None = format_option(),
    quiet: bool = quiet_option(),
) -> None:
    """List tasks (pending by default, in claim order), with the total count."""
    output = resolve_format(fmt, quiet, json_output)
    queue = _queue(ctx)
    result = queue.list_tasks(state, type=type_, label=label, limit=limit)
    report_notes(queue.store, result)

    def people() -> None:
        rows = [[t["id"], t["state"], t["priority"], t["type"], t["title"], t["attempts"],
                 t["claimed_by"] or "", t["lease_until"] or (t["available_at"] if t["state"] == "pending" else "")]
                for t in result["tasks"]]
        # at 80 columns the type, then the state (one state listed: the footer names it) give way
        table(None, ["id", "state", "priority", "type", "title", "tries", "holder", "lease / available"], rows,
              droppable=["type", "state", "holder", "tries", "lease / available"])
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
    fields = ["state", "priority", "type", "labels", "dependencies", "created_at", "available_at", "claimed_by",
              "lease_until", "max_attempts", "last_error", "completed_at"]
    values = {**task, "state": result["state"] + (" (archived)" if result.get("archived") else "")}
    table(None, ["field", "value"], [[f, _text(values.get(f))] for f in fields if values.get(f) not in (None, [], "")])
    if task.get("description"):
        say(task["description"])
    if task.get("attempts"):
        table("attempts", ["#", "when", "agent", "approach", "type", "error"],
              [[a["attempt_number"], a["timestamp"], a["agent_id"], a["approach"], a["error_type"],
                a["error_message"][:120]] for a in task["attempts"]])
    for note in task.get("notes", []):
        say(f"note {note['timestamp']}{' ' + note['author'] if note.get('author') else ''}: {note['text']}")


def _text(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


@app.command("claim")
def claim(
    ctx: typer.Context,
    agent: str = typer.Option(..., "--agent", "-a", help=AGENT_HELP),
    type_: list[str] | None = typer.Option(None, "--type", help="Only tasks of this type (repeatable)."),
    lease: float | None = typer.Option(None, "--lease", help="Lease in seconds (default 3600)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
    fmt: str | None = format_option(),
    quiet: bool = quiet_option(),
) -> None:
    """Take the best ready task. Exit 3, with the reason, when nothing is ready.

    `id=$(loki queue claim --agent a1 -q)` gives the id alone; --format jsonl the task on one line.
    """
    from loki.cli.output import print_claim

    # `loki queue claim` usually runs through the fast lane (loki/cli/fast.py); both print the same.
    output = resolve_format(fmt, quiet, json_output)  # a bad format claims nothing
    print_claim(_queue(ctx).claim(agent, types=type_ or [], lease_seconds=lease), output)


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
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Mark a task you hold as completed. Exit 4 if you no longer hold it."""
    from loki.queue.queue import parse_json_option

    task = _queue(ctx).complete(task_id, agent, token=token, result=parse_json_option(result, "--result"))
    if json_output:
        print_json({"task": task})
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


@app.command("cancel")
def cancel(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., help="The task id."),
    cascade: bool = typer.Option(False, "--cascade", help="Also cancel every task that depends on it."),
    reason: str | None = typer.Option(None, "--reason", help="Why (kept in the task's notes)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Cancel a task; tasks that depend on it are reported (and cancelled with --cascade)."""
    outcome = _queue(ctx).cancel(task_id, cascade=cascade, reason=reason)
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
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Move a failed, dead-letter or cancelled task back to pending, keeping its attempts."""
    outcome = _queue(ctx).retry(task_id)
    if json_output:
        print_json(outcome)
    else:
        say(f"{_one_line(outcome['task'])}: back to pending from {outcome['from']}")
