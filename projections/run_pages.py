"""Runs as analysts look at them: a filtered page of runs, and one run in detail.

The API, `props runs list/show` and the viewer read these, so a filter means the same
everywhere, and a run's page (`shown`: its header, its issues under one scorer, and that
scorer's recall, chance and precision of it) is computed here once for all three. Rows
come from `agent_runs`; a run's timeline from its stream in the log, so a run the
projections have not caught up with is still shown (as `projected = False`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any

from props.core.domain import catalog, run_requests, streams
from props.core.log import errors
from props.core.log.events import RecordedEvent
from props.core.log.store import EventStore
from props.projections import run_view
from props.schema import queries

_Q = queries.load("run_pages")


@dataclasses.dataclass(frozen=True)
class RunFilter:
    agent_type: str | None = "critic"  # None: critics' and graders' runs
    status: str | None = None
    model: str | None = None
    definition: str | None = None
    snapshot: str | None = None


@dataclasses.dataclass(frozen=True)
class After:
    """Where a page ends: the last row's (requested_at, run_id)."""

    requested_at: dt.datetime
    run_id: uuid.UUID


@dataclasses.dataclass(frozen=True)
class Page:
    rows: list[dict[str, Any]]
    next: After | None  # None on the last page


async def page(store: EventStore, where: RunFilter, limit: int,
               after: After | None = None) -> Page:
    """Up to `limit` runs, newest first, after `after`."""
    rows = await store.sql.fetch(
        _Q["page"], where.agent_type, where.status, where.model, where.definition,
        where.snapshot, after.requested_at if after else None, after.run_id if after else None,
        limit + 1)
    shown = [dict(r) for r in rows[:limit]]
    last = shown[-1] if len(rows) > limit else None
    return Page(shown, After(last["requested_at"], last["run_id"]) if last else None)


# The orders the viewer's runs table offers, each a constant clause (never built from input).
SORTS = {
    "newest": "requested_at DESC, run_id DESC",
    "oldest": "requested_at, run_id",
    "cost": "cost_usd DESC NULLS LAST, run_id",
    "duration": "finished_at - started_at DESC NULLS LAST, run_id",
    "tokens": "tokens_in + tokens_out DESC NULLS LAST, run_id",
}


@dataclasses.dataclass(frozen=True)
class TableFilter(RunFilter):
    """The viewer's filters: RunFilter's, and a file set (by name), the runs a scorer
    graded, a window of request times [since, until), and some runs (an evaluation's)."""

    file_set: str | None = None
    scorer: tuple[str, int] | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    run_ids: list[uuid.UUID] | None = None  # an evaluation's


async def table(store: EventStore, where: TableFilter, sort: str, limit: int,
                offset: int = 0) -> tuple[list[dict[str, Any]], bool]:
    """A page of runs in the order `sort` names (a key of SORTS), and whether more follow."""
    name, version = where.scorer or (None, None)
    rows = await store.sql.fetch(
        _Q["table"].format(order=SORTS[sort]), where.agent_type, where.status, where.model,
        where.definition, where.snapshot, where.file_set, name, version, where.since,
        where.until, limit + 1, offset, where.run_ids)
    return [dict(r) for r in rows[:limit]], len(rows) > limit


async def file_set_names(store: EventStore, hashes: list[str]) -> dict[str, str]:
    """The name of each of these file sets (a run names its file set by hash)."""
    rows = await store.sql.fetch(_Q["file_set_names"], [h for h in hashes if h])
    return {r["files_hash"]: r["name"] for r in rows}


async def grading_events(store: EventStore, run_id: uuid.UUID) -> list[RecordedEvent]:
    """The events of the run's grades, every scorer's (they are in streams of their own)."""
    pattern = streams.grading(run_id, "%")  # (a uuid holds no LIKE wildcard)
    found: list[RecordedEvent] = []
    for row in await store.sql.fetch(_Q["grading_streams"], pattern):
        found += await store.read_stream(row["stream_id"])
    return found


async def issue_counts(store: EventStore, run_ids: list[uuid.UUID]) -> dict[uuid.UUID, int]:
    """How many issues each of these runs reported (those with none are left out)."""
    rows = await store.sql.fetch(_Q["issue_counts"], run_ids)
    return {r["run_id"]: int(r["issues"]) for r in rows}


async def scores_of(store: EventStore, run_ids: list[uuid.UUID], scorer: tuple[str, int],
                    ) -> dict[uuid.UUID, dict[str, Any]]:
    """Recall and precision of these runs under one scorer (those it scored)."""
    rows = await store.sql.fetch(_Q["scores_of"], run_ids, *scorer)
    return {r["run_id"]: dict(r) for r in rows}


