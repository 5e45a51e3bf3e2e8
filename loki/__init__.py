"""loki: locked, atomic, crash-safe shared state for a team of AI coding agents.

The package imports lazily: ``import loki`` costs almost nothing, so the hot hook
path (``loki hook pre-tool-use``) never pays for the queue, the schemas or typer.
``from loki import Queue`` loads what it names on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "LokiError": "loki.errors",
    "Store": "loki.store",
    "Clock": "loki.clock",
    "SystemClock": "loki.clock",
    "ManualClock": "loki.clock",
    "Queue": "loki.queue",
    "Task": "loki.queue",
    "DeadLetter": "loki.deadletter",
    "Breakers": "loki.breakers",
    "Signals": "loki.signals",
    "Strikes": "loki.strikes",
    "ErrorMemory": "loki.memory",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'loki' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
