"""What wakes a watcher on the file tree: a watchdog observer of one directory (inotify on Linux).

Its events are hints only (docs/design.md §4): the watcher also rescans on a timer, so an overflowed
inotify queue, a network filesystem or no observer at all delays signals and loses none. The
database store's counterpart is LISTEN/NOTIFY (:mod:`loki.storage.postgres.listen`).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # see loki/__init__.py: keep typing off the import path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


class DirectoryObserver:
    """A started watchdog observer that calls ``wake`` when something may have arrived in a directory."""

    kind = "native"

    def __init__(self, directory: str, wake: Callable[[], None]) -> None:
        import logging

        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer

        # watchdog logs a warning when its thread is stopped mid-read; with no handler configured
        # Python would print it on stderr, in the middle of --no-tui output.
        logging.getLogger("watchdog").addHandler(logging.NullHandler())

        class Hint(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                if event.event_type in ("created", "modified", "moved", "closed"):
                    path = event.dest_path if event.event_type == "moved" else event.src_path
                    name = os.path.basename(os.fsdecode(path))
                    if name and not name.startswith("."):
                        wake()

        observer: Any = Observer()
        observer.schedule(Hint(), directory, recursive=False)
        observer.daemon = True
        observer.start()
        self._observer = observer

    def stop(self) -> None:
        self._observer.stop()

    def join(self, timeout: float | None = None) -> None:
        self._observer.join(timeout=timeout)