async def parked_counts(store: EventStore, run_ids: list[uuid.UUID]) -> dict[uuid.UUID, int]:
    """How many events of each of these runs some consumer skips now (runs with none left
    out): a run a park touches may show partial figures, and the page must say so."""
    rows = await store.sql.fetch(_Q["parked_counts"], run_ids)
    return {r["run_id"]: int(r["parked"]) for r in rows}


async def parked_overall(store: EventStore) -> dict[str, int]:
    """Every park now: `events`, of how many `runs`, by how many `consumers`."""
    row = await store.sql.fetchrow(_Q["parked_overall"])
    assert row is not None
    return {k: int(row[k]) for k in ("events", "runs", "consumers")}


@dataclasses.dataclass(frozen=True)
class RunDetail:
    run_id: uuid.UUID
    events: list[RecordedEvent]
    row: dict[str, Any] | None  # None while the projections have not caught up
    parked: list[dict[str, Any]]  # this run's events some consumer skips now, and why

    @property
    def status(self) -> str:
        return str(self.row["status"]) if self.row else "requested"


async def detail(store: EventStore, run_id: uuid.UUID) -> RunDetail:
    """The run's events and its projected row; NotFound when the log has no such run."""
    events = await run_requests.events_of(store, run_id)
    try:
        row = await store.sql.fetchrow(_Q["row"], run_id)
    except errors.NotBuilt:  # not built yet: the log has the run already
        row = None
    parked = [dict(r) for r in await store.sql.fetch(_Q["parked_of_run"], run_id)]
    return RunDetail(run_id, events, dict(row) if row is not None else None, parked)


async def header(store: EventStore, run: RunDetail) -> dict[str, Any]:
    """What a run's page opens with, from its row (or, before the projections caught up,
    from its request): its duration, status, parks and file set's name besides."""
    row = dict(run.row or {})
    if not row and run.events and isinstance(run.events[0].event, catalog.RunRequested):
        req = run.events[0].event
        row = {"run_id": run.run_id, "model": req.model, "definition": req.definition,
               "snapshot": req.example.snapshot, "requested_at": run.events[0].recorded_at}
    started, finished = row.get("started_at"), row.get("finished_at")
    row["duration"] = (finished - started).total_seconds() if started and finished else None
    row["status"] = run.status
    # Finished but not completed: its issues are what it reported before it stopped, listed
    # here and counted in no figure (run_scores counts completed runs only).
    row["partial"] = run.status not in ("requested", "running", "completed")
    row["parked"] = run.parked
    files_hash = row.get("files_hash")
    row["file_set"] = (await file_set_names(store, [files_hash])).get(files_hash) \
        if files_hash else None
    return row


@dataclasses.dataclass(frozen=True)
class Shown:
    """A run's page: the one answer `props runs show`, `GET /api/runs/{id}` and the viewer's
    run page render."""

    detail: RunDetail
    header: dict[str, Any]
    scorer: str | None  # the scorer it is shown under (None: none graded it, none active)
    scores: dict[str, Any] | None  # that scorer's figures of the run; None: not scored
    found: run_view.Issues | None  # its issues (when asked for and projected)

    @property
    def figures(self) -> dict[str, Any]:
        """The scorer, and its located recall (the view's `recall`: what the location rule
        found, never called recall), chance level and precision of the run (None where
        it has none): the same keys in the CLI's JSON and the API's."""
        got = self.scores or {}
        return {"scorer": self.scorer, "located_recall": got.get("recall"),
                "chance": got.get("chance"), "precision": got.get("precision")}


@dataclasses.dataclass(frozen=True)
class IssuesWanted:
    """Which of a run's issues its page lists: a page of them, and only one kind, maybe."""

    page: int = 1
    per_page: int = 100
    match: str | None = None  # a kind of run_view.KINDS, or run_view.UNGRADED


async def shown(store: EventStore, run_id: uuid.UUID, scorer: str | None = None,
                issues: IssuesWanted | None = None) -> Shown:
    """The run's page under `scorer` (default: the active one, else the first that graded
    it), with its `issues` when asked for; NotFound when the log has no such run."""
    run = await detail(store, run_id)
    head = await header(store, run)
    found = await run_view.issues(store, head, issues.page, issues.per_page, scorer,
                                  issues.match) if run.row and issues else None
    chosen = found.scorer if found else \
        await run_view.shown_scorer(store, run_id, scorer) if run.row else None
    scores = (await scores_of(store, [run_id], run_view.scorer_key(chosen))).get(run_id) \
        if chosen else None
    return Shown(run, head, chosen, scores, found)
