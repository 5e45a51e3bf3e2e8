"""``loki errors ...``: what agents keep failing at, and what fixed it.

Two parts share the group: the 3-strike protocol's state (``list``, ``show``, ``reset``, over
:class:`loki.strikes.strikes.Strikes`, one branch at a time) and error memory (``search``, ``stats``,
``reindex``, ``compact``, over :class:`loki.memory.memory.ErrorMemory`, every branch). Every command takes
its own options; nothing in the group callback assumes either.

(Named ``errormemory``, not ``errors``: :mod:`loki.errors` is the exception hierarchy and
:mod:`loki.text.errorscan` the classifier; three modules called "errors" were one too many.)
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from loki.cli.common import (
    JSON_HELP,
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

app = typer.Typer(
    help="Errors agents hit: the 3-strike protocol's state per branch (list, show, reset) and the error memory "
         "of every failure and what fixed it (search, stats, reindex, compact).",
    no_args_is_help=True,
)

BRANCH_HELP = "The git branch (default: the one checked out in the current directory; 'no-git' outside a repository)."
KEY_HELP = "A strike key (Bash:1a2b...), its input hash, or a unique prefix of either."


def _strikes(ctx: typer.Context, branch: str | None) -> Any:
    from loki.strikes.strikes import Strikes

    return Strikes(store_from(ctx), branch=branch)


def _call(entry: dict[str, Any]) -> str:
    call = entry.get("call")
    return call if isinstance(call, str) and call else f"{entry['tool']} {entry.get('input_preview', '')[:80]}"


@app.command("list")
def list_(
    ctx: typer.Context,
    branch: str | None = typer.Option(None, "--branch", help=BRANCH_HELP),
    all_branches: bool = typer.Option(False, "--all-branches", help="Every branch that has strike state."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
    fmt: str | None = format_option(),
    quiet: bool = quiet_option(),
) -> None:
    """Calls with strikes on a branch: how many, the tier, the last error."""
    from loki.strikes.strikes import Strikes

    output = resolve_format(fmt, quiet, json_output)
    store = store_from(ctx)
    branches: list[str | None] = [row["branch"] for row in Strikes.branches(store)] if all_branches else [branch]
    report: list[dict[str, Any]] = []
    for name in branches:
        strikes = Strikes(store, branch=name)
        tiers = strikes.tiers
        report.append({"branch": strikes.branch, "tiers": tiers.to_json(),
                       "strikes": [dict(e, tier=tiers.tier(e["strike_count"]), branch=strikes.branch)
                                   for e in strikes.active()]})
    items = [e for r in report for e in r["strikes"]]

    def people() -> None:
        rows = [[e["key"], e["branch"], e["strike_count"], e["tier"], e["last_at"], _call(e), e.get("last_error", "")]
                for e in items]
        if rows:
            table(None, ["key", "branch", "strikes", "tier", "last failure", "call", "last error"], rows,
                  droppable=["branch", "tier", "last failure"])
        where = "any branch" if all_branches else f"branch {report[0]['branch']}"
        footer(f"{plural(len(rows), 'failing call')} on {where}")

    print_listing(output, report[0] if not all_branches else {"branches": report}, items, "key", people)


@app.command("show")
def show(
    ctx: typer.Context,
    key: str | None = typer.Argument(None, help=KEY_HELP + " Omit it for the whole branch."),
    branch: str | None = typer.Option(None, "--branch", help=BRANCH_HELP),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """One call's streak with its attempts, or the branch's whole strike state."""
    strikes = _strikes(ctx, branch)
    state = strikes.state()
    if key is None:
        if json_output:
            print_json(state)
            return
        say(f"branch {strikes.branch}: highest strike {state['strike_count']}, "
            f"{plural(len(state['keys']), 'failing call')}, {plural(len(state['attempts']), 'recent attempt')}")
        _attempts(state["attempts"])
        return
    found = strikes.find_key(key)
    entry = state["keys"][found]
    attempts = [a for a in state["attempts"] if a["tool"] == entry["tool"] and a["input_hash"] == entry["input_hash"]]
    tier = strikes.tiers.tier(entry["strike_count"])
    if json_output:
        print_json({"branch": strikes.branch, "key": found, "tier": tier, "entry": entry, "attempts": attempts})
        return
    say(f"{found} on branch {strikes.branch}: {plural(entry['strike_count'], 'strike')}, tier {tier}")
    say(f"call: {_call(entry)}; compared as: {entry.get('input_preview', '')}")
    say(f"since {entry['first_at']}, last {entry['last_at']}; sessions: {', '.join(entry.get('sessions', [])) or '-'}")
    say(f"last error ({entry.get('error_class')}): {entry.get('last_error', '')}")
    say(f"suggestion: {entry.get('suggestion') or '-'}")
    if entry.get("escalation"):
        say(f"escalated {entry['escalated_at']}: escalations/{entry['escalation']}")
    _attempts(attempts)


def _attempts(attempts: list[dict[str, Any]]) -> None:
    if attempts:
        table(None, ["when", "tool", "input hash", "strike", "status", "session", "error"],
              [[a["timestamp"], a["tool"], a["input_hash"], a.get("strike", ""), a["status"], a.get("session") or "",
                a["error"]] for a in attempts[-20:]])


@app.command("reset")
def reset(
    ctx: typer.Context,
    key: str | None = typer.Argument(None, help=KEY_HELP),
    all_keys: bool = typer.Option(False, "--all", help="Clear every strike on the branch."),
    branch: str | None = typer.Option(None, "--branch", help=BRANCH_HELP),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Clear a call's strikes once its cause is fixed (its attempts are kept, marked 'reset')."""
    from loki.errors import UsageError

    if (key is None) == (not all_keys):
        raise UsageError("name a strike to reset (see `loki errors list`), or pass --all")
    strikes = _strikes(ctx, branch)
    cleared = strikes.reset(key, all_keys=all_keys)
    if json_output:
        print_json({"branch": strikes.branch, "reset": [{"key": e["key"], "strike_count": e["strike_count"]}
                                                         for e in cleared]})
        return
    for entry in cleared:
        say(f"reset {entry['key']} ({plural(entry['strike_count'], 'strike')}: {_call(entry)}) on branch "
            f"{strikes.branch}")
    if not cleared:
        say(f"nothing to reset on branch {strikes.branch}")


