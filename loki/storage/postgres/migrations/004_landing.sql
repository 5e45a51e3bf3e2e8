-- The `landing` state (docs/verify.md, "Landing"): a verified task waits there until its commit is
-- reachable from the branch it must land on. The state column's check gains it; nothing else changes
-- (a landing task is hot, never archived).
ALTER TABLE loki_tasks DROP CONSTRAINT loki_tasks_state_check;
ALTER TABLE loki_tasks ADD CONSTRAINT loki_tasks_state_check
    CHECK (state IN ('pending', 'in-progress', 'landing', 'blocked', 'completed', 'failed', 'cancelled',
                     'dead-letter', 'abandoned'));
