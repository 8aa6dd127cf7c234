-- Queries of props.core.tokens (the HTTP API's and the registry proxy's tokens).

-- create --
INSERT INTO props.api_tokens (name, scopes, secret_hash) VALUES ($1, $2, $3)
RETURNING id, name, scopes, created_at, revoked_at

-- create_first_admin --
-- The admin token of a first start: made only while no token was ever made, so two services
-- starting at once make one between them (the advisory lock $2 orders them).
WITH lock AS (SELECT pg_advisory_xact_lock($2::bigint))
INSERT INTO props.api_tokens (name, scopes, secret_hash)
SELECT 'admin', ARRAY['admin'], $1 FROM lock
 WHERE NOT EXISTS (SELECT 1 FROM props.api_tokens)
RETURNING id, name, scopes, created_at, revoked_at

-- verify --
SELECT id, name, scopes, created_at, revoked_at FROM props.api_tokens
 WHERE secret_hash = $1 AND revoked_at IS NULL

-- list --
SELECT id, name, scopes, created_at, revoked_at FROM props.api_tokens
 ORDER BY created_at, name

-- revoke --
UPDATE props.api_tokens SET revoked_at = now()
 WHERE revoked_at IS NULL AND (name = $1 OR id::text = $1)
RETURNING id, name, scopes, created_at, revoked_at
