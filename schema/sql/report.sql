-- Queries of `props report` (reads projections only).

-- scores --
-- run_scores evaluated once for both levels the report shows: per (model, definition,
-- scorer), the pooled figures (`whole`: the same as the model_scores view), and per example
-- (snapshot and file set) within it, the sums the bootstrap resamples. $1 scorer name or any, $2 version or any;
-- the report's scope (each NULL for any): $3 model, $4 definition, $5 snapshot, $6 run ids
-- (an evaluation's).
-- Sums of fractions in numeric: exact, so the figures do not change in the last digit with
-- the order parallel workers happen to add rows in (`--as-of` promises the same bytes).
-- A definition pushed again under one name (another config, another image) is another
-- critic: every row is one digest's (its hex, `digest`), never pooled; the report names it
-- by its digest only where the name ran several within the report's scope
-- (props.projections.figures.split_digests).
SELECT GROUPING(snapshot, files_hash) = 3 AS whole,
       model, definition, digest, scorer_name, scorer_version,
       snapshot, files_hash,
       count(*) AS runs,
       sum(recalled)::float8 AS recalled, sum(expected)::float8 AS expected,
       sum(finds)::float8 AS finds, sum(graded)::float8 AS graded,
       sum(recalled)::float8 / nullif(sum(expected), 0) AS recall,
       (sum(recalled_graded::numeric) / nullif(sum(expected), 0))::float8 AS recall_graded,
       sum(finds)::float8 / nullif(sum(graded), 0) AS precision,
       sum(partial) AS partial, sum(known_fp) AS known_fp, sum(unmatched) AS unmatched,
       avg(recalled::numeric / nullif(expected, 0))::float8 AS mean_run_recall,
       stddev_samp(recalled::numeric / nullif(expected, 0))::float8 AS stddev_run_recall,
       -- chance levels (grades.chance): the expected finds and graded credit by chance, and
       -- the runs whose chance level is not recorded (then the row has none)
       sum(chance_recalled::numeric)::float8 AS chance_recalled,
       sum(chance_graded::numeric)::float8 AS chance_graded,
       count(*) FILTER (WHERE chance_recalled IS NULL) AS chance_missing
  FROM (SELECT s.*, regexp_replace(a.digest, '^sha256:', '') AS digest
          FROM {schema}.run_scores s
          JOIN {schema}.agent_runs a ON a.run_id = s.run_id) s
 WHERE ($1::text IS NULL OR scorer_name = $1) AND ($2::int IS NULL OR scorer_version = $2)
   AND ($3::text IS NULL OR model = $3) AND ($4::text IS NULL OR s.definition = $4)
   AND ($5::text IS NULL OR snapshot = $5) AND ($6::uuid[] IS NULL OR run_id = ANY ($6))
   AND (current_setting('props.exclude_imported', true) IS DISTINCT FROM 'on'
        OR NOT EXISTS (SELECT 1 FROM {schema}.imported_runs i WHERE i.run_id = s.run_id))
 GROUP BY GROUPING SETS ((model, definition, digest, scorer_name, scorer_version),
                         (model, definition, digest, scorer_name, scorer_version, snapshot,
                          files_hash))
 ORDER BY model, definition, digest, scorer_name, scorer_version, whole DESC, snapshot,
          files_hash

-- report_scorer --
-- The scorer the run states are counted under: the one asked for ($1 name, $2 version or
-- any), else the active one.
SELECT coalesce($1::text, a.name) AS name,
       CASE WHEN $1::text IS NULL THEN a.version ELSE $2::int END AS version
  FROM (SELECT 1) one LEFT JOIN {schema}.active_scorer a ON true

-- evidence_gaps --
-- Every critic run in the report's scope ($3..$6, as in `scores`) in exactly one state under
-- the report's scorer ($1 name, NULL for none; $2 version or any: see report_scorer), so that the counts add up to critic_runs: excluded
-- (`run.excluded`), touched by a parked event (one of its own or of its grades that some
-- consumer skips now: its figures may be partial, so it is never silently counted), no
-- finish event yet, finished but not completed, completed with no issue reported (nothing
-- to grade), an issue the scorer has not graded, an issue it could not grade or a grade
-- against a ground truth that is not recorded (unscorable), or scored.
-- Runs with no issue reported are in the figures (they found nothing) and counted apart
-- here. Set-based: each kind of run found in one pass, then every run looked up (a test per
-- run and issue took 22 s over a million issues); the unscorable from the grades' counts;
-- whether a completed run reported anything, one probe of the issues' index (grouping every
-- issue by run took a third of the statement).
WITH ungraded AS (
    SELECT DISTINCT i.run_id FROM {schema}.reported_issues i
     WHERE NOT EXISTS (SELECT 1 FROM {schema}.grading_edges e
                        WHERE e.critique_run_id = i.run_id AND e.critique_issue_id = i.issue_id
                          AND e.scorer_name = $1::text
                          AND ($2::int IS NULL OR e.scorer_version = $2::int))
), unscorable AS (  -- an issue it could not grade, or a grade against unrecorded truth
    SELECT DISTINCT o.run_id
      FROM {schema}.scored_occurrences o
      JOIN {schema}.agent_runs r ON r.run_id = o.run_id
     WHERE o.scorer_name = $1::text AND ($2::int IS NULL OR o.scorer_version = $2::int)
       AND (o.unscorable > 0
            OR NOT EXISTS (SELECT 1 FROM {schema}.snapshots sv
                            WHERE sv.slug = r.snapshot
                              AND sv.ground_truth_hash = o.ground_truth_hash))
), parked AS (  -- read from the log itself: a park is the consumers' record, not a fold
    SELECT DISTINCT run_id FROM props.parked_now WHERE run_id IS NOT NULL
), states AS MATERIALIZED (  -- once per run: its state is read by every count below
    SELECT CASE
        WHEN x.run_id IS NOT NULL THEN 'excluded'
        WHEN pk.run_id IS NOT NULL THEN 'parked'
        WHEN r.status IN ('requested', 'running') THEN 'unfinished'
        WHEN r.status <> 'completed' THEN 'not_completed'
        WHEN NOT EXISTS (SELECT 1 FROM {schema}.reported_issues i WHERE i.run_id = r.run_id)
        THEN 'no_issues'
        WHEN u.run_id IS NOT NULL THEN 'ungraded'
        WHEN s.run_id IS NOT NULL THEN 'unscorable'
        ELSE 'scored' END AS state
      FROM {schema}.agent_runs r
      LEFT JOIN {schema}.excluded_runs x ON x.run_id = r.run_id
      LEFT JOIN ungraded u ON u.run_id = r.run_id
      LEFT JOIN unscorable s ON s.run_id = r.run_id
      LEFT JOIN parked pk ON pk.run_id = r.run_id
     WHERE r.agent_type = 'critic'
       AND ($3::text IS NULL OR r.model = $3) AND ($4::text IS NULL OR r.definition = $4)
       AND ($5::text IS NULL OR r.snapshot = $5) AND ($6::uuid[] IS NULL OR r.run_id = ANY ($6))
)
SELECT count(*) AS critic_runs,
       count(*) FILTER (WHERE state = 'excluded') AS excluded,
       count(*) FILTER (WHERE state = 'parked') AS parked,
       count(*) FILTER (WHERE state = 'unfinished') AS unfinished,
       count(*) FILTER (WHERE state = 'not_completed') AS not_completed,
       count(*) FILTER (WHERE state = 'no_issues') AS no_issues,
       count(*) FILTER (WHERE state = 'ungraded') AS ungraded,
       count(*) FILTER (WHERE state = 'unscorable') AS unscorable,
       count(*) FILTER (WHERE state = 'scored') AS scored
  FROM states

