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
from pathlib import Path

import httpx

from props.core.domain import catalog, definitions, evaluation_starts, evaluations, streams, tokens
from props.core.log.store import EventStore
from props.core.scoring import registration, rescoring, reviews, scorers
from props.projections import evaluation_standing, figures
from props.tools.http.app import create_app
from tests import hostile_imports
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
    # the counts behind it, as the report's: located = confirmed + rejected + unconfirmed
    assert "located 1 = 0 confirmed + 0 rejected + 1 unconfirmed" in page
    assert "Confirmed by" not in page  # nobody confirmed anything


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


async def test_the_analysts_sql_selects_one_evaluation_s_figures(store: EventStore) -> None:
    """`projections.evaluation_scores` gives, per evaluation, the figures `props report --eval`
    and `eval show` print, from the runs `projections.evaluation_runs` counts: each case's
    latest attempt, never a failed, excluded or superseded one. Two evaluations of one critic
    differ; the pooled `model_scores` (the negative control) mixes them, so an analyst who
    read it for one evaluation would quote neither. A request that only *says* in its
    metadata that it belongs to the evaluation (requested by someone else, at an attempt past
    the real ones, of a case that has a result) joins nothing, and one whose metadata is not
    even well formed stops no fold."""
    from props.core.log.events import NewEvent

    ev, failed = await _evaluation(store)
    plan = evaluations.Plan(name="second", examples=["csvtool/*"], epochs=1,
                            critic=[evaluations.Critic(definition="reference", ref="local")])
    other, _ = await evaluation_starts.start(store, plan,
                                             await evaluations.resolve(store, plan))
    await _finish(store, await evaluations.request(store, other, other.cases[0], 0),
                  [MEDIAN, RANK])
    scored = ev.cases[0]
    forged = [uuid.uuid4(), uuid.uuid4()]
    for run, attempt in zip(forged, (7, "seven"), strict=True):
        await store.append(streams.run(run), [NewEvent(catalog.RunRequested(
            run_id=run, agent_type="critic", definition=scored.definition,
            definition_ref=scored.digest, model=scored.model, timeout_seconds=60,
            budget_usd=0, requested_by="api:mallory",
            example=catalog.Example(snapshot=scored.snapshot, files_hash=scored.files_hash)),
            metadata={"evaluation": ev.name, "evaluation_version": ev.version,
                      "case": scored.key, "attempt": attempt})])
        await _finish(store, run, [HEAD, MEDIAN, RANK])
    await rebuilt(store)
    await rescoring.rescore(store, scorers.scorer("tiered@2"),
                            rescoring.Selection(everything=True))
    await rebuilt(store)

    # A person confirms the scored case's find: the human scorer's own row appears, and like
    # the report's it has no confirmation figures (its finds are claims already read).
    await reviews.confirm(store, ev.run_id(scored, 0), "i0", "tiered", 2, reviewer="ana")
    await rebuilt(store)
    for name in (ev.name, other.name):
        [shown] = (await evaluation_standing.named(store, name)).critics
        for scorer, version in (("tiered", 2), ("human", 1))[:2 if name == ev.name else 1]:
            [report], _ = await figures.load(store, scorer, version,
                                             scope=figures.Scope(evaluation=name))
            row = await store.pool.fetchrow(
                "SELECT * FROM projections.evaluation_scores WHERE evaluation = $1 "
                "AND scorer_name = $2 AND scorer_version = $3", name, scorer, version)
            assert row is not None, (name, scorer)
            assert row["runs"] == report["runs"], (name, scorer)
            for k in ("located_recall", "located", "confirmed", "confirmed_recall",
                      "reviewed", "chance", "above_chance", "precision"):
                assert row[k] == report[k], (name, scorer, k, row[k], report[k])
                if scorer == "tiered":
                    assert report[k] == shown[k] and row["runs"] == shown["scored"], (name, k)
    assert await store.pool.fetchval("SELECT count(*) FROM projections.evaluation_scores "
                                     "WHERE evaluation = $1 AND scorer_name = 'human'",
                                     other.name) == 0
    human = await store.pool.fetchrow(
        "SELECT confirmed, reviewed FROM projections.evaluation_scores WHERE evaluation = $1 "
        "AND scorer_name = 'human'", ev.name)
    assert human is not None and tuple(human) == (None, None)
    counted = {r["run_id"]: r["status"] for r in await store.pool.fetch(
        "SELECT run_id, status FROM projections.evaluation_runs "
        "WHERE evaluation = $1 AND counted", ev.name)}
    assert set(counted) == set(await evaluation_standing.counted_runs(store, ev.name))
    # The capped case's one attempt stands for it (failed: in no figure); the retried
    # case's first attempt does not, nor does any forged request.
    assert len(counted) == 4 and counted[failed[0]] == "failed"
    assert not set(counted) & {failed[1], *forged}
    pooled = await store.pool.fetchval(
        "SELECT recall FROM projections.model_scores WHERE scorer_name = 'tiered' "
        "AND scorer_version = 2")
    assert pooled not in {r["located_recall"] for r in await store.pool.fetch(
        "SELECT located_recall FROM projections.evaluation_scores WHERE scorer_name = "
        "'tiered'")}


async def test_an_imported_version_of_a_local_evaluation_takes_none_of_its_figures(
        store: EventStore, tmp_path: Path) -> None:
    """An unsigned file brings `evaluation.started` in a stream of its own whose data says
    it is version 9 of the local evaluation, and four completed runs requested, it says, by
    that version. The local evaluation's figures and counted runs stay its own: the view
    reads an evaluation's versions from its own stream, as `eval show` does. Negative
    control (an attacker's probe of this stop, before the fix): every counted run was the
    file's, and the report said evil-model, 4 runs, located recall 0.5."""
    ev, _ = await _evaluation(store)
    before = await figures.load(store, "tiered", 2, scope=figures.Scope(evaluation=ev.name))
    counted = set(await evaluation_standing.counted_runs(store, ev.name))
    started = (await store.read_stream(streams.evaluation(ev.name)))[0].event
    assert isinstance(started, catalog.EvaluationStarted)
    claimed = {**started.model_dump(mode="json"), "version": 9, "nonce": str(uuid.uuid4())}
    brought = [hostile_imports._event("evaluation-elsewhere", 1, "evaluation.started",
                                      claimed, 0)]
    for n, case in enumerate(ev.cases):
        run = str(uuid.uuid4())
        request = hostile_imports._event(f"run-{run}", 1, "run.requested", {
            "run_id": run, "agent_type": "critic", "definition": case.definition,
            "definition_ref": case.digest, "example": {"snapshot": case.snapshot},
            "model": "evil-model", "timeout_seconds": 60, "budget_usd": 1.0,
            "requested_by": f"eval:{ev.name}@9"}, 1 + 2 * n)
        request["metadata"] = {"evaluation": ev.name, "evaluation_version": 9,
                               "case": case.key, "attempt": 0}
        brought += [request, hostile_imports._event(f"run-{run}", 2, "run.finished", {
            "run_id": run, "status": "completed"}, 2 + 2 * n)]
    await hostile_imports.bring(store, tmp_path, brought)
    await rebuilt(store)
    assert set(await evaluation_standing.counted_runs(store, ev.name)) == counted
    after, _ = await figures.load(store, "tiered", 2, scope=figures.Scope(evaluation=ev.name))
    assert [(r["model"], r["runs"], r["located_recall"]) for r in after] == \
        [(r["model"], r["runs"], r["located_recall"]) for r in before[0]]
    assert await store.pool.fetchval(
        "SELECT count(*) FROM projections.evaluation_runs WHERE model = 'evil-model'") == 0
