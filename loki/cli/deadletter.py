"""``loki deadletter ...`` and ``loki abandoned list``: a thin layer over :class:`loki.queue.deadletter.DeadLetter`."""

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
    say,
    store_from,
    table,
    who,
)
from loki.cli.output import resolve_format
from loki.tasks.record import attempts_in_budget
from loki.wording import plural

app = typer.Typer(help="The dead-letter queue: list, show, the session-start review, retry, abandon, split.",
                  no_args_is_help=True)
abandoned_app = typer.Typer(help="Tasks abandoned from the dead-letter queue, each with its reason.",
                            no_args_is_help=True)


def _deadletter(ctx: typer.Context) -> Any:
    from loki.queue.deadletter import DeadLetter

    return DeadLetter(store_from(ctx))


@app.command("list")
def list_(ctx: typer.Context, json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
          fmt: str | None = format_option(), quiet: bool = quiet_option()) -> None:
    """Every dead-letter entry: failures, last failure, recovery strategy, error summary."""
    output = resolve_format(fmt, quiet, json_output)
    result = _deadletter(ctx).list_entries()

    def people() -> None:
        table(None, ["task", "title", "failures", "last failure", "strategy", "error summary"],
              [[e["task_id"], e["title"], e["failure_count"], e["last_failure"], e["recovery_strategy"],
                e["error_summary"]] for e in result["entries"]], droppable=["strategy", "failures"])
        meta = result["metadata"]
        footer(f"{plural(result['total'], 'entry', 'entries')}; last reviewed {meta['last_reviewed'] or 'never'}; "
               f"{meta['total_recovered']} recovered, {meta['total_abandoned']} abandoned so far")

    print_listing(output, result, result["entries"], "task_id", people)


