-- Queries of people's verdicts (props.core.scoring.reviews): `props review` and the viewer.

-- unreviewed --
-- The oldest grades under scorer ($1, $2) of issues no person ($3) has judged yet, with the
-- issue as reported and what the grade matched it to; $4 of them.
SELECT e.critique_run_id AS run_id, e.critique_issue_id AS issue_id, e.tp_id,
       e.tp_occurrence, e.fp_id, e.grade, e.ground_truth_hash, i.rationale, i.locations::text,
       r.snapshot
  FROM projections.grading_edges e
  JOIN projections.reported_issues i
    ON i.run_id = e.critique_run_id AND i.issue_id = e.critique_issue_id
  JOIN projections.agent_runs r ON r.run_id = e.critique_run_id
 WHERE e.scorer_name = $1 AND e.scorer_version = $2
   AND NOT EXISTS (SELECT 1 FROM projections.grading_edges h
                    WHERE h.critique_run_id = e.critique_run_id
                      AND h.critique_issue_id = e.critique_issue_id
                      AND h.scorer_name = $3)
 ORDER BY e.graded_at, e.critique_run_id, e.critique_issue_id COLLATE "C"
 LIMIT $4

-- unreviewed_count --
-- Grades of scorer ($1, $2) no person has judged; never counting issue $5 of run $4 (the
-- one just judged: its verdict may not be projected yet).
SELECT count(*)
  FROM projections.grading_edges e
 WHERE e.scorer_name = $1 AND e.scorer_version = $2
   AND ($4::uuid IS NULL OR (e.critique_run_id, e.critique_issue_id) <> ($4, $5::text))
   AND NOT EXISTS (SELECT 1 FROM projections.grading_edges h
                    WHERE h.critique_run_id = e.critique_run_id
                      AND h.critique_issue_id = e.critique_issue_id
                      AND h.scorer_name = $3)

-- active_scorer --
-- The active scorer as the projections have it.
SELECT name, version FROM projections.active_scorer

-- grade_of --
-- One issue's grade under scorer ($3, $4).
SELECT tp_id, tp_occurrence, fp_id, grade, code_hash, ground_truth_hash
  FROM projections.grading_edges
 WHERE critique_run_id = $1 AND critique_issue_id = $2 AND scorer_name = $3
   AND scorer_version = $4

-- issue_and_truth --
-- The reported issue, and the ground truth its run is judged against: the one any grade of
-- it cites, else the snapshot version in force when the run was requested.
SELECT i.issue_id,
       coalesce((SELECT e.ground_truth_hash FROM projections.grading_edges e
                  WHERE e.critique_run_id = i.run_id ORDER BY e.graded_at DESC LIMIT 1),
                (SELECT v.ground_truth_hash FROM projections.snapshots v
                  WHERE v.slug = r.snapshot AND v.synced_at <= r.requested_at
                  ORDER BY v.version DESC LIMIT 1)) AS ground_truth_hash,
       r.snapshot
  FROM projections.reported_issues i JOIN projections.agent_runs r ON r.run_id = i.run_id
 WHERE i.run_id = $1 AND i.issue_id = $2

-- truth_ids --
-- The TP occurrences and decoys of the snapshot version with this ground-truth hash, with
-- their rationales.
SELECT 'tp' AS kind, o.tp_id AS id, o.occurrence, o.locations::text AS locations,
       t.rationale
  FROM projections.tp_occurrences o
  JOIN projections.snapshots v ON v.slug = o.slug AND v.version = o.version
  JOIN projections.true_positives t
    ON t.slug = o.slug AND t.version = o.version AND t.tp_id = o.tp_id
 WHERE v.slug = $1 AND v.ground_truth_hash = $2
UNION ALL
SELECT 'fp', f.fp_id, NULL, f.locations::text, f.rationale
  FROM projections.false_positives f
  JOIN projections.snapshots v ON v.slug = f.slug AND v.version = f.version
 WHERE v.slug = $1 AND v.ground_truth_hash = $2
