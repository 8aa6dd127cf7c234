"""The cohort a scorer is verified on: a named, frozen set of recorded critic runs.

An evaluation's cohort is every run it requested (each version and attempt); an as-of cohort
is every critic run finished at or before a position of the log. Its id is a hash of its run
ids, so "the same cohort" means the same runs. A verification stays current while its cohort,
asked again, has the same id and no evaluation of this database's own started after the
verification was recorded: a new evaluation is a new cohort, which the scorer has not seen.
"""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from collections.abc import Sequence

from props.core.domain import catalog
from props.core.log import errors
from props.core.log.store import EventStore
from props.schema import queries

_Q = queries.load("verification")
_EVALUATIONS = queries.load("evaluations")


@dataclasses.dataclass(frozen=True)
class Cohort:
    spec: catalog.Cohort
    run_ids: list[uuid.UUID]

    @property
    def label(self) -> str:
        kind = "evaluation" if self.spec.kind == "evaluation" else "the log at"
        return f"{kind} {self.spec.name} ({self.spec.runs} runs, cohort {self.spec.cohort_id})"


def cohort_id(run_ids: Sequence[uuid.UUID]) -> str:
    text = "\n".join(sorted(str(r) for r in run_ids))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _cohort(kind: catalog.CohortKind, name: str, run_ids: Sequence[uuid.UUID]) -> Cohort:
    runs = sorted(set(run_ids))
    return Cohort(catalog.Cohort(kind=kind, name=name, cohort_id=cohort_id(runs),
                                 runs=len(runs)), runs)


async def of_evaluation(store: EventStore, name: str) -> Cohort:
    runs = [r[0] for r in await store.sql.fetch(_EVALUATIONS["runs"], name)]
    if not runs:
        raise errors.NotFound(f"no evaluation named {name!r} has requested a run "
                              f"(props eval list)")
    return _cohort("evaluation", name, runs)


async def as_of(store: EventStore, position: int | None = None) -> Cohort:
    """The critic runs finished at or before `position` (default: the log's head now)."""
    if position is None:
        position = int(await store.sql.fetchval(_Q["log_head"]))
    if position < 0:
        raise errors.ValueRefused(f"--as-of {position}: a log position is 0 or more")
    runs = [r[0] for r in await store.sql.fetch(_Q["finished_by"], position)
            if r[0] is not None]
    return _cohort("as-of", str(position), runs)


async def latest_evaluation(store: EventStore) -> str | None:
    found = await store.sql.fetchval(_Q["latest_evaluation"])
    return None if found is None else str(found)


async def default(store: EventStore) -> Cohort:
    """The newest evaluation's cohort, else every run finished so far."""
    name = await latest_evaluation(store)
    return await of_evaluation(store, name) if name is not None else await as_of(store)


async def again(store: EventStore, spec: catalog.Cohort) -> Cohort:
    """The cohort `spec` names, as the log has it now."""
    if spec.kind == "evaluation":
        try:
            return await of_evaluation(store, spec.name)
        except errors.NotFound:
            return _cohort("evaluation", spec.name, [])
    return await as_of(store, int(spec.name))


async def stale(store: EventStore, spec: catalog.Cohort, recorded_at: int) -> str | None:
    """Why a verification of cohort `spec` recorded at log position `recorded_at` is no
    longer current, or None while it is."""
    now = await again(store, spec)
    if now.spec.cohort_id != spec.cohort_id:
        return (f"its cohort ({spec.kind} {spec.name}) has other runs now "
                f"({now.spec.runs} runs, cohort {now.spec.cohort_id}, not {spec.cohort_id})")
    newer = [r[0] for r in await store.sql.fetch(_Q["evaluations_after"], recorded_at)]
    if newer:
        return f"evaluation {newer[-1]} started after it: a new cohort, not verified on"
    return None
