-- The SQL of loki's PostgreSQL store, by name (the schema it runs on: ../migrations/).
--
-- File format (read by loki/storage/postgres/queries.py, once per process, on first use):
--   -- query_name --                 a header line: lower case, digits and _, unique in the file
--   -- what the statement promises  description lines, for the reader: not sent to the server
--   the statement                   %s / %(name)s are psycopg's parameters; %% is a literal %
--                                   in a statement run with parameters
-- A statement may splice a fragment, another entry of this file, as {{fragment_name}}: the readiness
-- conditions below are written once and used by both the claim and the census.
-- The code names each statement with query("name"); tests/storage/test_named_queries.py checks that
-- every entry is used and every use names an entry.


-- ================================================================================================
-- The task store (tasks.py): one row per task id, in loki_tasks (migrations/002_tasks.sql)
-- ================================================================================================

-- task_columns --
-- What a unit of work reads of a row: the record and what it is checked against (tasks.checked).
-- The Python side unpacks rows in this order (id, state, archived, doc, priority_rank).
t.id, t.state, t.archived, t.doc, t.priority_rank

-- lock_rows --
-- How a unit other than a claim reads the rows it may change: locked until it commits (a claimer
-- skips them). A claim appends nothing: it never waits.
FOR UPDATE OF t

-- The readiness rule's SQL twin, a condition per entry: of_type, skipped_type, waiting, deferred, held and
-- dependencies_done. The files and memory decide the same in Python (the readiness module of the task
-- record, tasks/readiness.py today); the contract suite runs both over the same cases.

-- of_type --
-- The claimer asked for these types (%(typed)s false: any type).
(NOT %(typed)s OR coalesce(t.type = ANY(%(types)s::text[]), false))

-- skipped_type --
-- A type the claimer skips (its circuit breaker is open).
coalesce(t.type = ANY(%(skip)s::text[]), false)

-- waiting --
-- Backing off after a failure: available_at still ahead, but not beyond the clock-skew bound.
(t.available_at > %(now)s AND t.available_at <= %(not_after)s)

