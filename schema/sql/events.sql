-- Queries of the event store (props.core.store). Blocks are named `-- name --`.
-- read_all, read_category and read_types repeat their select list on purpose: one query
-- with optional filters ("$4 IS NULL OR category = $4") would get a generic plan that
-- cannot use the category index.

-- append_events --
-- One statement: the stream's next versions are computed here. With an expected version
-- ($2 not null) nothing is inserted unless the stream is exactly there. The dense-version
-- trigger refuses what a concurrent writer would make inconsistent.
WITH ins AS (
    INSERT INTO props.events
           (event_id, stream_id, stream_version, type, schema_version, data, metadata)
    SELECT u.event_id, $1, h.version + u.n::integer, u.type, u.schema_version, u.data,
           u.metadata
      FROM (SELECT coalesce((SELECT version FROM props.streams WHERE stream_id = $1), 0)
                   AS version) h,
           unnest($3::uuid[], $4::text[], $5::smallint[], $6::jsonb[], $7::jsonb[])
           WITH ORDINALITY AS u(event_id, type, schema_version, data, metadata, n)
     WHERE $2::integer IS NULL OR h.version = $2::integer
    RETURNING stream_version
)
SELECT count(*)::integer, max(stream_version) FROM ins

-- append_one --
-- The same for a single event, without arrays: the most common append, kept lean.
-- Returns the new version, or no row when the stream is not at the expected version.
INSERT INTO props.events
       (event_id, stream_id, stream_version, type, schema_version, data, metadata)
SELECT $3, $1, h.version + 1, $4, $5, $6, $7
  FROM (SELECT coalesce((SELECT version FROM props.streams WHERE stream_id = $1), 0)
               AS version) h
 WHERE $2::integer IS NULL OR h.version = $2::integer
RETURNING stream_version

-- stream_versions --
SELECT stream_id, version FROM props.streams WHERE stream_id = ANY ($1::text[])

-- category_streams --
-- The ids of one category's streams ($1: `snapshot` for `snapshot-...`), as committed now.
SELECT stream_id FROM props.streams WHERE starts_with(stream_id, $1 || '-') ORDER BY stream_id

-- stored_by_stream --
SELECT e.stream_id, count(*)::integer AS found, max(e.stream_version) AS last
  FROM props.event_ids i JOIN props.events e ON e.global_position = i.global_position
 WHERE i.event_id = ANY ($1::uuid[]) GROUP BY e.stream_id

-- stored_event_ids --
-- For an append that hit a unique violation: is it a retry of an append that is stored?
-- Ids are looked up in props.event_ids (every id ever appended, archived ones too).
SELECT count(*)::integer AS found,
       (count(*) FILTER (WHERE e.stream_id = $2))::integer AS in_stream,
       max(e.stream_version) FILTER (WHERE e.stream_id = $2) AS last_version
  FROM props.event_ids i LEFT JOIN props.events e ON e.global_position = i.global_position
 WHERE i.event_id = ANY ($1::uuid[])

-- stream_version --
SELECT coalesce((SELECT version FROM props.streams WHERE stream_id = $1), 0)

-- read_stream --
SELECT global_position, tx_id, event_id, stream_id, stream_version, type, schema_version,
       data, metadata, recorded_at
  FROM props.events
 WHERE stream_id = $1 AND stream_version >= $2
 ORDER BY stream_version
 LIMIT $3

-- read_streams --
-- Several whole streams at once ($1), each in version order.
SELECT global_position, tx_id, event_id, stream_id, stream_version, type, schema_version,
       data, metadata, recorded_at
  FROM props.events
 WHERE stream_id = ANY ($1::text[])
 ORDER BY stream_id, stream_version

-- count_after --
-- How many events the log holds after position $1 (0: every one): a progress bar's total.
SELECT count(*) FROM props.events WHERE global_position > $1

-- count_of_type --
-- How many events of type $2 the streams $1 hold, read directly as streams are: a client's
-- wait for an outcome (how many of these runs finished).
SELECT count(*) FROM props.events WHERE stream_id = ANY ($1::text[]) AND type = $2

-- ping --
-- Does the database answer (a health probe): one round trip, nothing read.
SELECT 1

-- read_all --
-- The visibility fence: only rows of transactions older than every transaction still in
-- progress, so no row can later appear before the returned ones.
SELECT global_position, tx_id, event_id, stream_id, stream_version, type, schema_version,
       data, metadata, recorded_at
  FROM props.events
 WHERE (tx_id, global_position) > ($1::xid8, $2::bigint)
   AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
 ORDER BY tx_id, global_position
 LIMIT $3

