-- Documents and the task queue (loki/storage/postgres/documents.py, tasks.py; docs/postgres.md).

-- Every write takes a fresh number from here: a change token is a row's version (documents) or a
-- fingerprint of a state's versions (tasks). Sequences never lock, so writers never wait on it.
CREATE SEQUENCE loki_version_seq;

-- Named items read whole, one row each, keyed like the file tree (`state/circuit-breakers.json`):
-- state documents (the canonical JSON bytes the file store would write), text (CONTINUITY.md, the
-- escalation template), published items. A lock domain is an advisory lock on its lock's name.
CREATE TABLE loki_documents (
    name        text COLLATE "C" PRIMARY KEY,
    data        bytea NOT NULL,
    version     bigint NOT NULL DEFAULT nextval('loki_version_seq'),
    modified_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    mtime_ns    bigint  -- set by a writer that gives its own time (a published item's); else modified_at
);

-- Insertion order within a state: a task put into a state (added, moved, requeued) takes the next
-- number, as the file store appends it to the end of that state's file.
CREATE SEQUENCE loki_task_seq;

-- Every task, dead-letter entry and abandoned entry, hot or archived: one row per task id. `doc` is
-- the whole record as loki writes it (json keeps its text: key order and numbers as written); the
-- columns beside it are copies of the fields SQL decides on, written with it.
CREATE TABLE loki_tasks (
    id              text COLLATE "C" PRIMARY KEY,
    state           text NOT NULL CHECK (state IN ('pending', 'in-progress', 'blocked', 'completed', 'failed',
                                                   'cancelled', 'dead-letter', 'abandoned')),
    archived        boolean NOT NULL DEFAULT false CHECK (NOT archived OR state IN ('completed', 'cancelled')),
    seq             bigint NOT NULL,
    version         bigint NOT NULL,
    priority_rank   smallint NOT NULL,        -- 0 high, 1 medium, 2 low
    created_at      text COLLATE "C",         -- compared as text, as the file store compares it
    available_at    timestamptz,
    type            text,
    claimed_by      text,
    lease_until     timestamptz,
    deferred_until  timestamptz,              -- the task's deferred.until (`loki queue defer`): not claimed before
    key_digest      text,                     -- SHA-256 of the idempotency key (any length, any character)
    dependencies    text[] NOT NULL DEFAULT '{}',
    labels          text[] NOT NULL DEFAULT '{}',
    finished_at     text COLLATE "C",         -- completed_at, else updated_at, else created_at: rotation order
    archived_month  text,                     -- YYYY-MM it finished, once archived
    doc             json NOT NULL
);

-- Every claim and completion updates rows (a new row version each): vacuum and refresh the planner's
-- statistics sooner than the defaults (20 % and 10 % of the table changed) would.
ALTER TABLE loki_tasks SET (autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02);

-- The claim: the best pending task in priority, age, insertion order, read from the index's front.
CREATE INDEX loki_tasks_ready ON loki_tasks (priority_rank, created_at, seq) WHERE state = 'pending';
-- Expired leases, which every claim requeues first.
CREATE INDEX loki_tasks_leases ON loki_tasks (lease_until) WHERE state = 'in-progress';
-- A state's tasks in insertion order (listings, the live view).
CREATE INDEX loki_tasks_states ON loki_tasks (state, seq) WHERE NOT archived;
-- Rotation: the oldest finished tasks of a state.
CREATE INDEX loki_tasks_finished ON loki_tasks (state, finished_at, seq)
    WHERE NOT archived AND state IN ('completed', 'cancelled');
-- An idempotency key names one task, wherever it is.
CREATE UNIQUE INDEX loki_tasks_key ON loki_tasks (key_digest) WHERE key_digest IS NOT NULL;

-- The dead-letter queue's metadata (last_reviewed, total_abandoned, total_recovered).
CREATE TABLE loki_queue_meta (
    key     text PRIMARY KEY,
    value   json NOT NULL,
    version bigint NOT NULL DEFAULT nextval('loki_version_seq')
);
INSERT INTO loki_queue_meta (key, value)
    VALUES ('dead-letter', '{"last_reviewed": null, "total_abandoned": 0, "total_recovered": 0}');
