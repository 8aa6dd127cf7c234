-- A deployment's trusted signers win (issue 54): once the operator trusts a signer (`props
-- keys trust`, events `signer.trusted` in `signers-trusted`), a file none of its trusted
-- signers signed is refused by `props import`, or taken with `--untrusted` as inert history
-- only: `props.import_staged` keeps every new event of such a file (its origin says
-- `"trust": "untrusted"`) as `import.inert` with the reason `untrusted`. It takes no stream,
-- run id, evaluation or model name, so it can never shadow or block what a trusted signer's
-- file brings later. (Files of a deployment that trusts no one are taken as before.)

CREATE OR REPLACE FUNCTION props.import_staged(p_origin jsonb, p_inert boolean,
                                    OUT appended integer, OUT inert integer,
                                    OUT refused_line integer, OUT refused_type text,
                                    OUT refused_stream text, OUT refused_reason text,
                                    OUT refused_run text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, props AS $$
DECLARE
    v_origin jsonb := p_origin || jsonb_build_object('recorded_here', now());
    v_stream text := 'inert-' || (p_origin->>'archive');
    v_untrusted boolean := coalesce(p_origin->>'trust' = 'untrusted', false);
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
    IF refused_line IS NOT NULL AND NOT p_inert AND NOT v_untrusted THEN
        RETURN;
    END IF;
    IF v_untrusted THEN  -- every new event is kept inert: the file takes no id here
        INSERT INTO pg_temp.import_refused
        SELECT s.line, s.stream_id, s.type, 'untrusted', NULL FROM pg_temp.import_events s
         WHERE NOT EXISTS (SELECT 1 FROM props.event_ids e WHERE e.event_id = s.event_id)
        ON CONFLICT (line) DO UPDATE SET reason = 'untrusted';
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
