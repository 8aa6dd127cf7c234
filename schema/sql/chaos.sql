-- What the chaos run (props.tools.checks.chaos) reads to check its invariants: the log and
-- the projections read directly, apart from the read models it tests. It writes nothing.

-- finished_runs --
SELECT count(DISTINCT stream_id) FROM props.events
WHERE type = 'run.finished' AND stream_id = ANY($1::text[])

-- grading_pending --
-- -1 until the projections are built.
SELECT CASE WHEN to_regclass('projections.grading_pending') IS NULL THEN -1
ELSE (SELECT count(*) FROM projections.grading_pending) END

-- event_count --
SELECT count(*) FROM props.events

-- ungraded_issues --
-- Issues of finished runs without a grade of the active scorer.
SELECT count(*) FROM projections.reported_issues i
JOIN projections.agent_runs r USING (run_id)
JOIN projections.active_scorer s ON true
WHERE r.status IS NOT NULL AND r.finished_at IS NOT NULL AND NOT EXISTS (
  SELECT 1 FROM projections.grading_edges e WHERE e.critique_run_id = i.run_id
  AND e.critique_issue_id = i.issue_id AND e.scorer_name = s.name
  AND e.scorer_version = s.version)

-- reported_issues --
SELECT count(*) FROM projections.reported_issues

-- hostile_runs --
SELECT r.stream_id FROM props.events r WHERE r.type = 'run.requested'
AND r.data->>'definition' = 'hostile' AND r.stream_id = ANY($1::text[])

-- roles_left --
-- The agent roles of these runs ($1) that still exist.
SELECT count(*) FROM pg_roles r JOIN props.agent_bindings b ON b.role_name = r.rolname
WHERE b.run_id = ANY($1::uuid[])

-- log_fence --
-- The log's visibility fence: no transaction below it is still running, so the log's rows
-- before it are final (a position drawn is not yet a row: max(global_position) is no such
-- mark, a transaction in flight below it may still commit).
SELECT pg_snapshot_xmin(pg_current_snapshot())

-- log_prefix --
-- The rows before a fence ($1), in the log's read order.
SELECT event_id, type, data::text FROM props.events WHERE tx_id < $1::xid8
ORDER BY tx_id, global_position
