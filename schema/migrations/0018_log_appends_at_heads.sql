-- The log's one way in for a statement that makes its events on the server (grading on the
-- server, props.core.scoring.server_grading): each event given is appended at the head of
-- its stream (one event per stream per call), but those whose ids are stored already (a
-- repeated grading appends nothing); the append trigger checks ids and versions as for any
-- append. Returns the ids appended. So no SQL outside the log's own writes props.events,
-- reads its streams' heads or its ids (docs/internals/layout.md, the SQL owners).
CREATE FUNCTION props.append_at_heads(p_event_ids uuid[], p_stream_ids text[], p_types text[],
                                      p_schema_versions smallint[], p_data jsonb[])
RETURNS SETOF uuid
LANGUAGE sql VOLATILE AS $$
    WITH stored AS (
        -- looked up by index, a chunk's worth: a join would read the whole table
        SELECT event_id FROM props.event_ids WHERE event_id = ANY (p_event_ids)
    ), heads AS (
        SELECT stream_id, version FROM props.streams WHERE stream_id = ANY (p_stream_ids)
    )
    INSERT INTO props.events (event_id, stream_id, stream_version, type, schema_version, data)
    SELECT g.event_id, g.stream_id, coalesce(h.version, 0) + 1, g.type, g.schema_version,
           g.data
      FROM unnest(p_event_ids, p_stream_ids, p_types, p_schema_versions, p_data)
           AS g(event_id, stream_id, type, schema_version, data)
      LEFT JOIN heads h ON h.stream_id = g.stream_id
     WHERE g.event_id NOT IN (SELECT event_id FROM stored)
    RETURNING event_id
$$;
REVOKE ALL ON FUNCTION props.append_at_heads(uuid[], text[], text[], smallint[], jsonb[])
    FROM PUBLIC;
-- the service grades on the server (its role appends as the owner's would)
GRANT EXECUTE ON FUNCTION props.append_at_heads(uuid[], text[], text[], smallint[], jsonb[])
    TO props_service;
