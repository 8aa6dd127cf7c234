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
-- The last event, in read order, recorded at or before $1 and behind the fence.
SELECT tx_id, global_position FROM props.events
 WHERE recorded_at <= $1::timestamptz AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
 ORDER BY tx_id DESC, global_position DESC LIMIT 1

-- events_up_to --
-- How many events the read order holds up to and including ($1, $2).
SELECT count(*) FROM props.events WHERE (tx_id, global_position) <= ($1::xid8, $2::bigint)
