-- What the consumers skip now, one row per parked event and consumer, with the run it
-- belongs to: read by the report (a run touched by a park is a state of its own) and the
-- viewer (the runs a park touches, and on a run's page what was skipped and why).
--
-- A park (`event.parked` in `reactor-<consumer>`) is current until a `parked.retried` of
-- the same event follows it in that stream; a park after a retry is current again.
CREATE VIEW props.parked_now AS
SELECT p.data->>'reactor' AS consumer,
       (p.data->>'event_id')::uuid AS event_id,
       x.global_position, x.stream_id, x.type,
       p.data->>'error_type' AS error_type, p.data->>'error_message' AS error_message,
       p.recorded_at AS parked_at,
       substring(x.stream_id FROM '^(?:run|grading|judge)-([0-9a-f-]{36})')::uuid AS run_id
  FROM props.events p
  JOIN props.events x ON x.global_position = (p.data->>'global_position')::bigint
 WHERE p.category = 'reactor' AND p.type = 'event.parked'
   AND NOT EXISTS (SELECT 1 FROM props.events q
                    WHERE q.stream_id = p.stream_id AND q.type = 'parked.retried'
                      AND q.data->>'event_id' = p.data->>'event_id'
                      AND q.global_position > p.global_position);

REVOKE ALL ON props.parked_now FROM PUBLIC;
GRANT SELECT ON props.parked_now TO props_service;
