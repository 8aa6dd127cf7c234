-- Aggregates of the server-side projection folds (projections/rows.py): the newest and the
-- oldest non-null value of a group, in the order given (`newest(x) OVER (... ORDER BY tx_id,
-- global_position)`). The transition functions are strict: the first non-null value becomes
-- the state without a call, nulls are skipped without one, so a group of one row (most rows
-- of a fold) costs no function call at all.

CREATE FUNCTION projections.keep_newer(anyelement, anyelement) RETURNS anyelement
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS 'SELECT $2';

CREATE FUNCTION projections.keep_older(anyelement, anyelement) RETURNS anyelement
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS 'SELECT $1';

CREATE AGGREGATE projections.newest(anyelement) (
    SFUNC = projections.keep_newer, STYPE = anyelement, PARALLEL = SAFE);

CREATE AGGREGATE projections.oldest(anyelement) (
    SFUNC = projections.keep_older, STYPE = anyelement, PARALLEL = SAFE);
