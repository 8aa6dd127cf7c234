-- An import's records of the origin's consumers are history here (issue 55): a whole-log
-- or evaluation export of another database (the demo's) imports without --inert, and its
-- streams stay dense and readable.
--
-- 1. `scorer.activated` and `run.excluded` in a stream the file brings whole (`history`)
--    are appended in place, as the origin recorded them, so that its scorer's stream stays
--    dense (taking the activation out left `scorer-tiered` with a hole: refused). What
--    acts on them here ignores an imported event (RecordedEvent.imported): the active
--    scorer, the grader and the projection's `active_scorer` read only this database's own
--    activations; an imported exclusion can only name a run the file brings.
-- 2. The origin's parks, retries, retention holds and launchers (`consumers`: whole
--    streams of its reactors, retention and launchers) no longer refuse the file: they are
--    kept as `import.inert` history, as --inert kept them; nothing here reads them.
-- 3. What would change this database's own streams or runs (`own_stream`, `other_origin`,
--    `own_run`) still refuses the file, unless --inert; it is looked for first, so a
--    `scorer.activated` appended to a local scorer's stream is `own_stream`, as before.

CREATE OR REPLACE FUNCTION props.import_refusals(p_origin jsonb)
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
           CASE WHEN o.stream_id IS NOT NULL THEN o.reason
                WHEN r.run_id IS NOT NULL THEN 'own_run'
                WHEN n.type IN ('event.parked', 'parked.retried', 'retention.held',
                                'retention.released', 'launcher.started')
                  OR split_part(n.stream_id, '-', 1) IN ('reactor', 'retention', 'launcher')
                THEN 'consumers'
                ELSE 'history' END,
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

-- As in 0013, but `consumers` are always kept inert and `history` appended in place.
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
      FROM pg_temp.import_refused f WHERE f.reason NOT IN ('consumers', 'history')
     ORDER BY f.line LIMIT 1;
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
       AND NOT EXISTS (SELECT 1 FROM pg_temp.import_refused f
                        WHERE f.line = s.line AND f.reason <> 'history')
     ORDER BY s.position;
    GET DIAGNOSTICS appended = ROW_COUNT;
    IF EXISTS (SELECT 1 FROM pg_temp.import_refused f WHERE f.reason <> 'history') THEN
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
         WHERE f.reason <> 'history' AND NOT EXISTS (SELECT 1 FROM props.event_ids e
                            WHERE e.event_id = md5(v_stream || ':' || s.event_id::text)::uuid)
         ORDER BY s.position;
        GET DIAGNOSTICS inert = ROW_COUNT;
    END IF;
END
$$;
