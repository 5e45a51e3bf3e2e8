"""``loki watch``: consume signals, run the periodic tick, show it live (a thin layer over loki.watch.watcher).

Output modes: a live view on a terminal (full screen, composed for its size by
:mod:`loki.watch.screen`; keys ``q`` quit, ``p`` pause, ``?`` help, arrows scroll the events);
``--no-tui`` one line per event (the default when stdout is not a terminal): the same events as
the live view's feed; ``--json`` one JSON object per event line. With ``--once``, one pass and
exit: a summary (``--json``: one JSON document).

SIGINT and SIGTERM (and SIGHUP in the live view) ask the watcher to stop: the signal in hand is
finished (applied, logged, deleted) and the process exits 0; the live view gives the terminal
back as it found it on every way out (loki/cli/watchkeys.py).
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
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
    """Consume signals (one consumer at a time; a second watcher is display-only) and show the state live.

    Keys in the live view: q quit, p pause, ? help, arrows scroll the events.
    """
    from loki.watch.watcher import Watcher

    store = store_from(ctx)
    live = not (once or no_tui or json_output) and sys.stdout.isatty()
    printer = None if live else (_json_line if json_output else _text_line)
    if once and json_output:
        printer = None  # one document at the end
    watcher = Watcher(store, on_event=printer, observer=observer)
    # SIGINT/SIGTERM stop the loop after the signal in hand, instead of interrupting it; in the live
    # view SIGHUP too, so a closed terminal or a `kill -HUP` still restores the terminal's mode.
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP) if live else None
    with stop_requests(lambda signum: watcher.stop(), stops):
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
    from loki.cli.watchkeys import KeyReader, cbreak
    from loki.cli.watchview import to_text
    from loki.watch.activity import history
    from loki.watch.dashboard import Dashboard
    from loki.watch.feed import Feed
    from loki.watch.screen import View, compose

    store = watcher.store
    watcher.follow_activity()  # before the history is read: nothing falls between the two
    assert watcher.activity is not None
    # Escalation files are re-read only when they change, so the panel can follow them every second.
    dashboard = Dashboard(store, in_progress_limit=200, escalations_limit=200, escalations_every=1.0,
                          escalations=watcher.activity.escalations)
    feed, view = Feed(), View()
    feed.extend(history(store), store.now_ts())
    watcher.on_event = lambda event: feed.add(event, store.now_ts())
    screen = console()
    state: dict[str, Any] = {"snap": None, "drawn": 0.0, "resized": False}

    def frame() -> Any:
        if state["snap"] is None or not view.paused:
            state["snap"] = dashboard.snapshot(consuming=watcher.consuming, holder=watcher.holder)
        # The terminal's size now, not the console's: the console was made as wide as the terminal was
        # at start and keeps that width, so a grown window kept 80 columns and a shrunk one got wrapped lines.
        width, height = _terminal_size(screen.size)
        screen.size = (width, height)
        return to_text(compose(state["snap"], feed, view, width, height))

    def on_resize(signum: int, frame_: Any) -> None:
        state["resized"] = True
        watcher.wake()

    with ExitStack() as stack:  # unwound in reverse: the screen first, the terminal's mode last
        keys: Any = _NoKeys()
        if sys.stdin.isatty():
            stack.enter_context(cbreak(sys.stdin.fileno()))
            keys = stack.enter_context(KeyReader(sys.stdin.fileno(), watcher.wake))
        stack.enter_context(_handler(signal.SIGWINCH, on_resize))
        live = stack.enter_context(Live(frame(), console=screen, auto_refresh=False, screen=True))

        def draw(_: Any) -> None:
            pressed = keys.drain()
            for key in pressed:
                view.press(key, feed)
            if view.quit:
                watcher.stop()
                return
            # Paused, the snapshot and the feed stay as they were; only "N new" moves.
            due = time.monotonic() - state["drawn"] >= refresh
            if pressed or due or state["resized"]:
                state["resized"] = False
                live.update(frame(), refresh=True)
                state["drawn"] = time.monotonic()

        watcher.run(on_cycle=draw)


def _terminal_size(fallback: Any) -> tuple[int, int]:
    """The size of the terminal stdout is, asked each frame (SIGWINCH only says it changed)."""
    import os

    try:
        size = os.get_terminal_size(sys.stdout.fileno())
    except (OSError, ValueError):  # not a terminal after all (LOKI_FORCE_TTY): what the console says
        return int(fallback[0]), int(fallback[1])
    return size.columns, size.lines


class _NoKeys:
    """Stands in for the KeyReader when stdin is not a terminal (``loki watch < /dev/null``)."""

    def drain(self) -> list[str]:
        return []


@contextmanager
def _handler(signum: int, handler: Any) -> Iterator[None]:
    """``handler`` for ``signum`` inside, the previous one back on the way out."""
    previous = signal.signal(signum, handler)
    try:
        yield
    finally:
        signal.signal(signum, previous)


def event_text(event: dict[str, Any], now: str) -> str:
    """One event as one line for people (--no-tui): :func:`loki.watch.feed.event_line`."""
    from loki.watch.feed import event_line

    return event_line(event, now)


def _text_line(event: dict[str, Any]) -> None:
    from loki.clock import default_clock, format_ts
    from loki.text.textsafe import for_terminal

    sys.stdout.write(for_terminal(event_text(event, format_ts(default_clock().now()))) + "\n")
    sys.stdout.flush()


def _json_line(event: dict[str, Any]) -> None:
    import json

    from loki.text.textsafe import json_for_terminal

    sys.stdout.write(json_for_terminal(json.dumps(event, ensure_ascii=False, default=str)) + "\n")
    sys.stdout.flush()


def _say(message: str) -> None:
    from loki.text.textsafe import for_terminal

    sys.stdout.write(for_terminal(message) + "\n")
    sys.stdout.flush()


