"""Each requester's bounded share of the service: runs in flight, cases queued, evaluations
open, per API token.

A requester is a token (`api:NAME`, what its runs record as `requested_by` and its
evaluations as the `requested_by` of their `evaluation.started` metadata). What it holds is
read from the log at each request, so a restart forgets nothing and several API processes
agree: every run of it not finished (requested directly, or by any version of any of its
evaluations, ended or not), and its evaluations whose latest version has not ended, with
their cases. A request that would take the requester past a quota is refused whole
(nothing is written): the API answers 429 naming the quota, the figure and the setting that
raises it. One POST of 10,000 cases is over the cases quota alone. The check and the append
are one transaction holding the requester's advisory key (`turn`), so requests at once are
counted one after another, across API processes too. `props` commands on the operator's
own database have no token and no quota.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator

from props.core.log import errors, leadership
from props.core.log.sql import Sql
from props.core.log.store import EventStore, StoreTransaction
from props.schema import queries

_Q = queries.load("quotas")


class OverQuota(errors.PropsError):
    """The request would take its requester past one of its quotas; nothing was written.
    Wait for runs or evaluations to finish, or ask the operator for a larger quota."""

    exit_code = 75  # EX_TEMPFAIL: it can pass later, as the requester's runs finish


@contextlib.asynccontextmanager
async def turn(store: EventStore, requester: str) -> AsyncIterator[StoreTransaction]:
    """The requester's turn: one transaction, holding its advisory key from before its check
    to the commit of its append, so its requests at once (in one API process or several)
    each count what the one before appended. Check and append through the transaction
    given; read what the request needs (definitions, snapshots) before taking the turn: a
    second connection wanted inside it could wait on the pool held by the turn's waiters."""
    async with store.transaction() as tx:
        await leadership.for_transaction(tx.conn, leadership.requester(requester))
        yield tx


@dataclasses.dataclass(frozen=True)
class Quotas:
    """The settings `quota_runs_in_flight`, `quota_cases_queued`, `quota_evaluations_open`."""

    runs_in_flight: int = 100
    cases_queued: int = 2_000
    evaluations_open: int = 5


Version = tuple[str | None, int | None]  # (evaluation, its version); (None, None): direct


@dataclasses.dataclass(frozen=True)
class Held:
    unfinished: dict[Version, int]  # runs not finished, by the evaluation version they serve
    evaluations: dict[str, tuple[int, int]]  # open evaluation -> (latest version, its cases)

    @property
    def runs_in_flight(self) -> int:
        return sum(self.unfinished.values())

    def left_over(self, also: Version | None = None) -> int:
        """Unfinished runs of evaluation versions no open evaluation counts by its cases (an
        older version, an ended evaluation): still queued, so still the requester's; `also`
        is one more version about to be superseded."""
        return sum(n for (name, version), n in self.unfinished.items()
                   if name is not None and ((name, version) == also or version !=
                                            self.evaluations.get(name, (None, 0))[0]))


async def held(sql: Sql, requester: str) -> Held:
    unfinished: dict[Version, int] = {
        (r["evaluation"], r["version"]): int(r["runs"])
        for r in await sql.fetch(_Q["unfinished_runs"], requester)}
    open_ = {r["name"]: (int(r["version"]), int(r["cases"]))
             for r in await sql.fetch(_Q["open_evaluations"], requester)}
    return Held(unfinished, open_)


async def asked_before(tx: StoreTransaction, stream_id: str) -> bool:
    """Whether the stream of a run an idempotent retry names holds its request already, as
    the requester's turn sees it (the retry asks for nothing new: no quota is taken twice)."""
    return bool(await Sql(tx.conn).fetchval(_Q["stream_exists"], stream_id))


def _refuse(requester: str, what: str, would: int, limit: int, setting: str) -> OverQuota:
    return OverQuota(f"{requester} would hold {would:,} {what}, over its quota of {limit:,} "
                     f"(setting {setting}): wait for its runs or evaluations to finish, or "
                     f"ask the operator to raise it")


async def check_runs(tx: StoreTransaction, quotas: Quotas, requester: str,
                     count: int) -> None:
    """Refuse `count` more runs for `requester` past its runs-in-flight quota: every run of
    it not finished counts, its evaluations' too (inside its `turn`)."""
    now = await held(Sql(tx.conn), requester)
    if now.runs_in_flight + count > quotas.runs_in_flight:
        raise _refuse(requester, "runs in flight", now.runs_in_flight + count,
                      quotas.runs_in_flight, "quota_runs_in_flight")


def runs_left(quotas: Quotas, now: Held) -> int:
    """How many more runs the requester may have in flight (none: at or past its quota)."""
    return max(0, quotas.runs_in_flight - now.runs_in_flight)


async def check_evaluation(tx: StoreTransaction, quotas: Quotas, requester: str, name: str,
                           cases: int, *, supersedes: bool) -> int:
    """Refuse evaluation `name` of `cases` cases for `requester` past its quotas (inside
    its `turn`). Its other open evaluations count their cases, and every version no longer
    driven its runs not finished; the same evaluation resumed is counted once, and one
    superseded (`supersedes`: a new version is recorded) leaves its unfinished runs counted.
    At its runs-in-flight quota already, it is refused too: it would request a run at once
    (main took a new evaluation past that quota). How many runs it may request now."""
    now = await held(Sql(tx.conn), requester)
    if not runs_left(quotas, now):
        raise _refuse(requester, "runs in flight", now.runs_in_flight + 1,
                      quotas.runs_in_flight, "quota_runs_in_flight")
    others = {n: c for n, (_, c) in now.evaluations.items() if n != name}
    mine = now.evaluations.get(name)
    superseded = (name, mine[0]) if supersedes and mine is not None else None
    would = sum(others.values()) + now.left_over(superseded) + cases
    if would > quotas.cases_queued:
        raise _refuse(requester, "cases queued", would, quotas.cases_queued,
                      "quota_cases_queued")
    if len(others) + 1 > quotas.evaluations_open:
        raise _refuse(requester, "evaluations open", len(others) + 1,
                      quotas.evaluations_open, "quota_evaluations_open")
    return runs_left(quotas, now)
