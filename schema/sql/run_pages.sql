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

-- table --
-- The viewer's runs table: the filters of `page`, a file set by name ($6), the runs scorer
-- ($7, $8) graded, requested in [$9, $10), only the runs $13 (an evaluation's) when given;
-- ordered by one of run_pages.SORTS, $11 from $12.
SELECT * FROM projections.agent_runs r
 WHERE ($1::text IS NULL OR agent_type = $1) AND ($2::text IS NULL OR status = $2)
   AND ($3::text IS NULL OR model = $3) AND ($4::text IS NULL OR definition = $4)
   AND ($5::text IS NULL OR snapshot = $5)
   AND ($6::text IS NULL OR files_hash IN (SELECT f.files_hash FROM projections.file_sets f
                                            WHERE f.name = $6))
   AND ($7::text IS NULL OR EXISTS (SELECT 1 FROM projections.grading_edges e
                                     WHERE e.critique_run_id = r.run_id
                                       AND e.scorer_name = $7 AND e.scorer_version = $8))
   AND ($9::timestamptz IS NULL OR requested_at >= $9)
   AND ($10::timestamptz IS NULL OR requested_at < $10)
   AND ($13::uuid[] IS NULL OR run_id = ANY ($13))
 ORDER BY {order} LIMIT $11 OFFSET $12

-- scores_of --
SELECT run_id, recall, recall_graded, precision, expected, recalled, graded, finds, chance,
       chance_graded_recall, chance_recalled
  FROM projections.run_scores
 WHERE run_id = ANY($1::uuid[]) AND scorer_name = $2 AND scorer_version = $3

-- file_set_names --
-- The name each of these file sets has (in its snapshot's latest version naming it).
SELECT DISTINCT ON (files_hash) files_hash, name FROM projections.file_sets
 WHERE files_hash = ANY ($1::text[]) ORDER BY files_hash, version DESC

-- grading_streams --
-- The streams of a run's grades, one per scorer that graded it (streams.grading).
SELECT stream_id FROM props.streams WHERE stream_id LIKE $1 ORDER BY stream_id

-- issue_counts --
SELECT run_id, count(*) AS issues FROM projections.reported_issues
 WHERE run_id = ANY($1::uuid[]) GROUP BY run_id

-- parked_counts --
-- How many events of each of these runs (their own, their grades', their judges') some
-- consumer skips now.
SELECT run_id, count(*) AS parked FROM props.parked_now
 WHERE run_id = ANY($1::uuid[]) GROUP BY run_id

-- parked_overall --
-- Every park now: how many events, of how many runs, by how many consumers.
SELECT count(*) AS events, count(DISTINCT run_id) AS runs, count(DISTINCT consumer) AS consumers
  FROM props.parked_now

-- parked_of_run --
SELECT consumer, global_position, stream_id, type, error_type, error_message, parked_at
  FROM props.parked_now WHERE run_id = $1 ORDER BY global_position, consumer
