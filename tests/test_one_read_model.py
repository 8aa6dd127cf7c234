"""One evaluation, one set of figures: `props report --eval`, `props eval show` (and the
API's `GET /api/evaluations/{name}`, which gives the same standing), the viewer's evaluation
page and the analysts' SQL read the same runs and say the same numbers, over an evaluation
whose cases ended every way: completed with a find, failed at the event cap after locating
two defects, completed then excluded, and failed then retried to completion.

The negative controls: the failed runs' issues are graded and located (a reader that counted
them would differ), and the runs the report used to read (every attempt the evaluation ever
requested) hold them."""

from __future__ import annotations

import re
import uuid

import httpx

from props.core.domain import catalog, definitions, evaluation_starts, evaluations, streams, tokens
from props.core.log.store import EventStore
from props.core.scoring import registration, rescoring, scorers
from props.projections import evaluation_standing, figures
from props.tools.http.app import create_app
from tests.conftest import rebuilt
from tests.reactor_helpers import sync_samples
from tests.test_viewer import sign_in

CLI, STATS = "csvtool/cli.py", "csvtool/stats.py"
HEAD, MEDIAN, RANK = (CLI, 37), (STATS, 47), (STATS, 58)  # three defects' first lines
NOWHERE = (CLI, 1)


async def _finish(store: EventStore, run: uuid.UUID, at: list[tuple[str, int]],
                  status: str = "completed", category: str | None = None) -> None:
    await store.append(streams.run(run), [
        *[catalog.IssueReported(run_id=run, issue_id=f"i{n}", rationale="a defect here",
                                locations=[catalog.Location(file=f, ranges=[
                                    catalog.LineRange(start=line, end=line)])])
          for n, (f, line) in enumerate(at)],
        catalog.RunFinished(run_id=run, status=status, failure=None if category is None
                            else catalog.Failure(phase="report", category=category,
                                                 retryable=False))])


async def _evaluation(store: EventStore) -> tuple[evaluations.Evaluation, list[uuid.UUID]]:
    await sync_samples(store)
    await definitions.push(store, definitions.reference_local())
    plan = evaluations.Plan(name="every-way", examples=["csvtool/*"], epochs=4,
                            critic=[evaluations.Critic(definition="reference", ref="local")])
    ev, _ = await evaluation_starts.start(store, plan, await evaluations.resolve(store, plan))
    scored, capped, excluded, retried = ev.cases
    run = await evaluations.request(store, ev, scored, 0)
    await _finish(store, run, [HEAD])
    failed = [await evaluations.request(store, ev, capped, 0)]
    await _finish(store, failed[0], [HEAD, MEDIAN], "failed", "event_cap")
    run = await evaluations.request(store, ev, excluded, 0)
    await _finish(store, run, [MEDIAN])
    await store.append(streams.run(run), [catalog.RunExcluded(
        run_id=run, reason="a person read it: a broken example", excluded_by="ana")])
    failed.append(await evaluations.request(store, ev, retried, 0))
    await _finish(store, failed[1], [RANK], "failed", "exit_nonzero")
    await _finish(store, await evaluations.request(store, ev, retried, 1), [NOWHERE])
    await rebuilt(store)
    await rescoring.rescore(store, scorers.scorer("tiered@2"),
                            rescoring.Selection(everything=True))
    await registration.activate(store, "tiered", 2)
    await rebuilt(store)
    return ev, failed


