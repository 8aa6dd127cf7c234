"""What counts as found: a find is a match at full credit, partial credit is reported apart,
and a decoy is a known false positive only when an issue overlaps it.

A snapshot of our own, with an answer key and four crafted issues, where proximity
mis-assigns exactly as the issue describes:
- i1 overlaps defect T1 (lines 10): a find;
- i2 sits on line 11, just after T1 (taken by i1): tiered gives it to T2 (line 14) for being
  near: partial credit, not a find (a reviewer says it found nothing new);
- i3 is about an unrelated class at line 60 of the decoys' file: tiered@1 made it a known
  false positive (D1, line 40) by same-file proximity; a reviewer says it matches nothing;
- i4 overlaps the decoy D2 (line 80): a known false positive.
What a careful reviewer says: 1 of the 2 occurrences found (recall 0.5), 1 of 4 issues a
find (precision 0.25), 1 known false positive. tiered@1, kept as the negative control, gets
the known-FP count wrong (2), and its old recall counted i2's proximity as found (1.0).
"""

from __future__ import annotations

import uuid

import pytest

from props.core.domain import catalog
from props.core.domain.specimens import specimens
from props.core.domain.store import open_store
from props.core.log import errors
from props.core.log.events import Event
from props.core.log.store import EventStore
from props.core.scoring import rescoring, scorers
from props.projections import figures
from tests.conftest import rebuilt

SLUG = "keyed/2026-02-01-00"


def loc(line: int) -> list[catalog.Location]:
    return [catalog.Location(file="a.py", ranges=[catalog.LineRange(start=line, end=line)])]


def occurrence(line: int) -> catalog.Occurrence:
    return catalog.Occurrence(locations=loc(line))


GROUND_TRUTH = catalog.GroundTruth(
    true_positives=[
        catalog.TruePositive(id="T1", rationale="r", occurrences=[occurrence(10)]),
        catalog.TruePositive(id="T2", rationale="r", occurrences=[occurrence(14)])],
    false_positives=[
        catalog.FalsePositive(id="D1", rationale="decoy", relevant_files=["a.py"],
                              occurrences=[occurrence(40)]),
        catalog.FalsePositive(id="D2", rationale="decoy", relevant_files=["a.py"],
                              occurrences=[occurrence(80)])],
    file_sets=[], scopes=[catalog.Scope(files_hash=None, occurrences=["T1#1", "T2#1"])])
ISSUES = {"i1": loc(10), "i2": loc(11), "i3": loc(60), "i4": loc(80)}


def test_the_scorers_match_as_a_reviewer_would_and_the_old_rule_does_not() -> None:
    strict = scorers.rule("tiered@2").match_run(ISSUES, GROUND_TRUTH)
    assert strict["i1"] == scorers.Match(tp_id="T1", tp_occurrence=1, grade=1.0)
    assert strict["i1"].find and not strict["i2"].find  # i2: near T2, partial credit
    assert strict["i2"].tp_id == "T2" and strict["i2"].grade == 0.6
    assert strict["i3"] == scorers.Match()  # not a decoy hit: nothing
    assert strict["i4"] == scorers.Match(fp_id="D2")
    old = scorers.rule("tiered@1").match_run(ISSUES, GROUND_TRUTH)
    assert old["i3"] == scorers.Match(fp_id="D1")  # the negative control: by proximity


async def graded_run(store: EventStore) -> uuid.UUID:
    await store.append(f"snapshot-{SLUG}", [catalog.SnapshotSynced(
        slug=SLUG, version=1, source="test", ground_truth=GROUND_TRUTH,
        ground_truth_hash=specimens.ground_truth_hash(GROUND_TRUTH),
        files=[catalog.FileEntry(path="a.py", sha256="0" * 64, size=1)])])
    run = uuid.uuid4()
    await store.append(f"run-{run}", [
        catalog.RunRequested(run_id=run, agent_type="critic", definition="crafted",
                             example=catalog.Example(snapshot=SLUG), model="m",
                             timeout_seconds=60, budget_usd=1),
        *[catalog.IssueReported(run_id=run, issue_id=i, rationale="r", locations=locations)
          for i, locations in ISSUES.items()],
        catalog.RunFinished(run_id=run, status="completed")])
    await rebuilt(store)  # re-scoring reads the runs' issues from the projections
    for ref in ("tiered@1", "tiered@2"):
        await rescoring.rescore(store, scorers.scorer(ref), rescoring.Selection(everything=True))
    await rebuilt(store)
    return run


