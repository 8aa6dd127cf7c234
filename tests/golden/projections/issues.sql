-- projection issues (version 2)

-- table reported_issues
CREATE TABLE projections.reported_issues (
    run_id uuid NOT NULL,
    issue_id text COLLATE "C" NOT NULL,
    files text[],
    locations jsonb,
    rationale text,
    severity text,
    reported_at timestamptz,
    PRIMARY KEY (run_id, issue_id)
); ALTER TABLE projections.reported_issues ALTER COLUMN locations SET STATISTICS 0;
-- fold of issue.reported into reported_issues
INSERT INTO projections.reported_issues AS t (run_id, issue_id, files, locations, rationale, severity, reported_at) SELECT run_id, issue_id, files, locations, rationale, severity, reported_at
  FROM (SELECT DISTINCT ON (run_id, issue_id) run_id, issue_id, files, locations, rationale, severity, reported_at
  FROM (SELECT tx_id, global_position, 1 AS nth,
    CASE type WHEN 'issue.reported' THEN (data->>'run_id')::uuid END AS run_id,
    CASE type WHEN 'issue.reported' THEN (data->>'issue_id')::text COLLATE "C" END AS issue_id,
    CASE type WHEN 'issue.reported' THEN (ARRAY(SELECT DISTINCT (loc->>'file') COLLATE "C" FROM jsonb_array_elements(data->'locations') loc
  ORDER BY 1))::text[] END AS files,
    CASE type WHEN 'issue.reported' THEN (data->'locations')::jsonb END AS locations,
    CASE type WHEN 'issue.reported' THEN (data->>'rationale')::text END AS rationale,
    CASE type WHEN 'issue.reported' THEN (data->>'severity')::text END AS severity,
    CASE type WHEN 'issue.reported' THEN (recorded_at)::timestamptz END AS reported_at
  FROM (SELECT tx_id, global_position, type, data, recorded_at FROM props.events
  WHERE (tx_id, global_position) > ($1::xid8, $2::bigint) AND (tx_id, global_position) <= ($3::xid8, $4::bigint) AND global_position <> ALL ($5::bigint[]) AND ((type = 'issue.reported' AND schema_version = 1))) e) s
  ORDER BY run_id, issue_id, tx_id DESC, global_position DESC, nth DESC) folded
  ON CONFLICT (run_id, issue_id) DO UPDATE SET files = EXCLUDED.files, locations = EXCLUDED.locations, rationale = EXCLUDED.rationale, severity = EXCLUDED.severity, reported_at = EXCLUDED.reported_at;
