-- The analysts' side: the `projections` schema (tables are created and rebuilt by the
-- projection runner, see projections/), the role that may read it and nothing else, and
-- helpers the score views use.

CREATE SCHEMA projections;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'props_analyst') THEN
        CREATE ROLE props_analyst LOGIN;
    END IF;
END
$$;

-- Analysts read projections; the log, the blobs and the checkpoints stay out of reach.
REVOKE ALL ON SCHEMA props FROM PUBLIC;
REVOKE ALL ON SCHEMA props_meta FROM PUBLIC;
GRANT USAGE ON SCHEMA projections TO props_analyst;

-- Wilson score interval, 95% (z = 1.96), of k successes in n trials: (low, high).
CREATE FUNCTION projections.wilson_low(k bigint, n bigint) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN n IS NULL OR n = 0 THEN NULL ELSE
        ((k::float8 / n) + 1.9208 / n
         - 1.96 * sqrt((k::float8 / n) * (1 - k::float8 / n) / n + 0.9604 / (n::float8 * n)))
        / (1 + 3.8416 / n) END
$$;

CREATE FUNCTION projections.wilson_high(k bigint, n bigint) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN n IS NULL OR n = 0 THEN NULL ELSE
        ((k::float8 / n) + 1.9208 / n
         + 1.96 * sqrt((k::float8 / n) * (1 - k::float8 / n) / n + 0.9604 / (n::float8 * n)))
        / (1 + 3.8416 / n) END
$$;
