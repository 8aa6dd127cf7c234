"""Each requester's bounded share of the service: runs in flight, cases queued, evaluations
open, per API token.

A requester is a token (`api:NAME`, what its runs record as `requested_by` and its
evaluations as the `requested_by` of their `evaluation.started` metadata). What it holds is
read from the log at each request, so a restart forgets nothing and several API processes
agree: its runs requested directly and not finished (an evaluation's runs are bounded by the
evaluation's own `max_concurrency`, which the service holds), and its evaluations whose
latest version has not ended, with their cases. A request that would take the requester
past a quota is refused whole (nothing is written): the API answers 429 naming the quota,
the figure and the setting that raises it. One POST of 10,000 cases is over the cases quota
alone. `props` commands on the operator's own database have no token and no quota.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
from collections.abc import AsyncIterator

import anyio

from props.core.log import errors
from props.core.log.store import EventStore
from props.schema import queries

_Q = queries.load("quotas")


class OverQuota(errors.PropsError):
    """The request would take its requester past one of its quotas; nothing was written.
    Wait for runs or evaluations to finish, or ask the operator for a larger quota."""

    exit_code = 75  # EX_TEMPFAIL: it can pass later, as the requester's runs finish


class Gates:
    """One requester's check and append at a time, in this process: 200 requests of one
    token at once cannot all pass a check made before any of them appended. (Several API
    processes each hold their own: a token could pass by one request per process.)"""

    def __init__(self) -> None:
        self._locks: collections.defaultdict[str, anyio.Lock] = collections.defaultdict(
            anyio.Lock)

    @contextlib.asynccontextmanager
    async def held(self, requester: str) -> AsyncIterator[None]:
        async with self._locks[requester]:
            yield


@dataclasses.dataclass(frozen=True)
class Quotas:
    """The settings `quota_runs_in_flight`, `quota_cases_queued`, `quota_evaluations_open`."""

    runs_in_flight: int = 100
    cases_queued: int = 2_000
    evaluations_open: int = 5
    gates: Gates = dataclasses.field(default_factory=Gates, compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class Held:
    runs_in_flight: int
    evaluations: dict[str, int]  # open evaluation -> its cases

    @property
    def cases_queued(self) -> int:
        return sum(self.evaluations.values())


async def held(store: EventStore, requester: str) -> Held:
    runs = await store.sql.fetchval(_Q["runs_in_flight"], requester)
    open_ = {r["name"]: r["cases"] for r in await store.sql.fetch(_Q["open_evaluations"],
                                                                 requester)}
    return Held(int(runs or 0), open_)


def _refuse(requester: str, what: str, would: int, limit: int, setting: str) -> OverQuota:
    return OverQuota(f"{requester} would hold {would:,} {what}, over its quota of {limit:,} "
                     f"(setting {setting}): wait for its runs or evaluations to finish, or "
                     f"ask the operator to raise it")


async def check_runs(store: EventStore, quotas: Quotas, requester: str, count: int) -> None:
    """Refuse `count` more runs for `requester` past its runs-in-flight quota."""
    now = await held(store, requester)
    if now.runs_in_flight + count > quotas.runs_in_flight:
        raise _refuse(requester, "runs in flight", now.runs_in_flight + count,
                      quotas.runs_in_flight, "quota_runs_in_flight")


async def check_evaluation(store: EventStore, quotas: Quotas, requester: str, name: str,
                           cases: int) -> None:
    """Refuse evaluation `name` of `cases` cases for `requester` past its quotas (the same
    evaluation open already, resumed, is counted once)."""
    now = await held(store, requester)
    others = {n: c for n, c in now.evaluations.items() if n != name}
    if sum(others.values()) + cases > quotas.cases_queued:
        raise _refuse(requester, "cases queued", sum(others.values()) + cases,
                      quotas.cases_queued, "quota_cases_queued")
    if len(others) + 1 > quotas.evaluations_open:
        raise _refuse(requester, "evaluations open", len(others) + 1,
                      quotas.evaluations_open, "quota_evaluations_open")
