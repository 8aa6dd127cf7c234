-- Queries of the launcher about agent roles and what agents reported (props.reactors.launcher.agent_roles).

-- open_role --
-- The run's role and its password, made once by the owner's function (migration 0007).
SELECT role_name AS role, password FROM props.open_agent_role($1, $2, $3, $4, $5, $6, $7, $8)

-- role_of --
SELECT role_name FROM props.agent_bindings WHERE run_id = $1

-- close_role --
-- NULL: the run had no role; false: the role could not be dropped (retried by the sweep).
SELECT props.close_agent_role($1)

-- leftover_roles --
-- Runs whose role is still there although the run has ended (binding closed, or a finish
-- event in the log): a crash or a lost connection kept it from being dropped.
SELECT b.run_id FROM props.agent_bindings b
  JOIN pg_roles r ON r.rolname = b.role_name
 WHERE b.closed OR EXISTS (SELECT 1 FROM props.events e
                            WHERE e.stream_id = 'run-' || b.run_id::text
                              AND e.type = 'run.finished')

-- end_overruns --
SELECT props.end_agent_overruns($1, $2) + props.end_analyst_fence_holds($3)
       + props.end_notify_queue_holders($4)

-- server_socket --
SELECT directories, port FROM props.server_socket()

-- binding --
SELECT events, bytes, over_cap, max_events, max_bytes, cap_reached
  FROM props.agent_bindings WHERE run_id = $1

-- outbox --
SELECT seq, event_id, type, data::text AS data, reported_at
  FROM props.agent_outbox WHERE run_id = $1 AND seq > $2 ORDER BY seq

-- unfinished_runs --
-- Runs requested here and not finished: the launcher's work after a restart, in request
-- order. An imported run (its request carries its origin) is another database's history.
SELECT r.stream_id
  FROM props.events r
 WHERE r.category = 'run' AND r.type = 'run.requested' AND NOT r.metadata ? 'origin'
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
-- What one consumer skips now: its parks less those taken up again (parked.retried).
SELECT count(*) FILTER (WHERE type = 'event.parked')
       - count(*) FILTER (WHERE type = 'parked.retried')
  FROM props.events WHERE stream_id = $1 AND type IN ('event.parked', 'parked.retried')

-- parked_now --
-- ... and every consumer's.
SELECT count(*) FILTER (WHERE type = 'event.parked')
       - count(*) FILTER (WHERE type = 'parked.retried')
  FROM props.events WHERE category = 'reactor' AND type IN ('event.parked', 'parked.retried')

-- stored_ids --
SELECT event_id FROM props.event_ids WHERE event_id = ANY ($1::uuid[])

-- deployment --
SELECT id, current_database() FROM props.deployment

-- reactor_serving --
-- Whether some session holds reactor $1's advisory lock (a ReactorHost serving it, in any
-- process): pg_locks splits the 64-bit key into two 32-bit halves.
SELECT EXISTS (SELECT 1 FROM pg_locks
                WHERE locktype = 'advisory' AND objsubid = 1 AND granted
                  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                  AND ((classid::bigint << 32) | objid::bigint) = $1::bigint)

-- connection_room --
-- What the server leaves for non-superusers, and what is connected now.
SELECT current_setting('max_connections')::int
       - current_setting('superuser_reserved_connections')::int AS room,
       (SELECT count(*)::int FROM pg_stat_activity WHERE backend_type = 'client backend')
           AS in_use
