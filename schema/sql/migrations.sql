-- The migrator's own table (props.core.log.migrate): which migration files were applied, with
-- their checksum. Blocks are named `-- name --`.

-- bootstrap --
-- Made before any migration runs (the migrations cannot make the table that records them).
CREATE SCHEMA IF NOT EXISTS props_meta;
CREATE TABLE IF NOT EXISTS props_meta.migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    sha256     text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- recorded --
-- Whether the table exists yet (a database never migrated has none).
SELECT to_regclass('props_meta.migrations') IS NOT NULL

-- applied --
SELECT version, name, sha256, applied_at FROM props_meta.migrations

-- record --
INSERT INTO props_meta.migrations (version, name, sha256) VALUES ($1, $2, $3)
