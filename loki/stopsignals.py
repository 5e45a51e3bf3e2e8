"""SIGINT and SIGTERM as a request to stop, for loops that must finish what they hold first.

``loki watch`` finishes the signal in hand; ``loki run`` stops retrying and passes the signal on
to its command. Both want the same thing from the interpreter: for a while, these two signals
call a function instead of raising KeyboardInterrupt or killing the process.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stop_requests(request_stop: Callable[[int], None],
                  signals: Iterable[signal.Signals] | None = None) -> Iterator[None]:
    """While inside, SIGINT and SIGTERM (or ``signals``) call ``request_stop(signum)``; the previous
    handlers come back on the way out. Outside the main thread, where Python cannot set handlers,
    nothing is installed (the caller can still request a stop itself)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        request_stop(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (STOP_SIGNALS if signals is None else signals)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
