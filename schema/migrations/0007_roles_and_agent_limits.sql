-- Who may do what, for each role that reaches the database (README: "Roles").
--
--   owner          the role that runs the migrations: owns every object.
--   props_service  reactors, the HTTP API and the CLI's writes. Owns nothing: it appends and
--                  reads through privileges granted here, and everything that needs more
--                  (agent roles, partitions, the side tables of the log) happens inside
--                  SECURITY DEFINER functions of the owner that check what they are asked.
--   props_analyst  reads `projections` (0002).
--   agent roles    one per run, members of `props_agent` (0003): the functions of `agent`.
--
-- What this migration closes:
-- 1. An agent's report ids were global: an agent could name another run's or the launcher's
--    events. They are now the agent's own, unique within its run; the launcher derives the
--    log's id from (run, the agent's id).
-- 2. The side tables of the log (streams, event_ids, log_partitions) took UPDATE, DELETE and
--    TRUNCATE from any role with DML, and `SET LOCAL props.restoring = 'on'` skipped the
--    append checks for anyone who may INSERT. They move only from the log's own triggers and
--    functions now, and a restore is the owner's function `props.restore_partition`.
-- 3. Agent roles are made and dropped by the owner's functions (the service needs no
--    CREATEROLE), under names that do not reveal the run, with short timeouts, and without
--    temp tables, large objects, advisory locks or NOTIFY (EXECUTE revoked from PUBLIC and
--    granted to the props roles that need it).

-- 1. Report ids are per run -----------------------------------------------------------------
ALTER TABLE props.agent_outbox DROP CONSTRAINT agent_outbox_event_id_key;
ALTER TABLE props.agent_outbox ADD CONSTRAINT agent_outbox_run_event_key UNIQUE (run_id, event_id);

CREATE OR REPLACE FUNCTION agent.report(p_event_id uuid, p_type text, p_data jsonb)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    b props.agent_bindings;
BEGIN
    IF jsonb_typeof(p_data) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'event data must be a JSON object' USING ERRCODE = '22023';
    END IF;
    b := props.agent_charge(1, octet_length(p_data::text));
    IF b IS NULL THEN
        RETURN false;
    END IF;
    -- Critics report what they did and found; graders report grades as well.
    IF NOT (p_type IN ('prompt.composed', 'llm.requested', 'llm.responded', 'phase.completed')
            OR (p_type = 'issue.reported' AND b.agent_type = 'critic')
            OR (p_type = 'grade.emitted' AND b.agent_type = 'grader')) THEN
        RAISE EXCEPTION 'a % agent cannot report % events', b.agent_type, p_type
            USING ERRCODE = '42501';
    END IF;
    -- The run is the binding's, whatever the agent wrote (a grade names the run it grades,
    -- which the launcher checks against what the grader was given). The id is the agent's
    -- own, unique within its run: the launcher derives the log's id from (run, this id).
    INSERT INTO props.agent_outbox (run_id, seq, event_id, type, data)
    VALUES (b.run_id, b.events, p_event_id, p_type,
            CASE WHEN p_type = 'grade.emitted' THEN p_data
                 ELSE p_data || jsonb_build_object('run_id', b.run_id) END)
    ON CONFLICT (run_id, event_id) DO NOTHING;
    RETURN true;
END
$$;

-- 2. The service role and what it may touch -------------------------------------------------
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'props_service') THEN
        -- Without a password it cannot log in on a server that asks for one; `props db
        -- migrate` on the embedded server gives it one (kept under PROPS_HOME).
        CREATE ROLE props_service LOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA props, props_meta TO props_service;
GRANT USAGE, CREATE ON SCHEMA projections TO props_service;
GRANT SELECT ON props_meta.migrations TO props_service;
GRANT SELECT ON props.events, props.blobs, props.checkpoints, props.deployment,
                props.agent_bindings, props.agent_outbox, props.api_tokens,
                props.log_settings, props.log_partitions, props.streams, props.event_ids
   TO props_service;
GRANT INSERT ON props.events, props.blobs TO props_service;
-- Consumers' positions and the state of runs in flight: derived, rewritten as they move.
GRANT INSERT, UPDATE, DELETE ON props.checkpoints, props.agent_bindings, props.agent_outbox,
                                props.api_tokens TO props_service;
