"""The log opened with the domain's catalog: what every command, service and test uses.

`props.core.log` knows no event type (its registry is an argument); this is where the
catalog meets it.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from props.core.domain.catalog import REGISTRY
from props.core.log.store import EventStore


def open_store(dsn: str | None = None, *, max_connections: int = 10,
               check_schema: bool = True) -> AbstractAsyncContextManager[EventStore]:
    """`async with open_store() as store:` the store on `dsn` (the service's when None),
    decoding with the catalog."""
    return EventStore.open(dsn, registry=REGISTRY, max_connections=max_connections,
                           check_schema=check_schema)
