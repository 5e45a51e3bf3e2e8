"""The storage layer: the file store and everything that touches ``.loki/`` on disk.

* :mod:`loki.storage.store` -- ``Store``, the file state store (locks.py, jsonio.py, layout.py, paths.py
  and schema.py are its locks, strict JSON, file kinds, path rules and schemas);
* :mod:`loki.storage.tree` -- ``loki init``, ``validate`` and ``doctor``: the file tree's administration;
* :mod:`loki.storage.state` -- ``StateStore``: documents, logs and published items, by lock domain;
* :mod:`loki.storage.tasks` -- ``TaskStore``: the queue's whole lock domain as tasks, not files;
* :mod:`loki.storage.filetasks` -- the task store on ``queue/*.json`` and ``archive/`` (the file
  state store is :class:`loki.storage.store.Store`);
* :mod:`loki.storage.memory` -- both interfaces in dicts, for tests and as proof the interfaces hold.

The protocol modules import ``typing``; nothing on a hot path imports them at run time (domain
modules name them under ``TYPE_CHECKING`` only), so the interfaces cost nothing there. This
``__init__`` imports nothing for the same reason. docs/storage.md describes the contract.
"""
