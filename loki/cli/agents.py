"""``loki agents``: every agent the tree has seen, and which ones went silent (:mod:`loki.queue.agents`)."""

from __future__ import annotations

from typing import Any

import typer

from loki.cli.common import JSON_HELP, footer, format_option, print_listing, quiet_option, store_from, table
from loki.cli.output import resolve_format
from loki.cli.usage import dollars
from loki.wording import duration, plural


def _strikes(row: dict[str, Any]) -> str:
    strikes = row["strikes"]
    return "" if not strikes else f"{strikes['calls']} on {row['branch']} (max {strikes['highest']})"


def agents(
    ctx: typer.Context,
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
    fmt: str | None = format_option(),
    quiet: bool = quiet_option(),
) -> None:
    """Every agent seen: last heartbeat, current task and lease left, tasks done and failed today, strikes on its
    branch. SILENT: holds a task but its lease expired or it sent no heartbeat for half its lease."""
    from loki.queue.agents import SILENT, roster

    output = resolve_format(fmt, quiet, json_output)
    result = roster(store_from(ctx))
    rows = result["agents"]

    def people() -> None:
        table(None, ["agent", "status", "task", "lease left", "last heartbeat", "done", "failed", "spent", "strikes",
                     "paths"],
              [[r["agent"], r["status"].upper() if r["status"] == SILENT else r["status"], r["task"] or "",
                "expired" if (r["lease_left"] or 0) < 0 else duration(r["lease_left"]), r["last_heartbeat"] or "",
                r["done_today"], r["failed_today"], dollars(r["spent_today"]) if r["spent_today"] else "",
                _strikes(r), " ".join(r["paths"])] for r in rows],
              droppable=["paths", "strikes", "spent", "last heartbeat", "failed", "done"])
        silent = [r for r in rows if r["status"] == SILENT]
        for row in silent:
            when = "at the next claim or watcher tick" if (row["lease_left"] or 0) <= 0 else "when its lease runs out"
            footer(f"{row['agent']} is silent: {row['silent_because']}; {row['task']} goes back to pending {when}")
        for row in rows:
            failed = row.get("failing_check")
            if failed:
                footer(f"{row['agent']} holds {row['task']}, whose check {failed['check']!r} failed at attempt "
                       f"{failed['attempt']} (exit {failed['exit_code']}, {failed['error_class']})")
            if row.get("landing"):
                footer(f"{row['agent']} verified {', '.join(row['landing'])}, waiting to land (docs/verify.md)")
        footer(f"{plural(len(rows), 'agent')} seen, {len(silent)} silent; done, failed and spent count today "
               f"({result['today']}, UTC)")

    print_listing(output, result, rows, "agent", people)
