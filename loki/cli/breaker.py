"""``loki breaker status|check|success|failure|reset|trip|capacity``: the shared circuit breakers.

A thin layer over :class:`loki.breakers.breakers.Breakers`. ``loki breaker check NAME`` is normally
answered by the fast lane (loki/cli/fast.py) before typer loads; this command is the same
code path for every other spelling (``--help``, ``--``) and prints the same thing.
"""

from __future__ import annotations

import typer

from loki.cli.common import (
    JSON_HELP,
    echo,
    footer,
    format_option,
    print_json,
    print_listing,
    quiet_option,
    store_from,
    table,
)
from loki.cli.output import resolve_format

TYPE_CHECKING = False
if TYPE_CHECKING:
    from loki.breakers.breakers import Breakers, BreakerStatus, Change

app = typer.Typer(
    help="Circuit breakers shared by every agent (state/circuit-breakers.json): CLOSED, OPEN, HALF_OPEN.",
    no_args_is_help=True,
)

NAME_HELP = "The breaker, e.g. api/claude (any 1-200 characters without control characters)."


def _breakers(ctx: typer.Context) -> Breakers:
    from loki.breakers.breakers import Breakers

    return Breakers(store_from(ctx))


def _left(seconds: int | None) -> str:
    return "" if seconds is None else f"{seconds}s"


def _describe(breaker: BreakerStatus, similar: str | None = None) -> list[str]:
    """A breaker for people, a few lines."""
    e = breaker.entry
    s = breaker.settings
    head = f"{breaker.name}: {e['state']}"
    if breaker.stored_state is not None and breaker.stored_state != e["state"]:
        head += f" (the file still says {breaker.stored_state}; the next check or record writes it)"
    elif not breaker.recorded:
        head += f" (never recorded; did you mean {similar}?)" if similar else " (never recorded)"
    lines = [head]
    window = f" in the window since {e['failure_window_start']}" if e["failure_window_start"] else ""
    lines.append(f"  failures: {e['failure_count']}/{s.threshold}{window} (total {e['total_failures']})")
    lines.append(f"  successes: {e['success_count']}/{s.recovery_threshold} consecutive while HALF_OPEN "
                 f"(total {e['total_successes']})")
    if breaker.cooldown_remaining is not None:
        lines.append(f"  cooldown: {breaker.cooldown_remaining}s left (until {e['cooldown_until']})")
    if breaker.next_probe_at is not None:
        lines.append(f"  next probe: {breaker.next_probe_at}")
    if e["last_failure_time"]:
        error = f": {e['last_error']}" if e["last_error"] else ""
        lines.append(f"  last failure: {e['last_failure_time']}{error}")
    if e["last_state_change"]:
        lines.append(f"  last state change: {e['last_state_change']}")
    lines.append(f"  settings: open after {s.threshold} failures within {s.window:g}s, cooldown {s.cooldown:g}s, "
                 f"one probe per {s.half_open_interval:g}s, close after {s.recovery_threshold} successes")
    return lines


def _echo_change(change: Change, verb: str, json_output: bool) -> None:
    if json_output:
        print_json(change.to_json())
        return
    for transition in change.transitions:
        echo(transition.log_line())
    breaker = change.breaker
    echo(f"{verb} {breaker.name}: now {breaker.state.value} (failures {breaker.failure_count}, "
               f"successes {breaker.success_count})")