async def test_every_reader_gives_one_set_of_figures(store: EventStore) -> None:
    ev, failed = await _evaluation(store)
    # The negative controls: the failed runs located defects, and the run list the report
    # once read for an evaluation holds them.
    located = await store.pool.fetch(
        "SELECT DISTINCT tp_id FROM projections.grading_edges WHERE critique_run_id = ANY ($1)"
        " AND scorer_name = 'tiered' AND grade >= 1", failed)
    assert {r["tp_id"] for r in located} >= {"head-off-by-one", "median-even-length"}
    assert set(failed) <= set(await evaluations.runs_of(store, ev.name))

    [report], notes = await figures.load(store, "tiered", 2,
                                         scope=figures.Scope(evaluation=ev.name))
    standing = await evaluation_standing.named(store, ev.name)
    [shown] = standing.critics
    assert standing.counts == {"scored": 2, "failed": 1, "excluded": 1}
    assert standing.done == 3  # scored or excluded: a failed case is not done
    # Two completed runs stand for the figures; the failed one and the excluded one are
    # counted apart, each with why; the retried case's failed first attempt is not its run.
    assert (report["runs"], shown["scored"], shown["cases"]) == (2, 2, 4)
    assert (notes["critic_runs"], notes["scored"], notes["not_completed"],
            notes["excluded"]) == (4, 2, 1, 1)
    for k in ("located_recall", "located_recall_low", "located_recall_high", "located",
              "confirmed_recall", "reviewed", "chance", "above_chance", "precision",
              "precision_low", "precision_high"):
        assert report[k] == shown[k], k
    assert report["located"] == 1 and report["reviewed"] is False  # HEAD, once; unreviewed
    # The analysts' SQL: the pooled view gives the figure the report prints.
    assert await store.pool.fetchval(
        "SELECT recall FROM projections.model_scores WHERE scorer_name = 'tiered' "
        "AND scorer_version = 2") == report["located_recall"]

    _, secret = await tokens.create(store, "ada", ("read",))
    transport = httpx.ASGITransport(app=create_app(store))
    async with httpx.AsyncClient(transport=transport, base_url="http://props") as client:
        api = (await client.get(f"/api/evaluations/{ev.name}", headers={
            "Authorization": f"Bearer {secret}"})).json()
        scores = (await client.get("/api/scores", params={"evaluation": ev.name}, headers={
            "Authorization": f"Bearer {secret}"})).json()
        assert (await sign_in(client, secret)).status_code == 303
        page = (await client.get(f"/evaluations/{ev.name}")).text
    assert api["done"] == 3 and api["counts"] == standing.counts
    assert [{k: c[k] for k in ("located_recall", "located", "scored")}
            for c in api["critics"]] == [{"located_recall": report["located_recall"],
                                         "located": 1, "scored": 2}]
    [from_api] = scores["scores"]
    assert from_api["located_recall"] == report["located_recall"] and from_api["runs"] == 2
    done = re.search(r"<dt>Done</dt><dd>(\d+) of (\d+)</dd>", page)
    assert done and done.groups() == ("3", "4")
    assert "unreviewed (1)" in page


# One issue per run, each giving a chance level of nine digits (0.081081081, 0.093333333,
# 0.121621623): their float sum, in any order, is not their exact sum rounded once.
SPANS = [[(STATS, 2, 2)], [(CLI, 23, 26)], [(STATS, 44, 45)]]


async def test_chance_is_one_value_in_every_reader(store: EventStore) -> None:
    """Three completed runs of one example whose chance levels no float sum adds exactly:
    `props report --eval` sums them as numeric in SQL, and `eval show` (the API, the viewer)
    summed the same floats in Python, in case order. On real data (cookiecutter's BugsInPy
    bugs, pylint) the two printed 0.137864065 and 0.13786406499999998 for one figure; the
    pooled analysts' view (model_scores) summed float8 in whatever order the rows came.
    Negative control: on the code before, `eval show` said chance 0.016446446500000003 here
    and the report 0.0164464465. The view's float8 sum depends on the order rows come in; it
    sums numeric now, as the report does, and the last assertion holds it to the report's."""
    await sync_samples(store)
    await definitions.push(store, definitions.reference_local())
    plan = evaluations.Plan(name="chance-bits", examples=["csvtool/*"], epochs=len(SPANS),
                            critic=[evaluations.Critic(definition="reference", ref="local")])
    ev, _ = await evaluation_starts.start(store, plan, await evaluations.resolve(store, plan))
    for case, spans in zip(ev.cases, SPANS, strict=True):
        run = await evaluations.request(store, ev, case, 0)
        await store.append(streams.run(run), [
            *[catalog.IssueReported(run_id=run, issue_id=f"i{n}", rationale="a defect here",
                                    locations=[catalog.Location(file=f, ranges=[
                                        catalog.LineRange(start=a, end=b)])])
              for n, (f, a, b) in enumerate(spans)],
            catalog.RunFinished(run_id=run, status="completed")])
    await rebuilt(store)
    await rescoring.rescore(store, scorers.scorer("tiered@2"),
                            rescoring.Selection(everything=True))
    await registration.activate(store, "tiered", 2)
    await rebuilt(store)
    [report], _ = await figures.load(store, "tiered", 2,
                                     scope=figures.Scope(evaluation=ev.name))
    [shown] = (await evaluation_standing.named(store, ev.name)).critics
    levels = [r["chance"] for r in await store.pool.fetch(
        "SELECT chance FROM projections.run_scores WHERE scorer_name = 'tiered'")]
    assert len(set(levels)) == len(SPANS)
    assert (report["runs"], shown["scored"]) == (len(SPANS), len(SPANS))
    for k in ("chance", "above_chance", "above_chance_low", "above_chance_high"):
        assert report[k] == shown[k], (k, report[k], shown[k])
    assert await store.pool.fetchval(
        "SELECT chance FROM projections.model_scores WHERE scorer_name = 'tiered' "
        "AND scorer_version = 2") == report["chance"]
