-- Queries of re-scoring and scorer comparison (props.core.rescoring); they read projections.

-- select_runs --
-- `imported`: the run's stream began in an import (props.importing, migration 0011).
SELECT r.run_id, r.status, r.snapshot, r.files_hash, r.requested_at, r.model, r.definition,
       EXISTS (SELECT 1 FROM props.events e JOIN props.importing i ON i.tx_id = e.tx_id
                WHERE e.stream_id = 'run-' || r.run_id AND e.stream_version = 1) AS imported
  FROM projections.agent_runs r
 WHERE agent_type = 'critic'
   AND ($1::uuid[] IS NULL OR run_id = ANY ($1::uuid[]))
   AND ($2::timestamptz IS NULL OR requested_at >= $2)
   AND ($3::timestamptz IS NULL OR requested_at < $3)
   AND ($4::text IS NULL OR model = $4)
   AND ($5::text IS NULL OR definition = $5)
   AND ($6::text IS NULL OR snapshot = $6)
 ORDER BY requested_at, run_id

-- issues_of --
SELECT run_id, issue_id, locations, rationale FROM projections.reported_issues
 WHERE run_id = ANY ($1::uuid[])

-- edges_of --
SELECT critique_run_id, critique_issue_id, scorer_name, scorer_version, tp_id, tp_occurrence,
       fp_id, unscorable
  FROM projections.grading_edges
 WHERE critique_run_id = ANY ($1::uuid[]) AND scorer_name = ANY ($2::text[])

-- scores_of --
SELECT run_id, scorer_name, scorer_version, recall, precision, model, definition, snapshot,
       files_hash, recalled, expected, finds, graded
  FROM projections.run_scores
 WHERE run_id = ANY ($1::uuid[]) AND scorer_name = ANY ($2::text[])

-- group_scores --
-- Per model and definition over the scorable runs: recall and precision under A and B, and
-- B minus A (the intervals are the bootstrap's, in props.core.scoring.comparison).
WITH s AS (
    SELECT * FROM projections.run_scores WHERE run_id = ANY ($1::uuid[])
), a AS (
    SELECT model, definition, count(*) AS runs, sum(recalled)::bigint AS k,
           sum(expected)::bigint AS n, sum(finds)::bigint AS pk, sum(graded)::bigint AS pn
      FROM s WHERE scorer_name = $2 AND scorer_version = $3 GROUP BY model, definition
), b AS (
    SELECT model, definition, count(*) AS runs, sum(recalled)::bigint AS k,
           sum(expected)::bigint AS n, sum(finds)::bigint AS pk, sum(graded)::bigint AS pn
      FROM s WHERE scorer_name = $4 AND scorer_version = $5 GROUP BY model, definition
)
SELECT model, definition, a.runs AS runs_a, b.runs AS runs_b,
       a.k::float8 / nullif(a.n, 0) AS recall_a,
       b.k::float8 / nullif(b.n, 0) AS recall_b,
       b.k::float8 / nullif(b.n, 0) - a.k::float8 / nullif(a.n, 0) AS recall_delta,
       a.pk::float8 / nullif(a.pn, 0) AS precision_a,
       b.pk::float8 / nullif(b.pn, 0) AS precision_b,
       b.pk::float8 / nullif(b.pn, 0) - a.pk::float8 / nullif(a.pn, 0) AS precision_delta
  FROM a FULL JOIN b USING (model, definition)
 ORDER BY model, definition