-- deferred --
-- Deferred by `loki queue defer` until a time still ahead (a person's date: no clock-skew bound).
(t.deferred_until IS NOT NULL AND t.deferred_until > %(now)s)

-- held --
-- Claimed where it lies, in pending (Loki Mode's flock claim): its holder works on it.
(coalesce(t.claimed_by, '') <> '' AND t.lease_until IS NOT NULL AND t.lease_until >= %(now)s)

-- dependencies_done --
-- Every dependency is a completed task, hot or archived (ids are unique across every state).
NOT EXISTS (
    SELECT 1 FROM unnest(t.dependencies) AS d(id)
     WHERE NOT EXISTS (SELECT 1 FROM loki_tasks c WHERE c.id = d.id AND c.state = 'completed'))

-- claim --
-- The best ready task, locked: one statement, the SQL twin of tasks/readiness.py's rule (of the
-- asked type, not deferred, not backing off, not held, not of a skipped type, every dependency done).
-- FOR UPDATE ... SKIP LOCKED: a row another unit holds is skipped, never waited for, so two claimers
-- never block each other and never get the same row. The partial index loki_tasks_ready hands rows
-- over in claim order (priority, age, insertion), so the first row that qualifies ends the scan.
SELECT {{task_columns}} FROM loki_tasks t
 WHERE t.state = 'pending' AND {{of_type}} AND NOT {{deferred}} AND NOT {{waiting}} AND NOT {{held}}
   AND NOT {{skipped_type}}
   AND {{dependencies_done}}
 ORDER BY t.priority_rank, t.created_at, t.seq
 LIMIT 1
 FOR UPDATE OF t SKIP LOCKED

-- census --
-- Why nothing was ready: each pending row under its first reason, in the file store's order of
-- reasons (the same fragments as the claim); 'ready' rows were locked by other units at the time.
-- Takes no lock.
SELECT why, CASE WHEN why = 'skipped' THEN type END, count(*)::int,
       min(CASE WHEN why = 'deferred' THEN deferred_until ELSE available_at END),
       array_agg(id ORDER BY priority_rank, created_at, seq) FILTER (WHERE why = 'deps')
  FROM (SELECT t.id, t.type, t.available_at, t.deferred_until, t.priority_rank, t.created_at, t.seq,
               CASE WHEN NOT {{of_type}} THEN 'other'
                    WHEN {{deferred}} THEN 'deferred'
                    WHEN {{waiting}} THEN 'waiting'
                    WHEN {{held}} THEN 'held'
                    WHEN NOT {{dependencies_done}} THEN 'deps'
                    WHEN {{skipped_type}} THEN 'skipped'
                    ELSE 'ready' END AS why
          FROM loki_tasks t WHERE t.state = 'pending') p
 GROUP BY 1, 2

-- expired --
-- In-progress tasks whose lease ran out, locked with SKIP LOCKED (a claim requeues them; two claimers
-- never requeue the same one).
SELECT {{task_columns}} FROM loki_tasks t
 WHERE t.state = 'in-progress' AND (t.lease_until IS NULL OR t.lease_until < %s)
 ORDER BY t.seq
 FOR UPDATE OF t SKIP LOCKED

-- newest_in_progress --
-- The latest claim or update among leased in-progress tasks.
SELECT max(greatest(t.doc->>'claimed_at', t.doc->>'updated_at')) FROM loki_tasks t
 WHERE t.state = 'in-progress' AND t.lease_until IS NOT NULL

-- waiting_chain --
-- The pending and blocked tasks that wait on the given ids, directly or through others; the caller
-- appends lock_rows outside a claim.
WITH RECURSIVE chain(id) AS (
    SELECT id FROM loki_tasks WHERE id = ANY(%s::text[]) AND state IN ('pending', 'blocked')
    UNION
    SELECT w.id FROM chain JOIN loki_tasks p ON p.id = chain.id
      CROSS JOIN LATERAL unnest(p.dependencies) AS d(id)
      JOIN loki_tasks w ON w.id = d.id AND w.state IN ('pending', 'blocked'))
SELECT {{task_columns}}, t.seq FROM loki_tasks t WHERE t.id IN (SELECT id FROM chain)

-- task_by_id --
-- One row by id, wherever it is; the caller appends lock_rows outside a claim.
SELECT {{task_columns}} FROM loki_tasks t WHERE t.id = %s

-- tasks_in_states --
-- The hot rows of some states (with seq, to sort after the locks); lock_rows appended outside a claim.
SELECT {{task_columns}}, t.seq FROM loki_tasks t WHERE t.state = ANY(%s::text[]) AND NOT t.archived

-- task_by_key --
-- The row holding an idempotency key (its SHA-256: tasks.key_digest); lock_rows appended outside a claim.
SELECT {{task_columns}} FROM loki_tasks t WHERE t.key_digest = %s

-- archived_task_by_key --
-- The archived row holding an idempotency key, inside a unit (no lock: the archive is not changed).
SELECT {{task_columns}} FROM loki_tasks t WHERE t.key_digest = %s AND t.archived

-- update_task --
-- Write a row the unit changed: its record and the columns copied from it (tasks.derived_columns);
-- a row put into a state anew (%(fresh)s) takes the next seq, so it goes to the end of that state.
UPDATE loki_tasks SET state = %(state)s, archived = %(archived)s, version = nextval('loki_version_seq'),
       priority_rank = %(priority_rank)s, created_at = %(created_at)s, available_at = %(available_at)s,
       type = %(type)s, claimed_by = %(claimed_by)s, lease_until = %(lease_until)s,
       deferred_until = %(deferred_until)s,
       key_digest = %(key_digest)s, dependencies = %(dependencies)s::text[],
       labels = %(labels)s::text[], finished_at = %(finished_at)s, doc = %(doc)s::json,
       seq = CASE WHEN %(fresh)s THEN nextval('loki_task_seq') ELSE seq END
 WHERE id = %(id)s

-- insert_task --
-- A new row (a duplicate id or idempotency key is refused by the unique indexes: exit 4).
INSERT INTO loki_tasks (id, state, archived, seq, version, priority_rank, created_at, available_at, type,
                        claimed_by, lease_until, deferred_until, key_digest, dependencies, labels, finished_at,
                        doc)
VALUES (%(id)s, %(state)s, %(archived)s, nextval('loki_task_seq'), nextval('loki_version_seq'), %(priority_rank)s,
        %(created_at)s, %(available_at)s, %(type)s, %(claimed_by)s, %(lease_until)s, %(deferred_until)s,
        %(key_digest)s,
        %(dependencies)s::text[], %(labels)s::text[], %(finished_at)s, %(doc)s::json)

-- delete_tasks --
-- Rows the unit removed (a recovered dead-letter entry, a task moved out of the store).
DELETE FROM loki_tasks WHERE id = ANY(%s::text[])

-- analyze_tasks --
-- After a large batch: refresh the planner's statistics, so claims keep reading the claim index.
ANALYZE loki_tasks

-- count_hot_up_to --
-- How many hot rows a state has, counting no further than the limit given.
SELECT count(*) FROM (SELECT 1 FROM loki_tasks WHERE state = %s AND NOT archived LIMIT %s) hot

-- count_hot --
-- How many hot rows a state has.
SELECT count(*) FROM loki_tasks WHERE state = %s AND NOT archived

-- rotate --
-- Archive the oldest finished rows of a state: they change state in place (archived), nothing is copied.
UPDATE loki_tasks SET archived = true, archived_month = left(finished_at, 7),
       version = nextval('loki_version_seq')
 WHERE id IN (SELECT id FROM loki_tasks WHERE state = %s AND NOT archived ORDER BY finished_at, seq LIMIT %s)
 RETURNING id

-- view_states --
-- Several states as of one instant (one statement, one snapshot), in insertion order; no lock.
SELECT id, state, priority_rank, doc FROM loki_tasks
 WHERE state = ANY(%s::text[]) AND NOT archived ORDER BY seq

-- dead_letter_document --
-- The dead-letter metadata (part 0) and every dead-letter entry (part 1) as of one instant.
SELECT 0, 0, value, '', 0 FROM loki_queue_meta WHERE key = 'dead-letter'
UNION ALL SELECT 1, seq, doc, id, priority_rank FROM loki_tasks
 WHERE state = 'dead-letter'
ORDER BY 1, 2

-- dead_letter_metadata --
-- The dead-letter metadata, read without a lock (a claim; loki validate).
SELECT value FROM loki_queue_meta WHERE key = 'dead-letter'

-- dead_letter_metadata_for_update --
-- The dead-letter metadata, locked until the unit commits (it may change it).
SELECT value FROM loki_queue_meta WHERE key = 'dead-letter' FOR UPDATE

-- write_dead_letter_metadata --
-- The dead-letter metadata, written whole.
INSERT INTO loki_queue_meta (key, value) VALUES ('dead-letter', %s::json)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = nextval('loki_version_seq')

-- state_token --
-- A fingerprint of a state: its row count and the sum of its rows' versions (never reused).
SELECT count(*), coalesce(sum(version), 0), 0 FROM loki_tasks WHERE state = %s AND NOT archived

-- dead_letter_token --
-- The same for dead-letter, with the metadata's version.
SELECT count(*), coalesce(sum(version), 0), (SELECT version FROM loki_queue_meta WHERE key = 'dead-letter')
  FROM loki_tasks WHERE state = %s AND NOT archived

-- archived_page --
-- A page of the archive, by id after the last one read (keyset: the archive grows without bound).
SELECT id, state, priority_rank, doc FROM loki_tasks WHERE archived AND id > %s ORDER BY id LIMIT 1000

-- archived_by_id --
-- One archived row by id (no unit: a read of one snapshot).
SELECT id, state, priority_rank, doc FROM loki_tasks WHERE id = %s AND archived

-- archived_by_key --
-- One archived row by idempotency key (its SHA-256).
SELECT id, state, priority_rank, doc FROM loki_tasks WHERE key_digest = %s AND archived

-- every_hot_row_unchecked --
-- loki validate: every hot row as stored, with the columns copied from its record, in the order of
-- tasks.DERIVED.
SELECT id, state, archived, doc, priority_rank, created_at, available_at, type, claimed_by, lease_until,
       deferred_until, key_digest, dependencies, labels, finished_at
  FROM loki_tasks WHERE NOT archived ORDER BY seq

-- every_archived_row_unchecked --
-- loki validate: the archive, a page at a time, as every_hot_row_unchecked.
SELECT id, state, archived, doc, priority_rank, created_at, available_at, type, claimed_by, lease_until,
       deferred_until, key_digest, dependencies, labels, finished_at
  FROM loki_tasks WHERE archived AND id > %s ORDER BY id LIMIT 1000


-- ================================================================================================
-- Documents (documents.py): whole JSON documents and text items, one row each in loki_documents
-- ================================================================================================

-- document_data --
-- A document's bytes.
SELECT data FROM loki_documents WHERE name = %s

-- put_document --
-- Replace a document in one statement; every write gives it a new version (its change token).
INSERT INTO loki_documents (name, data, mtime_ns) VALUES (%s, %s, %s)
ON CONFLICT (name) DO UPDATE SET data = EXCLUDED.data, mtime_ns = EXCLUDED.mtime_ns,
    version = nextval('loki_version_seq'), modified_at = clock_timestamp()
RETURNING version

-- documents_snapshot --
-- Several documents as of one instant: one statement, one snapshot, no lock.
SELECT name, data FROM loki_documents WHERE name = ANY(%s)

-- document_exists --
-- A document by name, or a "directory": some name in the range [low, high) below it.
SELECT EXISTS (SELECT 1 FROM loki_documents WHERE name = %s OR (name >= %s AND name < %s))

-- document_bytes_up_to --
-- A document's size, and its bytes only when within the limit (a larger one is refused by size).
SELECT octet_length(data), CASE WHEN octet_length(data) <= %s THEN data END
  FROM loki_documents WHERE name = %s

-- delete_document --
-- Delete a derived document (a hint); returns a row when it existed.
DELETE FROM loki_documents WHERE name = %s RETURNING 1

-- documents_in_range --
-- The names in [low, high): everything under a "directory".
SELECT name FROM loki_documents WHERE name >= %s AND name < %s

-- document_version --
-- A document's change token: a new number on every write.
SELECT version FROM loki_documents WHERE name = %s


-- ================================================================================================
-- Published items (items.py): signals, escalations, outcomes, in loki_items
-- ================================================================================================

-- item_mtime --
-- The database's clock in microseconds, with an order number in the nanoseconds: publication order.
(extract(epoch FROM clock_timestamp()) * 1000000)::bigint * 1000 + nextval('loki_items_order') %% 1000

-- commit_without_waiting_for_the_disk --
-- This transaction's commit does not wait for its WAL to reach the disk (see items.py for why that is
-- safe for a finish, and not for a claim).
SELECT set_config('synchronous_commit', 'off', true)

