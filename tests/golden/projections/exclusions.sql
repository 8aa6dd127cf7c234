-- projection exclusions (version 1)

-- table excluded_runs
CREATE TABLE projections.excluded_runs (
    run_id uuid NOT NULL,
    reason text,
    excluded_by text,
    excluded_at timestamptz,
    PRIMARY KEY (run_id)
);
-- fold of run.excluded into excluded_runs
INSERT INTO projections.excluded_runs AS t (run_id, reason, excluded_by, excluded_at) SELECT run_id, reason, excluded_by, excluded_at
  FROM (SELECT DISTINCT ON (run_id) run_id, reason, excluded_by, excluded_at
  FROM (SELECT tx_id, global_position, 1 AS nth,
    CASE type WHEN 'run.excluded' THEN (data->>'run_id')::uuid END AS run_id,
    CASE type WHEN 'run.excluded' THEN (data->>'reason')::text END AS reason,
    CASE type WHEN 'run.excluded' THEN (data->>'excluded_by')::text END AS excluded_by,
    CASE type WHEN 'run.excluded' THEN (recorded_at)::timestamptz END AS excluded_at
  FROM (SELECT tx_id, global_position, type, data, recorded_at FROM props.events
  WHERE (tx_id, global_position) > ($1::xid8, $2::bigint) AND (tx_id, global_position) <= ($3::xid8, $4::bigint) AND global_position <> ALL ($5::bigint[]) AND ((type = 'run.excluded' AND schema_version = 1))) e) s
  ORDER BY run_id, tx_id DESC, global_position DESC, nth DESC) folded
  ON CONFLICT (run_id) DO UPDATE SET reason = EXCLUDED.reason, excluded_by = EXCLUDED.excluded_by, excluded_at = EXCLUDED.excluded_at;
