"""Only what completed counts: a run that failed (the event cap included) contributes no
issue to any figure, whatever its grades; the report counts it apart, and its own page still
lists its partial output, marked partial.

The snapshot of tests/test_confirmed.py (T1 on line 10, T2 on line 30, both in scope). One
critic runs twice: `ok` completes and locates T1; `capped` fails at the event cap after
reporting issues on both T1's and T2's lines. Both are graded (the grader grades every
finished run's issues, so the run page can show them).
"""

from __future__ import annotations

import uuid

import pytest

from props.core.domain import catalog, streams
from props.core.log.store import EventStore
from props.core.scoring import rescoring, scorers
from props.projections import figures, run_pages
from props.tools.command_line import figure_tables
from tests.test_confirmed import F821, _projected, _snapshot, loc

CRITIC = "crafted"


async def _run(store: EventStore, lines: list[int], finished: catalog.RunFinished,
               ) -> uuid.UUID:
    run = finished.run_id
    await store.append(streams.run(run), [
        catalog.RunRequested(run_id=run, agent_type="critic", definition=CRITIC,
                             example=catalog.Example(snapshot="styled/2026-03-01-00"),
                             model=CRITIC, timeout_seconds=60, budget_usd=0),
        *[catalog.IssueReported(run_id=run, issue_id=f"i{n}", rationale=F821,
                                locations=loc(line)) for n, line in enumerate(lines)],
        finished])
    return run


async def _completed_and_capped(store: EventStore) -> tuple[uuid.UUID, uuid.UUID]:
    """A run that completed with one find (line 10), and one that failed at the event cap
    after reporting the same find and another (lines 10, 30); projected."""
    await _snapshot(store)
    ok, capped = uuid.uuid4(), uuid.uuid4()
    await _run(store, [10], catalog.RunFinished(run_id=ok, status="completed"))
    await _run(store, [10, 30], catalog.RunFinished(
        run_id=capped, status="failed", failure=catalog.Failure(
            phase="report", category="event_cap", retryable=False)))
    await _projected(store)
    return ok, capped


async def test_a_failed_run_contributes_no_issue_to_any_figure(store: EventStore) -> None:
    ok, capped = await _completed_and_capped(store)
    report = await rescoring.rescore(store, scorers.scorer("tiered@2"),
                                     rescoring.Selection(everything=True))
    assert report.accounted
    await _projected(store)
    # The negative control: the failed run's issues are graded, each locating a defect; a
    # figure that read its grades would say 3 of 4 (75%), over 2 runs.
    graded = {r["critique_issue_id"]: r["tp_id"] for r in await store.pool.fetch(
        "SELECT critique_issue_id, tp_id FROM projections.grading_edges "
        "WHERE critique_run_id = $1 AND scorer_name = 'tiered'", capped)}
    assert graded == {"i0": "T1", "i1": "T2"}

    records, notes = await figures.load(store, "tiered", 2)
    [row] = records
    assert (row["runs"], row["located_recall"], row["located"]) == (1, 0.5, 1)
    assert (notes["critic_runs"], notes["scored"], notes["not_completed"]) == (2, 1, 1)
    said = figure_tables.evidence_line(notes)
    assert "not completed 1" in said and "left out of every figure" in said
    # The analysts' SQL gives the same: no row of the failed run in any view.
    assert await store.pool.fetchval(
        "SELECT count(*) FROM projections.run_scores WHERE run_id = $1", capped) == 0
    assert await store.pool.fetchval(
        "SELECT recall FROM projections.model_scores WHERE scorer_name = 'tiered'") == 0.5
    # Its own page keeps its issues, marked partial, with no figure.
    page = await run_pages.shown(store, capped, issues=run_pages.IssuesWanted())
    assert page.header["partial"] is True and page.scores is None
    assert page.found is not None and page.found.total == 2
    assert (await run_pages.shown(store, ok)).header["partial"] is False


async def test_a_verdict_on_a_failed_run_names_no_reviewer(store: EventStore) -> None:
    """A person confirms the find of a run that failed (found on a real evaluation: its
    report, eval show and API said "confirmed by: human@1" beside 0 confirmed). The verdict
    is kept, but the run is in no figure, so "confirmed by" and "reviewed by" name nobody.
    The negative control: the same verdict on the completed run's find names the person."""
    from props.core.scoring import reviews

    ok, capped = await _completed_and_capped(store)
    await rescoring.rescore(store, scorers.scorer("tiered@2"),
                            rescoring.Selection(everything=True))
    await _projected(store)
    await reviews.confirm(store, capped, "i1", "tiered", 2, reviewer="ana")
    await _projected(store)
    [row], notes = await figures.load(store, "tiered", 2)
    assert (row["located"], row["confirmed"], row["reviewed"]) == (1, 0, False)
    assert (notes["confirmed_by"], notes["reviewed_by"]) == ([], [])

    await reviews.confirm(store, ok, "i0", "tiered", 2, reviewer="ana")
    await _projected(store)
    [row], notes = await figures.load(store, "tiered", 2)
    assert (row["confirmed"], notes["confirmed_by"], notes["reviewed_by"]) == \
        (1, ["human@1"], ["human@1"])


async def test_a_persons_verdict_reaches_the_figures_at_once(
        store: EventStore, capsys: pytest.CaptureFixture[str]) -> None:
    """`props review confirm` folds its verdict into the projections before it returns: the
    next report shows it, no rebuild. The negative control: the same verdict appended
    without the fold is not in the figures, and the report says how far behind they are."""
    import argparse

    from props.core.scoring import reviews
    from props.tools.command_line.handlers import review

    await _snapshot(store)
    ok, other = uuid.uuid4(), uuid.uuid4()
    await _run(store, [10], catalog.RunFinished(run_id=ok, status="completed"))
    await _run(store, [30], catalog.RunFinished(run_id=other, status="completed"))
    await _projected(store)
    await rescoring.rescore(store, scorers.scorer("tiered@2"),
                            rescoring.Selection(everything=True))
    await _projected(store)
    [row], notes = await figures.load(store, "tiered", 2)
    assert (row["located"], row["confirmed"], row["reviewed"]) == (2, 0, False)
    assert notes["behind_events"] == 0 and notes["confirmed_by"] == []

    await reviews.confirm(store, other, "i0", "tiered", 2, reviewer="ana")  # not folded
    [row], notes = await figures.load(store, "tiered", 2)
    assert row["confirmed"] == 0 and notes["behind_events"] > 0
    figure_tables.print_report([row], notes)
    assert "event(s) behind the log" in " ".join(capsys.readouterr().out.split())

    await review.confirm_cmd(argparse.Namespace(
        run_id=str(ok), issue_id="i0", scorer="tiered@2", reviewer="ben", note=""), store)
    [row], notes = await figures.load(store, "tiered", 2)
    assert (row["confirmed"], row["reviewed"], notes["behind_events"]) == (2, True, 0)
    assert row["confirmed_recall"] == 0.5 and notes["confirmed_by"] == ["human@1"]
