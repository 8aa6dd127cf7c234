"""`props bench viewer`: the viewer's two heaviest pages, each beside the raw SQL that feeds it.

The log holds 100,000 critic runs (requested, started, finished, across models, definitions,
snapshots and statuses) and one run of 2,000 issues graded by overlap@1. The runs page is
fetched with a rotation of filters and orders (none, a model, a status, by cost, a later
page), the run's page at its first page of issues; each request goes through the whole app
(token check, queries, template) in process, and is timed beside the one statement that
gives the page its rows, run with the same parameters on the same pool, alternating.
"""

from __future__ import annotations

import functools
import hashlib
import random
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from props.core.domain import catalog, streams, tokens
from props.core.domain.store import open_store
from props.core.log.store import EventStore
from props.core.scoring import rescoring
from props.projections import engine, run_pages
from props.schema import queries
from props.tools.checks.benchmarks.report import Check, Report
from props.tools.checks.workload import DEFINITIONS, HISTORIC, MODELS, STATUSES, Workload
from props.tools.command_line.render import Console
from props.tools.http.app import create_app

RUNS = 100_000
BIG_RUN_ISSUES = 2_000
BATCH = 1_000  # runs per append_many
_RUN_VIEW = queries.load("run_view")
_RUN_PAGES = queries.load("run_pages")
# (query string, the raw statement's parameters: filters, order, offset)
FILTERS: list[tuple[dict[str, str], run_pages.TableFilter, str, int]] = [
    ({}, run_pages.TableFilter("critic"), "newest", 0),
    ({"model": MODELS[1]}, run_pages.TableFilter("critic", model=MODELS[1]), "newest", 0),
    ({"status": "failed"}, run_pages.TableFilter("critic", status="failed"), "newest", 0),
    ({"sort": "cost"}, run_pages.TableFilter("critic"), "cost", 0),
    ({"page": "40"}, run_pages.TableFilter("critic"), "newest", 39 * 50),
]


def _uuid(rng: random.Random) -> uuid.UUID:
    return uuid.UUID(int=rng.getrandbits(128), version=4)


def _lifecycle(rng: random.Random, snapshots: list[str]) -> tuple[str, list[Any]]:
    run = _uuid(rng)
    status = rng.choice(STATUSES)
    failure = None if status == "completed" else catalog.Failure.of("review", "agent")
    return streams.run(run), [
        catalog.RunRequested(run_id=run, agent_type="critic", definition=rng.choice(DEFINITIONS),
                             example=catalog.Example(snapshot=rng.choice(snapshots)),
                             model=rng.choice(MODELS), timeout_seconds=600, budget_usd=1),
        catalog.RunStarted(run_id=run, digest="sha256:" + hashlib.sha256(b"r").hexdigest()),
        catalog.RunFinished(run_id=run, status=status, failure=failure,
                            tokens_in=rng.randrange(1000, 90_000), tokens_out=rng.randrange(900),
                            cost_usd=rng.random())]