GRANT EXECUTE ON FUNCTION props.ensure_partitions(bigint) TO props_service;
-- A rebuild builds its tables here, beside the live ones, then moves them over: the schema
-- is made once, so the service needs no right to make schemas.
CREATE SCHEMA IF NOT EXISTS projections_next;
GRANT USAGE, CREATE ON SCHEMA projections_next TO props_service;
-- Projection tables made before the service existed (by the owner) are the service's to
-- rebuild and swap from now on.
DO $$
DECLARE
    t record;
BEGIN
    FOR t IN SELECT n.nspname, c.relname FROM pg_class c
               JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname IN ('projections', 'projections_next')
                AND c.relkind IN ('r', 'p', 'v')
    LOOP
        EXECUTE format('ALTER TABLE %I.%I OWNER TO props_service', t.nspname, t.relname);
    END LOOP;
END
$$;

-- The side tables move only from inside the log's triggers: a statement run directly (at
-- trigger depth 0) is refused like a change to the log itself, and inside the append trigger
-- the guard is not even fired (its WHEN is false), so appends pay nothing for it.
CREATE TRIGGER streams_kept_by_the_log
    BEFORE INSERT OR UPDATE OR DELETE ON props.streams
    FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
    EXECUTE FUNCTION props.refuse_log_change();
CREATE TRIGGER streams_no_truncate BEFORE TRUNCATE ON props.streams
    FOR EACH STATEMENT EXECUTE FUNCTION props.refuse_log_change();
CREATE TRIGGER event_ids_kept_by_the_log
    BEFORE INSERT OR UPDATE OR DELETE ON props.event_ids
    FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
    EXECUTE FUNCTION props.refuse_log_change();
CREATE TRIGGER event_ids_no_truncate BEFORE TRUNCATE ON props.event_ids
    FOR EACH STATEMENT EXECUTE FUNCTION props.refuse_log_change();

-- A partition's row changes only as the catalog does: hot -> archived once the partition is
-- detached from the log, archived -> hot once it is attached again, and the row of a hot
-- partition goes once its table is gone (the owner re-partitioning an empty log).
CREATE FUNCTION props.partition_row_follows_the_catalog() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_attached boolean;
BEGIN
    IF TG_OP = 'DELETE' AND OLD.state = 'hot'
       AND to_regclass('props.' || quote_ident(OLD.name)) IS NULL THEN
        RETURN OLD;
    END IF;
    IF TG_OP <> 'UPDATE' OR NEW.name <> OLD.name OR NEW.from_position <> OLD.from_position
       OR NEW.to_position <> OLD.to_position THEN
        RAISE EXCEPTION 'props.log_partitions is kept by the log''s own functions: % refused',
            TG_OP USING ERRCODE = 'PX001';
    END IF;
    SELECT EXISTS (SELECT 1 FROM pg_inherits i
                    WHERE i.inhparent = 'props.events'::regclass
                      AND i.inhrelid = to_regclass('props.' || quote_ident(NEW.name)))
      INTO v_attached;
    IF NEW.state IS DISTINCT FROM OLD.state
       AND ((NEW.state = 'archived' AND v_attached) OR (NEW.state = 'hot' AND NOT v_attached))
    THEN
        RAISE EXCEPTION 'partition % cannot be marked % while it is %', NEW.name, NEW.state,
            CASE WHEN v_attached THEN 'in the log' ELSE 'out of the log' END
            USING ERRCODE = 'PX001';
    END IF;
    IF NEW.state = OLD.state AND (NEW.archive_file, NEW.archive_sha256, NEW.events)
                                 IS DISTINCT FROM (OLD.archive_file, OLD.archive_sha256, OLD.events)
    THEN
        RAISE EXCEPTION 'partition %: its archive is recorded when it is archived, never '
            'rewritten', NEW.name USING ERRCODE = 'PX001';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER log_partitions_follow_the_catalog
    BEFORE UPDATE OR DELETE ON props.log_partitions
    FOR EACH ROW EXECUTE FUNCTION props.partition_row_follows_the_catalog();
CREATE TRIGGER log_partitions_no_truncate BEFORE TRUNCATE ON props.log_partitions
    FOR EACH STATEMENT EXECUTE FUNCTION props.refuse_log_change();