-- publish_item --
-- Publish under a name nobody has: ON CONFLICT DO NOTHING never overwrites (no row back: taken).
INSERT INTO loki_items (name, dir, data, mtime_ns) VALUES (%s, %s, %s, {{item_mtime}})
ON CONFLICT (name) DO NOTHING RETURNING 1

-- taken_item_names --
-- Every name taken in a directory with a prefix (to find the next free number in one look).
SELECT name FROM loki_items WHERE dir = %s AND starts_with(name, %s)

-- claim_item --
-- Move an item to its claimed name so that exactly one claimer gets it: the row is locked with SKIP
-- LOCKED, so a second claimer finds nothing (no row back) instead of waiting.
UPDATE loki_items SET name = %s, dir = %s, version = version + 1
 WHERE name = (SELECT name FROM loki_items WHERE name = %s FOR UPDATE SKIP LOCKED) RETURNING 1

-- delete_item --
-- Delete an item by name.
DELETE FROM loki_items WHERE name = %s

-- move_item --
-- Rename an item (into a quarantine or archive directory).
UPDATE loki_items SET name = %s, dir = %s, version = version + 1 WHERE name = %s

-- item_children --
-- The items directly under a directory, and the directories of items below it (bytes NULL).
SELECT substr(name, %(cut)s), length(data), mtime_ns FROM loki_items WHERE dir = %(dir)s
UNION ALL SELECT DISTINCT split_part(substr(dir, %(cut)s), '/', 1), NULL::integer, NULL::bigint
  FROM loki_items WHERE dir > %(low)s AND dir < %(high)s

