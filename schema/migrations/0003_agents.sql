-- Agents in containers report through these functions and nothing else.
--
-- Each run gets its own login role (created at launch, dropped after), a member of
-- `props_agent`, bound to its run in `props.agent_bindings`. The role has no privilege on any
-- table: it cannot read the log, the blobs, the ground truth or the projections, and it can
-- write only through the SECURITY DEFINER functions of schema `agent`, which take the run from
-- the binding of the calling role (never from the caller) and enforce the run's caps.
-- What an agent reports lands in `props.agent_outbox`; the launcher validates it against the
-- event catalog and appends it to the run's stream, so nothing malformed ever enters the log.
-- An agent reads its example's files from a read-only directory mounted into its container.

CREATE SCHEMA agent;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'props_agent') THEN
        CREATE ROLE props_agent NOLOGIN;
    END IF;
END
$$;

REVOKE ALL ON SCHEMA agent FROM PUBLIC;
GRANT USAGE ON SCHEMA agent TO props_agent;

-- This deployment's identity (with the database's name): the label on its containers, so a
-- launcher reaps only its own containers on an engine other deployments share.
CREATE TABLE props.deployment (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    created_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO props.deployment DEFAULT VALUES;

-- Operational state of the runs in flight (not part of the log: it is rebuilt by launching).
CREATE TABLE props.agent_bindings (
    role_name   text        PRIMARY KEY,
    run_id      uuid        NOT NULL UNIQUE,
    agent_type  text        NOT NULL CHECK (agent_type IN ('critic', 'grader')),
    max_events  integer     NOT NULL CHECK (max_events >= 0),
    max_bytes   bigint      NOT NULL CHECK (max_bytes >= 0),
    events      integer     NOT NULL DEFAULT 0,
    bytes       bigint      NOT NULL DEFAULT 0,
    over_cap    boolean     NOT NULL DEFAULT false,
    closed      boolean     NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE props.agent_outbox (
    run_id      uuid        NOT NULL,
    seq         integer     NOT NULL,
    event_id    uuid        NOT NULL UNIQUE,
    type        text        NOT NULL,
    data        jsonb       NOT NULL,
    reported_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, seq)
);

-- The binding of the calling role, locked for this call; counts the call against the caps.
-- Returns NULL (and marks the run over its cap) when the call would exceed a cap: the caller
-- gets a refusal, the launcher sees `over_cap` and stops the agent with a closed reason.
CREATE FUNCTION props.agent_charge(p_events integer, p_bytes bigint)
RETURNS props.agent_bindings
LANGUAGE plpgsql AS $$
DECLARE
    b props.agent_bindings;
BEGIN
    SELECT * INTO b FROM props.agent_bindings
     WHERE role_name = session_user AND NOT closed FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'role % is not bound to a running run', session_user
            USING ERRCODE = '42501';
    END IF;
    IF b.over_cap OR b.events + p_events > b.max_events OR b.bytes + p_bytes > b.max_bytes THEN
        UPDATE props.agent_bindings SET over_cap = true WHERE role_name = b.role_name;
        RETURN NULL;
    END IF;
    UPDATE props.agent_bindings SET events = events + p_events, bytes = bytes + p_bytes
     WHERE role_name = b.role_name RETURNING * INTO b;
    RETURN b;
END
$$;

CREATE FUNCTION agent.report(p_event_id uuid, p_type text, p_data jsonb)
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
    -- which the launcher checks against what the grader was given).
    INSERT INTO props.agent_outbox (run_id, seq, event_id, type, data)
    VALUES (b.run_id, b.events, p_event_id, p_type,
            CASE WHEN p_type = 'grade.emitted' THEN p_data
                 ELSE p_data || jsonb_build_object('run_id', b.run_id) END)
    ON CONFLICT (event_id) DO NOTHING;
    RETURN true;
END
$$;

-- Stores bytes (a prompt, a message) as a blob; returns its sha256 hex, or NULL over the cap.
CREATE FUNCTION agent.put_blob(p_content bytea)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    b props.agent_bindings;
    v_sha bytea := sha256(p_content);
BEGIN
    b := props.agent_charge(0, octet_length(p_content));
    IF b IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO props.blobs (sha256, size, compression, content)
    VALUES (v_sha, octet_length(p_content), 'none', p_content)
    ON CONFLICT (sha256) DO NOTHING;
    RETURN encode(v_sha, 'hex');
END
$$;

REVOKE ALL ON FUNCTION agent.report(uuid, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION agent.put_blob(bytea) FROM PUBLIC;
REVOKE ALL ON FUNCTION props.agent_charge(integer, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION agent.report(uuid, text, jsonb) TO props_agent;
GRANT EXECUTE ON FUNCTION agent.put_blob(bytea) TO props_agent;
