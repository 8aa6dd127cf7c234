"""Typed events: the base model, the registry of types and versions, upcasting, decoding.

An event type is a pydantic model registered under a stable name (`run.requested`) and a
schema version. Stored events are never rewritten: when a type's schema changes, its version
goes up and an upcaster turns the stored older data into the current shape on read. A stored
type this props does not know is still readable, as an `UnknownEvent` with its raw data.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar, NamedTuple, TypeVar

import orjson
import pydantic

from props.core.log import errors

# An event's data is small and structured. Prompts, transcripts and logs go to the blob table
# and events carry their hash: the log stays fast to read and cheap to export.
MAX_EVENT_BYTES = 256 * 1024

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


class Event(pydantic.BaseModel):
    """Base of every event type. Subclasses set `type_name` and `schema_version`."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid", strict=False)

    type_name: ClassVar[str]
    schema_version: ClassVar[int] = 1


E = TypeVar("E", bound=type[Event])


@dataclasses.dataclass(frozen=True)
class UnknownEvent:
    """A stored event whose type is not in the catalog (newer props, foreign import)."""

    type_name: str
    schema_version: int
    data: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class UnreadableEvent(UnknownEvent):
    """A stored event of a known type that this props cannot read: it does not match its
    model (a value past a range the catalog has since bounded, a foreign writer's row) or no
    upcaster takes it. Reading never fails on it: the reader hands it on as this, and a
    consumer that wanted the type parks it (`event.parked`), never stops on it."""

    problem: str = ""


def unreadable(type_name: str, schema_version: int, data_json: str,
               exc: Exception) -> UnreadableEvent:
    try:
        data = orjson.loads(data_json)
    except orjson.JSONDecodeError:
        data = {}
    problem = (describe_validation_error(type_name, exc)
               if isinstance(exc, pydantic.ValidationError) else f"{type(exc).__name__}: {exc}")
    return UnreadableEvent(type_name, schema_version, data if isinstance(data, dict) else {},
                           problem[:4000])


# What reading a stored event may raise, all of it the event's fault, never the reader's.
UNREADABLE_ERRORS = (pydantic.ValidationError, errors.EventVersionError, ValueError, TypeError,
                     KeyError, AttributeError)


@dataclasses.dataclass(frozen=True, slots=True)
class NotDecoded:
    """A stored event its reader chose not to decode: it needs only the envelope (position,
    ids, type), as the projection runner does for the events the server folds."""

    type_name: str
    schema_version: int


# Which stored events a reader decodes, by (type, schema version); None: all of them.
DecodeFilter = Callable[[str, int], bool]


@dataclasses.dataclass(frozen=True)
class NewEvent:
    """An event to append, with the id that makes a retried append a no-op.

    Pass the same `event_id` when retrying: derive it deterministically (uuid5 of what caused
    the event) where a retry may come from another process.
    """

    event: Event
    event_id: uuid.UUID = dataclasses.field(default_factory=uuid.uuid4)
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)


class RecordedEvent(NamedTuple):
    """An event as stored in the log, decoded to its current schema version.

    A NamedTuple rather than a dataclass: a catch-up or rebuild makes millions of these, and a
    tuple is the cheapest immutable record Python builds.
    """

    global_position: int
    tx_id: int
    event_id: uuid.UUID
    stream_id: str
    stream_version: int
    type_name: str
    schema_version: int  # as stored; `event` is upcast to the current version
    event: Event | UnknownEvent | NotDecoded
    metadata: dict[str, Any]
    recorded_at: datetime

    @property
    def category(self) -> str:
        return self.stream_id.split("-", 1)[0]

    @property
    def imported(self) -> bool:
        """Brought by an import (`props.import_staged` records its origin): another
        database's history, which this one's consumers read but never act on as their own."""
        return "origin" in self.metadata