async def test_run_scores_count_finds_apart_from_partial_credit(store: EventStore) -> None:
    run = await graded_run(store)
    rows = {r["scorer_version"]: r for r in await store.pool.fetch(
        "SELECT * FROM projections.run_scores WHERE run_id = $1", run)}
    new, old = rows[2], rows[1]
    assert (new["expected"], new["recalled"], new["recall"]) == (2, 1, 0.5)
    assert new["recall_graded"] == pytest.approx(0.8)  # T1 1.0 + T2 0.6, over 2
    assert (new["graded"], new["finds"], new["partial"]) == (4, 1, 1)
    assert new["precision"] == 0.25 and new["known_fp"] == 1 and new["unmatched"] == 1
    # The negative controls: tiered@1's decoy rule counts i3 a known FP; the old recall
    # (every TP match a find) and precision (every TP match a hit) would have been 1.0, 0.5.
    assert old["known_fp"] == 2
    assert old["tp_matches"] / old["expected"] == 1.0 and old["tp_matches"] / 4 == 0.5
    assert old["recall"] == 0.5  # strict recall reads the grades, whichever the scorer


async def test_report_shows_strict_and_graded_recall_and_names_unknown_scorers(
        store: EventStore) -> None:
    await graded_run(store)
    records, notes = await figures.load(store, "tiered", 2)
    [row] = records
    assert (row["located_recall"], row["located_graded"], row["precision"]) == (0.5, 0.8, 0.25)
    assert row["partial"] == 1 and row["known_fp"] == 1
    assert notes["states_scorer"] == "tiered@2" and notes["scored"] == 1
    states = ("excluded", "parked", "unfinished", "not_completed", "no_issues", "ungraded",
              "unscorable", "scored")
    assert sum(notes[k] for k in states) == notes["critic_runs"] == 1
    with pytest.raises(errors.UnknownScorer, match="known: overlap@1, overlap@2, tiered@1, "
                                                   "tiered@2") as refused:
        await figures.load(store, "tierd", None)
    assert refused.value.exit_code == 66  # EX_NOINPUT: it names nothing here, as a missing run


async def test_a_run_that_reported_nothing_counts_as_finding_nothing(store: EventStore) -> None:
    """A completed run with no issue has nothing to grade; left out of the scores, a critic
    silent on hard examples would look better. It counts, recall 0, under every scorer."""
    await graded_run(store)
    silent = uuid.uuid4()
    await store.append(f"run-{silent}", [
        catalog.RunRequested(run_id=silent, agent_type="critic", definition="crafted",
                             example=catalog.Example(snapshot=SLUG), model="m",
                             timeout_seconds=60, budget_usd=1),
        catalog.RunFinished(run_id=silent, status="completed")])
    await rebuilt(store)
    rows = await store.pool.fetch(
        "SELECT scorer_version, expected, recalled, graded, recall, precision "
        "FROM projections.run_scores WHERE run_id = $1 ORDER BY scorer_version", silent)
    assert [tuple(r) for r in rows] == [(1, 2, 0, 0, 0.0, None), (2, 2, 0, 0, 0.0, None)]
    records, notes = await figures.load(store, "tiered", 2)
    assert records[0]["runs"] == 2 and records[0]["located_recall"] == 0.25  # 1 of 4 occurrences
    assert notes["no_issues"] == 1 and notes["scored"] == 1


