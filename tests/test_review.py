"""People's verdicts are events: `props review` confirms or corrects a grade as a
`grade.reviewed` of the `human@1` scorer, never overwriting the rule's grade; people and the
rule are compared like two scorers; an excluded run leaves every score and is counted."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

from props.core.domain import catalog
from props.core.log.store import EventStore
from props.core.scoring import comparison, rescoring, scorers
from props.projections import engine, figures
from tests.test_strict_recall import graded_run

CLI = [sys.executable, "-m", "props.tools.cli"]


def props(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env={**os.environ, "PROPS_DSN": dsn},
                          capture_output=True, text=True, timeout=120, check=False)


async def test_verdicts_are_their_own_scorer_and_compare_with_the_rule(
        store: EventStore) -> None:
    run = await graded_run(store)  # tiered@2: i1 T1#1, i2 near T2 (no find), i3 none, i4 D2
    await store.append("scorer-tiered", [catalog.ActiveScorerSet(name="tiered", version=2)])
    await engine.rebuild(store)
    shown = props(store.dsn, "review", "next")
    assert shown.returncode == 0 and f"run {run}" in shown.stdout, shown.stderr
    for issue in ("i1", "i3", "i4"):
        assert props(store.dsn, "review", "confirm", str(run), issue,
                     "--reviewer", "ada").returncode == 0
    corrected = props(store.dsn, "review", "correct", str(run), "i2", "--none",
                      "--reviewer", "ada", "--note", "a second report of T1, not T2")
    assert corrected.returncode == 0, corrected.stderr
    wrong = props(store.dsn, "review", "correct", str(run), "i2", "--tp", "T9")
    assert wrong.returncode == 65 and "no TP occurrence T9#1" in wrong.stderr
    assert props(store.dsn, "review", "confirm", str(uuid.uuid4()), "i1").returncode == 66
    verdicts = [r.event for r in await store.read_stream(f"review-{run}")]
    assert len(verdicts) == 4 and {v.reviewer for v in verdicts} == {"ada"}  # type: ignore[union-attr]
    await engine.rebuild(store)
    assert "nothing to review" in props(store.dsn, "review", "next").stdout
    edges = {(r["scorer_name"], r["critique_issue_id"]): (r["tp_id"], r["fp_id"])
             for r in await store.pool.fetch(
                 "SELECT * FROM projections.grading_edges WHERE critique_run_id = $1", run)}
    assert edges[("human", "i2")] == (None, None) and edges[("tiered", "i2")] == ("T2", None)
    c = await comparison.compare(store, scorers.HUMAN, "tiered@2",
                                rescoring.Selection(everything=True))
    assert c.agreement is not None and c.agreement.issues == 4 and c.agreement.agreed == 3
    records, _ = await figures.load(store, "human", 1)
    assert records[0]["located_recall"] == 0.5 and records[0]["precision"] == 0.25
    # Adjudicated: people's verdicts stand in for the rule's grades (i2's partial credit goes).
    rule, notes = await figures.load(store, "tiered", 2)
    judged, judged_notes = await figures.load(store, "tiered", 2, adjudicated=True)
    assert (rule[0]["located_graded"], judged[0]["located_graded"]) == (0.8, 0.5)
    assert (notes["adjudicated_issues"], judged_notes["adjudicated_issues"]) == (0, 4)


async def test_an_excluded_run_leaves_every_score_and_is_counted(store: EventStore) -> None:
    run = await graded_run(store)
    excluded = props(store.dsn, "review", "exclude", str(run), "--reason", "leaked key")
    assert excluded.returncode == 0, excluded.stderr
    assert props(store.dsn, "review", "exclude", str(uuid.uuid4()), "--reason",
                 "x").returncode == 66
    await engine.rebuild(store)
    records, notes = await figures.load(store, "tiered", 2)
    assert records == [] and notes["excluded"] == 1 and notes["critic_runs"] == 1
    assert await store.pool.fetchval(
        "SELECT reason FROM projections.excluded_runs WHERE run_id = $1", run) == "leaked key"
