-- Queries of the projection runner and rebuild (props.projections.engine).

-- tables_in_schema --
SELECT tablename FROM pg_tables WHERE schemaname = $1

-- lag --
-- Events after a checkpoint (committed or not yet behind the fence) and the age of the oldest.
SELECT count(*) AS events, extract(epoch FROM now() - min(recorded_at))::float8 AS seconds
  FROM props.events
 WHERE (tx_id, global_position) > ($1::xid8, $2::bigint)

-- chunk_end --
-- Where the next chunk of a fold ends, its size and kinds of events (see props.chunk_end).
SELECT tx_id, global_position, events, types, schema_versions
  FROM props.chunk_end($1::xid8, $2::bigint, $3::integer)

-- read_between --
-- Events of the types $5 after ($1, $2) up to ($3, $4), a range already behind the fence: of
-- each type, those stored under another schema version than the one given in $6 (0: all).
SELECT global_position, tx_id, event_id, stream_id, stream_version, type, schema_version,
       data, metadata, recorded_at
  FROM props.events
 WHERE (tx_id, global_position) > ($1::xid8, $2::bigint)
   AND (tx_id, global_position) <= ($3::xid8, $4::bigint)
   AND type = ANY ($5::text[])
   AND schema_version <> ($6::int[])[array_position($5::text[], type)]
 ORDER BY tx_id, global_position

-- range_envelopes --
-- The events of a range in read order, envelopes only: where a poisoned fold is bisected.
SELECT tx_id, global_position, event_id
  FROM props.events
 WHERE (tx_id, global_position) > ($1::xid8, $2::bigint)
   AND (tx_id, global_position) <= ($3::xid8, $4::bigint)
 ORDER BY tx_id, global_position

-- end_projection_readers --
-- Ends the analyst sessions that hold a lock on the live projections (migration 0012).
SELECT pid, role_name AS role FROM props.end_projection_readers()

-- settled --
-- Of runs $1, how many the projections show finished, and how many reported issues of any
-- run wait for the active scorer (props.projections.status.settled).
SELECT (SELECT count(*) FROM projections.agent_runs
         WHERE run_id = ANY ($1::uuid[]) AND finished_at IS NOT NULL) AS finished,
       (SELECT count(*) FROM projections.grading_pending) AS pending
