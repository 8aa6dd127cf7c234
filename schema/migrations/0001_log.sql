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

-- After every INSERT statement, whoever the writer (the store, an import, an agent's
-- function): (1) each stream's new versions must be dense and continue the stream, written
-- by a transaction no older than the stream's last writer, so readers ordering by tx_id see
-- every stream in version order; (2) NOTIFY, only as a hint: one tiny, identical payload per
-- transaction (PostgreSQL folds duplicates), consumers then read the table.
CREATE FUNCTION props.refuse_out_of_order(p_stream_id text, p_first integer, p_last integer)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_actual integer;
    v_tx xid8;
BEGIN
    SELECT e.stream_version, e.tx_id INTO v_actual, v_tx FROM props.events e
     WHERE e.stream_id = p_stream_id AND e.stream_version < p_first
     ORDER BY e.stream_version DESC LIMIT 1;
    RAISE EXCEPTION 'stream % would not stay dense and ordered', p_stream_id
        USING ERRCODE = 'PX409',
              DETAIL = coalesce(v_actual, 0)::text,
              HINT = CASE WHEN v_actual = p_first - 1
                     THEN 'the stream was last written by a younger transaction: retry'
                     ELSE format('versions %s..%s do not follow the stream''s version %s',
                                 p_first, p_last, coalesce(v_actual, 0)) END;
END
$$;

CREATE FUNCTION props.after_append() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    s record;
BEGIN
    FOR s IN SELECT stream_id, min(stream_version) AS first, max(stream_version) AS last,
                    count(*) AS rows
               FROM new_rows GROUP BY stream_id
    LOOP
        IF s.last - s.first + 1 <> s.rows
           OR (s.first > 1 AND NOT EXISTS (
                SELECT 1 FROM props.events p
                 WHERE p.stream_id = s.stream_id AND p.stream_version = s.first - 1
                   AND p.tx_id <= pg_current_xact_id()))
        THEN
            PERFORM props.refuse_out_of_order(s.stream_id, s.first, s.last);
        END IF;
    END LOOP;
    PERFORM pg_notify('props_events', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER events_after_append
    AFTER INSERT ON props.events
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION props.after_append();

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