-- item_entry --
-- What is at a name: an item (its size and time), else a directory of items (NULLs), else nothing.
SELECT length(data), mtime_ns FROM loki_items WHERE name = %(rel)s UNION ALL
(SELECT NULL, NULL FROM loki_items
  WHERE dir = %(rel)s OR (dir > %(low)s AND dir < %(high)s) LIMIT 1) LIMIT 1

-- item_data --
-- An item's bytes.
SELECT data FROM loki_items WHERE name = %s

-- replace_item --
-- Replace an item's content in place (it keeps its name; its time and version move on).
UPDATE loki_items SET data = %s, mtime_ns = {{item_mtime}}, version = version + 1
 WHERE name = %s RETURNING 1

-- delete_item_returning --
-- Delete an item by name; returns a row when it existed.
DELETE FROM loki_items WHERE name = %s RETURNING 1

-- item_version --
-- An item's change token.
SELECT version, mtime_ns FROM loki_items WHERE name = %s


-- ================================================================================================
-- Long-held locks (items.py PgHeldLock): session-level advisory locks, and who holds them
-- ================================================================================================

-- held_lock_backend --
-- The backend holding a long-held lock now (its key: two hashtexts, the second schema-qualified),
-- as pg_locks and pg_stat_activity show it.
SELECT l.pid, a.application_name, a.client_addr::text, a.backend_start FROM pg_locks l
  LEFT JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND l.classid = hashtext(%s)::oid AND l.objid = hashtext(current_schema() || ':' || %s)::oid

