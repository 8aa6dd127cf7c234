-- Queries of export files and of their import (core.domain.archive.exports, core.domain.archive.imports).

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

-- unknown_categories --
-- Of the categories an export names ($1), those no event of the log is in (one probe of the
-- category index each): a typo in --exclude-category must not export what it meant to leave out.
SELECT c FROM unnest($1::text[]) AS c
 WHERE NOT EXISTS (SELECT 1 FROM props.events e WHERE e.category = c)
 ORDER BY c

-- categories --
-- Every category of the log, walking the category index from one value to the next.
WITH RECURSIVE c(category) AS (
    (SELECT category FROM props.events ORDER BY category LIMIT 1)
    UNION ALL
    SELECT (SELECT e.category FROM props.events e WHERE e.category > c.category
             ORDER BY e.category LIMIT 1)
      FROM c WHERE c.category IS NOT NULL)
SELECT category FROM c WHERE category IS NOT NULL

-- stage_tables --
-- Per-session staging for an import: verified rows wait here; nothing of the log changes.
CREATE TEMP TABLE import_events (
    position bigint NOT NULL, tx_id bigint, event_id uuid NOT NULL, stream_id text NOT NULL,
    stream_version integer NOT NULL, type text NOT NULL, schema_version smallint NOT NULL,
    data jsonb NOT NULL, metadata jsonb NOT NULL, recorded_at timestamptz NOT NULL,
    line integer  -- the file's line: what a refusal names
);
CREATE TEMP TABLE import_blobs (sha256 bytea, size bigint, compression text, content bytea);

-- stage_events --
-- A chunk of checked events, parsed here, on the server's core, into typed columns: $1 a JSON
-- array of each event's fields by place (event_lines.FIELDS: a version 2 file's line as the chain
-- hashed it, whose steps and time are not read here); $2-$4 the positions, transactions and
-- times the client read them as (a time parsed there, as ISO 8601 with an offset: never one of
-- the server's own readings of text); $5 their lines in the file, all in the same order.
INSERT INTO import_events
SELECT x.position, x.tx_id, (x.f->>2)::uuid, x.f->>3, (x.f->>4)::integer, x.f->>5,
       (x.f->>6)::smallint, x.f->7, x.f->8, x.recorded_at, x.line
  FROM ROWS FROM (jsonb_array_elements($1::jsonb), unnest($2::bigint[]), unnest($3::bigint[]),
                  unnest($4::timestamptz[]), unnest($5::integer[]))
       AS x(f, position, tx_id, recorded_at, line)

-- repeated_event_ids --
-- An event id the file gives twice (the first such, by line): refused before anything is written.
SELECT event_id, min(line) AS first_line, max(line) AS again_line FROM import_events
 GROUP BY event_id HAVING count(*) > 1 ORDER BY min(line) LIMIT 1

-- drop_stage_tables --
DROP TABLE IF EXISTS import_events, import_blobs

-- staged_new_runs --
-- The critic runs whose request this import brings: a new stream `run-<id>` whose request
-- names that run (one naming another run is not this import's to count).
SELECT (s.data->>'run_id')::uuid FROM import_events s
 WHERE s.type = 'run.requested' AND s.stream_id LIKE 'run-%'
   AND lower(s.data->>'run_id') = substring(s.stream_id FROM 5)
   AND NOT EXISTS (SELECT 1 FROM props.event_ids e WHERE e.event_id = s.event_id)
   AND NOT EXISTS (SELECT 1 FROM props.streams t WHERE t.stream_id = s.stream_id)
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

-- import_staged --
-- The verified events the database does not have yet, in their original order, with their
-- origin ($1: the archive and its signer) kept in metadata, appended by the owner's function
-- (migration 0011): it first looks for what an import may not bring and, finding it, writes
-- nothing and names the first such event (or, $2, keeps those as inert history). Their
-- times are the origin's; the time this database recorded them is the import's.
SELECT * FROM props.import_staged($1::jsonb, $2::boolean)

-- import_history --
-- Of the events import_staged just took (in its transaction), the origin's records of its own
-- consumers, by type: `history` appended in place (an activation, an exclusion of a run the
-- file brings), `consumers` kept as import.inert (its parks, retries, holds, launchers).
SELECT reason, type, count(*)::integer AS events FROM pg_temp.import_refused
 WHERE reason IN ('history', 'consumers') GROUP BY reason, type ORDER BY reason, type

-- misfiled_snapshots --
-- A snapshot event in a stream other than its slug's (snapshot-<data.slug>): the folds key
-- snapshots on data.slug, so it would act on that snapshot (retire it, replace its ground
-- truth) from a stream the closed-stream rule never looks at (issue 43).
SELECT line, stream_id, type FROM import_events
 WHERE type LIKE 'snapshot.%' AND stream_id IS DISTINCT FROM 'snapshot-' || (data->>'slug')
 ORDER BY position LIMIT 1

-- future_events --
-- A staged event recorded later than now: no log takes a time it has not reached.
SELECT stream_id, stream_version, recorded_at FROM import_events
 WHERE recorded_at > now() ORDER BY position LIMIT 1
