"""A batch of events made ready for an append: checked, encoded, in columns.

Every append path (one stream, many streams, inside a transaction) prepares its events here,
before anything is sent: a request that is refused writes nothing.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Sequence
from typing import Any

import orjson

from props.core.log import errors
from props.core.log.events import Event, EventRegistry, NewEvent

STREAM_ID = re.compile(r"^[a-z][a-z0-9_]*-\S+\Z")  # (\Z: `$` lets a final newline by)
MAX_BATCH = 10_000
COPY_COLUMNS = ["event_id", "stream_id", "stream_version", "type", "schema_version", "data",
                 "metadata"]


@dataclasses.dataclass(frozen=True, slots=True)
class Batch:
    """Encoded events, as columns."""

    ids: list[uuid.UUID]
    types: list[str]
    versions: list[int]
    data: list[str]
    metadata: list[str]

    def rows(self, stream_id: str, after_version: int) -> list[tuple[Any, ...]]:
        return [
            (eid, stream_id, after_version + i, typ, ver, data, meta)
            for i, (eid, typ, ver, data, meta) in enumerate(
                zip(self.ids, self.types, self.versions, self.data, self.metadata, strict=True),
                start=1,
            )
        ]


def prepare(
    registry: EventRegistry,
    stream_id: str,
    events: Sequence[Event | NewEvent],
    expected_version: int | None,
    metadata: dict[str, Any] | None,
) -> Batch:
    """Check the request and encode the events; raise before anything is sent."""
    if not STREAM_ID.match(stream_id):
        raise errors.InvalidEvent(
            f"stream id {stream_id!r} is not <category>-<id> (category: lowercase letters, "
            f"digits, _; e.g. run-3f2a...)"
        )
    if not events:
        raise errors.InvalidEvent(f"nothing to append to {stream_id}: the batch is empty")
    if len(events) > MAX_BATCH:
        raise errors.PayloadTooLarge(
            f"{len(events):,} events in one append; at most {MAX_BATCH:,}: split the batch"
        )
    if expected_version is not None and expected_version < 0:
        raise errors.InvalidEvent(
            f"expected_version must be None, 0 or positive, not {expected_version}"
        )
    common = metadata or {}
    batch = Batch([], [], [], [], [])
    for item in events:
        new = item if isinstance(item, NewEvent) else NewEvent(item)
        if not isinstance(new.event, Event):
            raise errors.InvalidEvent(f"not an event: {type(new.event).__name__}")
        batch.ids.append(new.event_id)
        batch.types.append(new.event.type_name)
        batch.versions.append(new.event.schema_version)
        batch.data.append(registry.encode(new.event))
        meta = {**common, **new.metadata} if common else new.metadata
        try:
            batch.metadata.append(orjson.dumps(meta).decode())
        except TypeError as exc:
            raise errors.InvalidEvent(f"metadata is not JSON-serialisable: {exc}") from exc
    if len(set(batch.ids)) != len(batch.ids):
        raise errors.InvalidEvent("the batch repeats an event id")
    return batch
