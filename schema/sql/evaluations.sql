-- An evaluation's scores (props.tools.command_line.handlers.evaluations), read from the analysts' tables.

-- case_scores --
-- The scored runs $1 under the scorer $2@$3: what recall, precision and recall's chance
-- level sum (chance_recalled null: the run's chance level is not recorded), as numeric: the
-- report sums it so in SQL, and Python sums the same numbers exactly (one figure, one value).
SELECT run_id, snapshot, files_hash, recalled, expected, finds, graded,
       chance_recalled::numeric AS chance_recalled
  FROM projections.run_scores
 WHERE run_id = ANY ($1::uuid[]) AND scorer_name = $2 AND scorer_version = $3

-- case_confirmations --
-- The scored runs $1 under the scorer $2@$3: of their located finds, those a judge or a
-- person confirmed and rejected (read only when one of them has graded something).
SELECT run_id, confirmed, rejected FROM projections.run_confirmations
 WHERE run_id = ANY ($1::uuid[]) AND scorer_name = $2 AND scorer_version = $3

-- counted_runs --
-- The runs that stand for the evaluation $1's cases: the view evaluation_runs of the
-- projections in the schema {schema} (the live one, or a report's as of a point).
SELECT run_id FROM {schema}.evaluation_runs WHERE evaluation = $1 AND counted

-- names --
-- Every evaluation recorded, by name.
SELECT DISTINCT data->>'name' FROM props.events WHERE type = 'evaluation.started' ORDER BY 1

-- runs --
-- Every run an evaluation requested ($1 its name), each version and attempt: requests of
-- the same provenance as the evaluation's start (both recorded here, or both brought by an
-- import of one signer). A request's metadata is the requester's word: an imported run that
-- claims `evaluation: demo` never joins this database's demo (its cohort, export, pages),
-- nor does a request the API or the command line made (its `requested_by` is not the
-- evaluation's `eval:NAME@VERSION`). As the projections' evaluation_runs view has it.
SELECT (r.data->>'run_id')::uuid FROM props.events r
 WHERE r.category = 'run' AND r.type = 'run.requested' AND r.metadata->>'evaluation' = $1
   AND r.data->>'requested_by' = 'eval:' || $1 || '@' || (r.metadata->>'evaluation_version')
   AND r.metadata->'origin'->>'signer' IS NOT DISTINCT FROM (
       SELECT s.metadata->'origin'->>'signer' FROM props.events s
        WHERE s.stream_id = 'evaluation-' || $1 AND s.stream_version = 1)

-- snapshots --
-- The snapshots its runs ($1) were requested on.
SELECT DISTINCT data->'example'->>'snapshot' FROM props.events
 WHERE category = 'run' AND type = 'run.requested' AND stream_id = ANY ($1::text[])
