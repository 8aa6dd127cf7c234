"""Every recall beside its chance level: what the same issues would score anywhere in their
files (props.core.scoring.chance, docs/reference/chance.md).

Two snapshots of our own, each one file of 100 lines with one defect (line 10 of a.py, line
50 of b.py): two examples, so figures have an interval. Critics:
- `spray` reports one issue on every line of every file: recall 100%, chance 100%, lift 0;
- `precise` reports one issue on each defect's line (the negative control of the lift: its
  recall stays nearly all above chance);
- `silent` reports nothing: chance 0.
"""

from __future__ import annotations

import random
import uuid

import anyio
import pytest

from props.core.domain import catalog, streams
from props.core.domain.specimens import specimens
from props.core.log.store import EventStore
from props.core.scoring import chance, rescoring, scorers
from props.projections import engine, figures
from props.projections import status as projection_status
from props.tools.command_line import figure_tables

LINES = 100
SNAPSHOTS = {"alpha/2026-03-01-00": ("a.py", 10), "beta/2026-03-01-00": ("b.py", 50)}


def loc(file: str, first: int, last: int | None = None) -> list[catalog.Location]:
    return [catalog.Location(file=file, ranges=[catalog.LineRange(start=first,
                                                                  end=last or first)])]


def _truth(file: str, line: int) -> catalog.GroundTruth:
    return catalog.GroundTruth(
        true_positives=[catalog.TruePositive(id="T1", rationale="r", occurrences=[
            catalog.Occurrence(locations=loc(file, line))])],
        false_positives=[], file_sets=[],
        scopes=[catalog.Scope(files_hash=None, occurrences=["T1#1"])])


async def _snapshots(store: EventStore) -> None:
    code = "".join(f"x{n} = {n}\n" for n in range(1, LINES + 1)).encode()
    sha = await store.put_blob(code)
    for slug, (file, line) in SNAPSHOTS.items():
        gt = _truth(file, line)
        await store.append(streams.snapshot(slug), [catalog.SnapshotSynced(
            slug=slug, version=1, source="test", ground_truth=gt,
            ground_truth_hash=specimens.ground_truth_hash(gt),
            files=[catalog.FileEntry(path=file, sha256=sha, size=len(code))])])


async def _run(store: EventStore, definition: str, slug: str,
               issues: list[list[catalog.Location]]) -> uuid.UUID:
    run = uuid.uuid4()
    await store.append(streams.run(run), [
        catalog.RunRequested(run_id=run, agent_type="critic", definition=definition,
                             example=catalog.Example(snapshot=slug), model="m",
                             timeout_seconds=60, budget_usd=0),
        *[catalog.IssueReported(run_id=run, issue_id=f"i{n}", rationale="r", locations=locs)
          for n, locs in enumerate(issues, start=1)],
        catalog.RunFinished(run_id=run, status="completed")])
    return run


async def _critics(store: EventStore) -> None:
    await _snapshots(store)
    for slug, (file, line) in SNAPSHOTS.items():
        await _run(store, "spray", slug, [loc(file, n) for n in range(1, LINES + 1)])
        await _run(store, "precise", slug, [loc(file, line)])
        await _run(store, "silent", slug, [])


async def _projected(store: EventStore) -> None:
    with anyio.fail_after(120):
        await engine.rebuild(store)
        while any(s.lag_events for s in await projection_status.of(store)):
            await engine.rebuild(store)


def _row(records: list[dict[str, object]], definition: str) -> dict[str, object]:
    [row] = [r for r in records if r["definition"] == definition]
    return row


async def _chance_events(store: EventStore) -> int:
    return int(await store.pool.fetchval(
        "SELECT count(*) FROM props.events WHERE type = 'grades.chance'"))


