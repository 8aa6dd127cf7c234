-- Located candidates as cases for a judge (props.core.scoring.located).

-- candidates --
-- The finds (grade 1, a TP) of the location rule $2@$3 in the runs $1 (its candidates: a
-- baseline's style issue never is one), each with the ground truth it was graded against,
-- the issue's locations and rationale, and a person's verdict on it if any (`reviewed`;
-- `human_*`: what the person says the issue is).
SELECT e.critique_run_id AS run_id, e.critique_issue_id AS issue_id, e.tp_id,
       e.tp_occurrence, e.ground_truth_hash, i.locations::text AS locations,
       coalesce(i.rationale, '') AS rationale, r.snapshot,
       h.critique_run_id IS NOT NULL AS reviewed, h.tp_id AS human_tp,
       h.tp_occurrence AS human_occurrence, h.fp_id AS human_fp
  FROM projections.grading_edges e
  JOIN projections.reported_issues i
    ON i.run_id = e.critique_run_id AND i.issue_id = e.critique_issue_id
  JOIN projections.agent_runs r ON r.run_id = e.critique_run_id
  LEFT JOIN projections.grading_edges h
    ON h.critique_run_id = e.critique_run_id AND h.critique_issue_id = e.critique_issue_id
   AND h.scorer_name = 'human' AND h.scorer_version = 1
 WHERE e.critique_run_id = ANY ($1::uuid[]) AND e.scorer_name = $2::text
   AND e.scorer_version = $3::int AND e.grade >= 1 AND e.tp_id IS NOT NULL
 ORDER BY e.critique_run_id, e.critique_issue_id COLLATE "C"
