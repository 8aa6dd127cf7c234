"""The database schema as data: ordered migrations (`migrations/`) and named queries
(`sql/`, loaded by `queries`). The migrator that applies them is the log's
(`props.core.log.migrate`).

May import nothing of props.
"""
