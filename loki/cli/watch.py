"""``loki watch``: consume signals, run the periodic tick, show it live (a thin layer over loki.signals.watcher).

Output modes: a live rich view on a terminal; ``--no-tui`` one line per event (the
default when stdout is not a terminal); ``--json`` one JSON object per event line. With
``--once``, one pass and exit: a summary (``--json``: one JSON document).

SIGINT and SIGTERM ask the watcher to stop: the signal in hand is finished (applied,
logged, deleted) and the process exits 0.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import typer

from loki.cli.common import print_json, store_from
from loki.stopsignals import stop_requests
from loki.wording import plural


def watch(
    ctx: typer.Context,
    once: bool = typer.Option(False, "--once", help="Process what is waiting, run one tick, exit (cron, CI, tests)."),
    no_tui: bool = typer.Option(False, "--no-tui", help="One line per event instead of the live view."),
    json_output: bool = typer.Option(False, "--json", help="One JSON object per event (--once: one JSON document)."),
    observer: str | None = typer.Option(None, "--observer",
                                        help="auto (default), native (inotify... or fail) or polling (rescan only)."),
    refresh: float = typer.Option(1.0, "--refresh", help="Seconds between two frames of the live view."),
) -> None:
    """Consume signals (one consumer at a time; a second watcher is display-only) and show the state live."""
    from loki.signals.watcher import Watcher

    store = store_from(ctx)
    live = not (once or no_tui or json_output) and sys.stdout.isatty()
    printer = None if live else (_json_line if json_output else _text_line)
    if once and json_output:
        printer = None  # one document at the end
    watcher = Watcher(store, on_event=printer, observer=observer)
    # SIGINT/SIGTERM stop the loop after the signal in hand, instead of interrupting it.
    with stop_requests(lambda signum: watcher.stop()):
        if once:
            _once(watcher, json_output)
        elif live:
            _live(watcher, refresh)
        else:
            watcher.run()


def _once(watcher: Any, json_output: bool) -> None:
    from loki.errors import LokiError, NothingToDo

    result = watcher.run_once()
    if json_output:
        print_json(result)
    if not result["consuming"]:
        raise NothingToDo("another watcher is consuming signals; nothing done", holder=result["holder"])
    if not json_output:
        counts = ", ".join(f"{n} {kind}" for kind, n in result["outcomes"].items())
        _say(f"{plural(result['signals'], 'signal')} handled" + (f": {counts}" if counts else ""))
    errors = [e for e in result["events"] if e.get("event") == "error"]
    if errors:  # cron must notice: the signals are kept in .processing/ and the next run retries them
        raise LokiError(f"{plural(len(errors), 'error')}: {errors[0]['detail']}", errors=errors)


def _live(watcher: Any, refresh: float) -> None:
    from rich.live import Live

    from loki.cli.common import console
    from loki.cli.watchview import render
    from loki.signals.dashboard import Dashboard

    dashboard = Dashboard(watcher.store)
    message: list[str] = []  # the last event that is not a signal (signals have their own table)
    drawn = [0.0]

    def remember(event: dict[str, Any]) -> None:
        if event.get("event") != "signal":
            message[:] = [event_text(event, watcher.store.now_ts())]

    watcher.on_event = remember

    def frame() -> Any:
        snap = dashboard.snapshot(consuming=watcher.consuming, holder=watcher.holder)
        return render(snap, message[0] if message else None)

    with Live(frame(), console=console(), auto_refresh=False, vertical_overflow="crop") as view:

        def draw(_: Any) -> None:
            if time.monotonic() - drawn[0] >= refresh:
                view.update(frame(), refresh=True)
                drawn[0] = time.monotonic()

        watcher.run(on_cycle=draw)


def event_text(event: dict[str, Any], now: str) -> str:
    """One event as one line for people (--no-tui)."""
    stamp = str(event.get("timestamp") or now)[11:19]
    kind = event.get("event")
    if kind == "signal":
        seen = " (seen in the log)" if event.get("observed") else ""
        return f"{stamp} {event.get('name')} {event.get('outcome')}: {event.get('detail')}{seen}"
    if kind == "tick":
        seen = " (seen in the log)" if event.get("observed") else ""
        return f"{stamp} tick {event.get('action')}: {event.get('detail')}{seen}"
    return f"{stamp} {kind}: {event.get('detail')}"


def _text_line(event: dict[str, Any]) -> None:
    from loki.clock import default_clock, format_ts
    from loki.textsafe import for_terminal

    sys.stdout.write(for_terminal(event_text(event, format_ts(default_clock().now()))) + "\n")
    sys.stdout.flush()


def _json_line(event: dict[str, Any]) -> None:
    import json

    from loki.textsafe import json_for_terminal

    sys.stdout.write(json_for_terminal(json.dumps(event, ensure_ascii=False, default=str)) + "\n")
    sys.stdout.flush()


def _say(message: str) -> None:
    from loki.textsafe import for_terminal

    sys.stdout.write(for_terminal(message) + "\n")
    sys.stdout.flush()


