"""The watcher and the live view (``loki watch``), above the queue: the consumer and its rules (consumer.py,
rules.py), the watcher and its periodic tick (watcher.py, ticks.py), a human's decision applied at once
(approvals.py), and what the live view shows (dashboard.py activity.py feed.py screen.py: the snapshot,
others' activity, the event feed, the layout for a terminal's size). The bus it reads (emit, types,
outcomes) stays in signals/.

Empty on purpose: ``loki watch`` and the hooks import only the modules they need (docs/STYLE.md).
"""
