-- The log: the events table (the only source of truth), content-addressed blobs, and the
-- checkpoints of the consumers that follow the log.

CREATE SCHEMA props;

CREATE TABLE props.events (
    global_position bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The writing transaction; readers order by (tx_id, global_position) behind the
    -- visibility fence, so a position taken early but committed late is never skipped.
    tx_id           xid8        NOT NULL DEFAULT pg_current_xact_id(),
    event_id        uuid        NOT NULL,
    stream_id       text        NOT NULL,
    stream_version  integer     NOT NULL,
    category        text        NOT NULL GENERATED ALWAYS AS (split_part(stream_id, '-', 1)) STORED,
    type            text        NOT NULL,
    schema_version  smallint    NOT NULL,
    data            jsonb       NOT NULL,
    metadata        jsonb       NOT NULL DEFAULT '{}',
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT events_event_id_key UNIQUE (event_id),
    CONSTRAINT events_stream_version_key UNIQUE (stream_id, stream_version),
    CONSTRAINT events_stream_id_shape CHECK (stream_id ~ '^[a-z][a-z0-9_]*-.'),
    CONSTRAINT events_stream_version_positive CHECK (stream_version >= 1),
    CONSTRAINT events_schema_version_positive CHECK (schema_version >= 1),
    CONSTRAINT events_type_nonempty CHECK (type <> ''),
    CONSTRAINT events_data_object CHECK (jsonb_typeof(data) = 'object'),
    CONSTRAINT events_metadata_object CHECK (jsonb_typeof(metadata) = 'object')
);

CREATE INDEX events_fence_idx ON props.events (tx_id, global_position);
CREATE INDEX events_category_fence_idx ON props.events (category, tx_id, global_position);

COMMENT ON TABLE props.events IS
    'The append-only log. Every other table is derived from it. Never updated or deleted.';

-- Append-only, enforced by the database for every role, including the owner.
CREATE FUNCTION props.refuse_log_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'PX001',
              HINT = 'The log is never rewritten: append a correcting event instead.';
END
$$;

CREATE TRIGGER events_append_only
    BEFORE UPDATE OR DELETE OR TRUNCATE ON props.events
    FOR EACH STATEMENT EXECUTE FUNCTION props.refuse_log_change();

-- NOTIFY is only a hint that something was appended: one tiny, identical payload per
-- transaction (PostgreSQL folds duplicates), consumers then read the table.
CREATE FUNCTION props.notify_appended() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('props_events', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER events_notify
    AFTER INSERT ON props.events
    FOR EACH STATEMENT EXECUTE FUNCTION props.notify_appended();

-- Append a batch to one stream, atomically, in one round trip.
--   p_expected: NULL = any version, 0 = the stream must not exist, n = exactly version n.
-- Idempotent by event id: if every id of the batch is already in this stream, nothing is
-- written and the stored rows are returned with appended = false.
-- Conflicts raise SQLSTATE PX409 with the actual version in DETAIL.
CREATE FUNCTION props.append_events(
    p_stream_id text,
    p_expected integer,
    p_event_ids uuid[],
    p_types text[],
    p_schema_versions smallint[],
    p_data jsonb[],
    p_metadata jsonb[]
) RETURNS TABLE (global_position bigint, stream_version integer, appended boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_current integer;
    v_last_tx xid8;
    v_found integer;
    v_n integer := cardinality(p_event_ids);
BEGIN
    SELECT count(*), count(*) FILTER (WHERE e.stream_id = p_stream_id)
      INTO v_found, v_current
      FROM props.events e WHERE e.event_id = ANY (p_event_ids);
    IF v_found > 0 THEN
        IF v_current = v_n THEN
            RETURN QUERY SELECT e.global_position, e.stream_version, false FROM props.events e
                          WHERE e.event_id = ANY (p_event_ids) ORDER BY e.stream_version;
            RETURN;
        END IF;
        RAISE EXCEPTION 'events of this batch are already stored elsewhere'
            USING ERRCODE = 'PX410',
                  DETAIL = format('%s of %s event ids exist, %s of them in stream %s',
                                  v_found, v_n, v_current, p_stream_id);
    END IF;

    SELECT e.stream_version, e.tx_id INTO v_current, v_last_tx
      FROM props.events e WHERE e.stream_id = p_stream_id
     ORDER BY e.stream_version DESC LIMIT 1;
    v_current := coalesce(v_current, 0);

    IF p_expected IS NOT NULL AND p_expected <> v_current THEN
        RAISE EXCEPTION 'wrong expected version' USING ERRCODE = 'PX409', DETAIL = v_current::text;
    END IF;
    -- Readers order by transaction id. A transaction that took its id before the stream's
    -- last writer would be read before it: refuse, so per-stream order is the read order.
    IF v_last_tx IS NOT NULL AND v_last_tx > pg_current_xact_id() THEN
        RAISE EXCEPTION 'stream written by a younger transaction'
            USING ERRCODE = 'PX409', DETAIL = v_current::text;
    END IF;

    RETURN QUERY
    INSERT INTO props.events AS e
        (event_id, stream_id, stream_version, type, schema_version, data, metadata)
    SELECT u.event_id, p_stream_id, v_current + u.n::integer, u.type, u.schema_version,
           u.data, u.metadata
      FROM unnest(p_event_ids, p_types, p_schema_versions, p_data, p_metadata)
           WITH ORDINALITY AS u(event_id, type, schema_version, data, metadata, n)
    RETURNING e.global_position, e.stream_version, true;
END
$$;

-- Content-addressed large payloads (prompts, transcripts, logs): sha256 of the raw bytes,
-- stored zstd-compressed. Written once, never changed.
CREATE TABLE props.blobs (
    sha256      bytea       PRIMARY KEY,
    size        bigint      NOT NULL,
    compression text        NOT NULL,
    content     bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT blobs_sha256_length CHECK (octet_length(sha256) = 32),
    CONSTRAINT blobs_size_nonnegative CHECK (size >= 0),
    CONSTRAINT blobs_compression_known CHECK (compression IN ('zstd', 'none'))
);
-- Already compressed: keep PostgreSQL from trying to compress it again.
ALTER TABLE props.blobs ALTER COLUMN content SET STORAGE EXTERNAL;

CREATE TRIGGER blobs_append_only
    BEFORE UPDATE OR DELETE OR TRUNCATE ON props.blobs
    FOR EACH STATEMENT EXECUTE FUNCTION props.refuse_log_change();

-- Durable positions of consumers (subscriptions, projections, reactors), written with
-- compare-and-set, in the same transaction as the consumer's own effects.
CREATE TABLE props.checkpoints (
    name        text        PRIMARY KEY,
    tx_id       xid8        NOT NULL,
    position    bigint      NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