-- read_category --
SELECT global_position, tx_id, event_id, stream_id, stream_version, type, schema_version,
       data, metadata, recorded_at
  FROM props.events
 WHERE category = $4
   AND (tx_id, global_position) > ($1::xid8, $2::bigint)
   AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
 ORDER BY tx_id, global_position
 LIMIT $3

-- read_types --
SELECT global_position, tx_id, event_id, stream_id, stream_version, type, schema_version,
       data, metadata, recorded_at
  FROM props.events
 WHERE (tx_id, global_position) > ($1::xid8, $2::bigint)
   AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
   AND type = ANY ($4::text[])
 ORDER BY tx_id, global_position
 LIMIT $3

-- head --
-- The last event (by read order) that is behind the fence, and the last one at all.
SELECT last.tx_id AS last_tx, last.global_position AS last_position,
       (SELECT count(*) FROM props.events
         WHERE tx_id >= pg_snapshot_xmin(pg_current_snapshot())) AS held_back,
       pg_snapshot_xmin(pg_current_snapshot()) AS fence
  FROM (SELECT 1) one
  LEFT JOIN LATERAL (
        SELECT tx_id, global_position FROM props.events
         WHERE tx_id < pg_snapshot_xmin(pg_current_snapshot())
         ORDER BY tx_id DESC, global_position DESC LIMIT 1) last ON true

-- fence_blockers --
-- Transactions holding the fence back: every transaction with an id at or below the fence is
-- still running, oldest first. Only closed facts, never the query text.
SELECT pid, datname AS database, usename AS "user", application_name AS application, state,
       coalesce(extract(epoch FROM now() - xact_start)::float8, 0) AS age_seconds,
       backend_xid::text AS xid
  FROM pg_stat_activity
 WHERE backend_xid IS NOT NULL
   AND pid <> pg_backend_pid()
 ORDER BY xact_start
 LIMIT $1

-- put_blob --
INSERT INTO props.blobs (sha256, size, compression, content)
VALUES ($1, $2, $3, $4)
ON CONFLICT (sha256) DO NOTHING

-- insert_staged_blobs --
-- An import's blobs, from its staging table (exports.sql's stage_tables): the blob store
-- is written here only.
INSERT INTO props.blobs (sha256, size, compression, content)
SELECT DISTINCT ON (sha256) sha256, size, compression, content FROM import_blobs
ON CONFLICT (sha256) DO NOTHING

-- get_blob --
SELECT size, compression, content FROM props.blobs WHERE sha256 = $1

-- get_blobs --
SELECT sha256, size, compression, content FROM props.blobs WHERE sha256 = ANY ($1::bytea[])

-- load_checkpoint --
SELECT tx_id, position FROM props.checkpoints WHERE name = $1

-- overwrite_checkpoint --
-- A rebuild's swap: the checkpoint is set whatever it was (the swap holds the live tables).
INSERT INTO props.checkpoints (name, tx_id, position) VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE
   SET tx_id = excluded.tx_id, position = excluded.position, updated_at = now()

-- forget_checkpoints --
DELETE FROM props.checkpoints WHERE starts_with(name, $1)

-- start_checkpoint --
-- Compare-and-set from the start of the log: creates the checkpoint, or moves one still at
-- the start. Returns no row when another consumer moved it meanwhile.
INSERT INTO props.checkpoints AS c (name, tx_id, position)
VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE
   SET tx_id = excluded.tx_id, position = excluded.position, updated_at = now()
 WHERE c.tx_id = '0'::xid8 AND c.position = 0
RETURNING name

-- move_checkpoint --
-- Compare-and-set: moves only from the position the caller last read.
UPDATE props.checkpoints
   SET tx_id = $4, position = $5, updated_at = now()
 WHERE name = $1 AND tx_id = $2::xid8 AND position = $3::bigint
RETURNING name

-- stale_partitions --
-- Hot partitions of the log whose rows changed by more than a fifth since they were last
-- analyzed (the autovacuum daemon analyzes at a tenth, but only once it comes by).
SELECT format('%I.%I', s.schemaname, s.relname)
  FROM pg_stat_user_tables s
  JOIN props.log_partitions p ON p.name = s.relname
 WHERE s.schemaname = 'props' AND p.state = 'hot'
   AND s.n_mod_since_analyze > greatest(1000, 0.2 * s.n_live_tup)
 ORDER BY p.from_position

-- ensure_partitions --
-- Make the log's partitions reach past the next position (and $1 more).
SELECT props.ensure_partitions($1)

-- streams_by_prefix --
-- The streams whose id starts with $1 (a LIKE pattern), and how many there are: the first 10.
SELECT stream_id, count(*) OVER () FROM props.streams WHERE stream_id LIKE $1
ORDER BY stream_id LIMIT 10
