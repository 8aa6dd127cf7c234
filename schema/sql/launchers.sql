-- Queries of props.reactors.launcher.launchers: several launchers sharing the queue of runs.

-- started --
-- Each launcher's last `launcher.started`: its capacity, engine and lease as it last came up.
SELECT DISTINCT ON (stream_id) data::text AS data, recorded_at
  FROM props.events
 WHERE category = 'launcher' AND type = 'launcher.started'
 ORDER BY stream_id, stream_version DESC

-- held --
-- The unfinished runs and the launcher of each one's last claim (not released since).
SELECT DISTINCT ON (c.stream_id) c.stream_id, c.data ->> 'launcher' AS launcher
  FROM props.events c
 WHERE c.category = 'run' AND c.type = 'run.claimed'
   AND NOT EXISTS (SELECT 1 FROM props.events f
                    WHERE f.stream_id = c.stream_id AND f.type = 'run.finished')
   AND NOT EXISTS (SELECT 1 FROM props.events r
                    WHERE r.stream_id = c.stream_id AND r.type = 'run.released'
                      AND r.stream_version > c.stream_version)
 ORDER BY c.stream_id, c.stream_version DESC
