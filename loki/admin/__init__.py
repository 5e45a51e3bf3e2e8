"""Administration of a whole tree, across concepts: ``loki status``, ``validate`` and ``doctor`` (status.py)
and ``loki migrate`` (migrate.py). Above every concept it reads; only the CLI is above it. The marker that
holds other commands out during a migration (storage/moving.py) stays in storage: every store checks it.

Empty on purpose: the CLI imports only the modules a command needs (docs/STYLE.md).
"""
