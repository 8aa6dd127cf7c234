-- Grades computed on the server (props.core.server_grading). {scoring} is replaced by a
-- scorer's common table expressions (overlap.sql, from its parameters $1 to $7): `matches`
-- (run_id, issue_id, ground_truth_hash, tp_id, tp_occurrence, fp_id for every issue it
-- grades) and `problems` (run_id, issue_id, problem: the runs it cannot grade). Both
-- statements return the problems as a JSON array of [run_id, issue_id, problem].

-- count_matches --
-- A dry run: the grades are computed, counted and not kept.
WITH {scoring}
SELECT (SELECT count(*) FROM matches) AS graded, 0::bigint AS appended,
       (SELECT jsonb_agg(jsonb_build_array(run_id, issue_id, problem)) FROM problems)
           AS problems

-- append_grades --
-- The grades of each run become one `grades.emitted` event ($12: its schema version) at the
-- head of the run's stream under the scorer ($8: "name@version", $9 name, $10 version, $11
-- code hash), the issues in id order (by code point). Its id derives from (run, scorer,
-- ground truth) exactly as server_grading.run_grades_id derives it: a run already graded so
-- is not appended again. The log appends them (props.append_at_heads: no SQL here writes its
-- tables), its append trigger checking ids and stream versions as for any append. It
-- returns too what the runs' chance levels need (props.core.scoring.chance_runs),
-- from the ranges the statement parsed anyway, as arrays (no JSON to build or parse): each
-- graded run's issue count (`counted_runs`, `counted_issues`) and its issues' ranges in files
-- where its ground truth has a TP occurrence (`chance_runs`, `chance_files`, `chance_starts`,
-- `chance_ends`, one element a range; the ranges in other files reach no occurrence).
WITH {scoring}, per_run AS (
    SELECT m.run_id, m.ground_truth_hash, count(*) AS grades,
           -- written as the text of a JSON array and parsed once (jsonb_agg of
           -- jsonb_build_object cost twice as much); a field that is null is left out (its
           -- default): most issues match nothing
           ('[' || string_agg(
               '{"issue_id":' || to_json(m.issue_id)::text ||
               CASE WHEN m.tp_id IS NOT NULL
                    THEN ',"tp_id":' || to_json(m.tp_id)::text || ',"tp_occurrence":'
                         || m.tp_occurrence || ',"grade":1.0}'
                    WHEN m.fp_id IS NOT NULL
                    THEN ',"fp_id":' || to_json(m.fp_id)::text || ',"grade":0.0}'
                    ELSE ',"grade":0.0}' END,
               ',' ORDER BY m.issue_id COLLATE "C") || ']')::jsonb AS list
      FROM matches m
     GROUP BY m.run_id, m.ground_truth_hash
), g AS (
    SELECT 'grading-' || p.run_id || '-' || $8::text AS stream_id, p.grades,
           encode(set_byte(set_byte(d.h, 6, (get_byte(d.h, 6) & 15) | 128),
                           8, (get_byte(d.h, 8) & 63) | 128), 'hex')::uuid AS event_id,
           jsonb_build_object(
               'critique_run_id', p.run_id, 'grades', p.list,
               'scorer', jsonb_build_object('name', $9::text, 'version', $10::int,
                                            'code_hash', $11::text,
                                            'ground_truth_hash', p.ground_truth_hash)) AS data
      FROM per_run p
     CROSS JOIN LATERAL (
           SELECT substring(sha256(convert_to(
                      'props-grades:' || p.run_id || ':' || $8::text || ':' || p.ground_truth_hash,
                      'UTF8')) FROM 1 FOR 16) AS h) d
), chance AS (
    SELECT array_agg(ir.run_id) AS runs, array_agg(ir.file) AS files,
           array_agg(ir.first) AS starts, array_agg(ir.last) AS ends
      FROM issue_ranges ir
      JOIN (SELECT DISTINCT slug, version, file FROM truth WHERE kind = 'tp') f
        ON f.slug = ir.slug AND f.version = ir.version AND f.file = ir.file
     WHERE ir.run_id NOT IN (SELECT run_id FROM problems)
), counted AS (
    SELECT array_agg(run_id) AS runs, array_agg(n) AS issues
      FROM (SELECT run_id, count(*) AS n FROM issues
             WHERE run_id NOT IN (SELECT run_id FROM problems) GROUP BY run_id) per_run
), batch AS (  -- one array per column, in one aggregation's order
    SELECT array_agg(event_id) AS ids, array_agg(stream_id) AS streams,
           array_agg(data) AS data, count(*)::int AS n
      FROM g
), inserted AS (
    SELECT g.grades  -- (counted already: read from the event's JSON, 4 ms a chunk)
      FROM batch b
     CROSS JOIN LATERAL props.append_at_heads(
               b.ids, b.streams, array_fill('grades.emitted'::text, ARRAY[b.n]),
               array_fill($12::smallint, ARRAY[b.n]), b.data) appended(event_id)
      JOIN g ON g.event_id = appended.event_id
)
SELECT (SELECT coalesce(sum(grades), 0) FROM g)::bigint AS graded,
       (SELECT coalesce(sum(grades), 0) FROM inserted)::bigint AS appended,
       (SELECT jsonb_agg(jsonb_build_array(run_id, issue_id, problem)) FROM problems)
           AS problems,
       ct.runs AS counted_runs, ct.issues AS counted_issues, ch.runs AS chance_runs,
       ch.files AS chance_files, ch.starts AS chance_starts, ch.ends AS chance_ends
  FROM chance ch, counted ct

-- out_of_range --
-- The runs of $1 with an issue whose line range the scorer's SQL cannot hold (stored before
-- the catalog bounded line numbers to 1..2^31-1), each with its first such issue: told
-- apart once the statement failed on them (it fails for every run of its chunk).
SELECT DISTINCT ON (i.run_id) i.run_id, i.issue_id
  FROM projections.reported_issues i
 CROSS JOIN LATERAL jsonb_array_elements(i.locations) loc
 CROSS JOIN LATERAL jsonb_array_elements(loc->'ranges') rg
 WHERE i.run_id = ANY ($1::uuid[])
   AND (jsonb_typeof(rg->'start') <> 'number' OR jsonb_typeof(rg->'end') <> 'number'
        OR (rg->>'start')::numeric NOT BETWEEN 1 AND 2147483647
        OR (rg->>'end')::numeric NOT BETWEEN 1 AND 2147483647)
 ORDER BY i.run_id, i.issue_id COLLATE "C"

-- lz4_where_available --
-- The grades events this transaction appends (a run's grades are kilobytes of JSON, so each
-- is compressed when stored) compressed with lz4 rather than pglz where the server was built
-- with it (not every build is): about 80 us an event less (2 ms of a chunk of 25 runs), for
-- values about a fifth larger; every reader decompresses either, lz4 faster.
SELECT set_config('default_toast_compression', 'lz4', true)
 WHERE EXISTS (SELECT FROM pg_settings
                WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals))
