-- Grades computed on the server (props.core.server_grading). {matches} is replaced by a
-- scorer's matches query (overlap.sql), which yields run_id, issue_id, ground_truth_hash,
-- tp_id, tp_occurrence, fp_id for every issue it grades, from its parameters $1 to $6.

-- count_matches --
-- A dry run: the grades are computed, counted and not kept.
WITH m AS ({matches})
SELECT count(*) FROM m

-- append_grades --
-- The grades of each run become one `grades.emitted` event ($11: its schema version) at the
-- head of the run's stream under the scorer ($7: "name@version", $8 name, $9 version, $10
-- code hash), the issues in id order (by code point). Its id derives from (run, scorer,
-- ground truth) exactly as server_grading.run_grades_id derives it: a run already graded so
-- is not appended again. The log's append trigger checks ids and stream versions as for any
-- append.
WITH m AS ({matches}), per_run AS (
    SELECT m.run_id, m.ground_truth_hash, count(*) AS grades,
           jsonb_agg(jsonb_build_object(
               'issue_id', m.issue_id, 'tp_id', m.tp_id, 'tp_occurrence', m.tp_occurrence,
               'fp_id', m.fp_id, 'grade', CASE WHEN m.tp_id IS NULL THEN 0.0 ELSE 1.0 END)
               ORDER BY m.issue_id COLLATE "C") AS list
      FROM m
     GROUP BY m.run_id, m.ground_truth_hash
), g AS (
    SELECT 'grading-' || p.run_id || '-' || $7::text AS stream_id, p.grades,
           encode(set_byte(set_byte(d.h, 6, (get_byte(d.h, 6) & 15) | 128),
                           8, (get_byte(d.h, 8) & 63) | 128), 'hex')::uuid AS event_id,
           jsonb_build_object(
               'critique_run_id', p.run_id, 'grades', p.list,
               'scorer', jsonb_build_object('name', $8::text, 'version', $9::int,
                                            'code_hash', $10::text,
                                            'ground_truth_hash', p.ground_truth_hash)) AS data
      FROM per_run p
     CROSS JOIN LATERAL (
           SELECT substring(sha256(convert_to(
                      'props-grades:' || p.run_id || ':' || $7::text || ':' || p.ground_truth_hash,
                      'UTF8')) FROM 1 FOR 16) AS h) d
), inserted AS (
    INSERT INTO props.events (event_id, stream_id, stream_version, type, schema_version, data)
    SELECT g.event_id, g.stream_id, coalesce(s.version, 0) + 1, 'grades.emitted',
           $11::smallint, g.data
      FROM g
      LEFT JOIN props.streams s ON s.stream_id = g.stream_id
     WHERE NOT EXISTS (SELECT 1 FROM props.event_ids e WHERE e.event_id = g.event_id)
    RETURNING jsonb_array_length(data->'grades') AS grades
)
SELECT (SELECT coalesce(sum(grades), 0) FROM g)::bigint AS graded,
       (SELECT coalesce(sum(grades), 0) FROM inserted)::bigint AS appended
