-- What this database is and which of loki's migrations it has (loki/storage/postgres/migrations.py).
-- Every table loki owns is named loki_*, in the first schema of the connection's search_path.
CREATE TABLE loki_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);
INSERT INTO loki_meta (key, value) VALUES ('application', 'loki');

CREATE TABLE loki_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
