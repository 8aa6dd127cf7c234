"""Requesting critic runs: what `props runs request` and `POST /api/runs/critic` both do.

The definition's `latest` (or a tag) is resolved now, at request time, so the run asks for a
digest; the snapshot must be in the log and not retired; all requested runs are appended in
one atomic write. With an idempotency key the run ids derive from it, so a client that
retries a request it never saw answered gets the same runs back, not new ones.
"""

from __future__ import annotations

import dataclasses
import uuid

import pydantic

from props.core.domain import catalog, definitions, streams
from props.core.domain.specimens import specimen_sync
from props.core.log import errors
from props.core.log.events import Event, NewEvent, RecordedEvent, describe_validation_error
from props.core.log.store import EventStore, StoreTransaction
from props.schema import queries

_KEYS = uuid.UUID("0f0d6a43-5a8e-4d61-9a6e-3b1c2f5a9e11")


class InvalidRequest(errors.NotFound):
    """A request that names something the log does not hold; `field` says which input (the
    API answers 422 naming it; the CLI exits 66)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclasses.dataclass(frozen=True)
class CriticRunRequest:
    definition: str
    snapshot: str
    model: str
    ref: str = "latest"
    file_set: str | None = None
    timeout_seconds: float = 600
    budget_usd: float = 1.0
    count: int = 1
    requested_by: str | None = None
    idempotency_key: str | None = None


@dataclasses.dataclass(frozen=True)
class Requested:
    run_ids: list[uuid.UUID]
    digest: str
    already_requested: bool  # an idempotent retry: these runs were requested before


def idempotent_run_id(key: str, i: int) -> uuid.UUID:
    """The `i`th run of a request with idempotency key `key`."""
    return uuid.uuid5(_KEYS, f"{key}/{i}")


@dataclasses.dataclass(frozen=True)
class PreparedRuns:
    """Critic runs resolved and built, not yet appended (`append`)."""

    batches: list[tuple[str, list[Event | NewEvent]]]
    run_ids: list[uuid.UUID]
    digest: str

    async def append(self, writer: EventStore | StoreTransaction) -> Requested:
        """All of them in one atomic write: on the pool, or inside the caller's transaction
        (the API's, which holds the requester's quota check with it)."""
        if isinstance(writer, EventStore):
            results = await writer.append_many(self.batches)
        else:  # (one statement each; a request holds at most 100)
            results = [await writer.append(stream_id, events)
                       for stream_id, events in self.batches]
        return Requested(self.run_ids, self.digest,
                         already_requested=all(r.already_stored for r in results))


_AGENTS = queries.load("agents")
_EVENTS = queries.load("events")  # the log's streams


@dataclasses.dataclass(frozen=True)
class Counts:
    """Critic runs by where they stand, from the log (`props service status`)."""

    queued: int  # requested, no container yet
    running: int  # a container, no finish
    finished: int


async def counts(store: EventStore) -> Counts:
    """How many critic runs are queued, running and finished now."""
    row = await store.sql.fetchrow(_AGENTS["run_counts"])
    assert row is not None  # an aggregate: one row, always
    return Counts(int(row["queued"]), int(row["running"]), int(row["finished"]))


async def request_critic_runs(store: EventStore, req: CriticRunRequest) -> Requested:
    return await (await prepare_critic_runs(store, req)).append(store)


async def prepare_critic_runs(store: EventStore, req: CriticRunRequest) -> PreparedRuns:
    """The runs `req` asks for, with the definition's ref resolved now and the snapshot (and
    file set) checked: InvalidRequest naming the field otherwise."""
    resolved = await definitions.resolve(store, "critic", req.definition, req.ref)
    if resolved is None:
        raise InvalidRequest("definition", str(definitions.missing_definition(
            "critic", req.definition, req.ref)))
    history = await specimen_sync.history_of(store, req.snapshot)
    if history is None or history.retired:
        raise InvalidRequest("snapshot", f"snapshot {req.snapshot} is not in the log (or "
                             f"retired): props specimens sync first")
    files_hash = None
    if req.file_set:
        found = [fs for fs in history.latest.ground_truth.file_sets if fs.name == req.file_set]
        if not found:
            raise InvalidRequest("file_set", f"{req.snapshot} has no file set "
                                 f"{req.file_set!r}")
        files_hash = found[0].files_hash
    batches: list[tuple[str, list[Event | NewEvent]]] = []
    run_ids = []
    for i in range(req.count):
        if req.idempotency_key is None:
            run_id, event_id = uuid.uuid4(), uuid.uuid4()
        else:
            run_id = idempotent_run_id(req.idempotency_key, i)
            event_id = uuid.uuid5(run_id, "run.requested")
        try:
            event = catalog.RunRequested(
                run_id=run_id, agent_type="critic", definition=req.definition,
                definition_ref=resolved.digest,
                example=catalog.Example(snapshot=req.snapshot, files_hash=files_hash),
                model=req.model, timeout_seconds=req.timeout_seconds,
                budget_usd=req.budget_usd, requested_by=req.requested_by)
        except pydantic.ValidationError as exc:
            raise errors.InvalidEvent(describe_validation_error("run.requested", exc)) from exc
        batches.append((streams.run(run_id), [NewEvent(event, event_id)]))
        run_ids.append(run_id)
    return PreparedRuns(batches, run_ids, resolved.digest)


# -- what may be asked of a run once it is requested -----------------------------------------


async def resolve(store: EventStore, ref: str) -> uuid.UUID:
    """The run `ref` (streams.RUN_REF) names: its whole id, or the one run whose id starts
    so. None, or more than one: an error saying which."""
    try:
        return uuid.UUID(ref)
    except ValueError:
        pass
    ref = ref.lower()
    rows = await store.sql.fetch(  # (the ref's characters: hex and '-' only)
        _EVENTS["streams_by_prefix"], f"{streams.run(ref)}%")
    found = [str(streams.run_id_of(r[0])) for r in rows]
    if not found:
        raise errors.NotFound(f"no run id starts with {ref}")
    if len(found) > 1:  # the count first: the user needs it to know how much more to give
        many = rows[0][1]
        raise errors.Ambiguous(
            f"{ref} is the start of {many} run ids: {', '.join(found)}"
            + (", ..." if many > len(found) else "") + "; give more of it")
    return streams.run_id_of(streams.run(found[0]))


async def events_of(store: EventStore, run_id: uuid.UUID) -> list[RecordedEvent]:
    """The run's events, or NotFound."""
    records = await store.read_stream(streams.run(run_id))
    if not records:
        raise errors.NotFound(f"no run {run_id} in the log")
    return records


async def cancel(store: EventStore, run_id: uuid.UUID, by: str) -> bool:
    """Ask the launcher to stop the run; False when it has finished already."""
    records = await events_of(store, run_id)
    if any(r.type_name == "run.finished" for r in records):
        return False
    await store.append(streams.run(run_id), [catalog.RunCancelRequested(
        run_id=run_id, requested_by=by)])
    return True


async def hold(store: EventStore, run_id: uuid.UUID, reason: str, by: str) -> None:
    """Keep the run's events in the hot log: archival leaves them until released."""
    await events_of(store, run_id)  # the run must exist
    await store.append(streams.retention(run_id), [catalog.RetentionHeld(
        run_id=run_id, reason=reason, held_by=by)])


async def release(store: EventStore, run_id: uuid.UUID, by: str) -> bool:
    """End the run's hold; False when it is not held."""
    from props.core.domain.archive import archival  # (the archive's code: 0.3 s to import)

    await events_of(store, run_id)  # the run must exist, as for hold
    if run_id not in await archival.held_runs(store):
        return False
    await store.append(streams.retention(run_id), [catalog.RetentionReleased(
        run_id=run_id, released_by=by)])
    return True
