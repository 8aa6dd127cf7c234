-- The grades counted per run, scorer, cited ground truth and TP occurrence matched: the table
-- `grade_occurrences` that the score views read instead of a million grades
-- (props.projections.grading, kept by props.projections.folding after each folded range).
-- Each run's counts are kept in one reading, `both`, or, once a person gave a verdict on one
-- of its issues, in two: `plain` (the scorers' own grades) and `adjudicated` (the verdict
-- standing in for a rule scorer's grade of that issue: `props report --adjudicated`).

-- grouping --
-- The counts of the grades read (spliced in): each group's best grade, the grades, those
-- that found their TP occurrence (grade 1), those with partial credit, matched to a known
-- FP, matched to nothing, and those the scorer could not grade. Keys are never null in the
-- table: '' and 0 stand for "none" (no ground truth cited, not a TP match).
SELECT critique_run_id AS run_id, scorer_name, scorer_version,
       coalesce(ground_truth_hash, '') AS ground_truth_hash, coalesce(tp_id, '') AS tp_id,
       coalesce(tp_occurrence, 0) AS tp_occurrence, max(grade) AS best, count(*) AS graded,
       count(tp_id) FILTER (WHERE grade >= 1) AS finds,
       count(tp_id) FILTER (WHERE grade < 1) AS partial,
       count(fp_id) AS known_fp,
       count(*) FILTER (WHERE tp_id IS NULL AND fp_id IS NULL) AS unmatched,
       count(unscorable) AS unscorable
  FROM {edges}
 GROUP BY critique_run_id, scorer_name, scorer_version, ground_truth_hash, tp_id, tp_occurrence

-- adjudicated --
-- The grades read, with people's verdicts (`human` grades, both spliced in) standing in: a
-- verdict on an issue replaces a rule scorer's grade of it, whole.
SELECT e.critique_run_id, e.critique_issue_id, e.scorer_name, e.scorer_version,
       e.ground_truth_hash,
       CASE WHEN h.critique_run_id IS NULL THEN e.tp_id ELSE h.tp_id END AS tp_id,
       CASE WHEN h.critique_run_id IS NULL THEN e.tp_occurrence ELSE h.tp_occurrence END
           AS tp_occurrence,
       CASE WHEN h.critique_run_id IS NULL THEN e.fp_id ELSE h.fp_id END AS fp_id,
       CASE WHEN h.critique_run_id IS NULL THEN e.grade ELSE h.grade END AS grade,
       CASE WHEN h.critique_run_id IS NULL THEN e.unscorable END AS unscorable,
       h.critique_run_id IS NOT NULL AS adjudicated
  FROM {edges} e
  LEFT JOIN {human} h
    ON e.scorer_name <> 'human'
   AND h.critique_run_id = e.critique_run_id AND h.critique_issue_id = e.critique_issue_id

-- touched --
-- What the events of $5 (types) in the range ($1, $2) to ($3, $4) change: a run's grades by
-- one scorer, or (a person's verdict, no scorer named: its reading covers every scorer) all
-- of the run's.
SELECT DISTINCT (data->>'critique_run_id')::uuid AS run_id,
       data->'scorer'->>'name' AS scorer_name,
       (data->'scorer'->>'version')::int AS scorer_version
  FROM props.events
 WHERE (tx_id, global_position) > ($1::xid8, $2::bigint)
   AND (tx_id, global_position) <= ($3::xid8, $4::bigint)
   AND type = ANY ($5::text[])

-- forget --
-- The rows of the runs $1 by the scorer $2, $3 (null: every scorer).
DELETE FROM {schema}.grade_occurrences
 WHERE run_id = ANY ($1::uuid[])
   AND ($2::text IS NULL OR (scorer_name = $2::text AND scorer_version = $3::int))

-- count --
-- The runs $1 (by the scorer $2, $3, or every scorer) counted again from all their grades,
-- whichever range brought them: the rows a rebuild and the live runner keep are the same by
-- construction. A run with a verdict (a `human` grade) is counted twice: plain, and
-- adjudicated from its grades read again with the verdicts.
WITH plain AS MATERIALIZED (
{plain}
), reviewed AS (  -- (a run's verdicts, whichever scorer's grades are counted again)
    SELECT p.run_id FROM (SELECT DISTINCT run_id FROM plain) p
     WHERE EXISTS (SELECT 1 FROM {schema}.grading_edges h
                    WHERE h.critique_run_id = p.run_id AND h.scorer_name = 'human'
                      AND h.scorer_version = 1)
)
INSERT INTO {schema}.grade_occurrences (reading, run_id, scorer_name, scorer_version,
       ground_truth_hash, tp_id, tp_occurrence, best, graded, finds, partial, known_fp,
       unmatched, unscorable)
SELECT CASE WHEN p.run_id IN (SELECT run_id FROM reviewed) THEN 'plain' ELSE 'both' END, p.*
  FROM plain p
UNION ALL
SELECT 'adjudicated', a.* FROM ({adjudicated}) a
