-- Placeholder on the pg-state branch only: the pg-tasks branch owns this migration (documents and tasks).
-- Migrations are numbered without gaps (migrations.py), so 003_state.sql needs a 002 to apply here.
SELECT 1;
