-- Tokens of the HTTP API and the registry proxy.
--
-- Only a sha256 of each token is kept (tokens are 256 random bits, so a plain hash is as good
-- as a slow one and checks in microseconds); the token itself is shown once, when made.
-- Tokens are access control, not evaluation data: they live in a table of their own, never in
-- the log, and neither the analyst role nor agent roles can read it.

CREATE TABLE props.api_tokens (
    id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    name         text        NOT NULL CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}$'),
    scopes       text[]      NOT NULL
                 CHECK (cardinality(scopes) > 0
                        AND scopes <@ ARRAY['read', 'request', 'push', 'admin']::text[]),
    secret_hash  bytea       NOT NULL UNIQUE CHECK (length(secret_hash) = 32),
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz
);

-- One live token per name: `props tokens revoke NAME` is unambiguous.
CREATE UNIQUE INDEX api_tokens_live_name ON props.api_tokens (name) WHERE revoked_at IS NULL;

REVOKE ALL ON props.api_tokens FROM PUBLIC;
