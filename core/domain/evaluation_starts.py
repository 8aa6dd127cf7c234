"""Starting an evaluation: deciding what its `evaluation.started` will say (a new version,
or the recorded one resumed; refused when the plan changed, or when the name is another
requester's), then recording it. Two steps, so that the API records it inside the
requester's quota transaction (props.core.domain.quotas.turn), having read what it needs
before: a read on the pool inside that transaction could wait on connections its waiters
hold."""

from __future__ import annotations

import dataclasses
import hashlib
import uuid

from props.core.domain import catalog, streams
from props.core.domain.evaluations import (
    NAMESPACE,
    BroughtByImport,
    Case,
    Evaluation,
    NotYours,
    Plan,
    PlanChanged,
    canonical,
    history,
)
from props.core.log.events import NewEvent
from props.core.log.store import EventStore, StoreTransaction


@dataclasses.dataclass(frozen=True)
class Starting:
    """An evaluation about to be recorded (`record`), or resumed (nothing to record)."""

    evaluation: Evaluation
    resumed: bool
    event: NewEvent | None  # its `evaluation.started`; None when resumed
    at: int  # the version of its stream this was decided on


async def prepare(store: EventStore, plan: Plan, cases: list[Case], *,
                  new_version: bool = False, requester: str | None = None) -> Starting:
    """The evaluation of `plan` as it will stand: the same plan and cases resume it; a
    changed one is refused unless `new_version`. `requester` (a token's `api:NAME`) is
    recorded in the metadata: its quotas and its turn in the launcher's queue. A name
    another requester started is refused (NotYours); the operator (None) may do anything."""
    recorded_bytes = canonical(plan, cases)
    digest = hashlib.sha256(recorded_bytes).hexdigest()
    stream = await store.read_stream(streams.evaluation(plan.name))
    records = [(r.event, r.metadata) for r in stream
               if isinstance(r.event, catalog.EvaluationStarted)]
    at = stream[-1].stream_version if stream else 0
    if any(r.imported for r in stream):
        raise BroughtByImport(f"evaluation {plan.name} was brought by an import (another "
                              f"database's history, never resumed here): name your plan "
                              f"otherwise")
    if records and requester is not None and records[0][1].get("requested_by") != requester:
        raise NotYours(f"evaluation {plan.name} was started by another requester: a token "
                       f"runs its own evaluations only (the operator's props eval runs any); "
                       f"give yours another name")
    recorded = [e for e, _ in records]
    if recorded and recorded[-1].plan_sha256 == digest:
        by = records[-1][1].get("requested_by")
        return Starting(Evaluation(plan.name, recorded[-1].version, plan, cases,
                                   by if isinstance(by, str) else None, recorded[-1].nonce),
                        True, None, at)
    if recorded and not new_version:
        raise PlanChanged(f"evaluation {plan.name} is recorded with another plan (or its "
                          f"critics' digests or snapshots changed since): give it another "
                          f"name, or --new-version to record this one beside it")
    version = recorded[-1].version + 1 if recorded else 1
    blob = await store.put_blob(recorded_bytes)
    event = catalog.EvaluationStarted(name=plan.name, version=version,
                                      plan=plan.model_dump(mode="json"), plan_sha256=digest,
                                      cases_sha256=blob, cases=len(cases), nonce=uuid.uuid4())
    return Starting(Evaluation(plan.name, version, plan, cases, requester, event.nonce),
                    False, NewEvent(
        event, uuid.uuid5(NAMESPACE, f"started:{plan.name}:{version}:{digest}"),
        {"requested_by": requester} if requester else {}), at)


async def record(writer: EventStore | StoreTransaction, starting: Starting) -> bool:
    """Append what `prepare` decided, if the stream is still where it read it (otherwise
    ConcurrencyConflict: prepare again). False: the same start was recorded already (two
    at once append one event, by its id): its nonce is the recorded one (`settled`)."""
    if starting.event is None:
        return True
    done = await writer.append(streams.evaluation(starting.evaluation.name),
                               [starting.event], expected_version=starting.at)
    return not done.already_stored


async def settled(store: EventStore, starting: Starting) -> Evaluation:
    """The evaluation as recorded once `record` found its start there already."""
    ev = starting.evaluation
    stored = next(e for e in await history(store, ev.name) if e.version == ev.version)
    return dataclasses.replace(ev, nonce=stored.nonce)


async def start(store: EventStore, plan: Plan, cases: list[Case], *,
                new_version: bool = False, requester: str | None = None,
                ) -> tuple[Evaluation, bool]:
    """`prepare` and `record` in one: the evaluation of `plan` as recorded, and whether it
    was recorded before."""
    starting = await prepare(store, plan, cases, new_version=new_version, requester=requester)
    if not await record(store, starting):
        return await settled(store, starting), starting.resumed
    return starting.evaluation, starting.resumed
