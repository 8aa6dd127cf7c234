-- A scorer's verification (props.core.scoring.verification): its cohorts, read from the log.

-- finished_by --
-- The critic runs finished at or before the log position $1: an as-of cohort.
SELECT DISTINCT props.uuid_or_null(substr(e.stream_id, 5)) AS run_id
  FROM props.events e
 WHERE e.category = 'run' AND e.type = 'run.finished' AND e.global_position <= $1
 ORDER BY 1

-- log_head --
-- The log's last position (an as-of cohort's default point).
SELECT coalesce(max(global_position), 0) FROM props.events

-- evaluations_after --
-- Evaluations of this database's own (not imported) started after the log position $1: each
-- a cohort newer than a verification recorded at $1.
SELECT DISTINCT e.data->>'name' AS name FROM props.events e
 WHERE e.category = 'evaluation' AND e.type = 'evaluation.started'
   AND e.global_position > $1 AND NOT (e.metadata ? 'origin')
 ORDER BY 1

-- latest_evaluation --
-- The newest evaluation of this database's own: the default cohort.
SELECT e.data->>'name' FROM props.events e
 WHERE e.category = 'evaluation' AND e.type = 'evaluation.started'
   AND NOT (e.metadata ? 'origin')
 ORDER BY e.global_position DESC LIMIT 1

-- verified_streams --
-- The scorers' streams that hold a verification's outcome (props.core.scoring.divergence).
SELECT DISTINCT stream_id FROM props.events
 WHERE category = 'scorer' AND type = 'scorer.verified' ORDER BY 1
