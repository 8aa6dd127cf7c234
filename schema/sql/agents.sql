-- Queries of the launcher about agent roles and what agents reported (props.reactors.agent_roles).

-- bind --
INSERT INTO props.agent_bindings (role_name, run_id, agent_type, max_events, max_bytes)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (role_name) DO NOTHING

-- close --
UPDATE props.agent_bindings SET closed = true WHERE role_name = $1 AND NOT closed

-- terminate --
SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1

-- leftover_roles --
-- Roles whose run has ended (binding closed, or a finish event in the log) that a crash or a
-- lost connection kept from being dropped.
SELECT r.rolname FROM pg_roles r
  JOIN props.agent_bindings b ON b.role_name = r.rolname
 WHERE r.rolname LIKE $1
   AND (b.closed OR EXISTS (SELECT 1 FROM props.events e
                             WHERE e.stream_id = 'run-' || b.run_id::text
                               AND e.type = 'run.finished'))

-- binding --
SELECT events, bytes, over_cap FROM props.agent_bindings WHERE role_name = $1

-- outbox --
SELECT seq, event_id, type, data::text AS data, reported_at
  FROM props.agent_outbox WHERE run_id = $1 AND seq > $2 ORDER BY seq

-- unfinished_runs --
-- Runs requested and not finished: the launcher's work after a restart, in request order.
SELECT r.stream_id
  FROM props.events r
 WHERE r.category = 'run' AND r.type = 'run.requested'
   AND NOT EXISTS (SELECT 1 FROM props.events f
                    WHERE f.stream_id = r.stream_id AND f.type = 'run.finished')
 ORDER BY r.global_position

-- run_counts --
-- Critic runs by where they stand, from the log: queued (requested, no container yet),
-- running (a container, no finish) and finished.
SELECT count(*) FILTER (WHERE s.started IS NULL AND NOT s.finished) AS queued,
       count(*) FILTER (WHERE s.started IS NOT NULL AND NOT s.finished) AS running,
       count(*) FILTER (WHERE s.finished) AS finished
  FROM (SELECT stream_id,
               max(global_position) FILTER (WHERE type = 'container.started') AS started,
               bool_or(type = 'run.finished') AS finished
          FROM props.events
         WHERE category = 'run'
           AND type IN ('run.requested', 'container.started', 'run.finished')
         GROUP BY stream_id) s

-- parked --
SELECT count(*) FROM props.events WHERE stream_id = $1 AND type = 'event.parked'

-- stored_ids --
SELECT event_id FROM props.event_ids WHERE event_id = ANY ($1::uuid[])

-- deployment --
SELECT id, current_database() FROM props.deployment
