-- projection grading (version 8)

-- table grading_edges
CREATE TABLE projections.grading_edges (
    critique_run_id uuid NOT NULL,
    critique_issue_id text COLLATE "C" NOT NULL,
    scorer_name text COLLATE "C" NOT NULL,
    scorer_version integer NOT NULL,
    code_hash text,
    ground_truth_hash text,
    tp_id text,
    tp_occurrence integer,
    fp_id text,
    grade float8,
    graded_at timestamptz,
    unscorable text,
    PRIMARY KEY (critique_run_id, critique_issue_id, scorer_name, scorer_version)
);
-- fold of grade.emitted, grades.emitted, grade.reviewed, grades.unscorable into grading_edges
INSERT INTO projections.grading_edges AS t (critique_run_id, critique_issue_id, scorer_name, scorer_version, code_hash, ground_truth_hash, tp_id, tp_occurrence, fp_id, grade, graded_at, unscorable) SELECT critique_run_id, critique_issue_id, scorer_name, scorer_version, code_hash, ground_truth_hash, tp_id, tp_occurrence, fp_id, grade, graded_at, unscorable
  FROM (SELECT DISTINCT ON (critique_run_id, critique_issue_id, scorer_name, scorer_version) critique_run_id, critique_issue_id, scorer_name, scorer_version, code_hash, ground_truth_hash, tp_id, tp_occurrence, fp_id, grade, graded_at, unscorable
  FROM (SELECT tx_id, global_position, elements.nth,
    CASE type WHEN 'grade.emitted' THEN (data->>'critique_run_id')::uuid WHEN 'grades.emitted' THEN (data->>'critique_run_id')::uuid WHEN 'grade.reviewed' THEN (data->>'critique_run_id')::uuid WHEN 'grades.unscorable' THEN (data->>'critique_run_id')::uuid END AS critique_run_id,
    CASE type WHEN 'grade.emitted' THEN (data->>'critique_issue_id')::text COLLATE "C" WHEN 'grades.emitted' THEN (item->>'issue_id')::text COLLATE "C" WHEN 'grade.reviewed' THEN (data->>'critique_issue_id')::text COLLATE "C" WHEN 'grades.unscorable' THEN (item->>'issue_id')::text COLLATE "C" END AS critique_issue_id,
    CASE type WHEN 'grade.emitted' THEN (data->'scorer'->>'name')::text COLLATE "C" WHEN 'grades.emitted' THEN (data->'scorer'->>'name')::text COLLATE "C" WHEN 'grade.reviewed' THEN ('human')::text COLLATE "C" WHEN 'grades.unscorable' THEN (data->'scorer'->>'name')::text COLLATE "C" END AS scorer_name,
    CASE type WHEN 'grade.emitted' THEN (data->'scorer'->>'version')::integer WHEN 'grades.emitted' THEN (data->'scorer'->>'version')::integer WHEN 'grade.reviewed' THEN (1)::integer WHEN 'grades.unscorable' THEN (data->'scorer'->>'version')::integer END AS scorer_version,
    CASE type WHEN 'grade.emitted' THEN (data->'scorer'->>'code_hash')::text WHEN 'grades.emitted' THEN (data->'scorer'->>'code_hash')::text WHEN 'grade.reviewed' THEN ('0ad8423ffc48f9fdcd5eed0270acc3fe468422c367cc41801bc16694f8080572')::text WHEN 'grades.unscorable' THEN (data->'scorer'->>'code_hash')::text END AS code_hash,
    CASE type WHEN 'grade.emitted' THEN (data->'scorer'->>'ground_truth_hash')::text WHEN 'grades.emitted' THEN (data->'scorer'->>'ground_truth_hash')::text WHEN 'grade.reviewed' THEN (data->>'ground_truth_hash')::text WHEN 'grades.unscorable' THEN (data->'scorer'->>'ground_truth_hash')::text END AS ground_truth_hash,
    CASE type WHEN 'grade.emitted' THEN (data->>'tp_id')::text WHEN 'grades.emitted' THEN (item->>'tp_id')::text WHEN 'grade.reviewed' THEN (data->>'tp_id')::text END AS tp_id,
    CASE type WHEN 'grade.emitted' THEN (data->>'tp_occurrence')::integer WHEN 'grades.emitted' THEN (item->>'tp_occurrence')::integer WHEN 'grade.reviewed' THEN (data->>'tp_occurrence')::integer END AS tp_occurrence,
    CASE type WHEN 'grade.emitted' THEN (data->>'fp_id')::text WHEN 'grades.emitted' THEN (item->>'fp_id')::text WHEN 'grade.reviewed' THEN (data->>'fp_id')::text END AS fp_id,
    CASE type WHEN 'grade.emitted' THEN (data->>'grade')::float8 WHEN 'grades.emitted' THEN (item->>'grade')::float8 WHEN 'grade.reviewed' THEN (CASE WHEN data->>'tp_id' IS NULL THEN 0 ELSE 1 END)::float8 END AS grade,
    CASE type WHEN 'grade.emitted' THEN (recorded_at)::timestamptz WHEN 'grades.emitted' THEN (recorded_at)::timestamptz WHEN 'grade.reviewed' THEN (recorded_at)::timestamptz WHEN 'grades.unscorable' THEN (recorded_at)::timestamptz END AS graded_at,
    CASE type WHEN 'grades.unscorable' THEN (item->>'reason')::text END AS unscorable
  FROM (SELECT tx_id, global_position, type, recorded_at,
    CASE type WHEN 'grades.emitted' THEN data - 'grades' WHEN 'grades.unscorable' THEN data - 'issues' ELSE data END AS data,
    CASE type WHEN 'grades.emitted' THEN data->'grades' WHEN 'grades.unscorable' THEN data->'issues' END AS list
  FROM (SELECT tx_id, global_position, type, data, recorded_at FROM props.events
  WHERE (tx_id, global_position) > ($1::xid8, $2::bigint) AND (tx_id, global_position) <= ($3::xid8, $4::bigint) AND global_position <> ALL ($5::bigint[]) AND ((type = 'grade.emitted' AND schema_version = 1) OR (type = 'grades.emitted' AND schema_version = 1) OR (type = 'grade.reviewed' AND schema_version = 1) OR (type = 'grades.unscorable' AND schema_version = 1))) stored OFFSET 0) e
  LEFT JOIN LATERAL jsonb_array_elements(e.list) WITH ORDINALITY AS elements(item, nth) ON true
  WHERE elements.item IS NOT NULL OR type NOT IN ('grades.emitted', 'grades.unscorable')) s
  ORDER BY critique_run_id, critique_issue_id, scorer_name, scorer_version, tx_id DESC, global_position DESC, nth DESC) folded
  ON CONFLICT (critique_run_id, critique_issue_id, scorer_name, scorer_version) DO UPDATE SET code_hash = EXCLUDED.code_hash, ground_truth_hash = EXCLUDED.ground_truth_hash, tp_id = EXCLUDED.tp_id, tp_occurrence = EXCLUDED.tp_occurrence, fp_id = EXCLUDED.fp_id, grade = EXCLUDED.grade, graded_at = EXCLUDED.graded_at, unscorable = EXCLUDED.unscorable;

