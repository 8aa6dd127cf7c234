-- Resolving `--as-of` to a point of the read order, and counting the log up to it.

-- at_position --
-- The event at global position $1, if it is behind the visibility fence.
SELECT tx_id, global_position FROM props.events
 WHERE global_position = $1::bigint AND tx_id < pg_snapshot_xmin(pg_current_snapshot())

-- at_checkpoint --
-- The event a checkpoint TX:POSITION names, if it is behind the visibility fence.
SELECT tx_id, global_position FROM props.events
 WHERE tx_id = $1::xid8 AND global_position = $2::bigint
   AND tx_id < pg_snapshot_xmin(pg_current_snapshot())

-- at_time --
-- The last event, in read order, that this database recorded at or before $1, behind the
-- fence: an imported event was recorded here when its import was (props.importing), whatever
-- time it carries from its origin, so importing old events never moves what a time names.
SELECT e.tx_id, e.global_position FROM props.events e
  LEFT JOIN props.importing i ON i.tx_id = e.tx_id
 WHERE coalesce(i.recorded_at, e.recorded_at) <= $1::timestamptz
   AND e.tx_id < pg_snapshot_xmin(pg_current_snapshot())
 ORDER BY e.tx_id DESC, e.global_position DESC LIMIT 1

-- events_up_to --
-- How many events the read order holds up to and including ($1, $2).
SELECT count(*) FROM props.events WHERE (tx_id, global_position) <= ($1::xid8, $2::bigint)
