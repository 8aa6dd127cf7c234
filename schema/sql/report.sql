-- Queries of `props report` (reads projections only).

-- model_scores --
SELECT * FROM projections.model_scores
 WHERE ($1::text IS NULL OR scorer_name = $1) AND ($2::int IS NULL OR scorer_version = $2)
 ORDER BY model, definition, scorer_name, scorer_version

-- evidence_gaps --
-- What the scores leave out, counted so that a reader sees it.
SELECT count(*) FILTER (WHERE r.agent_type = 'critic') AS critic_runs,
       count(*) FILTER (WHERE r.agent_type = 'critic'
                          AND r.status IN ('requested', 'running')) AS unfinished,
       count(*) FILTER (WHERE r.agent_type = 'critic'
                          AND r.status IN ('failed', 'timed_out', 'budget_exceeded',
                                           'cancelled')) AS not_completed,
       (SELECT count(DISTINCT p.run_id) FROM projections.grading_pending p
          JOIN projections.agent_runs a ON a.run_id = p.run_id
         WHERE a.status = 'completed') AS ungraded,
       (SELECT count(*) FROM projections.run_scores s
         WHERE s.snapshot_version IS NULL) AS unscorable
  FROM projections.agent_runs r

-- imported_runs --
-- The scored runs that came in from export files, by the key that signed the file.
SELECT i.signer, count(DISTINCT s.run_id) AS runs
  FROM projections.run_scores s JOIN projections.imported_runs i ON i.run_id = s.run_id
 WHERE ($1::text IS NULL OR s.scorer_name = $1) AND ($2::int IS NULL OR s.scorer_version = $2)
 GROUP BY i.signer ORDER BY i.signer