-- table grade_occurrences
CREATE TABLE projections.grade_occurrences (
    reading text COLLATE "C" NOT NULL,
    run_id uuid NOT NULL,
    scorer_name text COLLATE "C" NOT NULL,
    scorer_version integer NOT NULL,
    ground_truth_hash text COLLATE "C" NOT NULL,
    tp_id text COLLATE "C" NOT NULL,
    tp_occurrence integer NOT NULL,
    best float8,
    graded bigint,
    finds bigint,
    partial bigint,
    known_fp bigint,
    unmatched bigint,
    unscorable bigint,
    PRIMARY KEY (reading, run_id, scorer_name, scorer_version, ground_truth_hash, tp_id, tp_occurrence)
);

-- table grade_chances
CREATE TABLE projections.grade_chances (
    run_id uuid NOT NULL,
    scorer_name text COLLATE "C" NOT NULL,
    scorer_version integer NOT NULL,
    ground_truth_hash text COLLATE "C" NOT NULL,
    null_model text,
    issues integer,
    occurrences jsonb,
    computed_at timestamptz,
    PRIMARY KEY (run_id, scorer_name, scorer_version, ground_truth_hash)
); ALTER TABLE projections.grade_chances ALTER COLUMN occurrences SET STATISTICS 0;
-- fold of grades.chance into grade_chances
INSERT INTO projections.grade_chances AS t (run_id, scorer_name, scorer_version, ground_truth_hash, null_model, issues, occurrences, computed_at) SELECT run_id, scorer_name, scorer_version, ground_truth_hash, null_model, issues, occurrences, computed_at
  FROM (SELECT DISTINCT ON (run_id, scorer_name, scorer_version, ground_truth_hash) run_id, scorer_name, scorer_version, ground_truth_hash, null_model, issues, occurrences, computed_at
  FROM (SELECT tx_id, global_position, 1 AS nth,
    CASE type WHEN 'grades.chance' THEN (data->>'critique_run_id')::uuid END AS run_id,
    CASE type WHEN 'grades.chance' THEN (data->'scorer'->>'name')::text COLLATE "C" END AS scorer_name,
    CASE type WHEN 'grades.chance' THEN (data->'scorer'->>'version')::integer END AS scorer_version,
    CASE type WHEN 'grades.chance' THEN (data->'scorer'->>'ground_truth_hash')::text COLLATE "C" END AS ground_truth_hash,
    CASE type WHEN 'grades.chance' THEN (data->>'null_model')::text END AS null_model,
    CASE type WHEN 'grades.chance' THEN (data->>'issues')::integer END AS issues,
    CASE type WHEN 'grades.chance' THEN (data->'occurrences')::jsonb END AS occurrences,
    CASE type WHEN 'grades.chance' THEN (recorded_at)::timestamptz END AS computed_at
  FROM (SELECT tx_id, global_position, type, data, recorded_at FROM props.events
  WHERE (tx_id, global_position) > ($1::xid8, $2::bigint) AND (tx_id, global_position) <= ($3::xid8, $4::bigint) AND global_position <> ALL ($5::bigint[]) AND ((type = 'grades.chance' AND schema_version = 1))) e) s
  ORDER BY run_id, scorer_name, scorer_version, ground_truth_hash, tx_id DESC, global_position DESC, nth DESC) folded
  ON CONFLICT (run_id, scorer_name, scorer_version, ground_truth_hash) DO UPDATE SET null_model = EXCLUDED.null_model, issues = EXCLUDED.issues, occurrences = EXCLUDED.occurrences, computed_at = EXCLUDED.computed_at;