async def test_every_critic_run_is_counted_in_the_one_state_it_is_in(store: EventStore) -> None:
    """The report's run states, each made on purpose: scored, no issues, ungraded (an issue
    the scorer has not graded), unscorable twice over (an issue it could not grade; a grade
    citing a ground truth never recorded), not completed, unfinished, excluded."""
    await graded_run(store)  # scored: tiered@2 graded all four of its issues

    async def run(status: catalog.TerminalStatus | None, issues: int = 0) -> uuid.UUID:
        run_id = uuid.uuid4()
        events: list[Event] = [catalog.RunRequested(
            run_id=run_id, agent_type="critic", definition="crafted",
            example=catalog.Example(snapshot=SLUG), model="m", timeout_seconds=60,
            budget_usd=1)]
        events += [catalog.IssueReported(run_id=run_id, issue_id=f"i{n}", rationale="r",
                                         locations=loc(10)) for n in range(issues)]
        if status is not None:
            events.append(catalog.RunFinished(
                run_id=run_id, status=status,
                failure=None if status == "completed" else catalog.Failure(
                    phase="run", category="exit_nonzero", retryable=False)))
        await store.append(f"run-{run_id}", events)
        return run_id

    await run("completed")  # no issue reported
    ungraded = await run("completed", issues=2)
    cannot, unknown = await run("completed", issues=1), await run("completed", issues=1)
    await run("failed", issues=1)
    await run(None, issues=1)
    excluded = await run("completed", issues=1)
    await store.append(f"run-{excluded}", [catalog.RunExcluded(run_id=excluded, reason="test")])
    registered = scorers.scorer("tiered@2")
    ref = catalog.ScorerRef(name="tiered", version=2, code_hash=registered.code_hash,
                            ground_truth_hash=specimens.ground_truth_hash(GROUND_TRUTH))
    await store.append(f"grading-{ungraded}-tiered@2", [catalog.GradesEmitted(
        critique_run_id=ungraded, scorer=ref, grades=[catalog.IssueGrade(issue_id="i0",
                                                                          grade=0)])])
    await store.append(f"grading-{cannot}-tiered@2", [catalog.GradesUnscorable(
        critique_run_id=cannot, scorer=ref,
        issues=[catalog.IssueUnscorable(issue_id="i0", reason="no majority")])])
    await store.append(f"grading-{unknown}-tiered@2", [catalog.GradesEmitted(
        critique_run_id=unknown, scorer=ref.model_copy(update={"ground_truth_hash": "f" * 64}),
        grades=[catalog.IssueGrade(issue_id="i0", grade=0)])])
    await rebuilt(store)
    _, notes = await figures.load(store, "tiered", 2)
    assert {k: notes[k] for k in ("critic_runs", "scored", "no_issues", "ungraded",
                                  "unscorable", "not_completed", "unfinished",
                                  "excluded")} == {
        "critic_runs": 8, "scored": 1, "no_issues": 1, "ungraded": 1, "unscorable": 2,
        "not_completed": 1, "unfinished": 1, "excluded": 1}
    # Under a scorer that graded nothing, every run with issues is ungraded.
    _, other = await figures.load(store, "overlap", 1)
    assert other["ungraded"] == 4 and other["scored"] == 0 and other["no_issues"] == 1


async def test_a_report_asked_again_and_again_is_planned_for_its_own_arguments(
        store: EventStore, dsn: str) -> None:
    """A served API asks for reports on pooled connections: after five runs of a prepared
    statement PostgreSQL may keep a generic plan, which cannot drop the scope's "($3 IS NULL
    OR model = $3)" branches (the scores statement went from 21 ms to 170 ms from the sixth
    report on). Each report's statements are planned for their own arguments, every time.
    Its negative control: without `plan_cache_mode` in figures.REPORT_SETTINGS this fails
    here with generic plans from the sixth report on."""
    await graded_run(store)
    async with open_store(dsn, max_connections=1) as one:
        for _ in range(8):
            await figures.load(one, "tiered", 2)
        async with one.sql.acquire() as conn:  # the one connection that ran them all
            plans = await conn.fetch(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE statement NOT LIKE '%pg_prepared_statements%' "  # this one
                "AND (statement LIKE '%run_scores evaluated once%' "
                "OR statement LIKE '%Every critic run in the report''s scope%')")
    assert len(plans) == 2
    assert [(p["generic_plans"], p["custom_plans"] >= 8) for p in plans] == [(0, True)] * 2
