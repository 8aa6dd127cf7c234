"""Projections: incremental equals rebuild, exactly-once under SIGKILL, swaps readers never
see half-built, analysts read projections and nothing else, old event versions project alike."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import uuid
from decimal import Decimal
from typing import Any, ClassVar

import anyio
import asyncpg
import orjson
import pytest

from props.core.domain import catalog
from props.core.log import database
from props.core.log.events import EventRegistry, NewEvent, RecordedEvent
from props.core.log.store import EventStore
from props.core.scoring import scorers
from props.projections import engine
from props.projections import run_tables as runs_projection
from props.projections import status as projection_status
from props.tools.checks.workload import Workload
from tests.conftest import as_role

Dump = dict[str, list[tuple[Any, ...]]]


async def dump(store: EventStore) -> Dump:
    return await projection_status.snapshot_rows(store)


async def caught_up(store: EventStore, seconds: float = 60) -> None:
    with anyio.fail_after(seconds):
        while any(s.lag_events for s in await projection_status.of(store)):  # noqa: ASYNC110
            await anyio.sleep(0.05)


async def every_kind_of_event(store: EventStore, runs: int, seed: int = 3) -> Workload:
    w = Workload(seed)
    await w.setup(store)
    await w.append_runs(store, runs)
    slug = w.found[0].slug
    await store.append(f"snapshot-{slug}", [catalog.SnapshotRetired(
        slug=slug, version=1, reason="test")])
    await store.append("reactor-grader", [catalog.EventParked(
        reactor="grader", event_id=uuid.uuid4(), global_position=1, error_type="ValueError",
        error_message="bad", attempts=3), catalog.ParkedRetried(
        reactor="grader", event_id=uuid.uuid4(), global_position=1, requested_by="ada")])
    graded = await store.pool.fetchval(
        "SELECT data->>'run_id' FROM props.events WHERE type = 'issue.reported' LIMIT 1")
    scorer = catalog.ScorerRef(name="overlap", version=2, code_hash="0" * 64,
                               ground_truth_hash="1" * 64)
    await store.append(f"grading-{graded}-overlap@2", [catalog.GradesEmitted(
        critique_run_id=uuid.UUID(graded), scorer=scorer, grades=[
            catalog.IssueGrade(issue_id="i1", tp_id="t", tp_occurrence=1, grade=1.0),
            catalog.IssueGrade(issue_id="u0", grade=0.0)]),
        catalog.GradesChance(critique_run_id=uuid.UUID(graded), scorer=scorer,
                             null_model="rotation@1", issues=2, occurrences=[
                                 catalog.OccurrenceChance(tp_id="t", tp_occurrence=1,
                                                          found=0.25, graded=0.25)])])
    # A judge that could not grade two issues; a later grade of one of them replaces its row.
    judge = scorer.model_copy(update={"name": "judge", "version": 1})
    await store.append(f"grading-{graded}-judge@1", [
        catalog.GradesUnscorable(critique_run_id=uuid.UUID(graded), scorer=judge, issues=[
            catalog.IssueUnscorable(issue_id="i1", reason="no majority"),
            catalog.IssueUnscorable(issue_id="u0", reason="not JSON")]),
        catalog.GradeEmitted(critique_run_id=uuid.UUID(graded), critique_issue_id="u0",
                             grade=0.0, scorer=judge)])
    # Its verification (passed: its word confirms, verified_scorers), and one forced.
    verification = uuid.uuid4()
    cohort = catalog.Cohort(kind="as-of", name="1", cohort_id="5" * 16, runs=1)
    await store.append(f"verification-{verification}", [
        catalog.VerificationReplayed(
            verification_id=verification, run_id=uuid.UUID(graded), identity_hash="6" * 64,
            ground_truth_hash="1" * 64, verdicts=[catalog.IssueVerdict(issue_id="i1")]),
        catalog.VerificationLabelled(
            verification_id=verification, identity_hash="6" * 64, cases_sha256="7" * 64,
            scores=[catalog.CaseScore(case_id="c", issues=2, right=1)]),
        catalog.VerificationBucketed(
            verification_id=verification, run_id=uuid.UUID(graded), issues=[
                catalog.IssueBucketed(issue_id="i1", bucket="unchanged", before="none",
                                      after="none")])])
    await store.append("signers-trusted", [
        catalog.SignerTrusted(fingerprint="8" * 16, name="lab"),
        catalog.SignerDistrusted(fingerprint="8" * 16)])
    await store.append("scorer-judge", [
        catalog.ScorerVerified(
            verification_id=verification, name="judge", version=1, identity_hash="6" * 64,
            code_hash="0" * 64, cohort=cohort, status="completed", candidates=2,
            unchanged=1, newly_credited=1, replayed_runs=1, passed=True),
        catalog.ScorerForced(name="judge", version=1, identity_hash="6" * 64,
                             reason="a trial", actor="ada")])
    run_id = uuid.uuid4()
    await store.append(f"retention-{run_id}", [
        catalog.RetentionHeld(run_id=run_id, reason="audit"),
        catalog.RetentionReleased(run_id=run_id)])
    await store.append(f"review-{graded}", [catalog.GradeReviewed(
        critique_run_id=uuid.UUID(graded), critique_issue_id="i1", tp_id="t", tp_occurrence=1,
        ground_truth_hash="1" * 64, reviewer="ada", note="checked")])
    excluded = await store.pool.fetchval(
        "SELECT data->>'run_id' FROM props.events WHERE type = 'run.finished' LIMIT 1")
    await store.append(f"run-{excluded}", [
        catalog.RunClaimed(run_id=uuid.UUID(excluded), launcher="b", takes_over="a"),
        catalog.RunReleased(run_id=uuid.UUID(excluded), launcher="b"),
        catalog.RunExcluded(run_id=uuid.UUID(excluded), reason="a broken image",
                            excluded_by="ada")])
    await store.append("evaluation-e", [catalog.EvaluationStarted(
        name="e", version=1, plan={"name": "e"}, plan_sha256="3" * 64, cases_sha256="4" * 64,
        cases=2), catalog.EvaluationEnded(name="e", version=1, outcome="incomplete", scored=1,
                                          failed=0, excluded=0, missing=1, cost_usd=0.0)])
    # Four more runs: requests an evaluation made (its requested_by says so), one that only
    # claims it, one whose attempt is no number, one an import brought: each case and
    # provenance projected.
    for requested_by, meta in (
            ("eval:e@1", {"evaluation": "e", "evaluation_version": 1, "case": "k", "attempt": 2}),
            ("api:mallory", {"evaluation": "e", "evaluation_version": 1, "case": "k"}),
            ("eval:e@1", {"evaluation": "e", "evaluation_version": 1, "attempt": "x"}),
            ("eval:e@1", {"evaluation": "e", "evaluation_version": "1", "case": "k",
                          "attempt": 3, "origin": {"archive": "a1", "signer": "lab"}})):
        claimed = uuid.uuid4()
        await store.append(f"run-{claimed}", [NewEvent(catalog.RunRequested(
            run_id=claimed, agent_type="critic", definition="reviewer", model="m",
            example=catalog.Example(snapshot=slug), timeout_seconds=60, budget_usd=0,
            requested_by=requested_by), metadata=meta)])
    await store.append("launcher-b", [catalog.LauncherStarted(
        name="b", capacity=8, runtimes=["local"], engine=None, lease_seconds=30)])
    await store.append("inert-a1", [catalog.ImportInert(
        line=3, reason="consumers", event={"type": "run.excluded", "data": {}})])
    await store.append("import-a1", [catalog.ArchiveImported(
        archive_id="a1", sha256="2" * 64, signer=None, events=1, imported=1, part=1,
        runs=[catalog.ImportedRun(run_id=uuid.UUID(graded))])])
    await store.append("endpoint-m", [catalog.EndpointRegistered(
        name="m", base_url="http://127.0.0.1:9/v1", key_env="M_KEY")])
    await store.append("definition-critic", [catalog.DefinitionGranted(
        agent_type="critic", name="x", digest="sha256:" + "5" * 64, network=True)])
    await store.append(f"gateway-{graded}", [catalog.GatewayCalled(
        run_id=uuid.UUID(graded), endpoint="m", outcome="answered", http_status=200,
        tokens_in=10, tokens_out=2, cost_usd=0.001, latency_ms=12.0)])
    return w


async def test_incremental_equals_rebuild(store: EventStore) -> None:
    w = await every_kind_of_event(store, runs=60)
    runner = engine.Runner(store, batch_size=53, poll_interval=0.05)
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run)
        for _ in range(4):  # appends while the runner follows, in several phases
            await w.append_runs(store, 40)
            await anyio.sleep(0.05)
        await caught_up(store)
        tg.cancel_scope.cancel()
    total = await store.pool.fetchval("SELECT count(*) FROM props.events")
    types = {r[0] for r in await store.pool.fetch("SELECT DISTINCT type FROM props.events")}
    assert total > 3000 and types == set(catalog.REGISTRY.names())  # every kind of event
    incremental = await dump(store)
    assert len(incremental["agent_runs"]) == 220 + 4 and incremental["grading_edges"]
    assert any(r[-1] is not None for r in incremental["snapshots"])  # the retirement landed
    await engine.rebuild(store)
    assert await dump(store) == incremental

    # Negative control: the comparison sees a single changed value.
    await store.pool.execute("UPDATE projections.llm_usage SET requests = requests + 1 "
                             "WHERE run_id = (SELECT run_id FROM projections.llm_usage LIMIT 1)")
    assert await dump(store) != incremental


async def test_the_grade_counts_count_every_grade_once_in_each_reading(
        store: EventStore) -> None:
    """grade_occurrences, kept batch by batch by the live runner, counts each grade once: in
    the `both` reading of an unreviewed run, and in both `plain` and `adjudicated` of the run
    a person reviewed (the verdict standing in there); a rebuild makes the same rows at once
    (the test above)."""
    await every_kind_of_event(store, runs=30)
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.Runner(store, batch_size=41, poll_interval=0.05).run)
        await caught_up(store)
        # After the verdict, another scorer grades the reviewed run: its counts are made
        # again, in both readings still (the verdict is older than the grade).
        reviewed_run = await store.pool.fetchval(
            "SELECT critique_run_id FROM projections.grading_edges WHERE scorer_name = 'human'")
        late = catalog.ScorerRef(name="late", version=1, code_hash="0" * 64,
                                 ground_truth_hash="1" * 64)
        await store.append(f"grading-{reviewed_run}-late@1", [catalog.GradesEmitted(
            critique_run_id=reviewed_run, scorer=late, grades=[
                catalog.IssueGrade(issue_id="i1", grade=0.0)])])
        await caught_up(store)
        tg.cancel_scope.cancel()
    edges = await store.pool.fetchval("SELECT count(*) FROM projections.grading_edges")
    counted: dict[str, int] = {r[0]: r[1] for r in await store.pool.fetch(
        "SELECT reading, sum(graded)::bigint FROM projections.grade_occurrences GROUP BY 1")}
    reviewed = await store.pool.fetchval(
        "SELECT count(*) FROM projections.grading_edges WHERE critique_run_id IN (SELECT "
        "critique_run_id FROM projections.grading_edges WHERE scorer_name = 'human')")
    assert edges > 50 and reviewed > 0
    assert counted["both"] + counted["plain"] == edges
    assert counted["plain"] == counted["adjudicated"] == reviewed


def _provenance(meta: dict[str, Any]) -> str:
    origin = meta.get("origin")
    if "origin" not in meta:
        return "here"
    signer = origin.get("signer") if isinstance(origin, dict) else None
    return f"import:{signer if isinstance(signer, str) else 'unsigned'}"


def _requested_for(e: catalog.RunRequested, meta: dict[str, Any]) -> dict[str, Any]:
    """The evaluation, version, case and attempt a request names, where the evaluation made
    it (its requested_by says so) and the numbers are whole numbers."""
    name, version = meta.get("evaluation"), str(meta.get("evaluation_version"))
    attempt = str(meta.get("attempt", 0))
    if e.requested_by != f"eval:{name}@{version}" or not (
            version.isdigit() and attempt.isdigit()):
        return {}
    return {"evaluation": name, "evaluation_version": int(version),
            "case_key": meta.get("case"), "attempt": int(attempt) if "attempt" in meta
            else None}


def expected_rows(events: list[RecordedEvent]) -> Dump:
    """What the row maps of runs, issues, usage and grading should make of `events`, computed
    from the decoded models, independently of the SQL (the merge rules, by hand)."""
    runs: dict[Any, dict[str, Any]] = {}
    issues: dict[Any, tuple[Any, ...]] = {}
    usage: dict[Any, list[Any]] = {}
    edges: dict[Any, tuple[Any, ...]] = {}
    for rec in events:
        e, at = rec.event, rec.recorded_at
        if isinstance(e, catalog.RunRequested):
            row = runs.setdefault(e.run_id, {})
            row.update(agent_type=e.agent_type, definition=e.definition, model=e.model,
                       definition_ref=e.definition_ref, snapshot=e.example.snapshot,
                       files_hash=e.example.files_hash or "", status="requested",
                       timeout_seconds=e.timeout_seconds, budget_usd=e.budget_usd,
                       provenance=_provenance(rec.metadata), **_requested_for(e, rec.metadata))
            row.setdefault("requested_at", at)
        elif isinstance(e, catalog.RunStarted):
            row = runs.setdefault(e.run_id, {})
            row.update(digest=e.digest, status="running")
            row.setdefault("started_at", at)
        elif isinstance(e, catalog.ContainerExited) and e.exit_code is not None:
            runs.setdefault(e.run_id, {})["exit_code"] = e.exit_code
        elif isinstance(e, catalog.RunFinished):
            row = runs.setdefault(e.run_id, {})
            row.update(status=e.status, finished_at=at, tokens_in=e.tokens_in,
                       tokens_out=e.tokens_out, cost_usd=e.cost_usd)
            if e.failure:
                row.update(failure_phase=e.failure.phase, failure_category=e.failure.category,
                           failure_retryable=e.failure.retryable)
        elif isinstance(e, catalog.IssueReported):
            issues[(e.run_id, e.issue_id)] = (
                sorted({loc.file for loc in e.locations}),
                [loc.model_dump(mode="json") for loc in e.locations], e.rationale, e.severity,
                at)
        elif isinstance(e, catalog.LlmResponded):
            total = usage.setdefault(e.run_id, [0, 0, 0, Decimal(0)])
            for i, value in enumerate((1, e.tokens_in, e.tokens_out, Decimal(repr(e.cost_usd)))):
                total[i] += value
        elif isinstance(e, catalog.GradeEmitted):
            edges[(e.critique_run_id, e.critique_issue_id, e.scorer.name, e.scorer.version)] = (
                e.scorer.code_hash, e.scorer.ground_truth_hash, e.tp_id, e.tp_occurrence,
                e.fp_id, e.grade, at, None)
        elif isinstance(e, catalog.GradesEmitted):
            for g in e.grades:
                edges[(e.critique_run_id, g.issue_id, e.scorer.name, e.scorer.version)] = (
                    e.scorer.code_hash, e.scorer.ground_truth_hash, g.tp_id, g.tp_occurrence,
                    g.fp_id, g.grade, at, None)
        elif isinstance(e, catalog.GradesUnscorable):  # no grade, and why
            for u in e.issues:
                edges[(e.critique_run_id, u.issue_id, e.scorer.name, e.scorer.version)] = (
                    e.scorer.code_hash, e.scorer.ground_truth_hash, None, None, None, None,
                    at, u.reason)
        elif isinstance(e, catalog.GradeReviewed):  # a person's verdict: the human scorer
            edges[(e.critique_run_id, e.critique_issue_id, scorers.HUMAN_NAME,
                   scorers.HUMAN_VERSION)] = (
                scorers.HUMAN_CODE_HASH, e.ground_truth_hash, e.tp_id, e.tp_occurrence,
                e.fp_id, 1.0 if e.tp_id else 0.0, at, None)
    columns = [c.name for c in runs_projection.AGENT_RUNS.columns][1:]
    return {
        "agent_runs": sorted((k, *(v.get(c) for c in columns)) for k, v in runs.items()),
        "reported_issues": sorted((*k, *v) for k, v in issues.items()),
        "llm_usage": sorted((k, *v) for k, v in usage.items()),
        "grading_edges": sorted((*k, *v) for k, v in edges.items()),
    }


async def projected_rows(store: EventStore) -> Dump:
    rows = await dump(store)
    for i, row in enumerate(rows["reported_issues"]):  # locations: jsonb as text
        rows["reported_issues"][i] = (*row[:3], orjson.loads(row[3]), *row[4:])
    return {name: rows[name] for name in
            ("agent_runs", "reported_issues", "llm_usage", "grading_edges")}


async def test_row_maps_project_what_the_events_say(store: EventStore) -> None:
    await every_kind_of_event(store, runs=80)
    events = [rec async for batch in store.iter_all() for rec in batch]
    await engine.rebuild(store, chunk=97)  # many chunks: rows merge across them too
    expected = expected_rows(events)
    assert len(expected["agent_runs"]) == 80 + 4 and all(expected.values())
    assert await projected_rows(store) == expected

    # Negative control: one changed value is seen.
    await store.pool.execute("UPDATE projections.reported_issues SET severity = NULL "
                             "WHERE severity IS NOT NULL AND issue_id = 'i1'")
    assert await projected_rows(store) != expected


@pytest.mark.slow
async def test_runner_killed_at_random_points_ends_equal_to_a_rebuild(
    store: EventStore, dsn: str
) -> None:
    rng = random.Random(20261130)
    w = Workload(11)
    await w.setup(store)
    await w.append_runs(store, 150)
    env = {**os.environ, "PROPS_DSN": dsn}
    cli = [sys.executable, "-m", "props.tools.cli", "projections", "run"]
    kills = 0
    for _ in range(20):
        proc = await anyio.open_process(cli, env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        try:
            await w.append_runs(store, rng.randint(5, 25))
            await anyio.sleep(rng.uniform(0.2, 1.5))
        finally:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        kills += 1
    assert kills == 20
    proc = await anyio.open_process(cli, env=env, stdout=subprocess.DEVNULL)
    try:
        assert proc.stderr is not None
        ready = b""
        while b"\n" not in ready:  # the runner says it is ready once it handles signals
            ready += await proc.stderr.receive()
        assert b"projection runner" in ready
        await caught_up(store, seconds=120)
    finally:
        proc.send_signal(signal.SIGTERM)
        await proc.wait()
    assert proc.returncode == 0
    after_kills = await dump(store)
    await engine.rebuild(store)
    assert await dump(store) == after_kills
    assert len(after_kills["agent_runs"]) > 150


async def test_rebuild_under_concurrent_reads_and_writes(store: EventStore) -> None:
    w = Workload(5)
    await w.setup(store)
    await w.append_runs(store, 150)
    await engine.rebuild(store)
    floor = await store.pool.fetchval("SELECT count(*) FROM projections.agent_runs")
    assert floor == 150
    seen: list[int] = []
    done = anyio.Event()

    async def reader() -> None:
        async with database.session(store.dsn) as conn:
            while not done.is_set():
                runs = await conn.fetchval("SELECT count(*) FROM projections.agent_runs")
                issues = await conn.fetchval("SELECT count(*) FROM projections.reported_issues")
                scores = await conn.fetchval("SELECT count(*) FROM projections.model_scores")
                seen.append(runs)
                assert runs >= floor and issues > 0 and scores > 0, (runs, issues, scores)
                await anyio.sleep(0.005)

    async def writer() -> None:
        for _ in range(10):
            await w.append_runs(store, 5)
            await anyio.sleep(0.02)

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.Runner(store, poll_interval=0.05).run)
        tg.start_soon(reader)
        async with anyio.create_task_group() as work:
            work.start_soon(writer)
            for _ in range(3):
                await engine.rebuild(store)
        await caught_up(store)
        done.set()
        tg.cancel_scope.cancel()
    assert len(seen) > 10 and min(seen) >= floor
    live = await dump(store)
    assert len(live["agent_runs"]) == 200  # every write made it
    await engine.rebuild(store)
    assert await dump(store) == live


async def test_analyst_reads_projections_and_nothing_else(store: EventStore) -> None:
    await every_kind_of_event(store, runs=5)
    await engine.rebuild(store)
    analyst = as_role(store.dsn, engine.ANALYST_ROLE)
    conn = await asyncpg.connect(analyst)
    try:
        assert await conn.fetchval("SELECT count(*) FROM projections.agent_runs") == 5 + 4
        # of the four requests that name evaluation e, the one it made and recorded here
        assert await conn.fetchval("SELECT count(*) FROM projections.evaluation_runs "
                                   "WHERE evaluation = 'e' AND counted") == 1
        assert await conn.fetchval("SELECT count(*) FROM projections.model_scores") > 0
        for table in ("props.events", "props.blobs", "props.checkpoints",
                      "props_meta.migrations"):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.fetchval(f"SELECT count(*) FROM {table}")
        with pytest.raises(asyncpg.ReadOnlySQLTransactionError):  # read-only by default
            await conn.execute("DELETE FROM projections.agent_runs")
        await conn.execute("SET default_transaction_read_only = off")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):  # and without the grant
            await conn.execute("DELETE FROM projections.agent_runs")
    finally:
        await conn.close()


async def test_older_event_versions_project_like_current_ones(dsn: str) -> None:
    registry = EventRegistry()
    for name in catalog.REGISTRY.names():
        if name != "issue.reported":
            registry.register(catalog.REGISTRY.require(name))

    @registry.register
    class IssueReportedV2(catalog.IssueReported):
        """As if `issue.reported` had moved from flat fields (v1) to locations (v2)."""

        schema_version: ClassVar[int] = 2

    @registry.upcaster("issue.reported", 1)
    def flat_to_locations(data: dict[str, Any]) -> dict[str, Any]:
        return {"run_id": data["run_id"], "issue_id": data["issue_id"],
                "rationale": data["text"], "severity": data.get("severity"),
                "locations": [{"file": data["file"],
                               "ranges": [{"start": data["line"], "end": data["line"]}]}]}

    run = uuid.uuid4()
    async with EventStore.open(dsn, registry=registry) as store:
        await store.append(f"run-{run}", [IssueReportedV2(
            run_id=run, issue_id="new", rationale="r", severity="low",
            locations=[catalog.Location(file="a.py", ranges=[catalog.LineRange(start=3,
                                                                               end=3)])])])
        await store.pool.execute(
            "INSERT INTO props.events (event_id, stream_id, stream_version, type, "
            "schema_version, data) VALUES (gen_random_uuid(), $1, 2, 'issue.reported', 1, $2)",
            f"run-{run}", f'{{"run_id": "{run}", "issue_id": "old", "text": "r", '
            f'"severity": "low", "file": "a.py", "line": 3}}')
        issues = engine.by_name(["issues"])
        await engine.rebuild(store, issues)
        # The live runner upcasts too: it decodes the older event, the server folds the rest.
        await store.pool.execute(
            "INSERT INTO props.events (event_id, stream_id, stream_version, type, "
            "schema_version, data) VALUES (gen_random_uuid(), $1, 3, 'issue.reported', 1, $2)",
            f"run-{run}", f'{{"run_id": "{run}", "issue_id": "later", "text": "r", '
            f'"severity": "low", "file": "a.py", "line": 3}}')
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.Runner(store, issues, poll_interval=0.05).run)
            with anyio.fail_after(30):
                while not await store.pool.fetchval(  # noqa: ASYNC110 - polls the table
                        "SELECT count(*) FROM projections.reported_issues "
                        "WHERE issue_id = 'later'"):
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
        rows = await store.pool.fetch("SELECT issue_id, files, locations, rationale, severity "
                                      "FROM projections.reported_issues ORDER BY issue_id")
    later, new, old = (tuple(r)[1:] for r in rows)
    assert [r["issue_id"] for r in rows] == ["later", "new", "old"]
    assert new == old == later


async def test_interrupted_rebuild_resumes(store: EventStore) -> None:
    w = Workload(9)
    await w.setup(store)
    await w.append_runs(store, 120)
    total = await store.pool.fetchval("SELECT count(*) FROM props.events")
    seen = 0

    def crash_midway(n: int) -> None:
        nonlocal seen
        seen += n
        if seen > total // 2:
            raise KeyboardInterrupt  # as if the operator pressed Ctrl-C

    with pytest.raises(KeyboardInterrupt):
        await engine.rebuild(store, progress=crash_midway, chunk=300)
    resumed = await engine.rebuild(store, chunk=300)
    assert resumed.resumed and resumed.events < total
    first = await dump(store)
    fresh = await engine.rebuild(store)
    assert not fresh.resumed and fresh.events >= resumed.events
    assert await dump(store) == first
