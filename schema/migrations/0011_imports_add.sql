-- What arrives from an export file adds; it never changes what is this database's own.
--
-- 1. One function appends an import: props.import_staged, the owner's. It checks the staged
--    file (the session's `import_events`, see schema/sql/exports.sql) before it writes
--    anything, marks its transaction as an import and appends. props.mark_import (0009) is
--    gone: marking a transaction let the service insert rows with any past time outside
--    any import.
-- 2. An import may bring new streams whole (runs with their grades, snapshots' versions,
--    scorers); props.import_refusals names each staged event that would act on this
--    database's own streams or consumers instead: a park or its retry, an exclusion, an
--    activation, a retention hold, a launcher's record (types no import may bring), an
--    event appended to a stream begun here (but a snapshot's new version), and any event
--    naming a critic run begun here (its grades, its judges, its reviews). Such a file is
--    refused, or, when the operator asks (`props import --inert`), those events are kept
--    as `import.inert` history in a stream of the import's own, which no projection or
--    reactor reads.
-- 3. The time this database recorded an imported event is its import's time
--    (props.importing.recorded_at, set here, never by the caller): `--as-of TIME` reads
--    it, so importing old events never moves what a time names.

ALTER TABLE props.importing ADD COLUMN recorded_at timestamptz NOT NULL DEFAULT now();
-- Imports made before: the time of their own record (archive.imported, at the import's now()).
UPDATE props.importing i
   SET recorded_at = coalesce((SELECT min(e.recorded_at) FROM props.events e
                                WHERE e.tx_id = i.tx_id AND e.type = 'archive.imported'),
                              i.recorded_at);
GRANT SELECT ON props.importing TO props_service, props_analyst;

DROP FUNCTION props.mark_import();

-- The staged events (new to this log) that an import may not bring, with why: `consumers`
-- (a type that acts on this database's consumers), `own_stream` (appends to a stream begun
-- here), `own_run` (names a critic run begun here: `run_id`). A stream or run is this
-- database's own when its first event is here and did not come in by an import (one whose
-- first event was archived counts as its own). plpgsql: the staging table is the session's.
CREATE FUNCTION props.import_refusals()
RETURNS TABLE (line integer, stream_id text, type text, reason text, run_id text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, props AS $$
BEGIN
    RETURN QUERY
    WITH new AS MATERIALIZED (
        SELECT s.line, s.stream_id, s.type, s.data FROM pg_temp.import_events s
         WHERE NOT EXISTS (SELECT 1 FROM props.event_ids e WHERE e.event_id = s.event_id)
    ), own_streams AS MATERIALIZED (
        SELECT t.stream_id FROM (SELECT DISTINCT n.stream_id FROM new n) t
          JOIN props.streams st ON st.stream_id = t.stream_id
         WHERE NOT EXISTS (SELECT 1 FROM props.events e
                             JOIN props.importing i ON i.tx_id = e.tx_id
                            WHERE e.stream_id = t.stream_id AND e.stream_version = 1)
    ), named AS MATERIALIZED (
        SELECT n.line, lower(r.run_id) AS run_id FROM new n
         CROSS JOIN LATERAL (
               SELECT substring(n.stream_id FROM
                      '^(?:run|grading|judge|review|retention)-([0-9a-f]{8}-[0-9a-f]{4}-'
                      '[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})')
               UNION ALL SELECT n.data->>'run_id'
               UNION ALL SELECT n.data->>'critique_run_id'
               UNION ALL SELECT x->>'run_id'
                 FROM jsonb_array_elements(CASE WHEN n.type = 'archive.imported'
                                                 AND jsonb_typeof(n.data->'runs') = 'array'
                                                THEN n.data->'runs' ELSE '[]' END) x
         ) r(run_id)
         WHERE r.run_id IS NOT NULL
    ), own_runs AS MATERIALIZED (
        SELECT t.run_id FROM (SELECT DISTINCT m.run_id FROM named m) t
          JOIN props.streams st ON st.stream_id = 'run-' || t.run_id
         WHERE NOT EXISTS (SELECT 1 FROM props.events e
                             JOIN props.importing i ON i.tx_id = e.tx_id
                            WHERE e.stream_id = 'run-' || t.run_id AND e.stream_version = 1)
    ), own_named AS MATERIALIZED (  -- per line, the first run of this database's it names
        SELECT DISTINCT ON (m.line) m.line, m.run_id FROM named m JOIN own_runs w USING (run_id)
         ORDER BY m.line, m.run_id
    )
    SELECT n.line, n.stream_id, n.type,
           CASE WHEN n.type IN ('event.parked', 'parked.retried', 'run.excluded',
                                'scorer.activated', 'retention.held', 'retention.released',
                                'launcher.started')
                  OR split_part(n.stream_id, '-', 1) IN ('reactor', 'retention', 'launcher')
                THEN 'consumers'
                WHEN o.stream_id IS NOT NULL THEN 'own_stream'
                ELSE 'own_run' END,
           r.run_id
      FROM new n
      LEFT JOIN own_streams o
        ON o.stream_id = n.stream_id AND n.type <> 'snapshot.synced'
      LEFT JOIN own_named r ON r.line = n.line
     WHERE n.type IN ('event.parked', 'parked.retried', 'run.excluded', 'scorer.activated',
                      'retention.held', 'retention.released', 'launcher.started')
        OR split_part(n.stream_id, '-', 1) IN ('reactor', 'retention', 'launcher')
        OR o.stream_id IS NOT NULL OR r.run_id IS NOT NULL
     ORDER BY n.line;
END
$$;
REVOKE ALL ON FUNCTION props.import_refusals() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION props.import_refusals() TO props_service;

-- Appends the staged import: first the check (a refusal returns its first event, by line,
-- and nothing is written), then the mark (the transaction's time is the import's), then
-- the new events, each with its origin ($1, with the import's time) in metadata, and with
-- p_inert the refused ones as `import.inert` in the stream `inert-<archive>`. Returns
-- (appended, inert, refused line, type, stream, reason, run).
CREATE FUNCTION props.import_staged(p_origin jsonb, p_inert boolean,
                                    OUT appended integer, OUT inert integer,
                                    OUT refused_line integer, OUT refused_type text,
                                    OUT refused_stream text, OUT refused_reason text,
                                    OUT refused_run text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, props AS $$
DECLARE
    v_origin jsonb := p_origin || jsonb_build_object('recorded_here', now());
    v_stream text := 'inert-' || (p_origin->>'archive');
BEGIN
    appended := 0;
    inert := 0;
    CREATE TEMP TABLE IF NOT EXISTS pg_temp.import_refused (line integer PRIMARY KEY, stream_id text,
        type text, reason text, run_id text) ON COMMIT DROP;
    TRUNCATE pg_temp.import_refused;
    INSERT INTO pg_temp.import_refused SELECT * FROM props.import_refusals();
    SELECT f.line, f.type, f.stream_id, f.reason, f.run_id
      INTO refused_line, refused_type, refused_stream, refused_reason, refused_run
      FROM pg_temp.import_refused f ORDER BY f.line LIMIT 1;
    IF refused_line IS NOT NULL AND NOT p_inert THEN
        RETURN;
    END IF;
    INSERT INTO props.importing (tx_id) VALUES (pg_current_xact_id()) ON CONFLICT DO NOTHING;
    INSERT INTO props.events (event_id, stream_id, stream_version, type, schema_version, data,
                              metadata, recorded_at)
    SELECT s.event_id, s.stream_id, s.stream_version, s.type, s.schema_version, s.data,
           s.metadata || jsonb_build_object('origin_position', s.position, 'origin', v_origin),
           s.recorded_at
      FROM pg_temp.import_events s
     WHERE NOT EXISTS (SELECT 1 FROM props.event_ids e WHERE e.event_id = s.event_id)
       AND NOT EXISTS (SELECT 1 FROM pg_temp.import_refused f WHERE f.line = s.line)
     ORDER BY s.position;
    GET DIAGNOSTICS appended = ROW_COUNT;
    IF refused_line IS NOT NULL THEN
        INSERT INTO props.events (event_id, stream_id, stream_version, type, schema_version,
                                  data, metadata)
        SELECT md5(v_stream || ':' || s.event_id::text)::uuid, v_stream,
               coalesce((SELECT h.version FROM props.streams h WHERE h.stream_id = v_stream), 0)
               + row_number() OVER (ORDER BY s.position),
               'import.inert', 1,
               jsonb_build_object('line', s.line, 'reason', f.reason,
                                  'event', jsonb_build_object(
                                      'event_id', s.event_id, 'stream_id', s.stream_id,
                                      'stream_version', s.stream_version, 'type', s.type,
                                      'schema_version', s.schema_version, 'data', s.data,
                                      'metadata', s.metadata, 'recorded_at', s.recorded_at,
                                      'position', s.position)),
               jsonb_build_object('origin', v_origin, 'actor', 'import')
          FROM pg_temp.import_events s JOIN pg_temp.import_refused f ON f.line = s.line
         WHERE NOT EXISTS (SELECT 1 FROM props.event_ids e
                            WHERE e.event_id = md5(v_stream || ':' || s.event_id::text)::uuid)
         ORDER BY s.position;
        GET DIAGNOSTICS inert = ROW_COUNT;
    END IF;
END
$$;
REVOKE ALL ON FUNCTION props.import_staged(jsonb, boolean) FROM PUBLIC;
