-- projection imports (version 1)

-- table imported_runs
CREATE TABLE projections.imported_runs (
    run_id uuid NOT NULL,
    archive_id text,
    signer text,
    PRIMARY KEY (run_id)
);
-- fold of archive.imported into imported_runs
INSERT INTO projections.imported_runs AS t (run_id, archive_id, signer) SELECT run_id, archive_id, signer
  FROM (SELECT *
  FROM (SELECT run_id,
    projections.oldest(archive_id) OVER w AS archive_id,
    projections.oldest(signer) OVER w AS signer, row_number() OVER w AS one_per_key
  FROM (SELECT tx_id, global_position, elements.nth,
    CASE type WHEN 'archive.imported' THEN (item->>'run_id')::uuid END AS run_id,
    CASE type WHEN 'archive.imported' THEN (data->>'archive_id')::text END AS archive_id,
    CASE type WHEN 'archive.imported' THEN (COALESCE(data->>'signer', 'unsigned'))::text END AS signer
  FROM (SELECT tx_id, global_position, type, recorded_at,
    CASE type WHEN 'archive.imported' THEN data - 'runs' ELSE data END AS data,
    CASE type WHEN 'archive.imported' THEN data->'runs' END AS list
  FROM (SELECT tx_id, global_position, type, data, recorded_at FROM props.events
  WHERE category IN ('import') AND (tx_id, global_position) > ($1::xid8, $2::bigint) AND (tx_id, global_position) <= ($3::xid8, $4::bigint) AND global_position <> ALL ($5::bigint[]) AND ((type = 'archive.imported' AND schema_version = 1))) stored OFFSET 0) e
  LEFT JOIN LATERAL jsonb_array_elements(e.list) WITH ORDINALITY AS elements(item, nth) ON true
  WHERE elements.item IS NOT NULL OR type NOT IN ('archive.imported')) s
  WINDOW w AS (PARTITION BY run_id
  ORDER BY tx_id, global_position, nth ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)) each
  WHERE one_per_key = 1) folded
  ON CONFLICT (run_id) DO UPDATE SET archive_id = COALESCE(t.archive_id, EXCLUDED.archive_id), signer = COALESCE(t.signer, EXCLUDED.signer);
