-- Queries of the web viewer (props.tools.http.viewer) that no other reader shares.

-- choices --
-- What the filters offer: every snapshot, file set name and registered scorer (small
-- tables), the active scorer, and every evaluation recorded.
SELECT coalesce((SELECT array_agg(DISTINCT slug ORDER BY slug) FROM projections.snapshots),
                '{}') AS snapshots,
       coalesce((SELECT array_agg(DISTINCT name ORDER BY name) FROM projections.file_sets),
                '{}') AS file_sets,
       coalesce((SELECT array_agg(name || '@' || version ORDER BY name, version)
                   FROM projections.scorers), '{}') AS scorers,
       (SELECT name || '@' || version FROM projections.active_scorer) AS active,
       coalesce((SELECT array_agg(DISTINCT data->>'name' ORDER BY data->>'name')
                   FROM props.events
                  WHERE category = 'evaluation' AND type = 'evaluation.started'),
                '{}') AS evaluations

-- per_snapshot --
-- Pooled recall and precision per model, definition and snapshot under scorer ($1, $2): the
-- figures' definitions (props.projections.figures), one snapshot at a time; $3 only these
-- runs (an evaluation's), when given.
SELECT model, definition, snapshot, count(*) AS runs,
       sum(recalled)::float8 / nullif(sum(expected), 0) AS recall,
       sum(finds)::float8 / nullif(sum(graded), 0) AS precision
  FROM projections.run_scores
 WHERE scorer_name = $1 AND scorer_version = $2 AND ($3::uuid[] IS NULL OR run_id = ANY ($3))
 GROUP BY model, definition, snapshot
 ORDER BY snapshot, model, definition

-- by_day --
-- The same per model and definition, by the day the runs were requested ($3 as above).
SELECT s.model || ' / ' || s.definition AS "group",
       to_char(date_trunc('day', r.requested_at AT TIME ZONE 'UTC'), 'YYYY-MM-DD') AS day,
       count(*) AS runs,
       sum(s.recalled)::float8 / nullif(sum(s.expected), 0) AS recall,
       sum(s.finds)::float8 / nullif(sum(s.graded), 0) AS precision
  FROM projections.run_scores s JOIN projections.agent_runs r ON r.run_id = s.run_id
 WHERE s.scorer_name = $1 AND s.scorer_version = $2
   AND ($3::uuid[] IS NULL OR s.run_id = ANY ($3))
 GROUP BY 1, 2
 ORDER BY 2, 1
