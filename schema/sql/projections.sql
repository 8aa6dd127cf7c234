-- Queries of the projection runner and rebuild (props.projections.engine).

-- set_checkpoint --
INSERT INTO props.checkpoints (name, tx_id, position) VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE
   SET tx_id = excluded.tx_id, position = excluded.position, updated_at = now()

-- forget_rebuilds --
DELETE FROM props.checkpoints WHERE name LIKE 'rebuild:%'

-- tables_in_schema --
SELECT tablename FROM pg_tables WHERE schemaname = $1

-- lag --
-- Events after a checkpoint (committed or not yet behind the fence) and the age of the oldest.
SELECT count(*) AS events, extract(epoch FROM now() - min(recorded_at))::float8 AS seconds
  FROM props.events
 WHERE (tx_id, global_position) > ($1::xid8, $2::bigint)
