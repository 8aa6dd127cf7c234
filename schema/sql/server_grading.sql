-- Grades computed on the server (props.core.server_grading). {matches} is replaced by a
-- scorer's matches query (overlap.sql), which yields run_id, issue_id, ground_truth_hash,
-- tp_id, tp_occurrence, fp_id for every issue it grades, from its parameters $1 to $6.

-- count_matches --
-- A dry run: the grades are computed, counted and not kept.
WITH m AS ({matches})
SELECT count(*) FROM m

-- append_grades --
-- Each grade becomes a `grade.emitted` event ($11: its schema version) of the run's stream
-- under the scorer ($7: "name@version", $8 name, $9 version, $10 code hash), in issue-id
-- order (by code point), after the stream's head. Its id derives from (run, issue, scorer,
-- ground truth) exactly as server_grading.grade_id derives it: a grade already stored is
-- not appended again. The log's append trigger checks ids and stream versions as for any
-- append.
WITH m AS ({matches}), g AS (
    SELECT 'grading-' || m.run_id || '-' || $7::text AS stream_id, m.issue_id,
           encode(set_byte(set_byte(d.h, 6, (get_byte(d.h, 6) & 15) | 128),
                           8, (get_byte(d.h, 8) & 63) | 128), 'hex')::uuid AS event_id,
           jsonb_build_object(
               'critique_run_id', m.run_id, 'critique_issue_id', m.issue_id,
               'tp_id', m.tp_id, 'tp_occurrence', m.tp_occurrence, 'fp_id', m.fp_id,
               'grade', CASE WHEN m.tp_id IS NULL THEN 0.0 ELSE 1.0 END,
               'scorer', jsonb_build_object('name', $8::text, 'version', $9::int,
                                            'code_hash', $10::text,
                                            'ground_truth_hash', m.ground_truth_hash)) AS data
      FROM m
     CROSS JOIN LATERAL (
           SELECT substring(sha256(convert_to(
                      'props-grade:' || m.run_id || ':' || m.issue_id || ':' || $7::text
                      || ':' || m.ground_truth_hash, 'UTF8')) FROM 1 FOR 16) AS h) d
), new AS (
    SELECT g.* FROM g
     WHERE NOT EXISTS (SELECT 1 FROM props.event_ids e WHERE e.event_id = g.event_id)
), inserted AS (
    INSERT INTO props.events (event_id, stream_id, stream_version, type, schema_version, data)
    SELECT n.event_id, n.stream_id,
           coalesce(s.version, 0)
           + row_number() OVER (PARTITION BY n.stream_id ORDER BY n.issue_id COLLATE "C"),
           'grade.emitted', $11::smallint, n.data
      FROM new n
      LEFT JOIN props.streams s ON s.stream_id = n.stream_id
    RETURNING 1
)
SELECT (SELECT count(*) FROM g) AS graded, (SELECT count(*) FROM inserted) AS appended
