-- Logs, published items, long-held locks and error memory's search (loki/storage/postgres/logs.py,
-- items.py, memorysearch.py; docs/postgres.md, "State: logs, signals, locks, error memory").

-- An append-only log is one row per line. A position is a line's sequence number in its log: the
-- lines are (base, last_seq]; a rewrite (compaction) or a removal moves base past every old position,
-- so a saved position from before it is no longer valid (log_valid) and numbers never repeat.
-- "offset" and bytes measure the log as a file would be (each line and its newline): sizes for reports.
CREATE TABLE loki_logs (
    name     text PRIMARY KEY,
    base     bigint  NOT NULL DEFAULT 0,
    last_seq bigint  NOT NULL DEFAULT 0,
    bytes    bigint  NOT NULL DEFAULT 0,
    torn     boolean NOT NULL DEFAULT false   -- the last line has no newline yet (an append of raw bytes)
);

CREATE TABLE loki_log_lines (
    log      text   NOT NULL,
    seq      bigint NOT NULL,
    "offset" bigint NOT NULL,
    data     bytea  NOT NULL,
    PRIMARY KEY (log, seq)
);
CREATE INDEX loki_log_lines_offset ON loki_log_lines (log, "offset");

-- Published items (signals, escalations): written once under a free name, claimed by one consumer
-- (UPDATE ... FOR UPDATE SKIP LOCKED moves it into signals/.processing/), then deleted or moved.
-- Keys compare bytewise (COLLATE "C") so that a directory's subtree is one index range.
CREATE SEQUENCE loki_items_order;
CREATE TABLE loki_items (
    name     text COLLATE "C" PRIMARY KEY,
    dir      text COLLATE "C" NOT NULL,
    data     bytea  NOT NULL,
    mtime_ns bigint NOT NULL,
    version  bigint NOT NULL DEFAULT 1
);
CREATE INDEX loki_items_dir ON loki_items (dir, mtime_ns);

-- Who holds a long-held lock (the signal consumer's): the lock itself is a session-level advisory
-- lock, free the moment its holder's connection ends; this row only names the holder, and is
-- believed only while pg_locks shows its backend holding the lock.
CREATE TABLE loki_lock_holders (
    name        text PRIMARY KEY,
    backend_pid integer NOT NULL,
    pid         integer,
    host        text,
    command     text,
    since       text
);

-- Error memory's search, shared by every machine: patterns (one per content_hash) with a weighted
-- tsvector, caught up from the log memory/errors.jsonl by whoever searches first (docs/memory.md).
-- Text is searched as words: punctuation separates them (tests/test_calc.py is tests, test, calc, py),
-- as in the SQLite cache's FTS5 tokenizer, where PostgreSQL's parser would keep a path as one token.
CREATE FUNCTION loki_words(text) RETURNS text IMMUTABLE STRICT PARALLEL SAFE LANGUAGE sql
    AS $$ SELECT regexp_replace($1, '[[:punct:]]+', ' ', 'g') $$;

CREATE TABLE loki_memory_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE loki_memory_patterns (
    id              bigserial PRIMARY KEY,
    content_hash    text    NOT NULL UNIQUE,
    tool            text    NOT NULL,
    prefix          text    NOT NULL,
    command         text    NOT NULL,
    error_message   text    NOT NULL,
    error_class     text,
    exit_code       integer,
    file_references text    NOT NULL,
    refs_text       text    NOT NULL DEFAULT '',
    stack_trace     text,
    output          text    NOT NULL,
    cwd             text    NOT NULL,
    branch          text    NOT NULL,
    session_id      text,
    first_seen      text    NOT NULL,
    last_seen       text    NOT NULL,
    occurrences     integer NOT NULL,
    resolutions     integer NOT NULL DEFAULT 0,
    resolution_text text    NOT NULL DEFAULT '',
    last_id         text    NOT NULL,
    last_line       bigint  NOT NULL,
    -- Weights (ts_rank's {D, C, B, A}): the message A, the command B, file references and fixes C,
    -- stack trace and output D: the SQLite index's BM25 column weights, in four classes.
    search tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english', loki_words(error_message)), 'A')
        || setweight(to_tsvector('english', loki_words(command)), 'B')
        || setweight(to_tsvector('english', loki_words(refs_text)), 'C')
        || setweight(to_tsvector('english', loki_words(resolution_text)), 'C')
        || setweight(to_tsvector('english', loki_words(coalesce(stack_trace, ''))), 'D')
        || setweight(to_tsvector('english', loki_words(output)), 'D')
    ) STORED
);
CREATE INDEX loki_memory_patterns_search ON loki_memory_patterns USING gin (search);
CREATE INDEX loki_memory_patterns_prefix ON loki_memory_patterns (tool, prefix);
CREATE INDEX loki_memory_patterns_class ON loki_memory_patterns (error_class);

CREATE TABLE loki_memory_records (
    id      text PRIMARY KEY,
    pattern bigint NOT NULL
);

CREATE TABLE loki_memory_resolutions (
    pattern       bigint  NOT NULL,
    id            text    NOT NULL,
    resolution    text    NOT NULL,
    confidence    double precision NOT NULL,
    calls_between integer NOT NULL,
    same_input    boolean NOT NULL,
    timestamp     text    NOT NULL,
    line          bigint  NOT NULL,
    PRIMARY KEY (pattern, id)
);

CREATE TABLE loki_memory_resolution_log (
    id     text PRIMARY KEY,
    line   bigint NOT NULL,
    record text   NOT NULL
);
