"""``loki work --agent NAME [OPTIONS] -- CMD [ARGS]...``: the agent loop (loki/work/loop.py).

stdout belongs to the command, as with ``loki run``: loki's progress lines (``loki work: ...``) and
the ``--json`` summary go to stderr. Everything after ``--``, or after the first word that is not one
of loki's options, is the command.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import typer

from loki.cli.common import store_from

if TYPE_CHECKING:
    from loki.work.loop import Summary

CONTEXT = {"allow_interspersed_args": False}
"""Stop option parsing at the command's first word: the command's own options are its own."""


def work(
    ctx: typer.Context,
    command: list[str] = typer.Argument(None, metavar="-- CMD [ARGS]...",
                                        help="The agent's command, after `--` (placeholders allowed in ARGS)."),
    agent: str = typer.Option(..., "--agent", "-a", help="The agent's name (the holder of each claim)."),
    type_: list[str] | None = typer.Option(None, "--type", help="Only tasks of this type (repeatable)."),
    max_tasks: int | None = typer.Option(None, "--max-tasks", help="Stop after this many tasks (>= 1)."),
    until_empty: bool = typer.Option(False, "--until-empty", help="When nothing is ready, wait for what may "
                                     "still become ready (backoffs, dependencies others hold); exit 0 once "
                                     "nothing can."),
    breaker: str | None = typer.Option(None, "--breaker", help="Run CMD as `loki run --breaker` does: the "
                                       "breaker checked before each run, retries with backoff, rate limits "
                                       "waited out."),
    retries: int = typer.Option(5, "--retries", help="With --breaker: waits allowed after a failure or a "
                                "refusal by the breaker, within one claim."),
    lease: float | None = typer.Option(None, "--lease", help="Lease in seconds (default 3600), renewed every "
                                       "third of it while CMD runs."),
    json_output: bool = typer.Option(False, "--json", help="At the end, print a JSON summary on stderr (stdout "
                                     "is the command's); no progress lines."),
    reserve: float = typer.Option(0.0, "--reserve", help="Dollars the budgets count for each attempt running in "
                                  "their scope, this one included, before each claim: bounds the overshoot."),
    max_task_usd: float | None = typer.Option(None, "--max-task-usd", help="A cap per task: passed to Claude Code "
                                              "as --max-budget-usd; a failed attempt that spent it is class budget."),
) -> None:
    """Claim a task, run CMD for it with the lease kept alive, complete it on exit 0 or record the
    failure, and go on to the next, until --max-tasks are done or nothing is ready.

    CMD gets the task in its environment (LOKI_TASK_ID, LOKI_TASK_TITLE, LOKI_TASK_TYPE, LOKI_TASK_PRIORITY,
    LOKI_TASK_ATTEMPT, LOKI_TASK_TOKEN, LOKI_TASK_FILE: the task as JSON, LOKI_RESULT_FILE: where it may write
    a JSON object as its result, LOKI_AGENT, LOKI_ROOT) and in placeholders in ARGS: {id} {title} {description}
    {type} {priority} {labels} {payload} {attempt} {agent} {token} {task_file} {result_file} ({{id}} for a
    literal {id}; an unknown one is a usage error, and so is one in CMD itself or in a shell's -c script,
    where a task's text would run as code: write sh -c '... "$1"' sh {title}).

    Exit: 0 all completed; 1 some failed (recorded); 3 nothing ready; 4 a lease was lost; 75 the breaker
    stayed open or a spent budget refused the claim (docs/spend.md); 127 CMD not found; 130/143 stopped by
    Ctrl-C/SIGTERM (the task in hand is released)."""
    from loki.work.loop import Worker, WorkOptions

    options = WorkOptions(agent=agent, command=command or [], types=type_ or [], max_tasks=max_tasks,
                          until_empty=until_empty, breaker=breaker, lease_seconds=lease, retries=retries,
                          reserve_usd=reserve, max_task_usd=max_task_usd)
    worker = Worker(store_from(ctx), options, notify=None if json_output else _progress)
    summary = worker.run()
    from loki.text.textsafe import json_for_terminal

    if json_output:
        sys.stderr.write(json_for_terminal(json.dumps(summary.to_json(), ensure_ascii=False)) + "\n")
    else:
        _progress(_closing_line(summary))
    raise typer.Exit(summary.exit_code)


def _closing_line(summary: Summary) -> str:
    from loki.wording import plural

    counts = [f"{summary.count(outcome)} {outcome.replace('_', ' ')}"
              for outcome in ("completed", "failed", "lease_lost", "released", "unrecorded") if summary.count(outcome)]
    claims, tasks = len(summary.runs), summary.tasks_claimed()
    claimed = (f"{plural(tasks, 'task')} claimed" if claims == tasks
               else f"{plural(claims, 'claim')} of {plural(tasks, 'task')}")
    done = claimed + (f" ({', '.join(counts)})" if counts else "")
    return f"{summary.reason}; {done}; exit {summary.exit_code}"


def _progress(message: str) -> None:
    from loki.text.textsafe import for_terminal

    sys.stderr.write(f"loki work: {for_terminal(message)}\n")
    sys.stderr.flush()
