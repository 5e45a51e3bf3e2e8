"""``loki usage``: what the team spent (:mod:`loki.spend.report`), and the one-line spend shown by ``queue show``,
``queue history``, ``loki agents`` and ``loki status``."""

from __future__ import annotations

from typing import Any

import typer

from loki.cli.common import JSON_HELP, footer, format_option, print_listing, quiet_option, store_from, table

TOKEN_COLUMNS = ["input", "output", "cache read", "cache write"]


def dollars(sums: dict[str, Any]) -> str:
    """``$0.2500``, with ``+ N unpriced`` when some entries had no dollar figure (an unknown model)."""
    text = f"${sums['usd']:,.4f}"
    return text + (f" + {sums['unpriced']} unpriced" if sums.get("unpriced") else "")


def one_line(sums: dict[str, Any]) -> str:
    """``$0.2500 in 2 attempts: 30,610 tokens (10 in, 200 out, 30,000 cache read, 400 cache write)``."""
    from loki.wording import plural

    return (f"{dollars(sums)} in {plural(sums['attempts'], 'attempt')}: {sums['tokens']:,} tokens "
            f"({sums['input_tokens']:,} in, {sums['output_tokens']:,} out, {sums['cache_read_tokens']:,} cache read, "
            f"{sums['cache_creation_tokens']:,} cache write)")


def usage(
    ctx: typer.Context,
    by: str | None = typer.Option(None, "--by", help="Group by agent, type, label, day (UTC) or model."),
    since: str | None = typer.Option(None, "--since", help="Only what was recorded since: a date (2026-11-01), "
                                     "a UTC timestamp, or a span back from now (90m, 24h, 7d)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
    fmt: str | None = format_option(),
    quiet: bool = quiet_option(),
) -> None:
    """What the agents reported spending, summed from every task's attempts: tokens by kind (input, output,
    cache read, cache write) and dollars. `loki work` records it (docs/spend.md)."""
    from loki.cli.output import resolve_format
    from loki.spend.report import report

    output = resolve_format(fmt, quiet, json_output)
    result = report(store_from(ctx), by=by, since=since)
    key = by or "key"
    rows = result["rows"]

    def people() -> None:
        total = result["total"]
        if by is not None:
            table(None, [by, "dollars", "attempts", "tokens", *TOKEN_COLUMNS],
                  [[r[key], dollars(r), r["attempts"], f"{r['tokens']:,}", f"{r['input_tokens']:,}",
                    f"{r['output_tokens']:,}", f"{r['cache_read_tokens']:,}", f"{r['cache_creation_tokens']:,}"]
                   for r in rows], droppable=TOKEN_COLUMNS)
        since_text = f" since {result['since']}" if result["since"] else ""
        overlap = " (a task with several labels counts in each)" if by == "label" else ""
        footer(f"total{since_text}: {one_line(total)}{overlap}; prices {result['prices_version']}")

    print_listing(output, result, rows, key, people)