-- A restore is marked by the transaction itself, in a table only the owner's functions
-- write: no session setting can skip the append checks.
CREATE TABLE props.restoring (tx_id xid8 PRIMARY KEY);
REVOKE ALL ON props.restoring FROM PUBLIC;

-- The append trigger runs as the owner: the service appends without any privilege on the
-- side tables it keeps.
CREATE OR REPLACE FUNCTION props.after_append() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, props AS $$
DECLARE
    s record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM props.restoring WHERE tx_id = pg_current_xact_id()) THEN
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

-- Puts an archived partition back from the caller's staging table `import_events` (see
-- props.core.archive): only rows the log once held, each at its own position, all of them.
CREATE FUNCTION props.restore_partition(p_name text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, props AS $$
DECLARE
    p props.log_partitions;
    v_rows integer;
BEGIN
    SELECT * INTO p FROM props.log_partitions WHERE name = p_name FOR UPDATE;
    IF NOT FOUND OR p.state <> 'archived' THEN
        RAISE EXCEPTION 'partition % is not archived', p_name USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_temp.import_events s
                WHERE s.position < p.from_position OR s.position >= p.to_position
                   OR NOT EXISTS (SELECT 1 FROM props.event_ids e
                                   WHERE e.event_id = s.event_id
                                     AND e.global_position = s.position)) THEN
        RAISE EXCEPTION 'the file holds events partition % never held', p_name
            USING ERRCODE = 'PX001';
    END IF;
    INSERT INTO props.restoring VALUES (pg_current_xact_id());
    PERFORM props.make_partition(p_name, p.from_position, p.to_position);
    INSERT INTO props.events (global_position, tx_id, event_id, stream_id, stream_version,
                              type, schema_version, data, metadata, recorded_at)
    OVERRIDING SYSTEM VALUE
    SELECT position, tx_id::text::xid8, event_id, stream_id, stream_version, type,
           schema_version, data, metadata, recorded_at
      FROM pg_temp.import_events ORDER BY position;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    IF v_rows IS DISTINCT FROM p.events::integer THEN
        RAISE EXCEPTION 'partition % held % events, the file gives %', p_name, p.events, v_rows
            USING ERRCODE = 'PX001';
    END IF;
    DELETE FROM props.restoring WHERE tx_id = pg_current_xact_id();
    UPDATE props.log_partitions SET state = 'hot', archived_at = NULL WHERE name = p_name;
    RETURN v_rows;
END
$$;
REVOKE ALL ON FUNCTION props.restore_partition(text) FROM PUBLIC;

