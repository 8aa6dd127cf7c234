-- The log's `after_append` asks the server fewer questions per statement (issue 56). Each
-- statement a PL/pgSQL trigger runs costs a one-event append 15-30 us on a loaded 2-core
-- machine whatever it does (plan check, locks, executor start; docs/internals/measurements.md,
-- "The append trigger in fewer statements"), and 0017's trigger ran five for the commonest
-- append (one event, a stream that goes on): whether the transaction restores a partition,
-- the aggregate, the `event_ids` insert, the stream's head and the NOTIFY. Now two:
--
-- 1. The NOTIFY is sent by the aggregate's own statement.
-- 2. `props.restoring` is asked only when a row of the statement comes from another
--    transaction: `before_append` lets such a row through only in a restoring transaction
--    (a row of this transaction, at the position this session drew, never goes there), so a
--    statement whose rows are all this transaction's is not a restore's.
-- 3. For one stream, the event ids and the stream's head are written by one statement
--    (its `event_ids` insert is a data-modifying WITH, run to completion after the head's
--    write, in the same statement: a repeated event id is still refused before the stream
--    out of order, which is raised after the statement).
--
-- What is refused, and how, is unchanged: a row out of order in its stream, a backdated row
-- outside an import, a repeated event id; a statement over several streams still goes
-- through `append_streams`.

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
    v_foreign boolean;
    v_notified text;
    v_ids text[];
    v_firsts integer[];
    v_lasts integer[];
    v_counts integer[];
BEGIN
    -- One plain aggregate: most statements append to one stream, and for them it is all
    -- there is to know. The hint goes with it (one statement fewer; dropped if we refuse).
    SELECT min(stream_id), max(stream_id), min(stream_version), max(stream_version),
           count(*), bool_or(recorded_at <> now()), bool_or(tx_id <> v_tx),
           pg_notify('props_events', '')::text
      INTO v_low, v_high, v_first, v_last, v_rows, v_backdated, v_foreign, v_notified
      FROM new_rows;
    -- (nested IFs: an IF whose condition holds a subquery runs it through the executor even
    -- when the other operand is false)
    IF v_foreign THEN
        IF EXISTS (SELECT 1 FROM props.restoring WHERE tx_id = v_tx) THEN
            RETURN NULL;  -- a partition restored: its ids and streams are already kept
        END IF;
    END IF;
    IF v_backdated THEN
        IF NOT EXISTS (SELECT 1 FROM props.importing WHERE tx_id = v_tx) THEN
            RAISE EXCEPTION 'the log sets tx_id, recorded_at and global_position itself: an '
                            'insert may not give them' USING ERRCODE = 'PX001';
        END IF;
    END IF;
    IF v_low = v_high THEN  -- one stream
        IF v_last - v_first + 1 <> v_rows THEN
            INSERT INTO props.event_ids (event_id, global_position)
            SELECT event_id, global_position FROM new_rows;  -- a repeated id refused first
            PERFORM props.refuse_out_of_order(v_low, v_first, v_last);
        ELSIF v_first = 1 THEN
            WITH ids AS (
                INSERT INTO props.event_ids (event_id, global_position)
                SELECT event_id, global_position FROM new_rows)
            INSERT INTO props.streams (stream_id, version, tx_id)
            VALUES (v_low, v_last, v_tx) ON CONFLICT (stream_id) DO NOTHING;
        ELSE
            WITH ids AS (
                INSERT INTO props.event_ids (event_id, global_position)
                SELECT event_id, global_position FROM new_rows)
            UPDATE props.streams SET version = v_last, tx_id = v_tx
             WHERE stream_id = v_low AND version = v_first - 1 AND tx_id <= v_tx;
        END IF;
        IF NOT FOUND THEN  -- (the head's row count: the WITH's insert is not counted)
            PERFORM props.refuse_out_of_order(v_low, v_first, v_last);
        END IF;
    ELSIF v_low IS NOT NULL THEN
        INSERT INTO props.event_ids (event_id, global_position)
        SELECT event_id, global_position FROM new_rows;
        SELECT array_agg(stream_id ORDER BY stream_id), array_agg(first ORDER BY stream_id),
               array_agg(last ORDER BY stream_id), array_agg(n ORDER BY stream_id)
          INTO v_ids, v_firsts, v_lasts, v_counts
          FROM (SELECT stream_id, min(stream_version) AS first,
                       max(stream_version) AS last, count(*)::integer AS n
                  FROM new_rows GROUP BY stream_id) s;
        PERFORM props.append_streams(v_ids, v_firsts, v_lasts, v_counts);
    END IF;
    RETURN NULL;
END
$$;
