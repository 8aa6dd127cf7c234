"""Re-scoring history under a new scorer version, and comparing scorers run by run."""

from __future__ import annotations

import uuid

import pytest

from props.core.domain import catalog, streams
from props.core.domain.specimens import specimen_sync, specimens
from props.core.domain.store import open_store
from props.core.log import errors, migrate
from props.core.log.events import Event
from props.core.log.store import EventStore
from props.core.scoring import comparison, registration, rescoring, scorers, server_grading
from props.tools.checks.workload import Workload
from tests.conftest import rebuilt

V1, V2 = scorers.rule("overlap@1"), scorers.rule("overlap@2")
ALL = rescoring.Selection(everything=True)


async def history(store: EventStore, runs: int = 80, seed: int = 21) -> Workload:
    w = Workload(seed)
    await w.setup(store)
    await w.append_runs(store, runs)
    await rebuilt(store)
    return w


async def grade_rows(store: EventStore) -> list[tuple[str, str]]:
    """The overlap@2 grade events, as stored."""
    rows = await store.pool.fetch(
        "SELECT stream_id, data::text FROM props.events "
        "WHERE type IN ('grade.emitted', 'grades.emitted') AND stream_id LIKE '%overlap@2' "
        "ORDER BY stream_id, stream_version")
    return [(r[0], r[1]) for r in rows]


async def stored_grades(store: EventStore) -> int:
    """How many overlap@2 grades the log holds (a run's grades are one event)."""
    count: int = await store.pool.fetchval(
        "SELECT coalesce(sum(CASE type WHEN 'grades.emitted' "
        "THEN jsonb_array_length(data->'grades') ELSE 1 END), 0) FROM props.events "
        "WHERE type IN ('grade.emitted', 'grades.emitted') AND stream_id LIKE '%overlap@2'")
    return count


async def test_rescore_then_compare_buckets_every_run(store: EventStore) -> None:
    await history(store)
    report = await rescoring.rescore(store, V2, ALL)
    assert report.selected == 80 and report.accounted and report.appended == report.grades
    assert report.graded_runs == 80  # every finished run, completed or not, is graded
    again = await rescoring.rescore(store, V2, ALL)
    assert again.appended == 0 and again.grades == report.grades  # idempotent
    await rebuilt(store)
    scorers = await store.pool.fetch(
        "SELECT DISTINCT scorer_name, scorer_version FROM projections.grading_edges")
    assert {tuple(r) for r in scorers} == {("overlap", 1), ("overlap", 2)}

    c = await comparison.compare(store, "overlap@1", "overlap@2", ALL)
    assert c.complete and c.selected == 80
    assert len(c.unchanged) + len(c.changed) + len(c.unscorable) == 80
    assert c.changed and c.unchanged  # tolerance 3 moves some matches, not all
    assert set(c.unscorable.values()) == {"not graded by overlap@1"}  # the old grader skipped
    for run_id in c.unchanged:  # unchanged really is unchanged, issue by issue
        edges = await store.pool.fetch(
            "SELECT critique_issue_id, scorer_version, tp_id, tp_occurrence, fp_id "
            "FROM projections.grading_edges WHERE critique_run_id = $1", run_id)
        by_version: dict[int, set[tuple[object, ...]]] = {1: set(), 2: set()}
        for e in edges:
            by_version[e["scorer_version"]].add((e[0], e[2], e[3], e[4]))
        assert by_version[1] == by_version[2] and by_version[1]
    assert all(d.changed_issues for d in c.changed)
    assert c.groups and all(g["recall_b"] is not None for g in c.groups)


