"""The PostgreSQL backend: the state store and the task store as tables of one database (docs/postgres.md).

A team whose agents run on several machines shares one database instead of one disk: tasks are rows
claimed with ``FOR UPDATE SKIP LOCKED``, signals wake watchers with LISTEN/NOTIFY. psycopg 3 is an
optional dependency (``pip install 'loki-state[postgres]'``, the distribution's name); nothing here is
imported by a file tree.
"""
