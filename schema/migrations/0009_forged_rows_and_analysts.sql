-- What no role may write into the log, and what no analyst may hold.
--
-- 1. The log sets a row's transaction, time and position itself. Any role that may insert
--    (the service) could give its own `tx_id` (a transaction long past every reader's
--    checkpoint: live readers would never see the row, a rebuild would), its own
--    `recorded_at` (a run "requested" in 2000) or, with OVERRIDING SYSTEM VALUE, its own
--    position. A row whose values are not the log's own is refused, unless the owner's
--    restore path (props.restore_partition, marked in props.restoring) puts archived rows
--    back as they were. An import keeps each event's original time (never a later one
--    than now), in a transaction it marks as one (props.mark_import); its transaction and
--    positions are this log's. The check refuses, it never rewrites: the position is the
--    partition key, which a BEFORE trigger may not change.
-- 2. Analysts read, and cannot stall anyone: read-only by default, statement and idle
--    timeouts, no temp tables (a temp table takes a transaction id, which holds every
--    reader's visibility fence), and a watchdog (props.end_analyst_fence_holds) ends an
--    analyst transaction that holds an id for longer than the service allows.

CREATE TABLE props.importing (tx_id xid8 PRIMARY KEY);  -- (xid8 never repeats)
REVOKE ALL ON props.importing FROM PUBLIC;

CREATE FUNCTION props.mark_import() RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, props AS $$
    INSERT INTO props.importing VALUES (pg_current_xact_id()) ON CONFLICT DO NOTHING
$$;
REVOKE ALL ON FUNCTION props.mark_import() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION props.mark_import() TO props_service;

CREATE FUNCTION props.before_append() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, props AS $$
BEGIN
    -- currval is this session's last draw of the identity: the row's own, unless the
    -- insert gave its position itself (in a session that never drew, currval raises:
    -- refused too). No EXCEPTION block: it would cost a subtransaction per row.
    IF NEW.tx_id = pg_current_xact_id()
       AND NEW.global_position = currval('props.events_global_position_seq') THEN
        IF NEW.recorded_at = now() THEN
            RETURN NEW;
        END IF;
        IF NEW.recorded_at <= now()
           AND EXISTS (SELECT 1 FROM props.importing WHERE tx_id = pg_current_xact_id()) THEN
            RETURN NEW;
        END IF;
    END IF;
    IF EXISTS (SELECT 1 FROM props.restoring WHERE tx_id = pg_current_xact_id()) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'the log sets tx_id, recorded_at and global_position itself: an insert '
                    'may not give them' USING ERRCODE = 'PX001';
END
$$;

CREATE TRIGGER events_before_append BEFORE INSERT ON props.events
    FOR EACH ROW EXECUTE FUNCTION props.before_append();

-- TEMP is the service's alone (0007 gave it to the analyst too). Launches call this at once
-- from many sessions: two REVOKEs of the same database's ACL collide ("tuple concurrently
-- updated"), so they take turns, and the second finds nothing left to do.
CREATE OR REPLACE FUNCTION props.keep_temp_from_agents() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, props AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('props.keep_temp_from_agents'));
    IF has_database_privilege('public', current_database(), 'TEMPORARY')
       OR has_database_privilege('props_analyst', current_database(), 'TEMPORARY') THEN
        EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC, props_analyst',
                       current_database());
        EXECUTE format('GRANT TEMPORARY ON DATABASE %I TO props_service', current_database());
    END IF;
END
$$;

DO $$
BEGIN
    PERFORM props.keep_temp_from_agents();
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'props: not the database owner: the analyst keeps TEMP until the first launch';
END
$$;

-- Role defaults hold for sessions of that role (not inherited): set on the analyst itself.
-- An analyst may SET them away within a session; the watchdog below is what holds.
DO $$
BEGIN
    ALTER ROLE props_analyst SET default_transaction_read_only = on;
    ALTER ROLE props_analyst SET statement_timeout = '300s';
    ALTER ROLE props_analyst SET idle_in_transaction_session_timeout = '30s';
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'props: cannot set the analyst role''s defaults as this role (run '
                 '`props db harden` as a superuser)';
END
$$;

-- Ends analyst sessions whose transaction has held a transaction id (so the visibility fence
-- of every reader) for more than p_seconds. Returns how many were ended.
CREATE FUNCTION props.end_analyst_fence_holds(p_seconds double precision) RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, props AS $$
    SELECT count(*) FILTER (WHERE pg_terminate_backend(a.pid))::integer
      FROM pg_stat_activity a
     WHERE a.usename = 'props_analyst'
       AND a.backend_xid IS NOT NULL
       AND a.xact_start < now() - make_interval(secs => p_seconds)
$$;
REVOKE ALL ON FUNCTION props.end_analyst_fence_holds(double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION props.end_analyst_fence_holds(double precision) TO props_service;
