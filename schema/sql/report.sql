-- Queries of `props report` (reads projections only).

-- model_scores --
SELECT * FROM {schema}.model_scores
 WHERE ($1::text IS NULL OR scorer_name = $1) AND ($2::int IS NULL OR scorer_version = $2)
 ORDER BY model, definition, scorer_name, scorer_version

-- example_points --
-- The scores' sums per example (snapshot and file set), each example's runs pooled: what
-- the cluster bootstrap resamples. Same selection as model_scores.
SELECT model, definition, scorer_name, scorer_version, snapshot, files_hash,
       count(*) AS runs, sum(recalled)::float8 AS recalled, sum(expected)::float8 AS expected,
       sum(finds)::float8 AS finds, sum(graded)::float8 AS graded
  FROM {schema}.run_scores s
 WHERE ($1::text IS NULL OR scorer_name = $1) AND ($2::int IS NULL OR scorer_version = $2)
   AND (current_setting('props.exclude_imported', true) IS DISTINCT FROM 'on'
        OR NOT EXISTS (SELECT 1 FROM {schema}.imported_runs i WHERE i.run_id = s.run_id))
 GROUP BY model, definition, scorer_name, scorer_version, snapshot, files_hash
 ORDER BY model, definition, scorer_name, scorer_version, snapshot, files_hash

-- evidence_gaps --
-- Every critic run in exactly one state under the report's scorer ($1 name, $2 version or
-- any; with no name, the active scorer), so that the counts add up to critic_runs: excluded
-- (`run.excluded`), no finish event yet, finished but not completed, completed with no issue reported (nothing
-- to grade), an issue the scorer has not graded, graded against a ground truth that is not
-- recorded (unscorable), or scored. Runs with no issue reported are in the figures (they
-- found nothing) and counted apart here.
WITH chosen AS (
    SELECT coalesce($1::text, a.name) AS name,
           CASE WHEN $1::text IS NULL THEN a.version ELSE $2::int END AS version
      FROM (SELECT 1) one LEFT JOIN {schema}.active_scorer a ON true
), states AS (
    SELECT CASE
        WHEN EXISTS (SELECT 1 FROM {schema}.excluded_runs x WHERE x.run_id = r.run_id)
             THEN 'excluded'
        WHEN r.status IN ('requested', 'running') THEN 'unfinished'
        WHEN r.status <> 'completed' THEN 'not_completed'
        WHEN NOT EXISTS (SELECT 1 FROM {schema}.reported_issues i
                          WHERE i.run_id = r.run_id) THEN 'no_issues'
        WHEN EXISTS (SELECT 1 FROM {schema}.reported_issues i
                      WHERE i.run_id = r.run_id AND NOT EXISTS (
                            SELECT 1 FROM {schema}.grading_edges e
                             WHERE e.critique_run_id = i.run_id
                               AND e.critique_issue_id = i.issue_id
                               AND e.scorer_name = c.name
                               AND (c.version IS NULL OR e.scorer_version = c.version)))
             THEN 'ungraded'
        WHEN EXISTS (SELECT 1 FROM {schema}.grading_edges e
                      WHERE e.critique_run_id = r.run_id AND e.scorer_name = c.name
                        AND (c.version IS NULL OR e.scorer_version = c.version)
                        AND NOT EXISTS (SELECT 1 FROM {schema}.snapshots sv
                                         WHERE sv.slug = r.snapshot
                                           AND sv.ground_truth_hash = e.ground_truth_hash))
             THEN 'unscorable'
        ELSE 'scored' END AS state
      FROM {schema}.agent_runs r CROSS JOIN chosen c
     WHERE r.agent_type = 'critic'
)
SELECT (SELECT CASE WHEN name IS NULL THEN NULL
                    ELSE name || coalesce('@' || version, '') END FROM chosen) AS scorer,
       count(*) AS critic_runs,
       count(*) FILTER (WHERE state = 'excluded') AS excluded,
       count(*) FILTER (WHERE state = 'unfinished') AS unfinished,
       count(*) FILTER (WHERE state = 'not_completed') AS not_completed,
       count(*) FILTER (WHERE state = 'no_issues') AS no_issues,
       count(*) FILTER (WHERE state = 'ungraded') AS ungraded,
       count(*) FILTER (WHERE state = 'unscorable') AS unscorable,
       count(*) FILTER (WHERE state = 'scored') AS scored
  FROM states

-- known_scorers --
SELECT name, version FROM {schema}.scorers ORDER BY name, version

-- imported_runs --
-- The scored runs that came in from export files, by the key that signed the file.
SELECT i.signer, count(DISTINCT s.run_id) AS runs
  FROM {schema}.run_scores s JOIN {schema}.imported_runs i ON i.run_id = s.run_id
 WHERE ($1::text IS NULL OR s.scorer_name = $1) AND ($2::int IS NULL OR s.scorer_version = $2)
 GROUP BY i.signer ORDER BY i.signer

-- adjudicated_issues --
-- Grades a person's verdict replaced (none unless `props.adjudicated` is on).
SELECT count(*) FROM {schema}.scored_edges
 WHERE adjudicated AND ($1::text IS NULL OR scorer_name = $1)
   AND ($2::int IS NULL OR scorer_version = $2)

-- live_points --
-- Where the live projections ($1: their checkpoints' names) stand: one row when they all
-- stand at one point, read in the report's own snapshot.
SELECT DISTINCT tx_id, position FROM props.checkpoints WHERE name = ANY ($1::text[])
