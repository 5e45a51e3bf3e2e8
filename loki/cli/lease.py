"""``loki lease acquire|renew|release|list|break``: path leases (docs/leases.md).

A thin layer over :class:`loki.leases.leases.PathLeases`: parse, call, print.
"""

from __future__ import annotations

import typer

from loki.cli.common import JSON_HELP, echo, footer, format_option, print_json, print_listing, quiet_option, table
from loki.cli.output import resolve_format

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from loki.leases.leases import PathLeases

app = typer.Typer(
    help="Path leases: which agent edits which files (state/path-leases.json). Patterns are gitignore-style "
         "globs relative to the repository root.",
    no_args_is_help=True,
)

AGENT_HELP = "The agent holding the lease (its name, as in loki queue claim --agent)."
TTL_HELP = "How long the lease lives without a renewal: seconds or 90s, 15m, 2h, 1d (default 1h; at most a week)."


def leases_from(ctx: typer.Context) -> PathLeases:
    import os

    from loki.cli.common import store_from
    from loki.leases.leases import PathLeases

    store = store_from(ctx)
    local = store.local_root
    return PathLeases(store, root=os.path.dirname(os.path.abspath(local)) if local else None)


def _line(lease: dict[str, Any]) -> str:
    from loki.text.textsafe import for_terminal as esc

    kind = "exclusive" if lease["exclusive"] else "shared"
    task = f" task {esc(lease['task'])}" if lease.get("task") else ""
    return (f"{lease['lease_id']} {esc(lease['agent'])} {kind}{task} until {lease['expires_at']}: "
            + " ".join(esc(p) for p in lease["patterns"]))


