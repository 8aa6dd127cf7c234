-- Chance levels of runs graded on the server (props.core.scoring.chance_runs): the issues'
-- line ranges that the chance needs, read without the issues crossing the wire whole.

-- issue_ranges --
-- Per run of $1: its issues' count, and the line ranges ([file, start, end]) of its issues
-- that lie in the files ($2 run, $3 file: pairs) where the run's ground truth has a TP
-- occurrence; the other ranges cannot reach any occurrence.
WITH wanted AS (
    SELECT * FROM unnest($2::uuid[], $3::text[]) AS w(run_id, file)
), ranges AS (
    SELECT i.run_id, l.file, rg.start, rg."end"
      FROM projections.reported_issues i
     CROSS JOIN LATERAL jsonb_to_recordset(i.locations) AS l(file text, ranges jsonb)
     CROSS JOIN LATERAL jsonb_to_recordset(l.ranges) AS rg(start int, "end" int)
     WHERE i.run_id = ANY ($1::uuid[])
       AND EXISTS (SELECT 1 FROM wanted w WHERE w.run_id = i.run_id AND w.file = l.file)
), counts AS (
    SELECT run_id, count(*) AS issues FROM projections.reported_issues
     WHERE run_id = ANY ($1::uuid[]) GROUP BY run_id
), grouped AS (
    SELECT run_id, jsonb_agg(jsonb_build_array(file, start, "end"))::text AS ranges
      FROM ranges GROUP BY run_id
)
SELECT c.run_id, c.issues, coalesce(g.ranges, '[]') AS ranges
  FROM counts c LEFT JOIN grouped g ON g.run_id = c.run_id
