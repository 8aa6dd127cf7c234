"""Which scorers the log knows and which one is active: registration, lookup, activation.

Every path that registers or activates a scorer (the grader at start, `props scorers
register/activate`, a rescore) calls these, so each is idempotent everywhere: the same
request twice, a retry, or two processes at once append one event.
"""

from __future__ import annotations

import uuid

from props.core.domain import catalog, streams
from props.core.log import errors
from props.core.log.events import NewEvent
from props.core.log.store import EventStore
from props.core.scoring import scorers

# The namespace registrations have always used (their ids must stay what they were).
_RESCORING_NAMESPACE = uuid.UUID("0b8f6f57-3c8a-4f64-8d57-2b3f3f1a9e21")
_ACTIVATION_NAMESPACE = uuid.UUID("c1f2d3e4-5a6b-4c7d-8e9f-0a1b2c3d4e5f")


async def ensure_registered(store: EventStore, s: scorers.Scorer) -> bool:
    """Record the scorer's registration unless it is there; refuse a changed scorer that
    kept its version. Returns whether a registration was appended."""
    for rec in await store.read_stream(streams.scorer(s.name)):
        event = rec.event
        if isinstance(event, catalog.ScorerRegistered) and event.version == s.version:
            if event.code_hash != s.code_hash:
                raise errors.PropsError(
                    f"{scorers.ref(s)} is registered with code hash {event.code_hash[:12]}, "
                    f"but this props computes {s.code_hash[:12]}: a changed scorer (code or "
                    f"settings) needs a new version"
                )
            return False
    event_id = uuid.uuid5(_RESCORING_NAMESPACE, f"register:{scorers.ref(s)}:{s.code_hash}")
    await store.append(streams.scorer(s.name), [NewEvent(scorers.registration(s), event_id)])
    return True


async def resolve_ref(store: EventStore, ref: str) -> tuple[str, int]:
    """NAME@VERSION of a built-in scorer, or of one a grader push registered."""
    try:
        name, version = streams.parse_ref(ref)
    except ValueError:
        name, version = ref, 0  # a malformed ref: unknown, said as below
    if ref in scorers.SCORERS:
        return name, version
    if version and any(
            isinstance(r.event, catalog.ScorerRegistered) and r.event.version == version
            for r in await store.read_stream(streams.scorer(name))):
        return name, version
    raise errors.UnknownScorer(f"unknown scorer {ref!r}: neither built in "
                               f"({', '.join(scorers.SCORERS)}) nor registered in the log")


async def _last_activation(store: EventStore) -> tuple[str | None, uuid.UUID | None]:
    """NAME@VERSION of the active scorer and the id of the event that made it so. Read from
    the scorers' streams directly, not through the visibility fence: a transaction left open
    anywhere on the server would otherwise hide the last activation, even this process's
    own (activating the default back after B read B as still active). An activation an
    import brought is its origin's history: which scorer grades here is this database's."""
    active, event_id = None, None
    for rec in await store.reader.read_category_now("scorer"):
        if isinstance(rec.event, catalog.ActiveScorerSet) and not rec.imported:
            active, event_id = f"{rec.event.name}@{rec.event.version}", rec.event_id
    return active, event_id


async def active_scorer(store: EventStore) -> str | None:
    """The scorer the last `scorer.activated` event names, as NAME@VERSION."""
    return (await _last_activation(store))[0]


async def origin_scorer(store: EventStore, archive: str | None) -> str | None:
    """NAME@VERSION of the scorer an import's origin had active: the last activation (in
    the origin's order) that the import of `archive` brought, else that any import brought.
    History, never this database's active scorer: what an evaluation the import brought was
    graded under."""
    theirs: list[tuple[bool, int, int, str]] = []
    for rec in await store.reader.read_category_now("scorer"):
        if isinstance(rec.event, catalog.ActiveScorerSet) and rec.imported:
            origin = rec.metadata.get("origin")
            same = isinstance(origin, dict) and origin.get("archive") == archive
            at = rec.metadata.get("origin_position")
            theirs.append((same, at if isinstance(at, int) else 0, rec.global_position,
                           f"{rec.event.name}@{rec.event.version}"))
    return max(theirs)[3] if theirs else None


async def activate(store: EventStore, name: str, version: int,
                   forced: catalog.ScorerForced | None = None) -> bool:
    """Make NAME@VERSION the active scorer; False when it is already. The event's id is
    derived from the activation it follows: a retry, or a second process asking the same at
    the same time, appends nothing more, while activating A again after B does append.
    `forced`: the gate refused it (props.core.scoring.gate), recorded in the same write."""
    ref = f"{name}@{version}"
    active, after = await _last_activation(store)
    if active == ref:
        return False
    event_id = uuid.uuid5(_ACTIVATION_NAMESPACE, f"activation:{ref}:after:{after or 'none'}")
    events = [NewEvent(catalog.ActiveScorerSet(name=name, version=version), event_id)]
    if forced is not None:
        events.insert(0, NewEvent(forced, uuid.uuid5(event_id, "forced")))
    result = await store.append(streams.scorer(name), events)
    return not result.already_stored