-- table scorers
CREATE TABLE projections.scorers (
    name text COLLATE "C" NOT NULL,
    version integer NOT NULL,
    code_hash text,
    deterministic boolean,
    registered_at timestamptz,
    PRIMARY KEY (name, version)
);

-- table verified_scorers
CREATE TABLE projections.verified_scorers (
    name text COLLATE "C" NOT NULL,
    version integer NOT NULL,
    code_hash text COLLATE "C" NOT NULL,
    verified_at timestamptz,
    PRIMARY KEY (name, version, code_hash)
);

-- table active_scorer
CREATE TABLE projections.active_scorer (
    singleton boolean NOT NULL,
    name text,
    version integer,
    activated_at timestamptz,
    PRIMARY KEY (singleton)
);

-- grade_occurrences from grading_edges: touched
-- What the events of $5 (types) in the range ($1, $2) to ($3, $4) change: a run's grades by
-- one scorer, or (a person's verdict, no scorer named: its reading covers every scorer) all
-- of the run's.
SELECT DISTINCT (data->>'critique_run_id')::uuid AS run_id,
       data->'scorer'->>'name' AS scorer_name,
       (data->'scorer'->>'version')::int AS scorer_version
  FROM props.events
 WHERE (tx_id, global_position) > ($1::xid8, $2::bigint)
   AND (tx_id, global_position) <= ($3::xid8, $4::bigint)
   AND type = ANY ($5::text[]);

-- grade_occurrences from grading_edges: forget
-- The rows of the runs $1 by the scorer $2, $3 (null: every scorer).
DELETE FROM projections.grade_occurrences
 WHERE run_id = ANY ($1::uuid[])
   AND ($2::text IS NULL OR (scorer_name = $2::text AND scorer_version = $3::int));

-- grade_occurrences from grading_edges: count
-- The runs $1 (by the scorer $2, $3, or every scorer) counted again from all their grades,
-- whichever range brought them: the rows a rebuild and the live runner keep are the same by
-- construction. A run with a verdict (a `human` grade) is counted twice: plain, and
-- adjudicated from its grades read again with the verdicts.
WITH plain AS MATERIALIZED (
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
  FROM projections.grading_edges WHERE critique_run_id = ANY ($1::uuid[]) AND ($2::text IS NULL OR (scorer_name = $2::text AND scorer_version = $3::int))
 GROUP BY critique_run_id, scorer_name, scorer_version, ground_truth_hash, tp_id, tp_occurrence
), reviewed AS (  -- (a run's verdicts, whichever scorer's grades are counted again)
    SELECT p.run_id FROM (SELECT DISTINCT run_id FROM plain) p
     WHERE EXISTS (SELECT 1 FROM projections.grading_edges h
                    WHERE h.critique_run_id = p.run_id AND h.scorer_name = 'human'
                      AND h.scorer_version = 1)
)
INSERT INTO projections.grade_occurrences (reading, run_id, scorer_name, scorer_version,
       ground_truth_hash, tp_id, tp_occurrence, best, graded, finds, partial, known_fp,
       unmatched, unscorable)
SELECT CASE WHEN p.run_id IN (SELECT run_id FROM reviewed) THEN 'plain' ELSE 'both' END, p.*
  FROM plain p
UNION ALL
SELECT 'adjudicated', a.* FROM (-- The counts of the grades read (spliced in): each group's best grade, the grades, those
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
  FROM (-- The grades read, with people's verdicts (`human` grades, both spliced in) standing in: a
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
  FROM (SELECT * FROM projections.grading_edges WHERE critique_run_id = ANY ($1::uuid[]) AND ($2::text IS NULL OR (scorer_name = $2::text AND scorer_version = $3::int)) AND critique_run_id IN (SELECT run_id FROM reviewed)) e
  LEFT JOIN (SELECT * FROM projections.grading_edges WHERE critique_run_id IN (SELECT run_id FROM reviewed) AND scorer_name = 'human' AND scorer_version = 1) h
    ON e.scorer_name <> 'human'
   AND h.critique_run_id = e.critique_run_id AND h.critique_issue_id = e.critique_issue_id) adjudicated
 GROUP BY critique_run_id, scorer_name, scorer_version, ground_truth_hash, tp_id, tp_occurrence) a;

-- grade_occurrences from grading_edges: count_all
-- The runs $1 (by the scorer $2, $3, or every scorer) counted again from all their grades,
-- whichever range brought them: the rows a rebuild and the live runner keep are the same by
-- construction. A run with a verdict (a `human` grade) is counted twice: plain, and
-- adjudicated from its grades read again with the verdicts.
WITH plain AS MATERIALIZED (
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
  FROM projections.grading_edges WHERE true
 GROUP BY critique_run_id, scorer_name, scorer_version, ground_truth_hash, tp_id, tp_occurrence
), reviewed AS (  -- (a run's verdicts, whichever scorer's grades are counted again)
    SELECT p.run_id FROM (SELECT DISTINCT run_id FROM plain) p
     WHERE EXISTS (SELECT 1 FROM projections.grading_edges h
                    WHERE h.critique_run_id = p.run_id AND h.scorer_name = 'human'
                      AND h.scorer_version = 1)
)
INSERT INTO projections.grade_occurrences (reading, run_id, scorer_name, scorer_version,
       ground_truth_hash, tp_id, tp_occurrence, best, graded, finds, partial, known_fp,
       unmatched, unscorable)
SELECT CASE WHEN p.run_id IN (SELECT run_id FROM reviewed) THEN 'plain' ELSE 'both' END, p.*
  FROM plain p
UNION ALL
SELECT 'adjudicated', a.* FROM (-- The counts of the grades read (spliced in): each group's best grade, the grades, those
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
  FROM (-- The grades read, with people's verdicts (`human` grades, both spliced in) standing in: a
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
  FROM (SELECT * FROM projections.grading_edges WHERE true AND critique_run_id IN (SELECT run_id FROM reviewed)) e
  LEFT JOIN (SELECT * FROM projections.grading_edges WHERE critique_run_id IN (SELECT run_id FROM reviewed) AND scorer_name = 'human' AND scorer_version = 1) h
    ON e.scorer_name <> 'human'
   AND h.critique_run_id = e.critique_run_id AND h.critique_issue_id = e.critique_issue_id) adjudicated
 GROUP BY critique_run_id, scorer_name, scorer_version, ground_truth_hash, tp_id, tp_occurrence) a;

-- folded in Python: scorer.activated, scorer.registered, scorer.verified
