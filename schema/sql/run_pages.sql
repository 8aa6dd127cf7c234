-- Queries of props.projections.run_pages: runs as the API, the CLI and the viewer list them.

-- page --
-- Newest first; keyset pagination on (requested_at, run_id): $6/$7 the last row shown.
SELECT * FROM projections.agent_runs
 WHERE ($1::text IS NULL OR agent_type = $1) AND ($2::text IS NULL OR status = $2)
   AND ($3::text IS NULL OR model = $3) AND ($4::text IS NULL OR definition = $4)
   AND ($5::text IS NULL OR snapshot = $5)
   AND ($6::timestamptz IS NULL OR (requested_at, run_id) < ($6, $7::uuid))
 ORDER BY requested_at DESC, run_id DESC LIMIT $8

-- row --
SELECT * FROM projections.agent_runs WHERE run_id = $1
