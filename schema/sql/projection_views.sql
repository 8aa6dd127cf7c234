-- Views over the projection tables, created in the schema named {schema} (a fixed name,
-- checked before it is spliced in). Recreated whenever projection tables are swapped.

-- grading_pending --
-- Issues of finished critic runs that the active scorer has not graded yet.
CREATE VIEW {schema}.grading_pending AS
SELECT i.run_id, i.issue_id, s.name AS scorer_name, s.version AS scorer_version
  FROM {schema}.reported_issues i
  JOIN {schema}.agent_runs r ON r.run_id = i.run_id
  JOIN {schema}.active_scorer s ON true
 WHERE r.agent_type = 'critic'
   AND r.status IN ('completed', 'failed', 'timed_out', 'budget_exceeded', 'cancelled')
   AND NOT EXISTS (
        SELECT 1 FROM {schema}.grading_edges e
         WHERE e.critique_run_id = i.run_id AND e.critique_issue_id = i.issue_id
           AND e.scorer_name = s.name AND e.scorer_version = s.version)

-- scored_edges --
-- The grades the score views read: every scorer's, except that after `SET props.adjudicated =
-- on` a person's verdict (the human scorer) stands in for a rule scorer's grade of the same
-- issue (`props report --adjudicated`). With the setting off the join is never run.
CREATE VIEW {schema}.scored_edges AS
{scored_edges}

-- scored_occurrences --
-- The counts the score views read, in the reading asked for: a run's `both`, else its
-- `adjudicated` counts after `SET props.adjudicated = on` and its `plain` ones before. As in
-- the table, '' and 0 stand for none (no ground truth cited, not a TP match): they join
-- nothing, as a null would, and joined as they are the planner sees the table's statistics
-- (through nullif() it guessed 2 rows of 131,860 and joined them in loops: 100 s).
CREATE VIEW {schema}.scored_occurrences AS
SELECT run_id, scorer_name, scorer_version, ground_truth_hash, tp_id, tp_occurrence, best,
       graded, finds, partial, known_fp, unmatched, unscorable
  FROM {schema}.grade_occurrences
 WHERE reading IN ('both', CASE WHEN current_setting('props.adjudicated', true) = 'on'
                                THEN 'adjudicated' ELSE 'plain' END)

-- run_scores --
-- Per run and scorer, under the ground truth the grades cite: TP occurrences in the example's
-- scope (`expected`, recall's denominator); those found (`recalled`: matched at full credit,
-- grade 1, the scorer's "find"); the best grade each got (`recalled_graded`: partial credit
-- too, tiered's near and same-file); issues graded, found (`finds`: precision's numerator),
-- matched with partial credit only (`partial`), matched to a known FP, matched to nothing.
-- Only completed runs count: a run that failed (any category, the event cap included), timed
-- out, ran over its budget or was cancelled contributes no issue to any figure, whatever its
-- grades (its partial output stays on its run page, marked partial); the report counts it
-- apart (`evidence_gaps`: not_completed). Runs excluded by a `run.excluded` event are left
-- out too. `chance_recalled` and
-- `chance_graded`: what the same issues would get by chance (grades.chance: the expected
-- finds and the expected graded credit over the occurrences in scope, props.core.scoring.
-- chance), null where the run's chance level is not recorded; `chance` and `chance_graded_
-- recall` are recall's and graded recall's chance levels.
CREATE VIEW {schema}.run_scores AS
WITH graded AS (
    SELECT run_id, scorer_name, scorer_version,
           min(nullif(ground_truth_hash, '')) AS ground_truth_hash,
           sum(graded)::bigint AS graded,
           coalesce(sum(graded) FILTER (WHERE tp_id <> ''), 0)::bigint AS tp_matches,
           sum(finds)::bigint AS finds, sum(partial)::bigint AS partial,
           sum(known_fp)::bigint AS known_fp, sum(unmatched)::bigint AS unmatched,
           sum(unscorable)::bigint AS unscorable
      FROM {schema}.scored_occurrences
     GROUP BY run_id, scorer_name, scorer_version
), runs AS (  -- a run with an issue the scorer could not grade is not scored by it
    SELECT r.run_id, r.model, r.definition, r.snapshot, r.files_hash, g.scorer_name,
           g.scorer_version, g.ground_truth_hash, sv.version AS snapshot_version,
           g.graded, g.tp_matches, g.finds, g.partial, g.known_fp, g.unmatched
      FROM graded g
      JOIN {schema}.agent_runs r ON r.run_id = g.run_id AND r.status = 'completed'
       AND NOT EXISTS (SELECT 1 FROM {schema}.excluded_runs x WHERE x.run_id = r.run_id)
      LEFT JOIN LATERAL (  -- one version per run: two versions may hold one ground truth
           SELECT min(v.version) AS version FROM {schema}.snapshots v
            WHERE v.slug = r.snapshot AND v.ground_truth_hash = g.ground_truth_hash) sv ON true
     -- `<= 0` for `= 0` (a count is never negative): the planner guesses 0.5% of the runs
     -- pass `= 0` on an aggregate's output and 33% pass `<= 0`; guessing 2 of 500 runs it
     -- joined `found` to them in a loop (98,000 rows filtered for 403 runs: half the
     -- report's scores statement, issue 56).
     WHERE g.unscorable <= 0
), expected AS (
    SELECT slug, version, files_hash, count(*) AS expected
      FROM {schema}.scopes GROUP BY slug, version, files_hash
), found AS (
    -- Per run and scorer: of the occurrences in the scope of the ground truth the grades
    -- cite, those found (the best grade any issue got them is a find), and the best grades
    -- summed.
    SELECT run_id, scorer_name, scorer_version, count(*) FILTER (WHERE best >= 1) AS recalled,
           sum(best::numeric)::float8 AS recalled_graded  -- exact: the same in any order
      FROM (SELECT o.run_id, o.scorer_name, o.scorer_version, max(o.best) AS best
              FROM {schema}.scored_occurrences o
              JOIN {schema}.agent_runs r ON r.run_id = o.run_id
              JOIN LATERAL (SELECT min(v.version) AS version FROM {schema}.snapshots v
                             WHERE v.slug = r.snapshot
                               AND v.ground_truth_hash = o.ground_truth_hash) sv ON true
             WHERE EXISTS (SELECT 1 FROM {schema}.scopes sc
                            WHERE sc.slug = r.snapshot AND sc.version = sv.version
                              AND sc.files_hash = r.files_hash AND sc.tp_id = o.tp_id
                              AND sc.occurrence = o.tp_occurrence)
             GROUP BY o.run_id, o.scorer_name, o.scorer_version, o.tp_id,
                      o.tp_occurrence) per_occurrence
     GROUP BY run_id, scorer_name, scorer_version
), chances AS (
    -- Per run, scorer and cited ground truth: the chance of the occurrences in scope.
    SELECT c.run_id, c.scorer_name, c.scorer_version, c.ground_truth_hash,
           s.found AS chance_recalled, s.graded AS chance_graded
      FROM {schema}.grade_chances c
      JOIN {schema}.agent_runs r ON r.run_id = c.run_id
      JOIN LATERAL (SELECT min(v.version) AS version FROM {schema}.snapshots v
                     WHERE v.slug = r.snapshot AND v.ground_truth_hash = c.ground_truth_hash
                    HAVING min(v.version) IS NOT NULL) sv ON true
     CROSS JOIN LATERAL (
           SELECT coalesce(sum(o.found), 0)::float8 AS found,
                  coalesce(sum(o.graded), 0)::float8 AS graded
             FROM jsonb_to_recordset(c.occurrences)
                  AS o(tp_id text, tp_occurrence int, found numeric, graded numeric)
            WHERE EXISTS (SELECT 1 FROM {schema}.scopes sc
                           WHERE sc.slug = r.snapshot AND sc.version = sv.version
                             AND sc.files_hash = r.files_hash AND sc.tp_id = o.tp_id
                             AND sc.occurrence = o.tp_occurrence)) s
), counted AS (
    SELECT u.run_id, u.model, u.definition, u.snapshot, u.files_hash, u.scorer_name,
           u.scorer_version, u.ground_truth_hash, u.snapshot_version,
           coalesce(x.expected, 0) AS expected, coalesce(f.recalled, 0) AS recalled,
           coalesce(f.recalled_graded, 0)::float8 AS recalled_graded,
           u.graded, u.tp_matches, u.finds, u.partial, u.known_fp, u.unmatched,
           ch.chance_recalled, ch.chance_graded
      FROM runs u
      LEFT JOIN found f ON f.run_id = u.run_id AND f.scorer_name = u.scorer_name
       AND f.scorer_version = u.scorer_version
      LEFT JOIN chances ch ON ch.run_id = u.run_id AND ch.scorer_name = u.scorer_name
       AND ch.scorer_version = u.scorer_version AND ch.ground_truth_hash = u.ground_truth_hash
      LEFT JOIN expected x ON x.slug = u.snapshot AND x.version = u.snapshot_version
       AND x.files_hash = u.files_hash
), silent AS (
    -- Completed critic runs that reported no issue: nothing to grade, yet every scorer
    -- would say they found nothing. Left out, a critic silent on hard examples would look
    -- better; they count, under every registered scorer, against the snapshot version in
    -- force when the run was requested.
    SELECT r.run_id, r.model, r.definition, r.snapshot, r.files_hash, s.name, s.version,
           sv.ground_truth_hash, sv.version,
           (SELECT count(*) FROM {schema}.scopes sc
             WHERE sc.slug = r.snapshot AND sc.version = sv.version
               AND sc.files_hash = r.files_hash),
           0::bigint, 0::float8, 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint,
           0::float8, 0::float8  -- no issue: nothing placed, chance 0
      FROM {schema}.agent_runs r
      CROSS JOIN {schema}.scorers s
      LEFT JOIN LATERAL (
           SELECT v.version, v.ground_truth_hash FROM {schema}.snapshots v
            WHERE v.slug = r.snapshot AND v.synced_at <= r.requested_at
            ORDER BY v.version DESC LIMIT 1) sv ON true
     WHERE r.agent_type = 'critic' AND r.status = 'completed'
       AND NOT EXISTS (SELECT 1 FROM {schema}.reported_issues i WHERE i.run_id = r.run_id)
       AND NOT EXISTS (SELECT 1 FROM {schema}.excluded_runs x WHERE x.run_id = r.run_id)
)
SELECT c.*,
       c.recalled::float8 / nullif(c.expected, 0) AS recall,
       c.recalled_graded / nullif(c.expected, 0) AS recall_graded,
       c.finds::float8 / nullif(c.graded, 0) AS precision,
       c.chance_recalled / nullif(c.expected, 0) AS chance,
       c.chance_graded / nullif(c.expected, 0) AS chance_graded_recall
  FROM (SELECT * FROM counted UNION ALL SELECT * FROM silent) c

-- model_scores --
-- Per (model, definition, scorer): pooled recall and precision, and the mean and standard
-- deviation of per-run recall. No interval: runs of one example are not independent draws,
-- and props has one interval for a figure (props.core.scoring.intervals, in every output).
CREATE VIEW {schema}.model_scores AS
SELECT model, definition, scorer_name, scorer_version, count(*) AS runs,
       sum(recalled) AS recalled, sum(expected) AS expected,
       sum(recalled)::float8 / nullif(sum(expected), 0) AS recall,
       -- fractional sums as numeric, as the report sums them: a float8 sum depends on the
       -- order the rows come in, and an analyst's figure must be the report's to the bit
       (sum(recalled_graded::numeric) / nullif(sum(expected), 0))::float8 AS recall_graded,
       sum(finds)::float8 / nullif(sum(graded), 0) AS precision,
       sum(partial) AS partial, sum(known_fp) AS known_fp, sum(unmatched) AS unmatched,
       avg(recall) AS mean_run_recall, stddev_samp(recall) AS stddev_run_recall,
       -- chance levels only where every run's is recorded (else null: never a partial sum)
       CASE WHEN bool_and(chance_recalled IS NOT NULL)
            THEN sum(chance_recalled::numeric)::float8 / nullif(sum(expected), 0)
       END AS chance,
       CASE WHEN bool_and(chance_graded IS NOT NULL)
            THEN sum(chance_graded::numeric)::float8 / nullif(sum(expected), 0)
       END AS chance_graded
  FROM {schema}.run_scores s
 -- `SET props.exclude_imported = on` leaves out the runs that came in from export files.
 WHERE current_setting('props.exclude_imported', true) IS DISTINCT FROM 'on'
    OR NOT EXISTS (SELECT 1 FROM {schema}.imported_runs i WHERE i.run_id = s.run_id)
 GROUP BY model, definition, scorer_name, scorer_version

-- example_scores --
-- Repeated runs of the same example: mean and standard deviation of recall and precision.
CREATE VIEW {schema}.example_scores AS
SELECT model, definition, scorer_name, scorer_version, snapshot, files_hash,
       count(*) AS runs, avg(recall) AS mean_recall, stddev_samp(recall) AS stddev_recall,
       avg(precision) AS mean_precision, stddev_samp(precision) AS stddev_precision
  FROM {schema}.run_scores
 GROUP BY model, definition, scorer_name, scorer_version, snapshot, files_hash

-- run_confirmations --
-- Per critic run and location rule (a deterministic scorer): the TP occurrences in the
-- run's scope that it located (found at full credit: run_scores' `recalled`), and of those
-- how many a judge or a person confirmed (said the issue describes that defect) and how many
-- they rejected; the rest nobody has looked at (props.projections.confirmation). A person's
-- verdict (`human`, the newest) decides an issue; else the judges' grades (every scorer that
-- is not deterministic, whose exact code hash passed a verification: verified_scorers)
-- against the same ground truth: confirmed when every judge that
-- graded it names the defect located, rejected when one names anything else (an issue a
-- judge could not grade is not looked at). An occurrence is confirmed when an issue that
-- located it is, rejected when every one of them is rejected.
CREATE VIEW {schema}.run_confirmations AS
WITH located AS (
    SELECT e.critique_run_id AS run_id, e.scorer_name, e.scorer_version,
           e.ground_truth_hash, e.critique_issue_id AS issue_id, e.tp_id, e.tp_occurrence
      FROM {schema}.scored_edges e
      JOIN {schema}.scorers k
        ON k.name = e.scorer_name AND k.version = e.scorer_version AND k.deterministic
      JOIN {schema}.agent_runs r ON r.run_id = e.critique_run_id
      JOIN LATERAL (SELECT min(v.version) AS version FROM {schema}.snapshots v
                     WHERE v.slug = r.snapshot AND v.ground_truth_hash = e.ground_truth_hash
                    ) sv ON true
     WHERE e.grade >= 1 AND e.tp_id IS NOT NULL
       AND EXISTS (SELECT 1 FROM {schema}.scopes sc
                    WHERE sc.slug = r.snapshot AND sc.version = sv.version
                      AND sc.files_hash = r.files_hash AND sc.tp_id = e.tp_id
                      AND sc.occurrence = e.tp_occurrence)
), said AS (  -- per located issue: the person's word, else the judges' (null: nobody's)
    SELECT l.*,
           (SELECT coalesce(h.tp_id = l.tp_id, false) FROM {schema}.grading_edges h
             WHERE h.critique_run_id = l.run_id AND h.critique_issue_id = l.issue_id
               AND h.scorer_name = 'human' AND h.scorer_version = 1
               AND h.ground_truth_hash = l.ground_truth_hash) AS person,
           (SELECT bool_and(coalesce(j.tp_id = l.tp_id AND j.grade >= 1, false))
              FROM {schema}.grading_edges j
              JOIN {schema}.scorers jk
                ON jk.name = j.scorer_name AND jk.version = j.scorer_version
             WHERE j.critique_run_id = l.run_id AND j.critique_issue_id = l.issue_id
               AND NOT jk.deterministic AND j.scorer_name <> 'human'
               AND j.unscorable IS NULL AND j.ground_truth_hash = l.ground_truth_hash
               AND EXISTS (SELECT 1 FROM {schema}.verified_scorers vs
                            WHERE vs.name = j.scorer_name AND vs.version = j.scorer_version
                              AND vs.code_hash = j.code_hash))
               AS judges
      FROM located l
), occurrences AS (
    SELECT run_id, scorer_name, scorer_version,
           bool_or(coalesce(person, judges)) AS confirmed,
           bool_and(coalesce(person, judges) IS NOT NULL) AS looked
      FROM said
     GROUP BY run_id, scorer_name, scorer_version, tp_id, tp_occurrence
)
SELECT run_id, scorer_name, scorer_version, count(*) AS located,
       count(*) FILTER (WHERE confirmed) AS confirmed,
       count(*) FILTER (WHERE NOT confirmed AND looked) AS rejected
  FROM occurrences
 GROUP BY run_id, scorer_name, scorer_version

-- evaluation_runs --
-- Every run an evaluation's latest version requested, with its case and attempt: requests of
-- the evaluation's own provenance only (both recorded here, or brought by imports of one
-- signer: a request's metadata is its requester's word). `counted`: the case's latest
-- attempt, the run that stands for the case. This is the rule every reader of an
-- evaluation's figures applies (`props report --eval`, `eval show`, `eval compare`, the API,
-- the viewer: props.projections.evaluation_scores reads this view); of the counted runs,
-- only the completed ones that are not excluded are in any figure (run_scores).
CREATE VIEW {schema}.evaluation_runs AS
SELECT v.name AS evaluation, v.version, r.case_key, coalesce(r.attempt, 0) AS attempt,
       r.run_id, r.definition, r.model, r.snapshot, r.files_hash, r.status,
       r.failure_category,
       EXISTS (SELECT 1 FROM {schema}.excluded_runs x WHERE x.run_id = r.run_id) AS excluded,
       coalesce(r.attempt, 0) = max(coalesce(r.attempt, 0))
           OVER (PARTITION BY v.name, r.case_key) AS counted
  FROM (SELECT DISTINCT ON (name) name, version, provenance
          FROM {schema}.evaluation_versions ORDER BY name, version DESC) v
  JOIN {schema}.agent_runs r
    ON r.evaluation = v.name AND r.evaluation_version = v.version
   AND r.provenance = v.provenance AND r.case_key IS NOT NULL

-- evaluation_scores --
-- Per evaluation, critic (definition, model) and scorer: the figures `props report --eval`
-- and `props eval show` print, pooled over the evaluation's counted runs that are scored
-- (evaluation_runs, run_scores). `located_recall` counts what the location rule located
-- (never called recall: nobody has confirmed it); `confirmed_recall` what a verified judge
-- or a person confirmed, null while nobody has said anything of its candidates
-- (`reviewed` false: "unreviewed", never 0%). Chance is null unless every run's is recorded.
-- A judge's or a person's own rows (a scorer that is not a location rule) have none of the
-- confirmation columns, as in the report: their finds are claims already read.
-- (No interval: the report's bootstrap resamples examples, props.core.scoring.intervals.)
CREATE VIEW {schema}.evaluation_scores AS
WITH pooled AS (
    SELECT e.evaluation, s.definition, s.model, s.scorer_name, s.scorer_version,
           coalesce(bool_and(k.deterministic), true) AS located_by_rule,
           count(*) AS runs, sum(s.expected) AS expected, sum(s.recalled) AS located,
           sum(s.finds) AS finds, sum(s.graded) AS graded,
           coalesce(sum(c.confirmed), 0) AS confirmed, coalesce(sum(c.rejected), 0) AS rejected,
           CASE WHEN bool_and(s.chance_recalled IS NOT NULL)
                THEN sum(s.chance_recalled::numeric) END AS chance_recalled
      FROM {schema}.evaluation_runs e
      JOIN {schema}.run_scores s ON s.run_id = e.run_id
      LEFT JOIN {schema}.run_confirmations c ON c.run_id = s.run_id
       AND c.scorer_name = s.scorer_name AND c.scorer_version = s.scorer_version
      LEFT JOIN {schema}.scorers k
        ON k.name = s.scorer_name AND k.version = s.scorer_version
     WHERE e.counted
     GROUP BY e.evaluation, s.definition, s.model, s.scorer_name, s.scorer_version
)
SELECT evaluation, definition, model, scorer_name, scorer_version, runs, expected,
       CASE WHEN located_by_rule THEN located END AS located,
       located::float8 / nullif(expected, 0) AS located_recall,
       CASE WHEN located_by_rule THEN confirmed END AS confirmed,
       CASE WHEN located_by_rule THEN rejected END AS rejected,
       CASE WHEN located_by_rule THEN located - confirmed - rejected END AS unconfirmed,
       CASE WHEN located_by_rule THEN confirmed > 0 OR rejected > 0 OR located = 0
       END AS reviewed,
       CASE WHEN located_by_rule AND (confirmed > 0 OR rejected > 0 OR located = 0)
            THEN confirmed::float8 / nullif(expected, 0) END AS confirmed_recall,
       finds::float8 / nullif(graded, 0) AS precision,
       chance_recalled::float8 / nullif(expected, 0) AS chance,
       located::float8 / nullif(expected, 0) - chance_recalled::float8 / nullif(expected, 0)
           AS above_chance
  FROM pooled
