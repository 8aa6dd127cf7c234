-- Queries of export and import (props.core.archive).

-- export_page --
-- Committed events (behind the fence) of a position/time/category selection, in position order.
SELECT global_position, event_id, stream_id, stream_version, type, schema_version, data,
       metadata, recorded_at
  FROM props.events
 WHERE global_position > $1
   AND ($2::bigint IS NULL OR global_position <= $2)
   AND ($3::timestamptz IS NULL OR recorded_at >= $3)
   AND ($4::timestamptz IS NULL OR recorded_at < $4)
   AND ($5::text[] IS NULL OR category = ANY ($5::text[]))
   AND ($6::text[] IS NULL OR category <> ALL ($6::text[]))
   AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
 ORDER BY global_position
 LIMIT $7

-- present_ids --
SELECT event_id FROM props.events WHERE event_id = ANY ($1::uuid[])
