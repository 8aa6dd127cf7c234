-- Queries of props.core.domain.quotas: what one requester (a token) holds now.

-- unfinished_runs --
-- Every run of the requester not finished: those it asked for directly (evaluation NULL)
-- and those of each of its evaluations, whatever version, ended or not, by version. A run
-- an import brought is never this database's requester's: it is never carried out here,
-- so, counted, a file naming the requester would hold its share for ever.
SELECT r.metadata ->> 'evaluation' AS evaluation,
       (r.metadata ->> 'evaluation_version')::int AS version, count(*) AS runs
  FROM props.events r
 WHERE r.category = 'run' AND r.type = 'run.requested' AND NOT r.metadata ? 'origin'
   AND (r.data ->> 'requested_by' = $1 OR r.metadata ->> 'requester' = $1)
   AND NOT EXISTS (SELECT 1 FROM props.events f
                    WHERE f.stream_id = r.stream_id AND f.type = 'run.finished')
 GROUP BY 1, 2

-- open_evaluations --
-- The requester's evaluations whose latest version has not ended, with their cases.
SELECT s.data ->> 'name' AS name, (s.data ->> 'version')::int AS version,
       (s.data ->> 'cases')::int AS cases
  FROM (SELECT DISTINCT ON (stream_id) stream_id, stream_version, data, metadata
          FROM props.events
         WHERE category = 'evaluation' AND type = 'evaluation.started'
         ORDER BY stream_id, stream_version DESC) s
 WHERE s.metadata ->> 'requested_by' = $1
   AND NOT EXISTS (SELECT 1 FROM props.events e
                    WHERE e.stream_id = s.stream_id AND e.type = 'evaluation.ended'
                      AND e.stream_version > s.stream_version)
   AND NOT EXISTS (SELECT 1 FROM props.events e
                    WHERE e.stream_id = s.stream_id AND e.metadata ? 'origin')
 ORDER BY 1

-- open_evaluation_names --
-- Every evaluation whose latest version has not ended (the service drives them), but those an
-- import brought (their events carry an origin): another database's, never driven here.
SELECT s.data ->> 'name' AS name
  FROM (SELECT DISTINCT ON (stream_id) stream_id, stream_version, data
          FROM props.events
         WHERE category = 'evaluation' AND type = 'evaluation.started'
         ORDER BY stream_id, stream_version DESC) s
 WHERE NOT EXISTS (SELECT 1 FROM props.events e
                    WHERE e.stream_id = s.stream_id AND e.type = 'evaluation.ended'
                      AND e.stream_version > s.stream_version)
   AND NOT EXISTS (SELECT 1 FROM props.events e
                    WHERE e.stream_id = s.stream_id AND e.metadata ? 'origin')
 ORDER BY 1

-- stream_exists --
-- Whether a stream holds an event (a run an idempotent retry names, requested already).
SELECT EXISTS (SELECT 1 FROM props.events WHERE stream_id = $1)