async def test_unscorable_runs_are_named_and_kept_out_of_metrics(store: EventStore) -> None:
    w = await history(store, runs=10)
    snapshot = w.found[1]
    example = catalog.Example(snapshot=snapshot.slug)
    path = sorted(snapshot.files)[0]

    async def run(stream_events: list[Event], run_id: uuid.UUID) -> None:
        await store.append(f"run-{run_id}", stream_events)

    def requested(run_id: uuid.UUID, ex: catalog.Example) -> catalog.RunRequested:
        return catalog.RunRequested(run_id=run_id, agent_type="critic", definition="reviewer",
                                    example=ex, model="model-x", timeout_seconds=60,
                                    budget_usd=1)

    def issue(run_id: uuid.UUID, loc: catalog.Location) -> catalog.IssueReported:
        return catalog.IssueReported(run_id=run_id, issue_id="i1", rationale="r",
                                     locations=[loc])

    good = catalog.Location(file=path, ranges=[catalog.LineRange(start=1, end=2)])
    unfinished, orphan, malformed = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    await run([requested(unfinished, example), issue(unfinished, good)], unfinished)
    gone = catalog.Example(snapshot="gone/2025-01-01-00")
    await run([requested(orphan, gone), issue(orphan, good),
               catalog.RunFinished(run_id=orphan, status="completed")], orphan)
    await run([requested(malformed, example),
               issue(malformed, catalog.Location(file=path, ranges=[])),
               catalog.RunFinished(run_id=malformed, status="completed")], malformed)
    await rebuilt(store)

    report = await rescoring.rescore(store, V2, ALL)
    assert report.selected == 13 and report.accounted
    assert report.unscorable == {"no finish event": 1, "ground truth missing": 1,
                                 "malformed issue": 1}
    await rebuilt(store)
    c = await comparison.compare(store, "overlap@2", "overlap@2", ALL)
    assert c.complete
    assert c.unscorable[unfinished] == "no finish event"
    assert c.unscorable[orphan] == "ground truth missing"
    assert c.unscorable[malformed].startswith("malformed issue: i1")
    in_metrics = await store.pool.fetchval(
        "SELECT count(*) FROM projections.run_scores WHERE run_id = ANY($1::uuid[])",
        [unfinished, orphan, malformed])
    assert in_metrics == 0


async def test_interrupted_rescore_finishes_when_run_again(store: EventStore) -> None:
    await history(store)
    done = 0

    def crash(n: int) -> None:
        nonlocal done
        done += n
        if done == 40:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        await rescoring.rescore(store, V2, ALL, progress=crash, chunk_runs=10)
    partial = await stored_grades(store)
    resumed = await rescoring.rescore(store, V2, ALL)
    assert 0 < partial < resumed.grades
    assert resumed.appended == resumed.grades - partial
    final = await stored_grades(store)
    # An uninterrupted rescore computes exactly these grades: it finds them all stored.
    check = await rescoring.rescore(store, V2, ALL)
    assert check.appended == 0 and final == check.grades


async def test_same_scorer_same_ground_truth_gives_byte_identical_grades(
    store: EventStore, dsn: str, new_database: object
) -> None:
    await history(store, runs=30, seed=5)
    await rescoring.rescore(store, V2, ALL)
    first = await grade_rows(store)
    other_dsn = new_database()  # type: ignore[operator]
    await migrate.migrate_database(other_dsn)
    async with open_store(other_dsn) as other:
        await history(other, runs=30, seed=5)
        await rescoring.rescore(other, V2, ALL)
        second = await grade_rows(other)
    assert first and first == second


def _loc(file: str, *ranges: tuple[int, int]) -> catalog.Location:
    return catalog.Location(file=file, ranges=[catalog.LineRange(start=a, end=b)
                                               for a, b in ranges])


async def a_snapshot_of_ties(store: EventStore) -> uuid.UUID:
    """A snapshot whose defects tie (equal TPs, equal decoys) and a finished run whose
    issues hit every rule of the overlap scorer: ties, tolerance, sums, several ranges."""
    def occ(*locations: catalog.Location) -> catalog.Occurrence:
        return catalog.Occurrence(locations=list(locations))

    gt = catalog.GroundTruth(
        true_positives=[
            catalog.TruePositive(id="b-defect", rationale="r",
                                 occurrences=[occ(_loc("f.py", (10, 12)))]),
            catalog.TruePositive(id="a-defect", rationale="r", occurrences=[
                occ(_loc("f.py", (10, 12))), occ(_loc("g.py", (1, 5)))]),
        ],
        false_positives=[
            catalog.FalsePositive(id="z-decoy", rationale="r", relevant_files=["h.py"],
                                  occurrences=[occ(_loc("h.py", (1, 3))),
                                               occ(_loc("h.py", (20, 22)))]),
            catalog.FalsePositive(id="y-decoy", rationale="r", relevant_files=["h.py"],
                                  occurrences=[occ(_loc("h.py", (1, 3)))]),
        ], file_sets=[], scopes=[])
    slug = "ties/2026-01-01-00"
    await store.append(f"snapshot-{slug}", [catalog.SnapshotSynced(
        slug=slug, version=1, source="test", ground_truth=gt,
        ground_truth_hash=specimens.ground_truth_hash(gt),
        files=[catalog.FileEntry(path=p, sha256="0" * 64, size=1)
               for p in ("f.py", "g.py", "h.py")])])
    run = uuid.uuid4()
    issues = {"i1": [_loc("f.py", (11, 11))], "i2": [_loc("g.py", (3, 4)), _loc("f.py", (30, 30))],
              "i3": [_loc("h.py", (2, 2), (21, 21))], "i4": [_loc("h.py", (2, 2))],
              "i5": [_loc("f.py", (14, 14))], "i6": [_loc("g.py", (50, 50))],
              "i7": [_loc("f.py", (10, 10)), _loc("f.py", (12, 12))],
              "I8": [_loc("h.py", (1, 1))], "é9": [_loc("g.py", (7, 8))],
              # (the server writes a grade's JSON as text: an id JSON must escape)
              'q"\\\t\x01': [_loc("f.py", (11, 11))]}
    await store.append(f"run-{run}", [
        catalog.RunRequested(run_id=run, agent_type="critic", definition="reviewer",
                             example=catalog.Example(snapshot=slug), model="m",
                             timeout_seconds=60, budget_usd=1),
        *[catalog.IssueReported(run_id=run, issue_id=i, rationale="r", locations=locs)
          for i, locs in issues.items()],
        catalog.RunFinished(run_id=run, status="completed")])
    return run


