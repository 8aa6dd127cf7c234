-- The advisory locks that say who is the one active instance (props.core.log.leadership, and
-- the migrator's lock). Each key is named in leadership.py. The blocks carry no comment of
-- their own: a lock's holder is found in pg_stat_activity by its exact statement.

-- try_lock --
SELECT pg_try_advisory_lock($1)

-- lock --
SELECT pg_advisory_lock($1)

-- unlock --
SELECT pg_advisory_unlock($1)

-- try_xact_lock --
SELECT pg_try_advisory_xact_lock($1)

-- xact_lock --
SELECT pg_advisory_xact_lock($1)