-- held_lock_record --
-- What the holder wrote about itself (pid, host, command, since), if that backend wrote it.
SELECT pid, host, command, since FROM loki_lock_holders
 WHERE name = %s AND backend_pid = %s

-- probe_connection --
-- A round trip: is the connection (and the lock it holds) still alive?
SELECT 1

-- try_held_lock --
-- Take a long-held lock if free; never waits.
SELECT pg_try_advisory_lock(hashtext(%s), hashtext(current_schema() || ':' || %s))

-- set_lock_timeout --
-- Bound the wait for a long-held lock (a psycopg.sql template: {} is the literal timeout).
SET lock_timeout = {}

-- wait_held_lock --
-- Take a long-held lock, waiting at most lock_timeout.
SELECT pg_advisory_lock(hashtext(%s), hashtext(current_schema() || ':' || %s))

-- record_held_lock --
-- Say who holds the lock (read by lock_holder; the backend pid ties the record to the lock).
INSERT INTO loki_lock_holders (name, backend_pid, pid, host, command, since)
VALUES (%s, pg_backend_pid(), %s, %s, %s, %s) ON CONFLICT (name) DO UPDATE SET
    backend_pid = EXCLUDED.backend_pid, pid = EXCLUDED.pid, host = EXCLUDED.host,
    command = EXCLUDED.command, since = EXCLUDED.since

-- forget_held_lock --
-- Remove this backend's record of a lock it is releasing.
DELETE FROM loki_lock_holders WHERE name = %s AND backend_pid = pg_backend_pid()

-- release_held_lock --
-- Release a long-held lock now (not only when the session ends).
SELECT pg_advisory_unlock(hashtext(%s), hashtext(current_schema() || ':' || %s))


-- ================================================================================================
-- Logs (logs.py): append-only logs as numbered lines, loki_logs and loki_log_lines
-- ================================================================================================

-- reserve_log_lines --
-- Reserve the numbers and bytes of lines to append, under the row's lock (one appender at a time
-- per log); returns where they start.
INSERT INTO loki_logs AS l (name, last_seq, bytes, torn) VALUES (%(name)s, %(count)s, %(size)s, %(torn)s)
ON CONFLICT (name) DO UPDATE SET last_seq = l.last_seq + %(count)s,
                                 bytes = l.bytes + l.torn::int + %(size)s, torn = %(torn)s
RETURNING last_seq - %(count)s, bytes - %(size)s

-- insert_log_lines --
-- Lines numbered from a start, at their byte offsets, in one statement.
INSERT INTO loki_log_lines (log, seq, "offset", data)
SELECT %s, %s + t.n, t.off, t.d FROM unnest(%s::bigint[], %s::bytea[]) WITH ORDINALITY AS t(off, d, n)

-- restart_log --
-- Empty a log's numbering: the new base is past every position it ever had.
INSERT INTO loki_logs AS l (name, base, last_seq) VALUES (%(name)s, 1, 1)
ON CONFLICT (name) DO UPDATE SET base = l.last_seq + 1, last_seq = l.last_seq + 1, bytes = 0, torn = false
RETURNING base

-- ensure_log --
-- A log's row, made if missing.
INSERT INTO loki_logs (name) VALUES (%s) ON CONFLICT (name) DO NOTHING

