-- Queries of the model endpoints the operator registered (props.core.domain.endpoints).

-- endpoint_streams --
-- Every endpoint's stream (its name follows 'endpoint-'), this database's own.
SELECT DISTINCT stream_id FROM props.events
 WHERE stream_id LIKE 'endpoint-%' AND type = 'endpoint.registered'
 ORDER BY stream_id