@app.command("show")
def show(ctx: typer.Context, task_id: str = typer.Argument(..., help="The task id."),
         json_output: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """One entry with every attempt."""
    entry = _deadletter(ctx).show(task_id)
    if json_output:
        print_json(entry)
        return
    say(f"{entry['task_id']}: {entry['task_data'].get('title')}")
    say(f"{entry['failure_count']} failures from {entry['first_failure']} to {entry['last_failure']} "
        f"(was {entry['original_queue']}); strategy {entry['recovery_strategy']}")
    say(f"summary: {entry['error_summary']}")
    if entry.get("escalation"):
        say(f"escalated {entry['escalated_at']}: escalations/{entry['escalation']}")
    if entry.get("new_approach"):
        say(f"proposed approach (next review): {entry['new_approach']}")
    table("attempts", ["#", "when", "agent", "approach", "type", "error"],
          [[a.get("attempt_number"), a.get("timestamp"), a.get("agent_id"), a.get("approach"), a.get("error_type"),
            a.get("error_message")] for a in entry["attempts"]], droppable=["approach", "type"])


@app.command("review")
def review(
    ctx: typer.Context,
    force: bool = typer.Option(False, "--force", help="Review even if the last review is younger than 24 h."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """The session-start review: retry, abandon, escalate or leave each entry, and say why."""
    result = _deadletter(ctx).review(force=force)
    if json_output:
        print_json(result)
        return
    if result["skipped"]:
        say(f"dead-letter review not due: last review {result['last_reviewed']}, next after "
            f"{result['next_review_after']} ({plural(result['entries'], 'entry', 'entries')}; "
            "--force to review now)")
        return
    if result.get("clock_skew"):
        say(f"note: {result['clock_skew']}")
    if result["decisions"]:
        table(f"dead-letter review at {result['reviewed_at']}", ["task", "action", "why"],
              [[d["task_id"], d["action"], d["reason"]] for d in result["decisions"]])
    for left in (d for d in result["decisions"] if d.get("next")):
        say(f"next: {left['task_id']}: {left['next']}")
    counts = result["counts"]
    say(f"reviewed {plural(result['entries'], 'entry', 'entries')}: "
        f"{counts['retry']} retried, {counts['abandon']} abandoned, "
        f"{counts['escalate']} escalated, {counts['leave']} left")


@app.command("retry")
def retry(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., help="The task id."),
    approach: str | None = typer.Option(None, "--approach", help="The new approach (kept in the task's notes)."),
    reset_count: bool = typer.Option(False, "--reset-count",
                                     help="Reset the attempt count: max_attempts more failures before the dead-letter "
                                          "queue (the history stays)."),
    fix_commit: str | None = typer.Option(None, "--fix-commit", help="The commit that fixed the blocking bug."),
    by: str | None = typer.Option(None, "--by", help=BY_HELP),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Move an entry back to pending now (a recovery), keeping every attempt."""
    outcome = _deadletter(ctx).retry(task_id, approach=approach, reset_count=reset_count, fix_commit=fix_commit,
                                     by=who(by))
    if json_output:
        print_json(outcome)
    else:
        task = outcome["task"]
        kept = plural(len(task["attempts"]), "attempt")
        allowed = plural(task["max_attempts"], "attempt")
        if reset_count:
            say(f"{task['id']}: back to pending ({task['recovery_strategy']}); {kept} kept, count reset: {allowed} "
                "allowed before the dead-letter queue")
        else:
            left = task["max_attempts"] - attempts_in_budget(task)
            budget = (f"the next failure dead-letters it again (max {task['max_attempts']}; --reset-count for a fresh "
                      "budget)" if left <= 1 else f"{plural(left, 'more attempt')} allowed")
            say(f"{task['id']}: back to pending ({task['recovery_strategy']}); {kept} kept and counted: {budget}")


@app.command("propose")
def propose(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., help="The task id."),
    approach: str = typer.Option(..., "--approach", help="The new approach for the next review to retry with."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Record a new approach; the next review retries the entry with it (the "new approach" retry condition)."""
    entry = _deadletter(ctx).propose(task_id, approach, by=who(None))
    if json_output:
        print_json(entry)
    else:
        say(f"{task_id}: the next review retries it with: {entry['new_approach']}")
        say(f"next: {entry['next']}")


@app.command("abandon")
def abandon(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., help="The task id."),
    reason: str = typer.Option(..., "--reason", help="Why (kept in abandoned.json)."),
    by: str | None = typer.Option(None, "--by", help=BY_HELP),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Abandon an entry for good: it moves to abandoned.json with the reason."""
    record = _deadletter(ctx).abandon(task_id, reason, by=who(by))
    if json_output:
        print_json(record)
    else:
        say(f"{task_id}: abandoned ({record['abandon_reason']})")


@app.command("split")
def split(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., help="The task id."),
    title: list[str] = typer.Option(..., "--title", help="A simpler task to create (repeatable)."),
    description: str = typer.Option("", "--description", "-d", help="Description of the simpler task(s)."),
    priority: str | None = typer.Option(None, "--priority", "-p", help="Default: the original's priority."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Replace an entry with simpler task(s) linked to it (split_from); the original is abandoned with that reason."""
    result = _deadletter(ctx).split(task_id, title, description=description,
                                    priority=None if priority is None else priority.lower(), by=who(None))
    if json_output:
        print_json(result)
        return
    for task in result["created"]:
        say(f"added {task['id']} [{task['priority']}] {task['title']} (split from {task_id})")
    say(f"{task_id}: {result['original']['abandon_reason']}")


@abandoned_app.command("list")
def abandoned_list(ctx: typer.Context, json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
                   fmt: str | None = format_option(), quiet: bool = quiet_option()) -> None:
    """Every abandoned task with when and why."""
    output = resolve_format(fmt, quiet, json_output)
    result = _deadletter(ctx).abandoned()

    def people() -> None:
        table(None, ["task", "title", "failures", "abandoned", "reason"],
              [[e["task_id"], e["title"], e["failure_count"], e["abandoned_at"], e["abandon_reason"]]
               for e in result["entries"]], droppable=["failures"])
        footer(f"{result['total']} abandoned")

    print_listing(output, result, result["entries"], "task_id", people)