-- known_scorers --
SELECT name, version FROM {schema}.scorers ORDER BY name, version

-- any_imported --
SELECT EXISTS (SELECT 1 FROM {schema}.imported_runs)

-- imported_runs --
-- The scored runs that came in from export files, by the key that signed the file (asked
-- only when some came in: it evaluates run_scores again). The scope: $3..$6 of `scores`.
SELECT i.signer, count(DISTINCT s.run_id) AS runs
  FROM {schema}.run_scores s JOIN {schema}.imported_runs i ON i.run_id = s.run_id
 WHERE ($1::text IS NULL OR s.scorer_name = $1) AND ($2::int IS NULL OR s.scorer_version = $2)
   AND ($3::text IS NULL OR s.model = $3) AND ($4::text IS NULL OR s.definition = $4)
   AND ($5::text IS NULL OR s.snapshot = $5) AND ($6::uuid[] IS NULL OR s.run_id = ANY ($6))
 GROUP BY i.signer ORDER BY i.signer

-- adjudicated_issues --
-- Grades a person's verdict replaced (none unless `props.adjudicated` is on).
SELECT count(*) FROM {schema}.scored_edges
 WHERE adjudicated AND ($1::text IS NULL OR scorer_name = $1)
   AND ($2::int IS NULL OR scorer_version = $2)

