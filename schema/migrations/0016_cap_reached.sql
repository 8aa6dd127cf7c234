-- Which cap a run's agent reached (issue 59): `agent_charge` records the cap the refused
-- charge would have passed, so the run's `event_cap` failure names it (max_events or
-- max_bytes) instead of guessing it from the counts afterwards. The caps themselves are the
-- operator's per definition digest (`definition.granted`), given to `open_agent_role`.

ALTER TABLE props.agent_bindings
    ADD COLUMN cap_reached text CHECK (cap_reached IN ('max_events', 'max_bytes'));

CREATE OR REPLACE FUNCTION props.agent_charge(p_events integer, p_bytes bigint)
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
        -- The first refusal names the cap; the run ends on it, so later ones change nothing.
        UPDATE props.agent_bindings
           SET over_cap = true,
               cap_reached = COALESCE(cap_reached,
                                      CASE WHEN b.events + p_events > b.max_events
                                           THEN 'max_events' ELSE 'max_bytes' END)
         WHERE role_name = b.role_name;
        RETURN NULL;
    END IF;
    UPDATE props.agent_bindings SET events = events + p_events, bytes = bytes + p_bytes
     WHERE role_name = b.role_name RETURNING * INTO b;
    RETURN b;
END
$$;
