"""``loki budget set|list|show|remove``: spending limits shared by every agent (:mod:`loki.spend.budgets`)."""

from __future__ import annotations

from typing import Any

import typer

from loki.cli.common import JSON_HELP, format_option, print_json, print_listing, quiet_option, say, store_from, table
from loki.cli.output import resolve_format

app = typer.Typer(
    help="Spending limits per hour, day or week for the team, a task type, a label or an agent "
         "(state/budgets.json): a spent one makes claims exit 75 until it refills.",
    no_args_is_help=True,
)


def _limit(row: dict[str, Any]) -> str:
    return f"${row['usd']:,.2f}" if row.get("usd") is not None else f"{row['tokens']:,} tokens"


def _spent(row: dict[str, Any]) -> str:
    return f"${row['spent_usd']:,.4f}" if row.get("usd") is not None else f"{row['spent_tokens']:,} tokens"


@app.command("set")
def set_(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The budget's name (letters, digits, '.', '_', '-')."),
    usd: float | None = typer.Option(None, "--usd", help="The limit in dollars."),
    tokens: str | None = typer.Option(None, "--tokens", help="The limit in tokens (all kinds): 5M, 200k, 1000."),
    per: str = typer.Option(..., "--per", help="The window: hour, day or week (UTC, fixed)."),
    scope: str = typer.Option("team", "--scope", help="team, type:NAME, label:NAME or agent:NAME."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Create or replace a budget: `loki budget set daily --usd 50 --per day`, `--tokens 5M --per hour
    --scope type:docs`."""
    from loki.spend.budgets import Budgets, parse_tokens

    count = parse_tokens(tokens) if tokens is not None else None
    record = Budgets(store_from(ctx)).set(name, usd=usd, tokens=count, per=per, scope=scope)
    if json_output:
        print_json(record)
    else:
        say(f"budget {name}: {_limit(record)} per {per} for {scope}")
        _resolved(record)


@app.command("list")
def list_(
    ctx: typer.Context,
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
    fmt: str | None = format_option(),
    quiet: bool = quiet_option(),
) -> None:
    """Every budget: its limit, what its scope spent this window, and when the window refills."""
    from loki.spend.budgets import Budgets

    output = resolve_format(fmt, quiet, json_output)
    rows = [standing.to_json() for standing in Budgets(store_from(ctx)).standings()]

    def people() -> None:
        table(None, ["budget", "scope", "limit", "per", "spent", "state", "refills at"],
              [[r["name"], r["scope"], _limit(r), r["per"], _spent(r), "SPENT" if r["exhausted"] else "ok",
                r["refill_at"]] for r in rows])

    print_listing(output, {"budgets": rows}, rows, "name", people)


@app.command("show")
def show(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The budget's name."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """One budget now: its limit, what was spent this window, and when it refills."""
    from loki.spend.budgets import Budgets

    standing = Budgets(store_from(ctx)).show(name)
    row = standing.to_json()
    if json_output:
        print_json(row)
        return
    state = "SPENT: claims in its scope exit 75" if row["exhausted"] else "ok"
    say(f"{name} ({row['scope']}): {_spent(row)} of {_limit(row)} this {row['per']} (since "
        f"{row['window_start']}); {state}; refills at {row['refill_at']}")
    if row.get("escalation") and row.get("signalled") == row["window_start"]:
        say(f"escalation: {row['escalation'].removesuffix('.md')} (`loki escalations show`)")


@app.command("remove")
def remove(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The budget's name."),
) -> None:
    """Remove a budget (what was spent stays in the tasks)."""
    from loki.spend.budgets import Budgets

    record = Budgets(store_from(ctx)).remove(name)
    say(f"budget {name} removed")
    _resolved(record)


def _resolved(record: dict[str, Any]) -> None:
    for file_name in record["resolved"]:
        say(f"resolved its escalation {file_name.removesuffix('.md')}")
