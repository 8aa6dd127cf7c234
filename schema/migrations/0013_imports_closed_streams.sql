-- What an import may not bring, tightened (issue 43, after a probe of 0011):
--
-- 1. Ids are compared as uuids, not as text. A file could name a critic run of this
--    database's own in another spelling (upper case, braces, no hyphens): the text checks
--    missed it, the projections (which parse ids) did not. props.uuid_or_null reads any
--    spelling PostgreSQL takes; the run ids a staged event names (its stream's, its data's)
--    are compared with this database's runs as uuids. (The verifier also refuses any
--    spelling but the canonical one, naming the line: core.domain.canonical_ids.)
-- 2. A stream holding any event of this database's own (not brought by an import) is closed
--    to imports, whatever the event's type: snapshot versions too (an import appending one
--    to a snapshot of this database's amended its ground truth), and streams an import
--    began but this database continued.
-- 3. A stream an import brought is continued only by a file of the same origin: the same
--    signer (`unsigned` continues only what unsigned files brought). Refused as
--    `other_origin`.

CREATE FUNCTION props.uuid_or_null(p_text text) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog AS $$
    SELECT CASE WHEN p_text ~* '^(\{[0-9a-f]{4}(-?[0-9a-f]{4}){7}\}|[0-9a-f]{4}(-?[0-9a-f]{4}){7})$'
                THEN p_text::uuid END
$$;
REVOKE ALL ON FUNCTION props.uuid_or_null(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION props.uuid_or_null(text) TO props_service;

DROP FUNCTION props.import_refusals();

-- The staged events (new to this log) that an import of origin p_origin may not bring,
-- with why: `consumers` (a type that acts on this database's consumers), `own_stream`
-- (appends to a stream holding an event of this database's own, or whose first event is
-- not here), `other_origin` (continues a stream an import of another signer brought),
-- `own_run` (names a critic run begun here: `run_id`). plpgsql: the staging table is the
-- session's.
CREATE FUNCTION props.import_refusals(p_origin jsonb)
RETURNS TABLE (line integer, stream_id text, type text, reason text, run_id text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, props AS $$
BEGIN
    RETURN QUERY
    WITH new AS MATERIALIZED (
        SELECT s.line, s.stream_id, s.type, s.data FROM pg_temp.import_events s
         WHERE NOT EXISTS (SELECT 1 FROM props.event_ids e WHERE e.event_id = s.event_id)
    ), closed AS MATERIALIZED (  -- streams here that this import may not append to
        SELECT t.stream_id,
               CASE WHEN first.signer IS NULL OR EXISTS (
                         SELECT 1 FROM props.events e
                          WHERE e.stream_id = t.stream_id
                            AND NOT EXISTS (SELECT 1 FROM props.importing i
                                             WHERE i.tx_id = e.tx_id))
                    THEN 'own_stream' ELSE 'other_origin' END AS reason,
               first.signer
          FROM (SELECT DISTINCT n.stream_id FROM new n) t
          JOIN props.streams st ON st.stream_id = t.stream_id
          LEFT JOIN LATERAL (  -- the stream's first event, when an import brought it
               SELECT coalesce(e.metadata->'origin'->>'signer', '') AS signer
                 FROM props.events e JOIN props.importing i ON i.tx_id = e.tx_id
                WHERE e.stream_id = t.stream_id AND e.stream_version = 1) first ON true
    ), named AS MATERIALIZED (
        SELECT n.line, props.uuid_or_null(r.run_id) AS run_id FROM new n
         CROSS JOIN LATERAL (
               SELECT (regexp_match(n.stream_id,
                      '^(?:run|grading|judge|review|retention)-(\{?[0-9a-f]{4}(?:-?[0-9a-f]{4}){7}\}?)',
                      'i'))[1]
               UNION ALL SELECT n.data->>'run_id'
               UNION ALL SELECT n.data->>'critique_run_id'
               UNION ALL SELECT x->>'run_id'
                 FROM jsonb_array_elements(CASE WHEN n.type = 'archive.imported'
                                                 AND jsonb_typeof(n.data->'runs') = 'array'
                                                THEN n.data->'runs' ELSE '[]' END) x
         ) r(run_id)
    ), own_runs AS MATERIALIZED (
        SELECT t.run_id FROM (SELECT DISTINCT m.run_id FROM named m
                               WHERE m.run_id IS NOT NULL) t
          JOIN props.streams st ON st.stream_id = 'run-' || t.run_id::text
         WHERE NOT EXISTS (SELECT 1 FROM props.events e
                             JOIN props.importing i ON i.tx_id = e.tx_id
                            WHERE e.stream_id = 'run-' || t.run_id::text
                              AND e.stream_version = 1)
    ), own_named AS MATERIALIZED (  -- per line, the first run of this database's it names
        SELECT DISTINCT ON (m.line) m.line, m.run_id FROM named m JOIN own_runs w USING (run_id)
         ORDER BY m.line, m.run_id
    ), shut AS (  -- the closed streams this import may not append to
        SELECT c.stream_id, c.reason FROM closed c
         WHERE c.reason = 'own_stream'
            OR c.signer IS DISTINCT FROM coalesce(p_origin->>'signer', '')
    )
    SELECT n.line, n.stream_id, n.type,
           CASE WHEN n.type IN ('event.parked', 'parked.retried', 'run.excluded',
                                'scorer.activated', 'retention.held', 'retention.released',
                                'launcher.started')
                  OR split_part(n.stream_id, '-', 1) IN ('reactor', 'retention', 'launcher')
                THEN 'consumers'
                WHEN o.stream_id IS NOT NULL THEN o.reason
                ELSE 'own_run' END,
           r.run_id::text
      FROM new n
      LEFT JOIN shut o ON o.stream_id = n.stream_id
      LEFT JOIN own_named r ON r.line = n.line
     WHERE n.type IN ('event.parked', 'parked.retried', 'run.excluded', 'scorer.activated',
                      'retention.held', 'retention.released', 'launcher.started')
        OR split_part(n.stream_id, '-', 1) IN ('reactor', 'retention', 'launcher')
        OR o.stream_id IS NOT NULL OR r.run_id IS NOT NULL
     ORDER BY n.line;
END
$$;
REVOKE ALL ON FUNCTION props.import_refusals(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION props.import_refusals(jsonb) TO props_service;

-- As in 0011, but the check is given the import's origin (its signer).
CREATE OR REPLACE FUNCTION props.import_staged(p_origin jsonb, p_inert boolean,
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
    INSERT INTO pg_temp.import_refused SELECT * FROM props.import_refusals(p_origin);
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
