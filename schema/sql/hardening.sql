-- What only a superuser can take from agents and analysts (a migration run by another owner
-- cannot): `props db harden`, and `props db migrate` run as a superuser, apply it; it is
-- idempotent. Built-in functions an agent or analyst must not call: large objects (stored
-- outside any cap; they keep a role from being dropped), advisory locks (a reactor's or the
-- migration's key taken would stall it), NOTIFY, and the functions that give a read-only
-- session a transaction id (which holds every reader's visibility fence). EXECUTE leaves
-- PUBLIC and is granted back to the service and to the schema's owner, who use them.

-- is_superuser --
SELECT rolsuper FROM pg_roles WHERE rolname = current_user

-- harden --
DO $$
DECLARE
    f regprocedure;
    v_owner text := (SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'props');
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
              WHERE p.pronamespace = 'pg_catalog'::regnamespace
                AND (p.proname LIKE 'lo\_%' OR p.proname IN ('loread', 'lowrite')
                     OR p.proname LIKE 'pg\_%advisory%' OR p.proname = 'pg_notify'
                     OR p.proname IN ('pg_current_xact_id', 'txid_current'))
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO props_service, %I', f, v_owner);
    END LOOP;
    PERFORM props.keep_temp_from_agents();
    ALTER ROLE props_analyst SET default_transaction_read_only = on;
    ALTER ROLE props_analyst SET statement_timeout = '300s';
    ALTER ROLE props_analyst SET idle_in_transaction_session_timeout = '30s';
END
$$

-- still_granted --
SELECT f FROM unnest($1::text[]) AS f
 WHERE has_function_privilege('public', f, 'EXECUTE')
    OR has_function_privilege('props_analyst', f, 'EXECUTE')

-- trust_rules --
-- The pg_hba.conf rules that let a connection in without a password (server_checks).
SELECT line_number, type, database, user_name, address FROM pg_hba_file_rules
WHERE auth_method = 'trust' AND error IS NULL ORDER BY line_number

-- public_may_execute --
SELECT has_function_privilege('public', $1, 'EXECUTE')

-- temp_granted --
SELECT has_database_privilege('public', current_database(), 'TEMPORARY') OR
       has_database_privilege('props_analyst', current_database(), 'TEMPORARY')

-- service_role --
-- Whether the connection's role is a superuser, or the owner of the schema props.
SELECT r.rolsuper, r.rolname = n.nspowner::regrole::text AS owner, r.rolname
FROM pg_roles r, pg_namespace n WHERE r.rolname = current_user AND n.nspname = 'props'