@app.command("status")
def status(
    ctx: typer.Context,
    name: str | None = typer.Argument(None, help=NAME_HELP + " Omit it for every breaker."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
    fmt: str | None = format_option(),
    quiet: bool = quiet_option(),
) -> None:
    """State, counts, time left in the cooldown and the next probe time, of one breaker or all."""
    output = resolve_format(fmt, quiet, json_output)
    breakers = _breakers(ctx)
    if name is not None:
        one = breakers.status(name)
        similar = breakers.similar(name)

        def describe() -> None:
            for line in _describe(one, similar):
                echo(line)

        document = {**one.to_json(), "did_you_mean": similar}
        print_listing(output, document, [document], "name", describe)
        return
    every = breakers.status()
    items = [b.to_json() for b in every]

    def people() -> None:
        if not every:
            footer("no breakers recorded yet (every name is CLOSED until its first failure)")
            return
        table(None, ["name", "state", "failures", "successes", "cooldown left", "next probe", "last error"],
              [[b.name, b.state.value, f"{b.failure_count}/{b.settings.threshold}",
                f"{b.success_count}/{b.settings.recovery_threshold}", _left(b.cooldown_remaining),
                b.next_probe_at or "", b.last_error or ""] for b in every],
              droppable=["successes", "last error", "next probe"])

    print_listing(output, {"now": breakers.store.now_ts(), "breakers": items}, items, "name", people)


@app.command("check")
def check(
    ctx: typer.Context,
    name: str = typer.Argument(..., help=NAME_HELP),
    new: bool = typer.Option(False, "--new", help="NAME is a new dependency: go ahead even though a recorded breaker "
                                                  "with a close name is open (else that is refused as a typo)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Exit 0 if a call may go ahead now; exit 75 with the seconds to wait if not.

    In HALF_OPEN a go-ahead claims the single probe slot for the probe interval: report the
    result with `loki breaker success|failure NAME`. A name never recorded that is close to an
    open breaker's is refused as a typo (exit 2) unless --new.
    """
    from loki.cli.output import emit_check, note_similar_breaker

    breakers = _breakers(ctx)
    decision = breakers.check(name, new=new)
    emit_check(decision, json_output)
    if not decision.allowed:
        raise decision.error()
    note_similar_breaker(breakers.similar(name), name, json_output)


@app.command("success")
def success(
    ctx: typer.Context,
    name: str = typer.Argument(..., help=NAME_HELP),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Record a successful call (in HALF_OPEN, enough consecutive ones close the breaker)."""
    _echo_change(_breakers(ctx).record_success(name), "recorded a success for", json_output)


@app.command("failure")
def failure(
    ctx: typer.Context,
    name: str = typer.Argument(..., help=NAME_HELP),
    error: str = typer.Option(None, "--error", help="What failed (kept as last_error, up to 500 characters)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Record a failed call (enough of them within the window open the breaker)."""
    _echo_change(_breakers(ctx).record_failure(name, error=error), "recorded a failure for", json_output)


@app.command("reset")
def reset(
    ctx: typer.Context,
    name: str = typer.Argument(..., help=NAME_HELP),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Close a breaker by hand and clear its counts (an unknown name is an error)."""
    _echo_change(_breakers(ctx).reset(name), "reset", json_output)


@app.command("trip")
def trip(
    ctx: typer.Context,
    name: str = typer.Argument(..., help=NAME_HELP),
    for_seconds: float = typer.Option(None, "--for", help="How long to stay OPEN (default: its cooldown)."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Open a breaker by hand; after the time it probes (HALF_OPEN) as usual."""
    _echo_change(_breakers(ctx).trip(name, for_seconds=for_seconds), "tripped", json_output)


@app.command("capacity")
def capacity(
    ctx: typer.Context,
    name: str = typer.Argument(..., help=NAME_HELP),
    max_agents: int = typer.Option(..., "--max", help="Your full parallelism (agents) when healthy."),
    json_output: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Recommended parallelism now: 0 while OPEN, 1 prober while HALF_OPEN, 50 % after closing, +25 % every 60 s."""
    result = _breakers(ctx).capacity(name, max_agents)
    if json_output:
        print_json(result.to_json())
        return
    step = f"; next step at {result.next_step_at}" if result.next_step_at else ""
    echo(f"{result.agents} of {result.max_agents} agents ({result.percent:g} %): {result.reason}{step}")
