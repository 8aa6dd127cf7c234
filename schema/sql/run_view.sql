-- Queries of props.projections.run_view: one run's issues and grades, as the viewer shows them.

-- issues_page --
-- A page of the run's issues, by file and first line, each with every scorer's grade of it
-- (a JSON array; the grading_edges key leads with the issue, so each is an index lookup).
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
 ORDER BY i.locations -> 0 ->> 'file' COLLATE "C",
          (i.locations -> 0 -> 'ranges' -> 0 ->> 'start')::int NULLS FIRST,
          i.issue_id COLLATE "C"
 LIMIT $2 OFFSET $3

-- issues_count --
SELECT count(*) FROM projections.reported_issues WHERE run_id = $1

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

