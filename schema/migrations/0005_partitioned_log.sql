-- The log, partitioned by position range, so that old ranges can leave the hot table cheaply
-- (`props archive`: export, verify, then detach and drop whole partitions).
--
-- No unique index can span partitions, so what the unique indexes of 0001 enforced moves to
-- two small tables that archival never touches:
--   props.streams    one row per stream: its head version. Appends compute the next version
--                    from it, and the append trigger moves it by compare-and-set, under its
--                    row lock: two writers of one stream serialise there, and the loser is
--                    refused exactly as a unique violation refused it before. A stream whose
--                    events were archived keeps its head, so it never restarts at version 1.
--   props.event_ids  every event id ever appended, with its position: idempotency by event
--                    id holds across partitions and across archival.
-- Partitions are made on demand (props.ensure_partitions: the store calls it when an insert
-- finds no partition, then retries), one partition size apart (props.log_settings).

CREATE TABLE props.log_settings (
    singleton       boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    partition_size  bigint  NOT NULL DEFAULT 1000000 CHECK (partition_size >= 10)
);
INSERT INTO props.log_settings DEFAULT VALUES;

-- The partitions of the log and where each stands: hot (in the table) or archived (detached,
-- dropped, in the file named here, restorable with `props import FILE`).
CREATE TABLE props.log_partitions (
    name            text        PRIMARY KEY,
    from_position   bigint      NOT NULL UNIQUE,
    to_position     bigint      NOT NULL,  -- exclusive
    state           text        NOT NULL DEFAULT 'hot' CHECK (state IN ('hot', 'archived')),
    archive_file    text,
    archive_sha256  text,
    events          bigint,
    archived_at     timestamptz,
    CHECK (to_position > from_position)
);

CREATE TABLE props.streams (
    stream_id  text    PRIMARY KEY,
    version    integer NOT NULL CHECK (version >= 1),
    tx_id      xid8    NOT NULL  -- the transaction that wrote the head
);

CREATE TABLE props.event_ids (
    event_id         uuid   PRIMARY KEY,
    global_position  bigint NOT NULL
);

-- The unpartitioned log of 0001 makes way: its rows move to the partitioned table below.
ALTER TABLE props.events RENAME TO events_0001;
ALTER INDEX props.events_pkey RENAME TO events_0001_pkey;
ALTER INDEX props.events_event_id_key RENAME TO events_0001_event_id_key;
ALTER INDEX props.events_stream_version_key RENAME TO events_0001_stream_version_key;
ALTER INDEX props.events_fence_idx RENAME TO events_0001_fence_idx;
ALTER INDEX props.events_category_fence_idx RENAME TO events_0001_category_fence_idx;
ALTER SEQUENCE props.events_global_position_seq RENAME TO events_0001_global_position_seq;

CREATE TABLE props.events (
    global_position bigint      GENERATED ALWAYS AS IDENTITY,
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
    CONSTRAINT events_pkey PRIMARY KEY (global_position),
    CONSTRAINT events_stream_id_shape CHECK (stream_id ~ '^[a-z][a-z0-9_]*-.'),
    CONSTRAINT events_stream_version_positive CHECK (stream_version >= 1),
    CONSTRAINT events_schema_version_positive CHECK (schema_version >= 1),
    CONSTRAINT events_type_nonempty CHECK (type <> ''),
    CONSTRAINT events_data_object CHECK (jsonb_typeof(data) = 'object'),
    CONSTRAINT events_metadata_object CHECK (jsonb_typeof(metadata) = 'object')
) PARTITION BY RANGE (global_position);

COMMENT ON TABLE props.events IS
    'The append-only log. Every other table is derived from it. Never updated or deleted; '
    'old partitions leave it only through `props archive`.';

CREATE INDEX events_stream_idx ON props.events (stream_id, stream_version);
CREATE INDEX events_fence_idx ON props.events (tx_id, global_position);
CREATE INDEX events_category_fence_idx ON props.events (category, tx_id, global_position);

-- Makes (and attaches) the partition of one position range: new ones, and archived ones
-- being restored (`props import` of the partition's archive file).
CREATE FUNCTION props.make_partition(p_name text, p_from bigint, p_to bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, props AS $$
BEGIN
    EXECUTE format('CREATE TABLE props.%I (LIKE props.events INCLUDING DEFAULTS '
                   'INCLUDING GENERATED INCLUDING CONSTRAINTS)', p_name);
    EXECUTE format('ALTER TABLE props.%I ADD CONSTRAINT %I CHECK (global_position >= %s '
                   'AND global_position < %s)', p_name, p_name || '_range', p_from, p_to);
    EXECUTE format('ALTER TABLE props.events ATTACH PARTITION props.%I '
                   'FOR VALUES FROM (%s) TO (%s)', p_name, p_from, p_to);
    EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE OR DELETE OR TRUNCATE ON props.%I '
                   'FOR EACH STATEMENT EXECUTE FUNCTION props.refuse_log_change()',
                   p_name || '_append_only', p_name);
END
$$;
REVOKE ALL ON FUNCTION props.make_partition(text, bigint, bigint) FROM PUBLIC;

-- Makes partitions until one lies wholly ahead of the next position (and `p_room` positions
-- after it, for a bulk insert about to come). A new partition is made
-- standalone and attached (a lock that lets reads and appends go on), not created in place
-- (a lock that would queue every query behind the longest running read).
CREATE FUNCTION props.ensure_partitions(p_room bigint DEFAULT 0) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, props AS $$
DECLARE
    v_size  bigint;
    v_next  bigint;
    v_from  bigint;
    v_name  text;
    v_made  integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('props.ensure_partitions'));
    SELECT partition_size INTO v_size FROM props.log_settings;
    EXECUTE format('SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END '
                   'FROM %s', pg_get_serial_sequence('props.events', 'global_position'))
       INTO v_next;
    SELECT coalesce(max(to_position), 1) INTO v_from FROM props.log_partitions;
    WHILE v_from <= v_next + greatest(p_room, 0) + v_size LOOP
        v_name := format('events_%s', lpad(v_from::text, 15, '0'));
        PERFORM props.make_partition(v_name, v_from, v_from + v_size);
        INSERT INTO props.log_partitions (name, from_position, to_position)
        VALUES (v_name, v_from, v_from + v_size);
        v_from := v_from + v_size;
        v_made := v_made + 1;
    END LOOP;
    RETURN v_made;
