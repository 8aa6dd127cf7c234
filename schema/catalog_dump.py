"""A normalised, stable text description of the props schemas as a database has them.

`schema/declared_schema.txt` holds this description for the current migrations, checked in: a
reviewer sees every schema change as a diff of it, and a test proves that migrating an empty
database gives exactly it. Regenerate it with `props db schema > schema/declared_schema.txt`
after adding a migration. Function bodies appear as a hash, so the SQL lives in one place.
"""

from __future__ import annotations

import hashlib

import asyncpg

SCHEMAS = ["props", "props_meta", "projections"]

_TABLES = """
SELECT c.oid, n.nspname || '.' || c.relname AS name, c.relkind::text AS relkind
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = ANY ($1) AND c.relkind IN ('r', 'p', 'v', 'm')
   -- The log's partitions are made as it grows (props.log_partitions lists them), and each
   -- server version describes their columns its own way: the parent is the declaration.
   AND NOT c.relispartition
 ORDER BY 2
"""
_COLUMNS = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull,
       pg_get_expr(d.adbin, d.adrelid) AS default_expr, a.attidentity::text AS attidentity,
       a.attgenerated::text AS attgenerated, a.attstorage::text AS attstorage,
       t.typstorage::text AS typstorage
  FROM pg_attribute a
  JOIN pg_type t ON t.oid = a.atttypid
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attnum
"""
_CONSTRAINTS = """
SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
 WHERE conrelid = $1 AND contype IN ('p', 'u', 'c', 'f', 'x') ORDER BY conname
"""
_INDEXES = """
SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = $1 ORDER BY 1
"""
_TRIGGERS = """
SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = $1 AND NOT tgisinternal ORDER BY 1
"""
_FUNCTIONS = """
SELECT n.nspname || '.' || p.proname || '(' || pg_get_function_arguments(p.oid) || ')',
       pg_get_function_result(p.oid), p.prosecdef, p.prosrc
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = ANY ($1) ORDER BY 1
"""


async def describe(conn: asyncpg.Connection) -> str:
    lines: list[str] = []
    for schema in SCHEMAS:
        exists = await conn.fetchval("SELECT 1 FROM pg_namespace WHERE nspname = $1", schema)
        lines.append(f"schema {schema}" + ("" if exists else " (missing)"))
    for table in await conn.fetch(_TABLES, SCHEMAS):
        lines.append(f"table {table['name']} ({table['relkind']})")
        for col in await conn.fetch(_COLUMNS, table["oid"]):
            parts = [f"  column {col['attname']} {col['type']}"]
            if col["attnotnull"]:
                parts.append("not null")
            if col["attidentity"]:
                parts.append({"a": "identity always", "d": "identity by default"}[
                    col["attidentity"]])
            elif col["attgenerated"]:
                parts.append(f"generated as ({col['default_expr']}) stored")
            elif col["default_expr"] is not None:
                parts.append(f"default {col['default_expr']}")
            if col["attstorage"] != col["typstorage"]:
                parts.append(f"storage {col['attstorage']}")
            lines.append(" ".join(parts))
        for name, definition in await conn.fetch(_CONSTRAINTS, table["oid"]):
            lines.append(f"  constraint {name} {definition}")
        for (definition,) in await conn.fetch(_INDEXES, table["oid"]):
            lines.append(f"  {definition}")
        for (definition,) in await conn.fetch(_TRIGGERS, table["oid"]):
            lines.append(f"  {definition}")
    for signature, result, secdef, source in await conn.fetch(_FUNCTIONS, SCHEMAS):
        body = hashlib.sha256(source.strip().encode()).hexdigest()[:16]
        security = " security definer" if secdef else ""
        lines.append(f"function {signature} returns {result}{security} body {body}")
    return "\n".join(lines) + "\n"