-- lock_log --
-- A log's last line number, its row locked until the transaction ends.
SELECT last_seq FROM loki_logs WHERE name = %s FOR UPDATE

-- delete_log_lines_up_to --
-- A rewrite's old lines, once the new ones are in.
DELETE FROM loki_log_lines WHERE log = %s AND seq <= %s

-- set_log_range --
-- A rewritten log's numbering and size.
UPDATE loki_logs SET base = %s, last_seq = %s, bytes = %s, torn = false WHERE name = %s

-- delete_log_lines --
-- Every line of a log.
DELETE FROM loki_log_lines WHERE log = %s

-- log_meta --
-- A log's numbering, size and whether its last line is torn.
SELECT base, last_seq, bytes, torn FROM loki_logs WHERE name = %s

-- logs_in_range --
-- The log names in [low, high), bytewise.
SELECT name FROM loki_logs WHERE name COLLATE "C" >= %s AND name COLLATE "C" < %s

-- log_has_lines --
-- Whether a log holds any line.
SELECT 1 FROM loki_logs WHERE name = %s AND last_seq > base

-- log_line_offset --
-- The byte offset of a line.
SELECT "offset" FROM loki_log_lines WHERE log = %s AND seq = %s

-- log_lines_after --
-- A batch of lines after a position, up to a stop; a line longer than the limit comes without its data.
SELECT seq, length(data), CASE WHEN length(data) <= %(limit)s OR %(whole)s THEN data END
  FROM loki_log_lines WHERE log = %(log)s AND seq > %(here)s AND seq <= %(stop)s
 ORDER BY seq LIMIT %(rows)s

-- log_line --
-- One line by number.
SELECT data FROM loki_log_lines WHERE log = %s AND seq = %s

-- log_tail --
-- The complete lines within the last bytes of a log, oldest first (not a torn last line).
SELECT d.data FROM loki_logs l JOIN loki_log_lines d ON d.log = l.name
 WHERE l.name = %s AND d."offset" >= l.bytes - %s AND d.seq <= l.last_seq - l.torn::int ORDER BY d.seq

-- log_lines_between --
-- The lines overlapping the byte range [start, end).
SELECT seq, "offset", data FROM loki_log_lines WHERE log = %s AND "offset" < %s
   AND "offset" + length(data) + 1 > %s ORDER BY seq

-- lock_log_row --
-- Whether a log exists, its row locked until the transaction ends.
SELECT 1 FROM loki_logs WHERE name = %s FOR UPDATE

-- log_has_a_line --
-- Whether a log has any line stored.
SELECT 1 FROM loki_log_lines WHERE log = %s LIMIT 1

-- log_token --
-- A log's change token: where its numbering starts and ends (appends and rewrites both change it).
SELECT base, last_seq, bytes, torn FROM loki_logs WHERE name = %s AND last_seq > base

-- log_names --
-- Every log, by name (loki validate).
SELECT name FROM loki_logs ORDER BY name


-- ================================================================================================
-- Sessions, lock domains and notifications (session.py, domains.py, listen.py)
-- ================================================================================================

-- database_now --
-- The database's clock: loki.now when the session sets it (tests move time so), else the server's.
SELECT coalesce(nullif(current_setting('loki.now', true), '')::timestamptz, clock_timestamp())

-- lock_domain --
-- Hold a lock domain of the tree until the transaction ends (its key: the schema-qualified name).
SELECT pg_advisory_xact_lock(hashtext(current_schema() || ':' || %s))

-- try_lock_domain --
-- Take a lock domain for the transaction if nobody holds it; never waits.
SELECT pg_try_advisory_xact_lock(hashtext(current_schema() || ':' || %s))

-- domain_key --
-- The advisory key of a lock domain's name, as lock_domain computes it.
hashtext(current_schema() || ':' || %s)::bigint

-- bound_and_try_domain --
-- The usual case in one round trip: bound this transaction's lock waits, and take the domain if free.
SELECT set_config('lock_timeout', %s, true), pg_try_advisory_xact_lock({{domain_key}})