async def _seed(store: EventStore, runs: int, console: Console) -> uuid.UUID:
    """The runs, and the big run (graded); returns the big run's id."""
    rng = random.Random(11)
    work = Workload(seed=11)
    await work.setup(store)
    snapshots = [s.slug for s in work.found]
    with Progress(TextColumn("generating runs"), BarColumn(), MofNCompleteColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task("runs", total=runs)
        for start in range(0, runs, BATCH):
            await store.append_many([_lifecycle(rng, snapshots)
                                     for _ in range(min(BATCH, runs - start))])
            bar.advance(task, min(BATCH, runs - start))
    specimen = work.found[0]
    files = sorted(specimen.files)
    big = _uuid(rng)
    await store.append(streams.run(big), [
        catalog.RunRequested(run_id=big, agent_type="critic", definition=DEFINITIONS[0],
                             example=catalog.Example(snapshot=specimen.slug), model=MODELS[0],
                             timeout_seconds=600, budget_usd=1),
        *[catalog.IssueReported(run_id=big, issue_id=f"i{n:04d}", rationale=f"issue {n}",
                                locations=[catalog.Location(file=files[n % len(files)], ranges=[
                                    catalog.LineRange(start=1 + n % 40, end=2 + n % 40)])])
          for n in range(BIG_RUN_ISSUES)],
        catalog.RunFinished(run_id=big, status="completed")])
    console.print(f"{runs:,} runs and one of {BIG_RUN_ISSUES:,} issues; projecting ...")
    await engine.rebuild(store)
    await rescoring.rescore(store, HISTORIC, rescoring.Selection(run_ids=[big]))
    await engine.rebuild(store)
    await store.sql.execute("VACUUM (ANALYZE) projections.agent_runs")
    await store.sql.execute("VACUUM (ANALYZE) projections.reported_issues")
    await store.sql.execute("VACUUM (ANALYZE) projections.grading_edges")
    return big


async def _raw_runs(store: EventStore, where: run_pages.TableFilter, sort: str,
                    offset: int) -> Any:
    """The statement that gives the runs page its rows, as an analyst would run it."""
    return await store.pool.fetch(
        _RUN_PAGES["table"].format(order=run_pages.SORTS[sort]), where.agent_type,
        where.status, where.model, where.definition, where.snapshot, None, None, None, None,
        None, 51, offset, None)


async def _timed(call: Callable[[], Awaitable[Any]]) -> float:
    t0 = time.perf_counter()
    await call()
    return 1000 * (time.perf_counter() - t0)


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) >= 2 else values[0]


async def run(dsn: str, quick: bool, console: Console) -> Report:
    rounds = 10 if quick else 40  # of each page of the rotation
    report = Report("viewer", quick)
    async with open_store(dsn, max_connections=6) as store:
        big = await _seed(store, RUNS, console)
        _, secret = await tokens.create(store, "bench", ("read",))
        transport = httpx.ASGITransport(app=create_app(store))
        async with httpx.AsyncClient(transport=transport, base_url="http://viewer",
                                     headers={"Authorization": f"Bearer {secret}"}) as client:
            async def page(path: str, params: dict[str, str]) -> None:
                response = await client.get(path, params=params)
                if response.status_code != 200:
                    raise AssertionError(f"{path} {params}: {response.status_code}")

            ours: list[float] = []
            raw: list[float] = []
            console.print(f"runs page over {RUNS:,} runs, {rounds} rounds of "
                          f"{len(FILTERS)} filters ...")
            for _ in range(rounds):
                for params, where, sort, offset in FILTERS:
                    ours.append(await _timed(functools.partial(page, "/runs", params)))
                    raw.append(await _timed(functools.partial(_raw_runs, store, where, sort,
                                                              offset)))
            run_ours: list[float] = []
            run_raw: list[float] = []
            console.print(f"a run's page with {BIG_RUN_ISSUES:,} issues ...")
            for _ in range(rounds):
                run_ours.append(await _timed(lambda: page(f"/runs/{big}", {})))
                run_raw.append(await _timed(lambda: store.pool.fetch(
                    _RUN_VIEW["issues_page"], big, 100, 0, None, "", 0, 1.0)))
    report.figures.update({
        "runs": RUNS, "big_run_issues": BIG_RUN_ISSUES,
        "runs_page_p50_ms": round(statistics.median(ours), 2),
        "runs_raw_p50_ms": round(statistics.median(raw), 2),
        "run_page_p50_ms": round(statistics.median(run_ours), 2),
        "run_raw_p50_ms": round(statistics.median(run_raw), 2),
        "run_page_vs_raw": round(sum(run_ours) / sum(run_raw), 2)})
    report.checks.append(Check("runs_page_ms", _p95(ours), "<=", 200, unit="ms"))
    report.checks.append(Check("run_page_ms", _p95(run_ours), "<=", 500, unit="ms"))
    report.checks.append(Check("runs_page_vs_raw", sum(ours) / sum(raw), "<=", 3))
    return report