-- live_points --
-- Where the live projections ($1: their checkpoints' names) stand: one row when they all
-- stand at one point, read in the report's own snapshot.
SELECT DISTINCT tx_id, position FROM props.checkpoints WHERE name = ANY ($1::text[])

-- registered_scorers --
-- Every registered scorer, and whether it is a rule (deterministic) or reads an issue's
-- claim (LLM judges and panels, and people's verdicts: `human`), whose word confirms a
-- located find.
SELECT name, version, deterministic FROM {schema}.scorers

-- verified_judges --
-- The scorers whose registered bytes passed a verification here (verified_scorers): only
-- their word confirms or rejects a located find (`run_confirmations`).
SELECT DISTINCT v.name, v.version FROM {schema}.verified_scorers v
  JOIN {schema}.scorers s ON s.name = v.name AND s.version = v.version
 WHERE s.code_hash = v.code_hash

-- confirmation --
-- Of the TP occurrences the scored runs located (`run_confirmations`), those a judge or a
-- person confirmed and those they rejected, per (model, definition, digest, scorer)
-- (`whole`) and per example within it, as `scores` groups them; its parameters.
SELECT GROUPING(s.snapshot, s.files_hash) = 3 AS whole,
       s.model, s.definition, s.digest, s.scorer_name, s.scorer_version, s.snapshot,
       s.files_hash, sum(c.confirmed) AS confirmed, sum(c.rejected) AS rejected
  FROM (SELECT s.*, regexp_replace(a.digest, '^sha256:', '') AS digest
          FROM {schema}.run_scores s
          JOIN {schema}.agent_runs a ON a.run_id = s.run_id) s
  JOIN {schema}.run_confirmations c
    ON c.run_id = s.run_id AND c.scorer_name = s.scorer_name
   AND c.scorer_version = s.scorer_version
 WHERE s.recalled > 0
   AND ($1::text IS NULL OR s.scorer_name = $1) AND ($2::int IS NULL OR s.scorer_version = $2)
   AND ($3::text IS NULL OR s.model = $3) AND ($4::text IS NULL OR s.definition = $4)
   AND ($5::text IS NULL OR s.snapshot = $5) AND ($6::uuid[] IS NULL OR s.run_id = ANY ($6))
   AND (current_setting('props.exclude_imported', true) IS DISTINCT FROM 'on'
        OR NOT EXISTS (SELECT 1 FROM {schema}.imported_runs i WHERE i.run_id = s.run_id))
 GROUP BY GROUPING SETS ((s.model, s.definition, s.digest, s.scorer_name, s.scorer_version),
                         (s.model, s.definition, s.digest, s.scorer_name, s.scorer_version,
                          s.snapshot, s.files_hash))

-- per_snapshot --
-- (figures.breakdown, the viewer's scores page)
-- Pooled recall and precision per model, definition and snapshot under scorer ($1, $2): the
-- figures' definitions (props.projections.figures), one snapshot at a time; $3 only these
-- runs (an evaluation's), when given.
SELECT model, definition, snapshot, count(*) AS runs,
       sum(recalled)::float8 / nullif(sum(expected), 0) AS recall,
       sum(finds)::float8 / nullif(sum(graded), 0) AS precision
  FROM projections.run_scores
 WHERE scorer_name = $1 AND scorer_version = $2 AND ($3::uuid[] IS NULL OR run_id = ANY ($3))
 GROUP BY model, definition, snapshot
 ORDER BY snapshot, model, definition

-- by_day --
-- The same per model and definition, by the day the runs were requested ($3 as above).
SELECT s.model || ' / ' || s.definition AS "group",
       to_char(date_trunc('day', r.requested_at AT TIME ZONE 'UTC'), 'YYYY-MM-DD') AS day,
       count(*) AS runs,
       sum(s.recalled)::float8 / nullif(sum(s.expected), 0) AS recall,
       sum(s.finds)::float8 / nullif(sum(s.graded), 0) AS precision
  FROM projections.run_scores s JOIN projections.agent_runs r ON r.run_id = s.run_id
 WHERE s.scorer_name = $1 AND s.scorer_version = $2
   AND ($3::uuid[] IS NULL OR s.run_id = ANY ($3))
 GROUP BY 1, 2
 ORDER BY 2, 1

-- reviewers --
-- The judges and people (scorers that read claims: not deterministic, `human` too) that
-- graded an issue of these runs ($1; NULL: any run), and whether each confirmed something
-- (named a defect at full credit): who "confirmed by" may name, and who only looked. Only
-- the runs a figure counts (completed, not excluded: run_scores' rule): a verdict on a
-- failed run's partial output is in no figure, so it names nobody beside them.
SELECT e.scorer_name || '@' || e.scorer_version AS scorer,
       bool_or(e.tp_id IS NOT NULL AND e.grade >= 1) AS confirmed
  FROM {schema}.grading_edges e
  JOIN {schema}.scorers k
    ON k.name = e.scorer_name AND k.version = e.scorer_version AND NOT k.deterministic
  JOIN {schema}.agent_runs r ON r.run_id = e.critique_run_id AND r.status = 'completed'
   AND NOT EXISTS (SELECT 1 FROM {schema}.excluded_runs x WHERE x.run_id = r.run_id)
 WHERE ($1::uuid[] IS NULL OR e.critique_run_id = ANY ($1))
 GROUP BY 1 ORDER BY 1

-- projections_built --
-- NULL until the projections were first built (a database only migrated has none).
SELECT to_regclass('projections.model_scores')

-- set_settings --
-- The report's settings ($1 names, $2 values) for this transaction only.
SELECT set_config(name, value, true) FROM unnest($1::text[], $2::text[]) AS s(name, value)
