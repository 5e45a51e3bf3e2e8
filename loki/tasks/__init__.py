"""A task: its record and states (record.py), the readiness rule (readiness.py), its history (history.py),
a dead-letter entry (deadentry.py) and Loki Mode's formats (compat.py). Pure rules below storage: every store
uses them, and they import nothing above the shared ground and text/.

Empty on purpose: ``loki queue claim`` has a cold-start budget and imports only the modules it needs
(docs/STYLE.md).
"""
