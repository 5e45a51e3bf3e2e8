"""The task queue: the Queue, task shapes, Loki Mode's format, the dead-letter queue, escalations, approvals.

Empty on purpose: ``loki queue claim`` has a cold-start budget and imports only the modules it needs
(docs/STYLE.md).
"""
