-- Queries of `props archive` (props.core.archival).

-- hot_partitions --
-- Hot partitions that end at or before $1 and lie wholly behind the positions handed out so
-- far (an archived range is never made again: a partition ahead must stay).
SELECT name, from_position, to_position FROM props.log_partitions
 WHERE state = 'hot' AND to_position <= $1
   AND to_position <= coalesce(pg_sequence_last_value(
           pg_get_serial_sequence('props.events', 'global_position')::regclass), 0) + 1
 ORDER BY from_position

-- partition_contents --
-- What a partition holds: its events, the categories that must stay hot, the runs it touches
-- (run, grading and judge streams name their run), and the last event in read order.
SELECT count(*) AS events,
       array_agg(DISTINCT category) FILTER (WHERE category NOT IN ('run', 'grading', 'judge'))
           AS kept_categories,
       array_agg(DISTINCT substr(stream_id, position('-' IN stream_id) + 1, 36))
           FILTER (WHERE category IN ('run', 'grading', 'judge')) AS runs,
       max(tx_id) AS last_tx, max(global_position) AS last_position
  FROM props.events WHERE global_position >= $1 AND global_position < $2

-- lagging_checkpoints --
-- Consumers that have not read past (tx, position) yet: archiving would take events from
-- under them.
SELECT name, tx_id::text AS tx_id, position FROM props.checkpoints
 WHERE (tx_id, position) < ($1::xid8, $2::bigint) ORDER BY name

-- held_back_in_range --
-- Events between positions $1 and $2 that the visibility fence still hides (written by a
-- transaction at or past it): an export of the range would miss them.
SELECT count(*) FROM props.events
 WHERE global_position BETWEEN $1 AND $2
   AND tx_id >= pg_snapshot_xmin(pg_current_snapshot())

-- mark_archived --
UPDATE props.log_partitions
   SET state = 'archived', archive_file = $2, archive_sha256 = $3, events = $4,
       archived_at = now()
 WHERE name = $1 AND state = 'hot'
RETURNING name

-- restore_partition --
-- An archived partition's rows (staged in import_events), back at their original positions
-- and transactions: the owner's function checks they are the rows the partition held.
SELECT props.restore_partition($1)

-- archived_by_sha --
SELECT name, from_position, to_position, events FROM props.log_partitions
 WHERE state = 'archived' AND archive_sha256 = $1

-- partitions --
SELECT name, from_position, to_position, state, archive_file, events, archived_at,
       (SELECT count(*) FROM props.events e
         WHERE e.global_position >= p.from_position AND e.global_position < p.to_position
           AND p.state = 'hot') AS hot_events
  FROM props.log_partitions p ORDER BY from_position

-- detach_partition --
-- {partition}: a partition's name as props.log_partitions records it (never a user's string),
-- put in by the caller with str.format: DDL takes no parameters.
ALTER TABLE props.events DETACH PARTITION props.{partition}

-- count_detached --
SELECT count(*) FROM props.{partition}

-- drop_detached --
DROP TABLE props.{partition}
