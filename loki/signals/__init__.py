"""Signals: emitting (emit.py), their types, the consumer and its rules, the outcome log, the watcher.

Empty on purpose: ``loki signal emit`` has a cold-start budget and imports only the modules it needs
(docs/STYLE.md).
"""