Graded = list[tuple[str, uuid.UUID, list[dict[str, object]]]]


async def python_grades(store: EventStore, s: scorers.LocationRule) -> Graded:
    """What the scorer's Python rule grades: per run, its stream, the id of its
    `grades.emitted` and the grades (as `grade.emitted` would hold them, in issue order)."""
    known = await specimen_sync.history(store)
    out = []
    for run in sorted(await rescoring.selected_runs(store, ALL), key=lambda r: str(r.run_id)):
        snapshot = rescoring.ground_truth_for(run, known, "at-run")
        parsed = rescoring.parse_issues(run)
        if rescoring.unscorable_reason(run, snapshot, parsed) is None and parsed:
            assert snapshot is not None
            out.append((f"grading-{run.run_id}-{scorers.ref(s)}",
                        server_grading.run_grades_id(run.run_id, scorers.ref(s),
                                                     snapshot.ground_truth_hash),
                        [g.model_dump(mode="json")
                         for g in rescoring.grades_for(s, run, snapshot, parsed)]))
    return out


async def server_grades(store: EventStore, after: int) -> Graded:
    """The `grades.emitted` appended after position `after`, read back the same way."""
    rows = await store.pool.fetch(
        "SELECT stream_id, event_id, data FROM props.events WHERE global_position > $1 "
        "AND type = 'grades.emitted' ORDER BY stream_id", after)
    out = []
    for stream, event_id, data in rows:
        e = catalog.GradesEmitted.model_validate_json(data)
        out.append((stream, event_id, [catalog.GradeEmitted(
            critique_run_id=e.critique_run_id, critique_issue_id=g.issue_id, tp_id=g.tp_id,
            tp_occurrence=g.tp_occurrence, fp_id=g.fp_id, grade=g.grade, scorer=e.scorer,
        ).model_dump(mode="json") for g in e.grades]))
    return out


async def test_grades_on_the_server_equal_the_python_rule(store: EventStore) -> None:
    await history(store, runs=60, seed=13)
    tie_run = await a_snapshot_of_ties(store)
    await rebuilt(store)
    for s in (V1, V2):  # V1 also graded the history before, in Python, one event an issue
        mark = await store.pool.fetchval("SELECT max(global_position) FROM props.events")
        report = await rescoring.rescore(store, s, ALL)
        on_server = await server_grades(store, mark)
        expected = await python_grades(store, s)
        assert report.appended == sum(len(g) for _, _, g in expected) > 200
        assert on_server == expected
    ties = next(grades for stream, _, grades in on_server if str(tie_run) in stream)
    assert {g["critique_issue_id"]: g["tp_id"] or g["fp_id"] for g in ties} == {
        "i1": "a-defect", "i2": "a-defect", "i3": "z-decoy", "i4": "y-decoy",
        "i5": "a-defect", "i6": None, "i7": "a-defect", "I8": "y-decoy", "é9": "a-defect",
        'q"\\\t\x01': "a-defect"}

    # Negative control: the comparison sees a rule that differs by one line of tolerance.
    assert await python_grades(store, scorers.OverlapScorer(version=2, tolerance=2)) != expected


