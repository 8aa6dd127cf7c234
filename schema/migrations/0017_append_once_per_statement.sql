-- The log's append triggers do their work once per statement (issue 56): an import of 19,202
-- events spent 24% of its final insert in `before_append` (~20 µs a row: an imported row keeps
-- its origin's `recorded_at`, so every row ran an `EXISTS` on `props.importing`) and 15% in
-- `after_append`'s loop over ~2,000 streams (docs/internals/measurements.md).
--
-- 1. `before_append` runs only for a row that is not plainly the log's own: the trigger's
--    WHEN clause (an expression, no PL/pgSQL call) lets through a row whose tx_id is this
--    transaction's, whose position is the one this session just drew, and whose recorded_at
--    is not in the future. Whether a past recorded_at is allowed (only in an import's
--    transaction) is asked once per statement, in `after_append`, over the transition table.
--    The WHEN clause runs as the inserting role, hence SELECT (currval) on the sequence.
-- 2. `after_append` updates `props.streams` in one statement per kind (new streams, streams
--    that go on) instead of one per stream when a statement appends to several
--    (`append_streams`), locking the rows it updates in stream order (as the loop did) so two
--    appenders cannot deadlock on each other's streams; one stream keeps the loop's body.
-- 3. An import sorts its staged events by origin position with room for them in memory (the
--    sort spilled 8.6 MB to disk at the default work_mem).

GRANT SELECT ON SEQUENCE props.events_global_position_seq TO props_service;

DROP TRIGGER events_before_append ON props.events;
CREATE TRIGGER events_before_append
    BEFORE INSERT ON props.events
    FOR EACH ROW
    WHEN (NOT (NEW.tx_id = pg_current_xact_id()
               AND NEW.global_position = currval('props.events_global_position_seq')
               AND NEW.recorded_at <= now()))
    EXECUTE FUNCTION props.before_append();

-- The streams of a statement that appends to more than one, set-based.
CREATE OR REPLACE FUNCTION props.append_streams(p_ids text[], p_firsts integer[],
                                                p_lasts integer[], p_counts integer[])
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, props AS $$
DECLARE
    v_tx xid8 := pg_current_xact_id();
    v_done text[] := '{}';
    v_bad record;
BEGIN
    -- Not dense within the statement, or a new stream that exists already: refused before
    -- any stream is locked.
    SELECT u.id, u.first, u.last INTO v_bad
      FROM unnest(p_ids, p_firsts, p_lasts, p_counts) u(id, first, last, n)
     WHERE u.last - u.first + 1 <> u.n
        OR (u.first = 1 AND EXISTS (SELECT 1 FROM props.streams st WHERE st.stream_id = u.id))
     ORDER BY u.id LIMIT 1;
    IF FOUND THEN
        PERFORM props.refuse_out_of_order(v_bad.id, v_bad.first, v_bad.last);
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_firsts) f WHERE f > 1) THEN
        -- Locked in stream order, as the loop did: two appenders cannot deadlock.
        PERFORM 1 FROM props.streams st
          WHERE st.stream_id IN (SELECT u.id FROM unnest(p_ids, p_firsts) u(id, first)
                                  WHERE u.first > 1)
          ORDER BY st.stream_id FOR UPDATE;
        WITH going AS (
            UPDATE props.streams st SET version = u.last, tx_id = v_tx
              FROM unnest(p_ids, p_firsts, p_lasts) u(id, first, last)
             WHERE u.first > 1 AND st.stream_id = u.id AND st.version = u.first - 1
               AND st.tx_id <= v_tx
            RETURNING st.stream_id)
        SELECT coalesce(array_agg(stream_id), '{}') INTO v_done FROM going;
    END IF;
    IF 1 = ANY (p_firsts) THEN
        WITH fresh AS (
            INSERT INTO props.streams (stream_id, version, tx_id)
            SELECT u.id, u.last, v_tx FROM unnest(p_ids, p_firsts, p_lasts) u(id, first, last)
             WHERE u.first = 1 ORDER BY u.id
            ON CONFLICT (stream_id) DO NOTHING
            RETURNING stream_id)
        SELECT v_done || coalesce(array_agg(stream_id), '{}') INTO v_done FROM fresh;
    END IF;
    IF cardinality(v_done) <> cardinality(p_ids) THEN
        SELECT u.id, u.first, u.last INTO v_bad
          FROM unnest(p_ids, p_firsts, p_lasts) u(id, first, last)
         WHERE u.id <> ALL (v_done) ORDER BY u.id LIMIT 1;
        PERFORM props.refuse_out_of_order(v_bad.id, v_bad.first, v_bad.last);
    END IF;
END
$$;
REVOKE ALL ON FUNCTION props.append_streams(text[], integer[], integer[], integer[])
    FROM PUBLIC;

CREATE OR REPLACE FUNCTION props.after_append()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, props AS $$
DECLARE
    v_tx xid8 := pg_current_xact_id();
    v_low text;
    v_high text;
    v_first integer;
    v_last integer;
    v_rows integer;
    v_backdated boolean;
    v_ids text[];
    v_firsts integer[];
    v_lasts integer[];
    v_counts integer[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM props.restoring WHERE tx_id = v_tx) THEN
        -- One plain aggregate first: most statements append to one stream, and for them it
        -- is all there is to know (grouping and arrays cost a one-event append 25-35 us).
        SELECT min(stream_id), max(stream_id), min(stream_version), max(stream_version),
               count(*), bool_or(recorded_at <> now())
          INTO v_low, v_high, v_first, v_last, v_rows, v_backdated
          FROM new_rows;
        IF v_backdated AND NOT EXISTS (SELECT 1 FROM props.importing WHERE tx_id = v_tx) THEN
            RAISE EXCEPTION 'the log sets tx_id, recorded_at and global_position itself: an '
                            'insert may not give them' USING ERRCODE = 'PX001';
        END IF;
        INSERT INTO props.event_ids (event_id, global_position)
        SELECT event_id, global_position FROM new_rows;
        IF v_low = v_high THEN  -- one stream: as the loop did
            IF v_last - v_first + 1 <> v_rows THEN
                PERFORM props.refuse_out_of_order(v_low, v_first, v_last);
            ELSIF v_first = 1 THEN
                INSERT INTO props.streams (stream_id, version, tx_id)
                VALUES (v_low, v_last, v_tx) ON CONFLICT (stream_id) DO NOTHING;
            ELSE
                UPDATE props.streams SET version = v_last, tx_id = v_tx
                 WHERE stream_id = v_low AND version = v_first - 1 AND tx_id <= v_tx;
            END IF;
            IF NOT FOUND THEN
                PERFORM props.refuse_out_of_order(v_low, v_first, v_last);
            END IF;
        ELSIF v_low IS NOT NULL THEN
            SELECT array_agg(stream_id ORDER BY stream_id), array_agg(first ORDER BY stream_id),
                   array_agg(last ORDER BY stream_id), array_agg(n ORDER BY stream_id)
              INTO v_ids, v_firsts, v_lasts, v_counts
              FROM (SELECT stream_id, min(stream_version) AS first,
                           max(stream_version) AS last, count(*)::integer AS n
                      FROM new_rows GROUP BY stream_id) s;
            PERFORM props.append_streams(v_ids, v_firsts, v_lasts, v_counts);
        END IF;
    END IF;
    PERFORM pg_notify('props_events', '');
    RETURN NULL;
END
$$;

ALTER FUNCTION props.import_staged(jsonb, boolean) SET work_mem = '64MB';
