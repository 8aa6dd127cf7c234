"""The raw side of the benchmarks: a plain table shaped like the log."""

from __future__ import annotations


def raw_events_table(name: str) -> str:
    """DDL of a plain (unpartitioned, trigger-free) table `schema.table` with the log's
    columns and indexes, plus the two unique indexes a plain table would use for the
    guarantees props keeps beside its partitioned log (one event id once: props.event_ids;
    one version per stream: props.streams). A ratio against writes into it is the cost props
    adds."""
    schema, table = name.split(".")
    return (f"CREATE TABLE {name} (LIKE props.events INCLUDING ALL); "
            f"CREATE UNIQUE INDEX {table}_event_id_key ON {name} (event_id); "
            f"DROP INDEX {schema}.{table}_stream_id_stream_version_idx; "
            f"CREATE UNIQUE INDEX {table}_stream_version_key ON {name} "
            f"(stream_id, stream_version)")