def test_a_changed_setting_changes_the_code_hash() -> None:
    a = scorers.OverlapScorer(version=2, tolerance=3)
    b = scorers.OverlapScorer(version=2, tolerance=4)
    assert a.code_hash == scorers.OverlapScorer(version=2, tolerance=3).code_hash
    assert a.code_hash != b.code_hash


async def test_a_changed_scorer_must_take_a_new_version(store: EventStore) -> None:
    await registration.ensure_registered(store, V2)
    changed = scorers.OverlapScorer(version=2, tolerance=9)
    with pytest.raises(errors.PropsError, match="needs a new version"):
        await registration.ensure_registered(store, changed)


async def test_grading_pending_follows_the_active_scorer(store: EventStore) -> None:
    await history(store, runs=20)
    assert await store.pool.fetchval(
        "SELECT count(*) FROM projections.grading_pending p JOIN projections.agent_runs r "
        "USING (run_id) WHERE r.status = 'completed'") == 0
    await store.append("scorer-overlap", [catalog.ActiveScorerSet(name="overlap", version=2)])
    await rebuilt(store)
    pending = await store.pool.fetchval("SELECT count(*) FROM projections.grading_pending")
    assert pending > 0
    await rescoring.rescore(store, V2, ALL)
    await rebuilt(store)
    assert await store.pool.fetchval("SELECT count(*) FROM projections.grading_pending") == 0


def test_selection_must_be_explicit() -> None:
    with pytest.raises(errors.PropsError, match="--all"):
        rescoring.Selection().check()


async def test_scorer_activation_is_idempotent_on_every_path(store: EventStore) -> None:
    """The grader at start, `props scorers activate`, and two processes at once: asking for
    the scorer that is active appends nothing; activating A again after B does append."""
    import anyio

    from props.reactors.grader import Grader
    from tests.test_cli import props
    from tests.verification_helpers import record_verification

    async def activations() -> list[str]:
        rows = await store.pool.fetch("SELECT data->>'name' || '@' || (data->>'version') "
                                      "FROM props.events WHERE type = 'scorer.activated' "
                                      "ORDER BY global_position")
        return [r[0] for r in rows]

    async with anyio.create_task_group() as tg:  # two graders starting on a new log
        tg.start_soon(Grader(store).start, tg)
        tg.start_soon(Grader(store).start, tg)
    default = scorers.DEFAULT_SCORER
    assert await activations() == [default]
    again = props("scorers", "activate", default, dsn=store.dsn)
    assert again.returncode == 0 and "already the active scorer" in again.stdout
    await record_verification(store, "overlap@2")  # (the gate: tests/test_verification.py)
    for _ in range(2):  # the second is a no-op
        assert props("scorers", "activate", "overlap@2", dsn=store.dsn).returncode == 0
    async with anyio.create_task_group() as tg:  # at once, back to the default
        for _ in range(2):
            tg.start_soon(registration.activate, store, *streams.parse_ref(default))
    assert await activations() == [default, "overlap@2", default]
    assert await registration.active_scorer(store) == default


async def test_an_issue_past_every_line_is_unscorable_and_the_rest_rescored(
        store: EventStore) -> None:
    """An issue at lines 1..3,000,000,000 (stored before the catalog bounded line numbers:
    built here without validation): its run is unscorable with a named reason, on the server
    and in Python alike, and every other run is re-scored (before, the statement's int cast
    failed and no run was)."""
    w = await history(store, runs=10)
    snapshot = w.found[1]
    far = uuid.uuid4()
    await store.append(f"run-{far}", [
        catalog.RunRequested(run_id=far, agent_type="critic", definition="reviewer",
                             example=catalog.Example(snapshot=snapshot.slug), model="m",
                             timeout_seconds=60, budget_usd=1),
        catalog.IssueReported.model_construct(
            run_id=far, issue_id="i1", rationale="r", severity=None, locations=[
                catalog.Location.model_construct(file=sorted(snapshot.files)[0], ranges=[
                    catalog.LineRange.model_construct(start=1, end=3_000_000_000)])]),
        catalog.RunFinished(run_id=far, status="completed")])
    await rebuilt(store)
    report = await rescoring.rescore(store, V2, ALL)
    assert report.selected == 11 and report.accounted
    assert report.unscorable == {"malformed issue": 1}
    assert report.graded_runs == 10
    python = await rescoring.rescore(store, V1, ALL)  # and under another version
    assert python.unscorable == {"malformed issue": 1} and python.graded_runs == 10
