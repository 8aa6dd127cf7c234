"""The views analysts read over the projections' tables (`run_scores`, `model_scores`,
`scored_edges`, ...): made after a build, dropped (dependents first) to swap tables under
them. They join several projections' tables, so they are made here, not by any one of them;
the SQL is `schema/sql/projection_views.sql`.
"""

from __future__ import annotations

from props.core.log import database
from props.projections import grading
from props.projections.tables import check_schema
from props.schema import queries

_VIEWS = queries.load("projection_views")
# Fragments the views share with a projection's own statements, spliced where they are named.
_FRAGMENTS = {"{scored_edges}": grading.SCORED_EDGES}


async def create(conn: database.Connection, schema: str) -> None:
    """Make the views over `schema`'s tables."""
    for sql in _VIEWS.values():
        for name, fragment in _FRAGMENTS.items():
            sql = sql.replace(name, fragment)
        await conn.execute(sql.replace("{schema}", check_schema(schema)))


async def drop(conn: database.Connection, schema: str) -> None:
    """Drop the views over `schema`'s tables, dependents first (to swap tables under them)."""
    for view in reversed(list(_VIEWS)):
        await conn.execute(f"DROP VIEW IF EXISTS {check_schema(schema)}.{view}")
