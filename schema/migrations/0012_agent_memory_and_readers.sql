-- What an agent or an analyst can still hold that the service needs (issue 43).
--
-- 1. An agent role opens one session (CONNECTION LIMIT 1: the SDK holds one connection), and
--    what it may spill to disk is capped (`temp_file_limit`, a setting only a superuser may
--    change, so the agent cannot SET it away). Its memory settings are defaults an agent may
--    SET away (PostgreSQL has no per-session memory cap): docs/internals/roles.md gives what
--    one session was measured to reach, which the one connection and the watchdog bound.
-- 2. A rebuild's swap takes the live projection tables; an analyst running short statements
--    in one long transaction would hold them forever. After the rebuild's grace the swap
--    ends the analyst sessions that hold a lock on a relation of schema `projections`.
-- 3. NOTIFY needs no privilege: any role may NOTIFY and LISTEN. The reactors take a
--    notification as a hint (they read the log whatever it says), so a forged one costs a
--    read at most. A listener that stops reading holds the server's notification queue; once
--    the queue is filled past a share, the agent and analyst sessions are ended (the only
--    roles that are not props' own), before the log's appends, which notify, would fail.

CREATE OR REPLACE FUNCTION props.open_agent_role(p_run uuid, p_new_role text,
                                                 p_new_password text, p_agent_type text,
                                                 p_max_events integer, p_max_bytes bigint,
                                                 p_statement_seconds double precision,
                                                 p_transaction_seconds double precision,
                                                 OUT role_name text, OUT password text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, props AS $$
DECLARE
    v_setting text;
    v_statement text := format('%sms', round(p_statement_seconds * 1000));
BEGIN
    IF p_new_role !~ '^props_agent_[0-9a-f]{16,32}$'
       OR p_new_password !~ '^[0-9a-f]{32,64}$' THEN
        RAISE EXCEPTION 'malformed agent role name or password' USING ERRCODE = '22023';
    END IF;
    SELECT b.role_name, b.password INTO role_name, password
      FROM props.agent_bindings b WHERE b.run_id = p_run;
    IF role_name IS NULL THEN
        role_name := p_new_role;
        password := p_new_password;
        INSERT INTO props.agent_bindings (role_name, run_id, agent_type, max_events,
                                          max_bytes, password)
        VALUES (role_name, p_run, p_agent_type, p_max_events, p_max_bytes, password);
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = role_name) THEN
        RETURN;
    END IF;
    EXECUTE format('CREATE ROLE %I LOGIN PASSWORD %L CONNECTION LIMIT 1 IN ROLE props_agent',
                   role_name, password);
    -- Defaults (an agent may SET them away; the watchdog ends what overruns).
    FOREACH v_setting IN ARRAY ARRAY[
            format('statement_timeout = %L', v_statement),
            format('idle_in_transaction_session_timeout = %L', v_statement),
            'lock_timeout = ''2s''', 'work_mem = ''1MB''', 'hash_mem_multiplier = 1',
            'maintenance_work_mem = ''1MB''', 'temp_buffers = ''800kB''']
    LOOP
        EXECUTE format('ALTER ROLE %I SET %s', role_name, v_setting);
    END LOOP;
    IF current_setting('server_version_num')::integer >= 170000 THEN
        EXECUTE format('ALTER ROLE %I SET transaction_timeout = %L', role_name,
                       format('%sms', round(p_transaction_seconds * 1000)));
    END IF;
    -- A limit (a superuser's setting: the agent cannot SET it). An owner that is not a
    -- superuser cannot set it either: said once per launch, and by `props db status`.
    BEGIN
        EXECUTE format('ALTER ROLE %I SET temp_file_limit = ''64MB''', role_name);
    EXCEPTION WHEN insufficient_privilege THEN
        RAISE WARNING 'props: agent role % has no temp_file_limit (the owner is not a '
                      'superuser)', role_name;
    END;
    PERFORM props.keep_temp_from_agents();
END
$$;

-- (Roles of runs in flight when this migration runs keep their limits until their run ends:
-- roles belong to the whole server, which other databases' props may share.)

-- Ends the analyst sessions holding a lock on a relation of schema `projections` (a table
-- or a view: the swap drops and recreates both). Returns each session ended.
CREATE FUNCTION props.end_projection_readers(OUT pid integer, OUT role_name text)
RETURNS SETOF record
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, props AS $$
BEGIN
    FOR pid, role_name IN
        SELECT DISTINCT a.pid, a.usename::text
          FROM pg_stat_activity a
          JOIN pg_locks l ON l.pid = a.pid AND l.locktype = 'relation'
                         AND l.database = a.datid
          JOIN pg_class c ON c.oid = l.relation
          JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'projections'
         WHERE a.usename = 'props_analyst' AND a.pid <> pg_backend_pid()
           AND a.datname = current_database()
         ORDER BY a.pid
    LOOP
        IF pg_terminate_backend(pid) THEN
            RETURN NEXT;
        END IF;
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION props.end_projection_readers() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION props.end_projection_readers() TO props_service;

-- Ends every agent and analyst session of this database once the notification queue is filled past
-- p_share (0..1) of its size. Returns how many were ended.
CREATE FUNCTION props.end_notify_queue_holders(p_share double precision) RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, props AS $$
    SELECT count(*) FILTER (WHERE pg_terminate_backend(a.pid))::integer
      FROM pg_stat_activity a
     WHERE pg_notification_queue_usage() > p_share
       AND a.pid <> pg_backend_pid() AND a.datname = current_database()
       AND (a.usename = 'props_analyst'
            OR EXISTS (SELECT 1 FROM props.agent_bindings b WHERE b.role_name = a.usename))
$$;
REVOKE ALL ON FUNCTION props.end_notify_queue_holders(double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION props.end_notify_queue_holders(double precision) TO props_service;