@pytest.mark.parametrize("scorer", ["tiered@2", "overlap@2"])  # Python, and the server's
async def test_spraying_every_line_is_all_chance_and_a_precise_find_keeps_its_lift(
        store: EventStore, scorer: str) -> None:
    await _critics(store)
    await _projected(store)
    first = await rescoring.rescore(store, scorers.scorer(scorer),
                                    rescoring.Selection(everything=True))
    assert first.accounted
    assert await _chance_events(store) == 4  # one per run with issues (silent: chance 0)
    await _projected(store)
    name, _, version = scorer.partition("@")
    records, _notes = await figures.load(store, name, int(version))
    spray, precise, silent = (_row(records, d) for d in ("spray", "precise", "silent"))
    assert spray["located_recall"] == 1.0 and spray["chance"] == pytest.approx(1.0)
    assert spray["above_chance"] == pytest.approx(0.0, abs=1e-9)
    low, high = spray["above_chance_low"], spray["above_chance_high"]
    assert isinstance(low, float) and isinstance(high, float) and low <= 0 <= high + 1e-9
    # The negative control: one issue on each defect's line, 1 of 100 offsets by chance
    # (the line itself; overlap@2 widens the defect by 3 lines on each side: 7 of 100).
    expected = 0.01 if name == "tiered" else 0.07
    assert precise["located_recall"] == 1.0 and precise["chance"] == pytest.approx(expected)
    assert precise["above_chance"] == pytest.approx(1 - expected)
    assert precise["above_chance_low"] == pytest.approx(1 - expected)
    assert silent["located_recall"] == 0.0 and silent["chance"] == 0.0
    # A rerun appends nothing: no grade, no chance level.
    again = await rescoring.rescore(store, scorers.scorer(scorer),
                                    rescoring.Selection(everything=True))
    assert again.appended == 0 and await _chance_events(store) == 4


async def test_graded_recall_is_shown_only_with_its_chance(store: EventStore) -> None:
    """tiered's same-file credit (0.3) comes to any issue in the defect's file: a critic
    with one issue far from the defect gets graded recall 30%, all of it chance."""
    await _snapshots(store)
    for slug, (file, line) in SNAPSHOTS.items():
        await _run(store, "far", slug, [loc(file, line + 30 if line < 50 else line - 30)])
    await _projected(store)
    await rescoring.rescore(store, scorers.scorer("tiered@2"),
                            rescoring.Selection(everything=True))
    await _projected(store)
    records, _notes = await figures.load(store, "tiered", 2)
    far = _row(records, "far")
    assert far["located_recall"] == 0.0 and far["located_graded"] == pytest.approx(0.3)
    # by chance: 1 offset of 100 a find, 10 more near (within 5 lines), the rest same file
    assert far["chance_graded"] == pytest.approx(0.01 + 0.6 * 0.10 + 0.3 * 0.89)
    said = "\n".join(figure_tables.chance_lines(records))
    assert "graded located 30.0%, by chance 33.7%" in said and "same file 0.3" in said


def _brute(lines: int, issues: chance.Ranges, occurrence: chance.Ranges, slack: int) -> int:
    """The offsets counted one by one, on the circle of the file's lines."""
    def on_circle(first: int, last: int) -> set[int]:
        return {n % lines for n in range(first, last + 1)}

    target = set().union(*(on_circle(a - slack, b + slack) for a, b in occurrence))
    return sum(1 for d in range(lines)
               if any(on_circle(s + d, e + d) & target for s, e in issues))


def test_the_chance_count_is_exact() -> None:
    rng = random.Random(42)
    for _ in range(300):
        lines = rng.randint(1, 60)
        issues = [(s, s + rng.randint(0, 8)) for s in
                  (rng.randint(1, 70) for _ in range(rng.randint(1, 6)))]
        occurrence = [(a, a + rng.randint(0, 5)) for a in
                      (rng.randint(1, 60) for _ in range(rng.randint(1, 3)))]
        slack = rng.choice([0, 2, 5])
        assert chance.covered(lines, issues, occurrence, slack) == \
            _brute(lines, issues, occurrence, slack), (lines, issues, occurrence, slack)
        # merged first (as the runs' issues are), the count is the same
        assert chance.covered(lines, chance.merged(lines, issues), occurrence, slack) == \
            _brute(lines, issues, occurrence, slack), (lines, issues, occurrence, slack)


def test_a_run_with_no_issue_has_chance_zero() -> None:
    g = chance.geometry(scorers.scorer("tiered@2"))
    assert g is not None
    t = chance.truth(_truth("a.py", 10), "t")
    assert chance.occurrence_chances(g, {}, t, {"a.py": LINES}) == []
    # a scorer that reads claims (a person, a judge) has no chance level here
    assert chance.geometry(scorers.scorer("tiered@1")) is not None
