"""loki: locked, atomic, crash-safe shared state for a team of AI coding agents.

The package imports lazily: ``import loki`` costs almost nothing, so the hot hook
path (``loki hook pre-tool-use``) never pays for the queue, the schemas or typer.
``from loki import Queue`` loads what it names on first use.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

TYPE_CHECKING = False  # typing itself costs ~8 ms of import; the hook path cannot afford it
if TYPE_CHECKING:
    from typing import Any

    from loki.breakers import Breakers
    from loki.clock import Clock, ManualClock, SystemClock
    from loki.deadletter import DeadLetter
    from loki.errors import LokiError
    from loki.memory import ErrorMemory
    from loki.queue import Queue
    from loki.store import Store
    from loki.strikes import Strikes

# public name -> module that defines it
_EXPORTS = {
    "LokiError": "loki.errors",
    "Store": "loki.store",
    "Clock": "loki.clock",
    "SystemClock": "loki.clock",
    "ManualClock": "loki.clock",
    "Queue": "loki.queue",
    "DeadLetter": "loki.deadletter",
    "Breakers": "loki.breakers",
    "ErrorMemory": "loki.memory",
    "Strikes": "loki.strikes",
}

__all__ = ["Breakers", "Clock", "DeadLetter", "ErrorMemory", "LokiError", "ManualClock", "Queue", "Store", "Strikes",
           "SystemClock", "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'loki' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
