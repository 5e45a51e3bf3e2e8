"""Signals, the bus: emitting (emit.py), their types (types.py), the outcome log (outcomes.py). What consumes
them, the watcher and the live view, is in loki/watch/.

Empty on purpose: ``loki signal emit`` has a cold-start budget and imports only the modules it needs
(docs/STYLE.md).
"""