# -- error memory ---------------------------------------------------------------------------------


def _memory(ctx: typer.Context) -> Any:
    from loki.memory.memory import ErrorMemory

    return ErrorMemory(store_from(ctx))


def _report_sync(report: dict[str, Any], warnings: list[str], json_output: bool) -> None:
    """Skipped lines and automatic rebuilds go to stderr (people) or into the JSON document (agents)."""
    if json_output:
        return
    from loki.text.textsafe import for_terminal

    for warning in warnings:
        sys.stderr.write(f"warning: {for_terminal(warning)}\n")
    if report.get("rebuilt"):
        sys.stderr.write(f"note: the search index was rebuilt from memory/errors.jsonl: {report['rebuilt']}\n")


@app.command("search")
def search(
    ctx: typer.Context,
    query: str = typer.Argument(..., help="Words to find: an error message, a command, a file name. Every word must "
                                          "match (stemmed: 'failed' finds 'failing'); if none does, any word may."),
    limit: int = typer.Option(10, "--limit", "-n", min=1, help="Most results to show."),
    error_class: str | None = typer.Option(None, "--class", help="Only errors of this class (test_failure, "
                                                                    "missing_command, ...: see `loki errors stats`)."),
    with_resolution: bool = typer.Option(False, "--with-resolution", help="Only errors that have a resolution."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
    fmt: str | None = format_option(),
    quiet: bool = quiet_option(),
) -> None:
    """Search every captured failure (BM25): command, message, file refs, when, how often, what fixed it."""
    from loki.cli import memoryview

    output = resolve_format(fmt, quiet, json_output)
    json_output = output in ("json", "jsonl")
    with _memory(ctx) as memory:
        synced = memory.sync()
        marks = ("**", "**") if output != "table" else (memoryview.MARK_OPEN, memoryview.MARK_CLOSE)
        hits = memory.search(query, limit=limit, error_class=error_class, with_resolution=with_resolution,
                             highlight=marks)
        warnings = memory.warnings
    _report_sync(synced, warnings, json_output)
    print_listing(output, {"query": query, "results": hits, "warnings": warnings, "index_rebuilt": synced["rebuilt"]},
                  hits, "content_hash", lambda: memoryview.print_hits(query, hits))


@app.command("stats")
def stats(
    ctx: typer.Context,
    top: int = typer.Option(10, "--top", min=1, help="How many of the most frequent errors to list."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Most frequent errors, errors by class, and the share of error patterns that have a resolution."""
    from loki.cli import memoryview

    with _memory(ctx) as memory:
        synced = memory.sync()
        report = memory.stats(top=top)
        warnings = memory.warnings
    _report_sync(synced, warnings, json_output)
    if json_output:
        print_json(dict(report, warnings=warnings))
        return
    memoryview.print_stats(report)


@app.command("reindex")
def reindex(
    ctx: typer.Context,
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Rebuild the search index (memory/errors.db) and the PreToolUse hints from memory/errors.jsonl."""
    import time

    from loki.cli import memoryview

    started = time.perf_counter()
    with _memory(ctx) as memory:
        report = memory.reindex()
        warnings = memory.warnings
    seconds = time.perf_counter() - started
    if json_output:
        print_json(dict(report, warnings=warnings, seconds=round(seconds, 3)))
        return
    _report_sync({}, warnings, json_output)
    memoryview.print_reindex(report, seconds)


@app.command("compact")
def compact(
    ctx: typer.Context,
    max_records: int | None = typer.Option(None, "--max-records", min=1,
                                           help="Bound in lines (default: memory.max_records, 100000)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Rewrite memory/errors.jsonl bounded: merge repeats, drop the oldest unresolved errors, keep every resolution."""
    from loki.cli import memoryview

    with _memory(ctx) as memory:
        report = memory.compact(max_records=max_records)
    if json_output:
        print_json(report)
        return
    memoryview.print_compact(report)
