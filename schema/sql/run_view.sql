-- Queries of props.projections.run_view: one run's issues and grades, as the viewer shows them.

-- issues_page --
-- A page of the run's issues, by file and first line, each with every scorer's grade of it
-- (a JSON array; the grading_edges key leads with the issue, so each is an index lookup);
-- with $4, only those whose grade under scorer $5@$6 is of that kind (see `kinds`).
SELECT i.issue_id, i.rationale, i.severity, i.locations::text AS locations,
       coalesce((SELECT jsonb_agg(jsonb_build_object(
                    'scorer', e.scorer_name || '@' || e.scorer_version, 'tp_id', e.tp_id,
                    'tp_occurrence', e.tp_occurrence, 'fp_id', e.fp_id, 'grade', e.grade,
                    'unscorable', e.unscorable)
                  ORDER BY e.scorer_name, e.scorer_version)
                   FROM projections.grading_edges e
                  WHERE e.critique_run_id = i.run_id AND e.critique_issue_id = i.issue_id),
                '[]'::jsonb)::text AS grades
  FROM projections.reported_issues i
 WHERE i.run_id = $1
   AND ($4::text IS NULL OR $4 = coalesce((
        SELECT CASE WHEN e.unscorable IS NOT NULL THEN 'unscorable'
                    WHEN e.tp_id IS NOT NULL AND e.grade >= $7 THEN 'find'
                    WHEN e.tp_id IS NOT NULL THEN 'partial'
                    WHEN e.fp_id IS NOT NULL THEN 'decoy' ELSE 'none' END
          FROM projections.grading_edges e
         WHERE e.critique_run_id = i.run_id AND e.critique_issue_id = i.issue_id
           AND e.scorer_name = $5 AND e.scorer_version = $6), 'ungraded'))
 ORDER BY i.locations -> 0 ->> 'file' COLLATE "C",
          (i.locations -> 0 -> 'ranges' -> 0 ->> 'start')::int NULLS FIRST,
          i.issue_id COLLATE "C"
 LIMIT $2 OFFSET $3

-- kinds --
-- How many of the run's issues each kind of grade under scorer $2@$3 has ($4: a find's
-- grade): a find (a TP at full credit), a partial match, a known decoy, none, unscorable,
-- or no grade yet (ungraded). The viewer's run_view._match says the same of one edge.
SELECT coalesce(k.kind, 'ungraded') AS kind, count(*) AS issues
  FROM projections.reported_issues i
  LEFT JOIN LATERAL (
       SELECT CASE WHEN e.unscorable IS NOT NULL THEN 'unscorable'
                   WHEN e.tp_id IS NOT NULL AND e.grade >= $4 THEN 'find'
                   WHEN e.tp_id IS NOT NULL THEN 'partial'
                   WHEN e.fp_id IS NOT NULL THEN 'decoy' ELSE 'none' END AS kind
         FROM projections.grading_edges e
        WHERE e.critique_run_id = i.run_id AND e.critique_issue_id = i.issue_id
          AND e.scorer_name = $2 AND e.scorer_version = $3) k ON true
 WHERE i.run_id = $1
 GROUP BY 1

-- finds --
-- Per scorer that graded the run: the TP occurrences ("T1#2") its issues found ($2: a find's
-- grade).
SELECT scorer_name, scorer_version,
       array_agg(DISTINCT tp_id || '#' || tp_occurrence)
         FILTER (WHERE tp_id IS NOT NULL AND grade >= $2) AS found
  FROM projections.grading_edges
 WHERE critique_run_id = $1
 GROUP BY scorer_name, scorer_version
 ORDER BY scorer_name, scorer_version