END
$$;
REVOKE ALL ON FUNCTION props.ensure_partitions(bigint) FROM PUBLIC;

-- The rows of 0001 move over, positions and transaction ids kept; the identity goes on from
-- the last position.
SELECT setval(pg_get_serial_sequence('props.events', 'global_position'),
              coalesce((SELECT max(global_position) FROM props.events_0001), 0) + 1, false);
SELECT props.ensure_partitions();
INSERT INTO props.events (global_position, tx_id, event_id, stream_id, stream_version, type,
                          schema_version, data, metadata, recorded_at)
OVERRIDING SYSTEM VALUE
SELECT global_position, tx_id, event_id, stream_id, stream_version, type, schema_version,
       data, metadata, recorded_at
  FROM props.events_0001 ORDER BY global_position;
INSERT INTO props.streams (stream_id, version, tx_id)
SELECT DISTINCT ON (stream_id) stream_id, stream_version, tx_id
  FROM props.events_0001 ORDER BY stream_id, stream_version DESC;
INSERT INTO props.event_ids (event_id, global_position)
SELECT event_id, global_position FROM props.events_0001;
DROP TABLE props.events_0001;

-- What refuses an append now reads the stream's head, which archival never removes.
CREATE OR REPLACE FUNCTION props.refuse_out_of_order(p_stream_id text, p_first integer,
                                                     p_last integer)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_actual integer;
BEGIN
    SELECT version INTO v_actual FROM props.streams WHERE stream_id = p_stream_id;
    RAISE EXCEPTION 'stream % would not stay dense and ordered', p_stream_id
        USING ERRCODE = 'PX409',
              DETAIL = coalesce(v_actual, 0)::text,
              HINT = CASE WHEN coalesce(v_actual, 0) = p_first - 1
                     THEN 'the stream was last written by a younger transaction: retry'
                     ELSE format('versions %s..%s do not follow the stream''s version %s',
                                 p_first, p_last, coalesce(v_actual, 0)) END;
END
$$;

CREATE TRIGGER events_append_only
    BEFORE UPDATE OR DELETE OR TRUNCATE ON props.events
    FOR EACH STATEMENT EXECUTE FUNCTION props.refuse_log_change();

-- After every INSERT statement, whoever the writer: (1) every event id is new (recorded in
-- props.event_ids, whose key refuses a second one); (2) each stream's new versions are dense
-- and continue the stream's head, which moves by compare-and-set under the head's row lock
-- (a concurrent writer of the stream waits there, then finds the head moved and is refused),
-- and only for a transaction no older than the head's writer, so readers ordering by tx_id
-- see every stream in version order; (3) NOTIFY, only as a hint. A restore of archived
-- partitions (`SET LOCAL props.restoring = 'on'`) puts back rows these tables already count.
CREATE OR REPLACE FUNCTION props.after_append() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    s record;
BEGIN
    IF current_setting('props.restoring', true) IS DISTINCT FROM 'on' THEN
        INSERT INTO props.event_ids (event_id, global_position)
        SELECT event_id, global_position FROM new_rows;
        FOR s IN SELECT stream_id, min(stream_version) AS first, max(stream_version) AS last,
                        count(*) AS rows
                   FROM new_rows GROUP BY stream_id ORDER BY stream_id
        LOOP
            IF s.last - s.first + 1 <> s.rows THEN
                PERFORM props.refuse_out_of_order(s.stream_id, s.first, s.last);
            END IF;
            IF s.first = 1 THEN
                INSERT INTO props.streams (stream_id, version, tx_id)
                VALUES (s.stream_id, s.last, pg_current_xact_id())
                ON CONFLICT (stream_id) DO NOTHING;
            ELSE
                UPDATE props.streams SET version = s.last, tx_id = pg_current_xact_id()
                 WHERE stream_id = s.stream_id AND version = s.first - 1
                   AND tx_id <= pg_current_xact_id();
            END IF;
            IF NOT FOUND THEN
                PERFORM props.refuse_out_of_order(s.stream_id, s.first, s.last);
            END IF;
        END LOOP;
    END IF;
    PERFORM pg_notify('props_events', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER events_after_append
    AFTER INSERT ON props.events
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION props.after_append();
