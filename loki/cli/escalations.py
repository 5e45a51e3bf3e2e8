"""``loki escalate``, ``loki approve`` and ``loki escalations list|close``: what waits for a human."""

from __future__ import annotations

import typer

from loki.cli.common import (
    JSON_HELP,
    console,
    echo,
    footer,
    format_option,
    print_json,
    print_listing,
    quiet_option,
    say,
    store_from,
    table,
)
from loki.cli.output import resolve_format
from loki.wording import plural

escalations_app = typer.Typer(help="Escalation files: what waits for a human.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.command("escalate")(escalate)
    app.command("approve")(approve)
    app.add_typer(escalations_app, name="escalations")


def escalate(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., help="The task id."),
    trigger: str = typer.Option(..., "--trigger", help="Why a human is needed (e.g. security_decision)."),
    analysis: str | None = typer.Option(None, "--analysis", help="What was tried and why it failed."),
    option: list[str] | None = typer.Option(None, "--option", help="A recommended option with its trade-offs "
                                                                  "(repeatable)."),
    agent: str | None = typer.Option(None, "--agent", "-a", help="Who escalates."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Write an escalation file, move the task to blocked and emit HUMAN_REVIEW_NEEDED."""
    from loki.queue.escalations import escalate as run_escalate

    store = store_from(ctx)
    result = run_escalate(store, task_id, trigger, analysis=analysis, options=option or [], agent=agent)
    if json_output:
        print_json(result)
        return
    stem = result["file"].rsplit("/", 1)[-1].removesuffix(".md")
    # a database tree has no escalations/ file on this machine: name the command that shows it
    say(f"escalated {task_id}: " + (result["file"] if store.backend == "files"
                                    else f"{stem} (`loki escalations show {stem}`)"))
    if result["state"] == "blocked":
        say(f"{task_id} is blocked until a human decides (deadline {result['deadline']}); "
            f"signal {result['signal']} emitted")
    else:
        say(f"{task_id} stays in the dead-letter queue marked requires_human_review; signal {result['signal']} "
            "emitted")


def approve(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., metavar="ID", help="The task id, or an escalation's id (escalations list): "
                                                          "every task it is about that still waits gets the decision."),
    decision: str = typer.Option(..., "--decision", help="approve, cancel or clarify."),
    note: str | None = typer.Option(None, "--note", help="The decision's reason or the clarification."),
    approver: str | None = typer.Option(None, "--approver", help="Who decides (default: $USER)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Record a human decision on a blocked or dead-letter task, or on every task of an escalation (a systemic one
    too): emits HUMAN_APPROVED for the watcher to apply."""
    from loki.watch.approvals import approve_any
    from loki.watch.watcher import describe_holder

    # choices are case-blind on the command line (`--decision Approve`), exact in the library
    result = approve_any(store_from(ctx), task_id, decision.lower(), note=note, approver=approver)
    approvals = result["approvals"]
    if json_output:
        # one task: the document it always was; an escalation: its id and one such document per task
        print_json(approvals[0].to_json() if result["escalation"] is None else
                   {"escalation": result["escalation"], "approvals": [a.to_json() for a in approvals]})
        return
    if result["escalation"] is not None and not approvals:  # a spent budget's: it parks no task
        say(f"escalation {result['escalation']}: acknowledged and resolved (a budget: no task was parked; "
            "`loki budget set` raises it)")
    elif result["escalation"] is not None:
        say(f"escalation {result['escalation']}: {decision.lower()} for {plural(len(approvals), 'task')}")
    for one in approvals:
        if one.outcome is not None:
            say(f"{one.outcome['outcome']}: {one.outcome.get('detail', '')}")
        else:
            say(f"{one.decision} for {one.task_id} recorded as signal {one.signal}; the running watcher "
                f"({describe_holder(one.consumer)}) applies it")


@escalations_app.command("list")
def list_(
    ctx: typer.Context,
    open_only: bool = typer.Option(False, "--open", help="Only escalations not yet resolved."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
    fmt: str | None = format_option(),
    quiet: bool = quiet_option(),
) -> None:
    """Escalation files, oldest first, and whether each is still open."""
    from loki.queue.escalations import list_escalations

    output = resolve_format(fmt, quiet, json_output)
    rows = list_escalations(store_from(ctx), open_only=open_only)

    def people() -> None:
        table(None, ["id", "task", "trigger", "open"],
              [[r["id"], r["task_id"], r["trigger"], "yes" if r["open"] else "no"] for r in rows], droppable=["task"])
        footer(plural(len(rows), "open escalation" if open_only else "escalation"))

    print_listing(output, {"total": len(rows), "escalations": rows}, rows, "id", people)


@escalations_app.command("show")
def show(
    ctx: typer.Context,
    escalation_id: str = typer.Argument(..., metavar="ID", help="The escalation's id as `escalations list` shows it "
                                                               "(or the task id it ends with, when unique)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Render one escalation file: what failed, the attempts, the options, and its resolution once decided."""
    from loki.cli.output import terminal_width
    from loki.queue.escalations import show as run_show

    result = run_show(store_from(ctx), escalation_id)
    if json_output:
        print_json(result)
        return
    tasks = ", ".join(f"{t['id']} ({t['state'] or 'gone'})" for t in result["tasks"]) or "none"
    state = "open" if result["open"] else f"resolved: {result['resolution']}"
    say(f"{result['id']}: {state}; tasks: {tasks}")
    body = result["text"].split("\n", 1)[1] if result["text"].startswith("<!--") else result["text"]
    if terminal_width() is None:
        echo(body.rstrip("\n"))
    else:
        from rich.markdown import Markdown

        from loki.text.textsafe import for_terminal

        # no hyperlinks: a Markdown link an agent wrote would be an OSC 8 link to any URL (shown as text instead)
        console().print(Markdown(for_terminal(body), hyperlinks=False))
    if result["open"] and result["tasks"]:
        say(f"decide with `loki approve {result['id']} --decision approve|cancel|clarify`, or close it with "
            f"`loki escalations close {result['id']} --note ...`")


@escalations_app.command("close")
def close(
    ctx: typer.Context,
    escalation_id: str = typer.Argument(..., metavar="ID", help="The escalation's id, as `escalations list` shows it."),
    note: str = typer.Option(..., "--note", help="Why it is closed (recorded in the escalation file)."),
    by: str | None = typer.Option(None, "--by", help="Who closes it (default: $USER)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Mark one escalation resolved (superseded, answered elsewhere); its task is left as it is."""
    import os

    from loki.errors import NotFound
    from loki.queue.escalations import close as run_close
    from loki.queue.queue import Queue

    store = store_from(ctx)
    result = run_close(store, escalation_id, note=note, by=by or os.environ.get("USER") or None)
    task_state = None
    if result.get("task_id"):
        try:
            task_state = Queue(store).show(result["task_id"])["state"]
        except (NotFound, ValueError):  # a strike escalation, or a task gone: nothing to say about it
            task_state = None
    if json_output:
        print_json({**result, "task_state": task_state})
        return
    say(f"closed {result['id']}: {result['resolution']}")
    if task_state in ("blocked", "dead-letter"):
        say(f"{result['task_id']} is still {task_state}: decide with `loki approve {result['task_id']} --decision "
            "approve|cancel|clarify`")
