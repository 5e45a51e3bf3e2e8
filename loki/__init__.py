"""loki: locked, atomic, crash-safe shared state for a team of AI coding agents.

The package imports lazily: ``import loki`` costs almost nothing, so the hot hook
path (``loki hook pre-tool-use``) never pays for the queue, the schemas or typer.
``from loki import Queue`` loads what it names on first use.

``loki.open_store(root=None)`` is the one public way to open a tree: the files, or the PostgreSQL
database its ``config/loki.json`` names (``Queue.open``, ``Breakers.open`` ... use it). ``loki.Store``
is the file store itself, and its ``open`` refuses a tree kept in a database.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

TYPE_CHECKING = False  # typing itself costs ~8 ms of import; the hook path cannot afford it
if TYPE_CHECKING:
    from typing import Any

    from loki.breakers.breakers import Breakers
    from loki.clock import Clock, ManualClock, SystemClock
    from loki.errors import LokiError
    from loki.memory.memory import ErrorMemory
    from loki.queue.deadletter import DeadLetter
    from loki.queue.queue import Queue
    from loki.storage.opening import open_store
    from loki.storage.store import Store
    from loki.strikes.strikes import Strikes

# public name -> module that defines it
_EXPORTS = {
    "LokiError": "loki.errors",
    "open_store": "loki.storage.opening",
    "Store": "loki.storage.store",
    "Clock": "loki.clock",
    "SystemClock": "loki.clock",
    "ManualClock": "loki.clock",
    "Queue": "loki.queue.queue",
    "DeadLetter": "loki.queue.deadletter",
    "Breakers": "loki.breakers.breakers",
    "ErrorMemory": "loki.memory.memory",
    "Strikes": "loki.strikes.strikes",
}

__all__ = ["Breakers", "Clock", "DeadLetter", "ErrorMemory", "LokiError", "ManualClock", "Queue", "Store", "Strikes",
           "SystemClock", "__version__", "open_store"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'loki' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