class EventRegistry:
    """Event types by name, and the upcasters from each older schema version."""

    def __init__(self) -> None:
        self._types: dict[str, type[Event]] = {}
        self._upcasters: dict[tuple[str, int], Upcaster] = {}
        # (type, current version) -> the model's JSON validator: the read path's fast lane.
        self.current_validators: dict[tuple[str, int], Callable[[str], Event]] = {}

    def register(self, cls: E) -> E:
        """Class decorator: add an event type (its `type_name` and `schema_version`)."""
        name = cls.type_name
        if name in self._types and self._types[name] is not cls:
            raise ValueError(f"event type {name!r} registered twice")
        if cls.schema_version < 1:
            raise ValueError(f"{name}: schema_version starts at 1")
        self._types[name] = cls
        validator = cls.__pydantic_validator__.validate_json
        self.current_validators[(name, cls.schema_version)] = validator
        return cls

    def upcaster(self, type_name: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
        """Decorator: a function turning `type_name` data of `from_version` into the next one."""

        def add(fn: Upcaster) -> Upcaster:
            self._upcasters[(type_name, from_version)] = fn
            return fn

        return add

    def check_complete(self) -> None:
        """Every registered type has an upcaster from each older version (a startup check)."""
        for name, cls in self._types.items():
            missing = [v for v in range(1, cls.schema_version) if (name, v) not in self._upcasters]
            if missing:
                raise ValueError(f"{name} v{cls.schema_version}: no upcaster from v{missing}")

    def get(self, type_name: str) -> type[Event] | None:
        return self._types.get(type_name)

    def names(self) -> list[str]:
        return sorted(self._types)

    def require(self, type_name: str) -> type[Event]:
        cls = self._types.get(type_name)
        if cls is None:
            raise errors.UnknownEventType(
                f"unknown event type {type_name!r}; known types: {', '.join(self.names())}"
            )
        return cls

    # -- decoding ---------------------------------------------------------------------------

    def decode(self, type_name: str, schema_version: int, data_json: str) -> Event | UnknownEvent:
        """Decode stored JSON data into the current model of its type, upcasting if older."""
        cls = self._types.get(type_name)
        if cls is None:
            return UnknownEvent(type_name, schema_version, orjson.loads(data_json))
        if schema_version == cls.schema_version:
            # The hot path: pydantic parses the JSON text itself, no intermediate dicts.
            return cls.model_validate_json(data_json)
        return self._upcast(cls, schema_version, orjson.loads(data_json))

    def validate_stored(self, type_name: str, schema_version: int,
                        data: Any) -> Event | UnknownEvent:
        """`decode` for data already parsed (an import checking each event of a file):
        raises `InvalidEvent` naming what is wrong when the catalog refuses it."""
        cls = self._types.get(type_name)
        if cls is None:
            return UnknownEvent(type_name, schema_version, data)
        try:
            return self._upcast(cls, schema_version, data)
        except pydantic.ValidationError as exc:
            raise errors.InvalidEvent(describe_validation_error(type_name, exc)) from exc
        except (TypeError, KeyError, AttributeError, ValueError) as exc:  # an upcaster's
            raise errors.InvalidEvent(f"{type_name} v{schema_version}: cannot be upcast "
                                      f"({type(exc).__name__}: {exc})") from exc

    def _upcast(self, cls: type[Event], schema_version: int, data: Any) -> Event:
        type_name = cls.type_name
        if schema_version > cls.schema_version or schema_version < 1:
            raise errors.EventVersionError(
                f"{type_name} stored with schema version {schema_version}, but this props "
                f"reads only versions 1 to {cls.schema_version}: upgrade props to read it."
            )
        for version in range(schema_version, cls.schema_version):
            step = self._upcasters.get((type_name, version))
            if step is None:
                raise errors.EventVersionError(
                    f"{type_name}: no upcaster from schema version {version} to {version + 1}"
                )
            data = step(data)
        return cls.model_validate(data)

    # -- encoding ---------------------------------------------------------------------------

    def encode(self, event: Event) -> str:
        """Validate and serialise an event for the log; raise a clear error when it cannot."""
        cls = type(event)
        if self._types.get(cls.type_name) is not cls:
            raise errors.UnknownEventType(
                f"event type {cls.type_name!r} ({cls.__name__}) is not registered in the catalog"
            )
        text = event.model_dump_json()
        if len(text) > MAX_EVENT_BYTES:
            raise errors.PayloadTooLarge(
                f"{cls.type_name} event data is {len(text):,} bytes, over the "
                f"{MAX_EVENT_BYTES:,}-byte limit: store large content with put_blob() and put "
                f"its sha256 in the event."
            )
        return text

    def parse(self, type_name: str, data: Any) -> Event:
        """Build an event of a named type from untrusted data (CLI, API, import)."""
        cls = self.require(type_name)
        try:
            return cls.model_validate(data)
        except pydantic.ValidationError as exc:
            raise errors.InvalidEvent(describe_validation_error(type_name, exc)) from exc


def validation_problems(exc: pydantic.ValidationError) -> str:
    """`field.path: what is wrong; ...`: one line naming every field that failed."""
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or '(event)'}: {err['msg']}"
                     for err in exc.errors())


def describe_validation_error(type_name: str, exc: pydantic.ValidationError) -> str:
    return f"invalid {type_name} event: {validation_problems(exc)}"


def data_of(event: Event | UnknownEvent | NotDecoded, *,
            exclude: set[str] | None = None) -> dict[str, Any]:
    """An event's fields as JSON values (of a decoded event: a reader that asked for no
    decoding has none to show)."""
    if isinstance(event, UnknownEvent):
        return event.data
    if isinstance(event, NotDecoded):
        raise TypeError(f"{event.type_name} was read without decoding: read it decoded")
    return event.model_dump(mode="json", exclude=exclude)


def details(event: Event | UnknownEvent | NotDecoded) -> dict[str, Any]:
    """An event's fields as JSON values, without the run id its run stream already names:
    what a run's timeline shows (`props runs show`, `GET /api/runs/{id}`)."""
    return data_of(event, exclude={"run_id"})