-- 3. Agent roles ----------------------------------------------------------------------------
-- The password of the run's role, drawn once: a relaunched launcher adopts a running
-- container, whose agent must still be able to log in with what it was given. Readable by
-- the service only (which may set any agent role's password anyway), never by agents.
ALTER TABLE props.agent_bindings ADD COLUMN password text;

-- No temp tables for agents: the database's TEMP privilege leaves PUBLIC for the props roles
-- that use it. A database made from a template gets it back, so every launch checks again.
CREATE FUNCTION props.keep_temp_from_agents() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, props AS $$
BEGIN
    IF has_database_privilege('public', current_database(), 'TEMPORARY') THEN
        EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
        EXECUTE format('GRANT TEMPORARY ON DATABASE %I TO props_service, props_analyst',
                       current_database());
    END IF;
END
$$;
REVOKE ALL ON FUNCTION props.keep_temp_from_agents() FROM PUBLIC;

-- Opens the run's role (made on first call; made again with the same password if it went)
-- and its binding; returns the role's name and password. The name is drawn by the caller
-- and reveals nothing of the run; the statement and transaction limits are the caller's
-- (the launcher's watchdog enforces the same ones from outside: an agent can SET these
-- role defaults away).
CREATE FUNCTION props.open_agent_role(p_run uuid, p_new_role text, p_new_password text,
                                      p_agent_type text, p_max_events integer,
                                      p_max_bytes bigint,
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
    EXECUTE format('CREATE ROLE %I LOGIN PASSWORD %L CONNECTION LIMIT 4 IN ROLE props_agent',
                   role_name, password);
    FOREACH v_setting IN ARRAY ARRAY[
            format('statement_timeout = %L', v_statement),
            format('idle_in_transaction_session_timeout = %L', v_statement),
            'lock_timeout = ''2s''', 'work_mem = ''1MB''']
    LOOP
        EXECUTE format('ALTER ROLE %I SET %s', role_name, v_setting);
    END LOOP;
    IF current_setting('server_version_num')::integer >= 170000 THEN
        EXECUTE format('ALTER ROLE %I SET transaction_timeout = %L', role_name,
                       format('%sms', round(p_transaction_seconds * 1000)));
    END IF;
    PERFORM props.keep_temp_from_agents();
END
$$;
REVOKE ALL ON FUNCTION props.open_agent_role(uuid, text, text, text, integer, bigint,
                                             double precision, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION props.open_agent_role(uuid, text, text, text, integer, bigint,
                                                double precision, double precision)
    TO props_service;

-- Closes the run's binding (nothing more is accepted), ends its sessions and drops its role.
-- Returns NULL when there was nothing to close, else whether the role is gone; a role that
-- cannot be dropped (it owns something somewhere) stays, with a warning, for a later retry.
CREATE FUNCTION props.close_agent_role(p_run uuid) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, props AS $$
DECLARE
    v_role text;
BEGIN
    SELECT role_name INTO v_role FROM props.agent_bindings WHERE run_id = p_run;
    IF v_role IS NULL THEN
        RETURN NULL;
    END IF;
    -- Sessions first: a session holding its binding's row lock would make the close wait.
    PERFORM pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = v_role;
    UPDATE props.agent_bindings SET closed = true WHERE run_id = p_run AND NOT closed;
    BEGIN
        EXECUTE format('DROP ROLE IF EXISTS %I', v_role);
    EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'agent role % of run % could not be dropped (%: %)', v_role, p_run,
            SQLSTATE, SQLERRM;
        RETURN false;
    END;
    RETURN true;
END
$$;
REVOKE ALL ON FUNCTION props.close_agent_role(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION props.close_agent_role(uuid) TO props_service;

-- Ends agent sessions that overrun: a statement or an idle transaction past p_statement
-- seconds, a transaction past p_transaction seconds (it would hold every reader's visibility
-- fence). Returns how many sessions were ended.
CREATE FUNCTION props.end_agent_overruns(p_statement double precision,
                                         p_transaction double precision)
RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, props AS $$
    SELECT count(*) FILTER (WHERE pg_terminate_backend(a.pid))::integer
      FROM pg_stat_activity a
      JOIN props.agent_bindings b ON b.role_name = a.usename
     WHERE a.xact_start < now() - make_interval(secs => p_transaction)
        OR (a.state IN ('active', 'idle in transaction', 'idle in transaction (aborted)')
            AND a.state_change < now() - make_interval(secs => p_statement))
$$;
REVOKE ALL ON FUNCTION props.end_agent_overruns(double precision, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION props.end_agent_overruns(double precision, double precision)
    TO props_service;

-- Where the server's Unix socket lies, for agents without network (its socket file is
-- mounted into their containers): a setting only superusers and pg_read_all_settings read.
CREATE FUNCTION props.server_socket(OUT directories text, OUT port text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog AS $$
    SELECT current_setting('unix_socket_directories'), current_setting('port')
$$;
REVOKE ALL ON FUNCTION props.server_socket() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION props.server_socket() TO props_service;

-- Built-in functions an agent must not call: large objects (stored outside any cap, and they
-- keep a role from being dropped), advisory locks (a reactor's or the runner's key taken
-- would stall it) and NOTIFY. Only a superuser can change their privileges: a migration run
-- by another role leaves them, and `props db status` says so.
DO $$
DECLARE
    f regprocedure;
BEGIN
    IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        RAISE NOTICE 'props: not a superuser, so agents keep EXECUTE on large-object, '
                     'advisory-lock and NOTIFY functions (see props db status)';
        RETURN;
    END IF;
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
              WHERE p.pronamespace = 'pg_catalog'::regnamespace
                AND (p.proname LIKE 'lo\_%' OR p.proname IN ('loread', 'lowrite')
                     OR p.proname LIKE 'pg\_%advisory%' OR p.proname = 'pg_notify')
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO props_service', f);
    END LOOP;
END
$$;

DO $$
BEGIN
    PERFORM props.keep_temp_from_agents();
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'props: not the database owner: agents keep TEMP until the first launch';
END
$$;
