"""What `props events` does: the handlers that the parsers of
`props.tools.command_line.commands.events` name."""

from __future__ import annotations

import argparse
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson

from props.core.domain import streams
from props.core.log import errors
from props.core.log.checkpoints import START, Checkpoint
from props.core.log.events import NewEvent, RecordedEvent, data_of
from props.core.log.store import EventStore
from props.tools.command_line.render import Console, emit

console = Console(highlight=False)




def _read_input(path: str) -> Any:
    try:
        raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise errors.PropsError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise errors.InvalidEvent(f"{path} is not valid JSON: {exc}") from exc


def parse_new_events(store: EventStore, doc: Any) -> tuple[str, list[NewEvent]]:
    items = doc if isinstance(doc, list) else [doc]
    if not items:
        raise errors.InvalidEvent("no events given")
    stream: str | None = None
    out: list[NewEvent] = []
    for i, item in enumerate(items):
        where = f"event {i + 1}" if len(items) > 1 else "the event"
        if not isinstance(item, dict):
            raise errors.InvalidEvent(f"{where} is not a JSON object")
        unknown = set(item) - {"stream", "type", "data", "metadata", "event_id"}
        if unknown:
            raise errors.InvalidEvent(f"{where}: unknown keys {sorted(unknown)}")
        for key in ("stream", "type", "data"):
            if key not in item:
                raise errors.InvalidEvent(f"{where}: missing key {key!r}")
        if stream is not None and item["stream"] != stream:
            raise errors.InvalidEvent("one append goes to one stream; split the input")
        stream = str(item["stream"])
        event = store.registry.parse(str(item["type"]), item["data"])
        slug = item["data"].get("slug") if isinstance(item["data"], dict) else None
        if str(item["type"]).startswith("snapshot.") and stream != streams.snapshot(str(slug)):
            # Folds key a snapshot's events on data.slug: elsewhere they would act on it.
            raise errors.InvalidEvent(f"{where}: a {item['type']} goes to the stream of its "
                                      f"slug ({streams.snapshot(str(slug))[:80]}), not "
                                      f"{stream[:80]}")
        meta = item.get("metadata") or {}
        if not isinstance(meta, dict):
            raise errors.InvalidEvent(f"{where}: metadata must be an object")
        try:
            event_id = uuid.UUID(str(item["event_id"])) if "event_id" in item else uuid.uuid4()
        except ValueError:
            raise errors.InvalidEvent(f"{where}: event_id is not a UUID") from None
        out.append(NewEvent(event, event_id, meta))
    assert stream is not None
    return stream, out


async def append_cmd(args: argparse.Namespace, store: EventStore) -> int:
    doc = _read_input(args.file)
    stream, events = parse_new_events(store, doc)
    result = await store.append(
        stream, events, expected_version=args.expected_version,
        metadata={"actor": "cli"},
    )
    verb = "already stored" if result.already_stored else "appended"
    console.print(
        f"{verb} {len(events)} event(s) to {stream} "
        f"(versions {result.first_version}..{result.last_version})"
    )
    return 0


def render(rec: RecordedEvent, as_json: bool) -> str:
    data = data_of(rec.event)
    if as_json:
        return orjson.dumps({
            "checkpoint": f"{rec.tx_id}:{rec.global_position}",
            "position": rec.global_position, "event_id": str(rec.event_id),
            "stream": rec.stream_id, "version": rec.stream_version, "type": rec.type_name,
            "schema_version": rec.schema_version, "recorded_at": rec.recorded_at.isoformat(),
            "data": data, "metadata": rec.metadata,
        }).decode()
    body = orjson.dumps(data).decode()
    if len(body) > 160:
        body = body[:157] + "..."
    return (f"{rec.global_position:>8} {rec.recorded_at:%H:%M:%S} {rec.stream_id}"
            f"@{rec.stream_version} {rec.type_name} {body}")


async def tail_cmd(args: argparse.Namespace, store: EventStore) -> int:
    start = args.start or ("start" if args.no_follow else "end")
    if start == "start":
        after = START
    elif start == "end":
        fence = await store.fence_status()
        after = fence.last_visible or START
    else:
        after = Checkpoint.parse(start)
    if args.no_follow:
        async for batch in store.iter_all(after, category=args.category):
            for rec in batch:
                print(render(rec, args.json), flush=True)
        return 0
    async with store.subscribe(after, category=args.category) as sub:
        async for batch in sub:
            for rec in batch:
                print(render(rec, args.json), flush=True)
    return 0


async def types_cmd(args: argparse.Namespace) -> int:
    from props.core.domain.catalog import REGISTRY

    types = [(name, REGISTRY.require(name)) for name in REGISTRY.names()]
    rows = [{"type": name, "schema_version": cls.schema_version, "fields": list(cls.model_fields)}
            for name, cls in types]
    if args.format != "table":
        emit(args, rows, TYPE_COLUMNS, empty="")
        return 0
    for name, cls in types:
        console.print(f"{name} v{cls.schema_version}: {', '.join(cls.model_fields)}")
    return 0


TYPE_COLUMNS = [("type", "type"), ("schema_version", "version"), ("fields", "fields")]
