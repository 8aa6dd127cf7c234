-- The overlap scorer on the server (props.core.scoring.OverlapScorer, graded by
-- props.core.server_grading): the same rule as its Python `match`, over the projected issues
-- of many runs at once. Part of the scorer's code hash: changing this file changes the hash.
--
-- Runs come as arrays: $1 run ids, $2 snapshot slugs, $3 snapshot versions, $4 ground-truth
-- hashes (what each run is graded against). $5 the ground truth's line ranges, a JSON array
-- of [slug, version, kind ("tp" or "fp"), defect id, occurrence number, file, start, end].
-- $6 the tolerance: lines each occurrence range is widened by on both sides. $7 the
-- snapshots' files, a JSON array of [slug, version, path].
--
-- An issue's score against an occurrence is the lines they share, summed over every pair of
-- the issue's and the occurrence's ranges in the same file. The issue matches the TP
-- occurrence of the highest score (ties: the smallest TP id, by code point, then the lowest
-- occurrence number); with none, the known FP of the highest score summed over its
-- occurrences (ties: the smallest id); with neither, nothing.
--
-- A run with an issue that cannot be graded (a location without line ranges, or in a file
-- the snapshot does not have) is not graded at all: `problems` names, per such run, the first
-- problem of its first such issue (by id, by code point), as the Python check finds it.

-- scoring --
-- Common table expressions (for a WITH) defining `matches` (run_id, issue_id,
-- ground_truth_hash, tp_id, tp_occurrence, fp_id: every issue of the gradable runs) and
-- `problems` (run_id, issue_id, problem).
runs AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::int[], $4::text[])
                  AS r(run_id, slug, version, ground_truth_hash)
), truth AS MATERIALIZED (
    SELECT t->>0 AS slug, (t->>1)::int AS version, t->>2 AS kind, t->>3 AS defect,
           (t->>4)::int AS occurrence, t->>5 AS file, (t->>6)::int - $6::int AS first,
           (t->>7)::int + $6::int AS last
      FROM jsonb_array_elements($5::jsonb) t
), files AS MATERIALIZED (
    SELECT f->>0 AS slug, (f->>1)::int AS version, f->>2 AS path
      FROM jsonb_array_elements($7::jsonb) f
), issues AS MATERIALIZED (
    -- by the key's index, whatever the planner guesses of the runs' count
    SELECT r.run_id, r.slug, r.version, r.ground_truth_hash, i.issue_id, i.locations
      FROM projections.reported_issues i JOIN runs r ON r.run_id = i.run_id
     WHERE i.run_id = ANY ($1::uuid[])
), locations AS MATERIALIZED (
    SELECT i.run_id, i.issue_id, i.slug, i.version, loc.file, loc.ranges, loc.n
      FROM issues i
     CROSS JOIN LATERAL ROWS FROM (jsonb_to_recordset(i.locations) AS (file text, ranges jsonb))
                        WITH ORDINALITY AS loc(file, ranges, n)
), problems AS MATERIALIZED (
    SELECT DISTINCT ON (l.run_id) l.run_id, l.issue_id,
           CASE WHEN jsonb_array_length(l.ranges) = 0 THEN 'a location without line ranges'
                ELSE l.file || ' is not in the snapshot' END AS problem
      FROM locations l
      LEFT JOIN files f ON f.slug = l.slug AND f.version = l.version AND f.path = l.file
     WHERE jsonb_array_length(l.ranges) = 0 OR f.path IS NULL
     ORDER BY l.run_id, l.issue_id COLLATE "C", l.n
), issue_ranges AS MATERIALIZED (
    SELECT l.run_id, l.issue_id, l.slug, l.version, l.file, rg.start AS first,
           rg."end" AS last
      FROM locations l
     CROSS JOIN LATERAL jsonb_to_recordset(l.ranges) AS rg(start int, "end" int)
), scored AS MATERIALIZED (
    -- only pairs of ranges that share lines: the others add nothing to any score
    SELECT ir.run_id, ir.issue_id, t.kind, t.defect, t.occurrence,
           sum(least(ir.last, t.last) - greatest(ir.first, t.first) + 1) AS score
      FROM issue_ranges ir
      JOIN truth t ON t.slug = ir.slug AND t.version = ir.version AND t.file = ir.file
     WHERE least(ir.last, t.last) >= greatest(ir.first, t.first)
     GROUP BY ir.run_id, ir.issue_id, t.kind, t.defect, t.occurrence
), tp AS (
    SELECT DISTINCT ON (run_id, issue_id) run_id, issue_id, defect, occurrence
      FROM scored
     WHERE kind = 'tp'
     ORDER BY run_id, issue_id, score DESC, defect COLLATE "C", occurrence
), fp AS (
    SELECT DISTINCT ON (run_id, issue_id) run_id, issue_id, defect
      FROM (SELECT run_id, issue_id, defect, sum(score) AS score FROM scored
             WHERE kind = 'fp' GROUP BY run_id, issue_id, defect) per_defect
     ORDER BY run_id, issue_id, score DESC, defect COLLATE "C"
), matches AS (
    SELECT i.run_id, i.issue_id, i.ground_truth_hash, tp.defect AS tp_id,
           tp.occurrence AS tp_occurrence,
           CASE WHEN tp.defect IS NULL THEN fp.defect END AS fp_id
      FROM issues i
      LEFT JOIN tp ON tp.run_id = i.run_id AND tp.issue_id = i.issue_id
      LEFT JOIN fp ON fp.run_id = i.run_id AND fp.issue_id = i.issue_id
     WHERE i.run_id NOT IN (SELECT run_id FROM problems)
)