-- domain_holder --
-- The other backend holding a lock domain now: pid, application, client, since (pg_locks, pg_stat_activity).
SELECT a.pid, a.application_name, host(a.client_addr), a.client_hostname,
       to_char(a.xact_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
  FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid,
       (SELECT {{domain_key}} AS k) key
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND l.classid::bigint = ((key.k >> 32) & 4294967295)
   AND l.objid::bigint = (key.k & 4294967295)
   AND a.pid <> pg_backend_pid()

-- notify --
-- Announce a name on its directory's channel; sent when the transaction commits.
SELECT pg_notify(%s, %s)

-- listen --
-- Listen on a channel (a psycopg.sql template: {} is the channel's identifier).
LISTEN {}


-- ================================================================================================
-- Migrations (migrations.py): the schema's version and its upgrade
-- ================================================================================================

-- schema_tables --
-- The tables of the connection's schema (is it loki's, empty, or another application's?).
SELECT table_name FROM information_schema.tables
 WHERE table_schema = current_schema() ORDER BY table_name

-- current_schema --
-- The schema the connection uses.
SELECT current_schema()

-- schema_version --
-- The highest migration applied.
SELECT coalesce(max(version), 0) FROM loki_migrations

-- schema_at_open --
-- Opening a tree in one round trip: the schema the connection uses, whether loki's tables are in it
-- (loki_meta visible to this role, and the loki_migrations the statement reads is that schema's own), and
-- the schema's version. Fails when no loki_migrations is on the search_path: the caller then asks
-- schema_tables, current_schema and schema_version one by one, for the error that says what is there.
SELECT current_schema(),
       coalesce(has_table_privilege(to_regclass(format('%I.loki_meta', current_schema())),
                                    'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER'), false)
         AND 'loki_migrations'::regclass = to_regclass(format('%I.loki_migrations', current_schema())),
       (SELECT coalesce(max(version), 0) FROM loki_migrations)

-- lock_migrations --
-- One upgrader per schema at a time, across machines; released at commit.
SELECT pg_advisory_xact_lock(hashtext('loki:migrate:' || current_schema()))

-- record_migration --
-- A migration was applied.
INSERT INTO loki_migrations (version, name) VALUES (%s, %s)


-- ================================================================================================
-- Error memory's search (memorysearch.py): the memory log indexed in loki_memory_* tables
-- ================================================================================================

-- pattern_columns --
-- What a search hit and a frequent pattern show: p.id, then loki/memory/patterns.py COLUMNS in order.
p.id, p.content_hash, p.tool, p.prefix, p.command, p.error_message, p.error_class, p.exit_code,
p.file_references, p.stack_trace, p.cwd, p.branch, p.session_id, p.first_seen, p.last_seen,
p.occurrences, p.resolutions

-- memory_meta --
-- Where the tables stand in the log.
SELECT key, value FROM loki_memory_meta

-- empty_memory_patterns --
-- A rebuild empties the tables, in this order.
DELETE FROM loki_memory_patterns

-- empty_memory_records --
-- (then the record ids that named a pattern)
DELETE FROM loki_memory_records

-- empty_memory_resolutions --
-- (then the resolutions of patterns)
DELETE FROM loki_memory_resolutions

-- empty_memory_resolution_log --
-- (then the resolution records kept whole)
DELETE FROM loki_memory_resolution_log

-- empty_memory_meta --
-- (last: where the tables stood in the log; the whole rebuild is one transaction)
DELETE FROM loki_memory_meta

-- write_memory_meta --
-- One key of where the tables stand.
INSERT INTO loki_memory_meta (key, value) VALUES (%s, %s) ON CONFLICT (key)
DO UPDATE SET value = EXCLUDED.value

-- upsert_pattern --
-- An error record: a new pattern, or one more occurrence of the pattern with its content hash.
INSERT INTO loki_memory_patterns AS p (content_hash, first_seen, last_seen, occurrences, tool, prefix, command,
    error_message, error_class, exit_code, file_references, refs_text, stack_trace, output, cwd, branch, session_id,
    last_id, last_line)
VALUES (%(content_hash)s, %(first)s, %(seen)s, %(occurrences)s, %(tool)s, %(prefix)s, %(command)s,
    %(error_message)s, %(error_class)s, %(exit_code)s, %(file_references)s, %(refs_text)s, %(stack_trace)s,
    %(output)s, %(cwd)s, %(branch)s, %(session_id)s, %(last_id)s, %(last_line)s)
ON CONFLICT (content_hash) DO UPDATE SET
    occurrences = p.occurrences + EXCLUDED.occurrences,
    first_seen = least(p.first_seen COLLATE "C", EXCLUDED.first_seen),
    last_seen = greatest(p.last_seen COLLATE "C", EXCLUDED.last_seen),
    tool = EXCLUDED.tool, prefix = EXCLUDED.prefix, command = EXCLUDED.command,
    error_message = EXCLUDED.error_message, error_class = EXCLUDED.error_class, exit_code = EXCLUDED.exit_code,
    file_references = EXCLUDED.file_references, refs_text = EXCLUDED.refs_text, stack_trace = EXCLUDED.stack_trace,
    output = EXCLUDED.output, cwd = EXCLUDED.cwd, branch = EXCLUDED.branch, session_id = EXCLUDED.session_id,
    last_id = EXCLUDED.last_id, last_line = EXCLUDED.last_line
RETURNING id

-- record_ids_of_pattern --
-- The record ids (and aliases) that name a pattern.
INSERT INTO loki_memory_records (id, pattern) SELECT unnest(%s::text[]), %s
ON CONFLICT (id) DO NOTHING

-- log_resolution --
-- A resolution record, kept whole in log order.
INSERT INTO loki_memory_resolution_log (id, line, record) VALUES (%s, %s, %s)
ON CONFLICT (id) DO NOTHING

-- patterns_resolved --
-- The patterns a resolution names (by record id), with the resolution text they have so far.
SELECT DISTINCT r.pattern, p.resolution_text FROM loki_memory_records r
  JOIN loki_memory_patterns p ON p.id = r.pattern WHERE r.id = ANY(%s) ORDER BY 1

-- add_resolution --
-- A resolution of a pattern (once per pattern and record id: no row back when it was there).
INSERT INTO loki_memory_resolutions (pattern, id, resolution, confidence, calls_between, same_input,
    timestamp, line) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1

-- count_resolution --
-- A pattern gained a resolution: count it and make its text searchable.
UPDATE loki_memory_patterns SET resolutions = resolutions + 1, resolution_text = %s
 WHERE id = %s

-- word_query --
-- The text search query of some words, as loki_words() splits them.
plainto_tsquery('english', %s)

-- match_patterns --
-- Patterns matching a text search query, by ts_rank (weights of the classes D, C, B, A: output and
-- stack; references and fixes; command; message), with a snippet. /*tsquery*/ is word_query, or
-- several joined with || (any of the words); then the optional filters: an error class (NULL: any),
-- only patterns with a resolution.
SELECT {{pattern_columns}}, ts_rank('{0.25, 0.5, 0.75, 1.0}', p.search, q.query) AS score,
       ts_headline('english', concat_ws(' ', p.error_message, p.command, p.refs_text, p.resolution_text,
                   p.stack_trace, p.output), q.query, %s) AS snippet
  FROM loki_memory_patterns p, (SELECT /*tsquery*/ AS query) q
 WHERE p.search @@ q.query AND (%s::text IS NULL OR p.error_class = %s) AND (NOT %s OR p.resolutions > 0)
 ORDER BY score DESC, p.last_seen DESC, p.id LIMIT %s

-- best_resolution --
-- A pattern's best resolution: most confident, then newest.
SELECT id, resolution, confidence, calls_between, same_input, timestamp FROM loki_memory_resolutions
 WHERE pattern = %s ORDER BY confidence DESC, timestamp DESC, line DESC LIMIT 1

-- memory_totals --
-- Patterns, occurrences, and patterns with a resolution.
SELECT count(*), coalesce(sum(occurrences), 0), count(*) FILTER (WHERE resolutions > 0)
  FROM loki_memory_patterns

-- count_resolutions --
-- Resolution records indexed.
SELECT count(*) FROM loki_memory_resolution_log

-- patterns_by_class --
-- Patterns, occurrences and resolved patterns by error class.
SELECT coalesce(error_class, 'unknown'), count(*), sum(occurrences),
       count(*) FILTER (WHERE resolutions > 0) FROM loki_memory_patterns
 GROUP BY 1 ORDER BY 3 DESC, 1

-- frequent_patterns --
-- The most frequent patterns.
SELECT {{pattern_columns}} FROM loki_memory_patterns p ORDER BY p.occurrences DESC, p.last_seen DESC, p.id
 LIMIT %s

-- resolution_records --
-- Every resolution record, in log order.
SELECT record FROM loki_memory_resolution_log ORDER BY line