@app.command("acquire")
def acquire(
    ctx: typer.Context,
    patterns: list[str] = typer.Argument(..., metavar="PATTERN...", help="Globs relative to the repository root: "
                                         "src/auth/**, docs/*.md, a plain file or folder."),
    agent: str = typer.Option(..., "--agent", help=AGENT_HELP),
    shared: bool = typer.Option(False, "--shared", help="A reader's lease: only an exclusive lease conflicts."),
    ttl: str = typer.Option(None, "--ttl", help=TTL_HELP),
    task: str = typer.Option(None, "--task", help="The task the lease is for (waiting or in progress), named in "
                                                  "messages."),
    reason: str = typer.Option(None, "--reason", help="Why, shown to whoever is refused."),
    key: str = typer.Option(None, "--key", help="Idempotency key: a retried acquire with it gets the same lease "
                                                "back instead of a second one."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Take a lease on PATTERN...; exit 4 naming the holder, its task and expiry when another agent's lease
    overlaps."""
    lease = leases_from(ctx).acquire(patterns, agent=agent, exclusive=not shared, ttl=ttl, task=task, reason=reason,
                                     key=key)
    if json_output:
        print_json(lease)
        return
    echo(("already held (same --key): " if lease["reused"] else "acquired ") + _line(lease))


@app.command("renew")
def renew(
    ctx: typer.Context,
    lease_id: str = typer.Argument(..., metavar="ID", help="The lease (L1, L2 ...)."),
    agent: str = typer.Option(..., "--agent", help=AGENT_HELP),
    ttl: str = typer.Option(None, "--ttl", help=TTL_HELP.replace("default 1h", "default: its own")),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Push the holder's lease out to now + its TTL."""
    lease = leases_from(ctx).renew(lease_id, agent=agent, ttl=ttl)
    if json_output:
        print_json(lease)
        return
    echo("renewed " + _line(lease))


@app.command("release")
def release(
    ctx: typer.Context,
    lease_id: str = typer.Argument(..., metavar="ID", help="The lease (L1, L2 ...)."),
    agent: str = typer.Option(..., "--agent", help=AGENT_HELP + " Only the holder may release it."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """End the holder's lease (kept in the history)."""
    entry = leases_from(ctx).release(lease_id, agent=agent)
    if json_output:
        print_json(entry)
        return
    echo("released " + _line(entry))


@app.command("break")
def break_(
    ctx: typer.Context,
    lease_id: str = typer.Argument(..., metavar="ID", help="The lease (L1, L2 ...)."),
    by: str = typer.Option(..., "--by", help="Who breaks it (a person), kept in the history."),
    reason: str = typer.Option(..., "--reason", help="Why, kept in the history."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """A person ends another agent's lease; the history keeps who and why."""
    entry = leases_from(ctx).break_(lease_id, by=by, reason=reason)
    if json_output:
        print_json(entry)
        return
    echo("broken " + _line(entry))


@app.command("list")
def list_(
    ctx: typer.Context,
    conflicts: bool = typer.Option(False, "--conflicts", help="Pairs of live leases of different agents whose "
                                                              "patterns overlap, instead of the leases."),
    history: bool = typer.Option(False, "--history", help="The ended leases (expired, released, broken)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
    fmt: str | None = format_option(),
    quiet: bool = quiet_option(),
) -> None:
    """The live leases and the paths held by task claims (task:ID), or --conflicts, or --history."""
    output = resolve_format(fmt, quiet, json_output)
    leases = leases_from(ctx)
    now = leases.now()
    from loki.clock import format_ts
    from loki.text.textsafe import for_terminal as esc

    if conflicts:
        pairs = leases.conflicts(now)

        def people_pairs() -> None:
            if not pairs:
                footer("no overlapping leases")
            for pair in pairs:
                echo(f"{pair['a']} and {pair['b']} ({pair['kind']}): " + " ~ ".join(esc(p) for p in pair["patterns"]))

        print_listing(output, {"now": format_ts(now), "conflicts": pairs}, pairs, "a", people_pairs)
        return
    items = leases.history() if history else [*leases.live(now), *leases.claims(now)]

    def people() -> None:
        if not items:
            footer("no ended leases" if history else "no live leases")
            return
        columns = ["id", "agent", "kind", "task", "until", "patterns"] + (["ended", "by", "why"] if history else [])
        rows = [[item["lease_id"], item["agent"], "exclusive" if item["exclusive"] else "shared", item["task"] or "",
                 item["expires_at"], " ".join(item["patterns"])]
                + ([item["ended"], item["ended_by"] or "", item["end_reason"] or ""] if history else [])
                for item in items]
        table(None, columns, rows, droppable=["task", "why"])

    key = "history" if history else "leases"
    print_listing(output, {"now": format_ts(now), key: items}, items, "lease_id", people)


@app.command("guard")
def guard(
    ctx: typer.Context,
    staged: bool = typer.Option(False, "--staged", help="Check the paths staged for the next commit (what the git "
                                                        "pre-commit hook runs)."),
    paths: list[str] = typer.Argument(None, metavar="[PATH]...", help="Repository-relative paths to check."),
    agent: str = typer.Option(None, "--agent", help="Who commits (default: $LOKI_AGENT; none: someone else)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Exit 1, naming holder, task and expiry, when a path (or a staged one) is held by another agent."""
    import os

    from loki.errors import UsageError
    from loki.leases import guard as leaseguard

    leases = leases_from(ctx)
    if staged == bool(paths):
        raise UsageError("give --staged or PATH..., one of the two")
    repo = leases.root or os.getcwd()
    wanted = leaseguard.staged_paths(repo) if staged else list(paths)
    who = agent or os.environ.get("LOKI_AGENT") or None
    held = leaseguard.check(leases, wanted, who)
    if json_output:
        print_json({"checked": len(wanted), "held": held})
    else:
        from loki.leases.leases import describe_holder

        for item in held:
            echo(f"loki: {describe_holder({**item, 'overlap': [item['path'], item['overlap'][1]]})}", err=True)
        if held:
            echo(f"loki: {len(held)} of {len(wanted)} path(s) held by another agent; commit them once the lease ends, "
                 "or unstage them (git restore --staged PATH)", err=True)
    if held:
        raise typer.Exit(1)
