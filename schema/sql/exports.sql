-- Queries of export files and of their import (core.domain.exports, core.domain.imports).

-- export_page --
-- Committed events (behind the fence) of a position/time/category selection, in position order;
-- $7/$8: only these streams and those LIKE these patterns (an evaluation's), when given.
SELECT global_position, tx_id, event_id, stream_id, stream_version, type, schema_version,
       data, metadata, recorded_at
  FROM props.events
 WHERE global_position > $1
   AND ($2::bigint IS NULL OR global_position <= $2)
   AND ($3::timestamptz IS NULL OR recorded_at >= $3)
   AND ($4::timestamptz IS NULL OR recorded_at < $4)
   AND ($5::text[] IS NULL OR category = ANY ($5::text[]))
   AND ($6::text[] IS NULL OR category <> ALL ($6::text[]))
   AND ($7::text[] IS NULL OR stream_id = ANY ($7::text[]) OR stream_id LIKE ANY ($8::text[]))
   AND tx_id < pg_snapshot_xmin(pg_current_snapshot())
 ORDER BY global_position
 LIMIT $9

-- stage_tables --
-- Per-session staging for an import: verified rows wait here; nothing of the log changes.
CREATE TEMP TABLE import_events (
    position bigint NOT NULL, tx_id bigint, event_id uuid NOT NULL, stream_id text NOT NULL,
    stream_version integer NOT NULL, type text NOT NULL, schema_version smallint NOT NULL,
    data jsonb NOT NULL, metadata jsonb NOT NULL, recorded_at timestamptz NOT NULL
);
CREATE TEMP TABLE import_blobs (sha256 bytea, size bigint, compression text, content bytea);

-- stage_events --
-- A chunk of checked event lines (a JSON array of them), parsed here, on the server's core,
-- into typed columns: the JSON text is what the chain hashed. Keys map to the columns by name;
-- `kind` and `chain` are left out.
INSERT INTO import_events SELECT * FROM jsonb_populate_recordset(NULL::import_events, $1::jsonb)

-- drop_stage_tables --
DROP TABLE IF EXISTS import_events, import_blobs

-- insert_staged_blobs --
INSERT INTO props.blobs (sha256, size, compression, content)
SELECT DISTINCT ON (sha256) sha256, size, compression, content FROM import_blobs
ON CONFLICT (sha256) DO NOTHING

-- staged_new_runs --
-- The critic runs whose request this import brings (not in the log yet).
SELECT (s.data->>'run_id')::uuid FROM import_events s
 WHERE s.type = 'run.requested' AND s.stream_id LIKE 'run-%'
   AND NOT EXISTS (SELECT 1 FROM props.event_ids e WHERE e.event_id = s.event_id)
 ORDER BY s.position

-- backdated_snapshots --
-- A snapshot version (new to this database) recorded before the version it follows, in the
-- log or in the file: it would rewrite which ground truth was in force when.
SELECT s.stream_id, s.stream_version FROM import_events s
  JOIN LATERAL (
       SELECT e.recorded_at FROM props.events e
        WHERE e.stream_id = s.stream_id AND e.stream_version = s.stream_version - 1
       UNION ALL
       SELECT p.recorded_at FROM import_events p
        WHERE p.stream_id = s.stream_id AND p.stream_version = s.stream_version - 1
       LIMIT 1) previous ON true
 WHERE s.stream_id LIKE 'snapshot-%' AND s.recorded_at < previous.recorded_at
   AND NOT EXISTS (SELECT 1 FROM props.event_ids e WHERE e.event_id = s.event_id)
 ORDER BY s.position LIMIT 1

-- insert_staged_events --
-- The verified events the database does not have yet, in their original order, with their
-- origin kept in metadata: the position there, and the archive and its signer ($1). Returns
-- how many were appended. Their times are the origin's, in a transaction marked as an import
-- (mark_import, first in the same transaction; migration 0009): the log takes no other row's
-- time but its own.
WITH ins AS (
    INSERT INTO props.events (event_id, stream_id, stream_version, type, schema_version, data,
                              metadata, recorded_at)
    SELECT s.event_id, s.stream_id, s.stream_version, s.type, s.schema_version, s.data,
           s.metadata || jsonb_build_object('origin_position', s.position, 'origin', $1::jsonb),
           s.recorded_at
      FROM import_events s
     WHERE NOT EXISTS (SELECT 1 FROM props.event_ids e WHERE e.event_id = s.event_id)
     ORDER BY s.position
    RETURNING 1
)
SELECT count(*)::integer FROM ins

-- mark_import --
SELECT props.mark_import()

-- future_events --
-- A staged event recorded later than now: no log takes a time it has not reached.
SELECT stream_id, stream_version, recorded_at FROM import_events
 WHERE recorded_at > now() ORDER BY position LIMIT 1
