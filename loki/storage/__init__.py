"""The storage layer: the two interfaces and the three backends behind them (files, memory, PostgreSQL).

* :mod:`loki.storage.state` -- ``StateStore``, cut into roles: documents, logs, published items, locks,
  observation, local caches, administration; capability flags where backends differ;
* :mod:`loki.storage.tasks` -- ``TaskStore``: the queue's whole lock domain as tasks, not files;
* :mod:`loki.storage.taskbase` -- what every task store shares (state names, the unit of work's common half);
* :mod:`loki.storage.checks`, :mod:`loki.storage.problems` -- the checks every backend's validate shares;
* :mod:`loki.storage.store` -- ``Store``, the file state store (locks.py, jsonio.py, layout.py, paths.py,
  atomic.py and schema.py are its locks, strict JSON, file kinds, path rules, fsyncs and schemas);
  :mod:`loki.storage.filetasks` its task store on ``queue/*.json`` and ``archive/``;
  :mod:`loki.storage.tree` (``init``) and :mod:`loki.storage.treecheck` (``validate``, ``doctor``) its administration;
* :mod:`loki.storage.memory` -- both interfaces in dicts, for tests and as proof the interfaces hold;
* :mod:`loki.storage.postgres` -- both interfaces on PostgreSQL (docs/postgres.md);
* :mod:`loki.storage.opening` -- which backend a tree is on; :mod:`loki.storage.moving` and
  :mod:`loki.storage.migrating` -- the marker every command honours and the file side of ``loki migrate``
  (``status`` and ``migrate`` themselves are administration, above the concepts: :mod:`loki.admin`).

The protocol modules import ``typing``; nothing on a hot path imports them at run time (domain
modules name them under ``TYPE_CHECKING`` only), so the interfaces cost nothing there. This
``__init__`` imports nothing for the same reason. docs/storage.md describes the contract.
"""
