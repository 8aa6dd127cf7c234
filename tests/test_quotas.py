"""Each API token's share (runs in flight, cases queued, evaluations open: over one is 429
and nothing written), and detached evaluations held by the service to their plan's ceiling
and budget, one driver at a time. The real API app on the real database; real local runs."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from props.core.domain import catalog, evaluation_starts, evaluations, quotas, streams, tokens
from props.core.domain.specimens import specimen_sync
from props.core.log import leadership
from props.core.log.store import EventStore, StoreTransaction
from props.reactors.evaluation_reactor import EvaluationDriver
from props.reactors.runtimes.local_runtime import LocalRuntime
from props.tools.http import app as http_app
from tests import hostile_imports
from tests.reactor_helpers import QUICK_AGENT, eventually, push_code, serving, sync_samples
from tests.test_launchers import most_at_once


@asynccontextmanager
async def api(store: EventStore, shares: quotas.Quotas | None = None,
              ) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    """A client per token (`a`, `b`: request and read) of the app with these quotas."""
    app = http_app.create_app(store, shares)
    clients = {}
    for name in ("a", "b"):
        _, secret = await tokens.create(store, name, ("request", "read"))
        clients[name] = httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                          base_url="http://props",
                                          headers={"Authorization": f"Bearer {secret}"})
    try:
        yield clients
    finally:
        for c in clients.values():
            await c.aclose()


async def _ready(store: EventStore) -> None:
    """The samples and the critic, and the log's fence past them (a plan reads through it;
    another database's transaction on this server may hold it a moment)."""
    await sync_samples(store)
    await push_code(store, "quick", QUICK_AGENT)

    async def visible() -> bool:
        return bool(await specimen_sync.history(store))

    await eventually(visible, seconds=60)


async def _count(store: EventStore, kind: str) -> int:
    return int(await store.pool.fetchval("SELECT count(*) FROM props.events WHERE type = $1",
                                         kind))


RUN = {"definition": "quick", "ref": "test", "snapshot": "csvtool/2025-09-03-00",
       "model": "m", "budget_usd": 0}


def _plan(name: str, epochs: int, critics: int = 1, **more: Any) -> dict[str, Any]:
    return {"name": name, "examples": ["csvtool/*"], "epochs": epochs,
            "critic": [{"definition": "quick", "ref": "test"}] * critics, **more}


async def test_runs_in_flight_over_the_quota_are_refused_with_429(store: EventStore) -> None:
    await _ready(store)
    async with api(store, quotas.Quotas(runs_in_flight=3)) as c:
        first = await c["a"].post("/api/runs/critic", json={**RUN, "count": 2},
                                  headers={"Idempotency-Key": "k1"})
        assert first.status_code == 202, first.text
        over = await c["a"].post("/api/runs/critic", json={**RUN, "count": 2})
        assert over.status_code == 429, over.text
        assert "quota_runs_in_flight" in over.json()["detail"]
        assert over.headers["Retry-After"]
        assert await _count(store, "run.requested") == 2  # nothing written on refusal
        # Each carries its requester (the launcher's fair queue takes turns by it).
        assert await store.pool.fetchval(
            "SELECT count(*) FROM props.events WHERE type = 'run.requested' "
            "AND data->>'requested_by' = 'api:a'") == 2
        # An idempotent retry asks for nothing new; another token has its own share.
        again = await c["a"].post("/api/runs/critic", json={**RUN, "count": 2},
                                  headers={"Idempotency-Key": "k1"})
        assert again.status_code == 202 and again.json()["already_requested"]
        assert (await c["b"].post("/api/runs/critic", json={**RUN, "count": 3})
                ).status_code == 202
        # Control: within the quota, a's next run passes.
        assert (await c["a"].post("/api/runs/critic", json=RUN)).status_code == 202


async def test_ten_thousand_cases_in_one_post_are_refused(store: EventStore) -> None:
    """The probe's shape: one `request` token, one POST of 10,000 cases (100 critics x 100
    epochs), with the default quotas."""
    await _ready(store)
    async with api(store) as c:
        flood = await c["a"].post("/api/evaluations", json=_plan("flood", 100, critics=100))
        assert flood.status_code == 429, flood.text
        assert "10,000 cases queued" in flood.json()["detail"]
        assert await _count(store, "evaluation.started") == 0
        assert await _count(store, "run.requested") == 0


async def test_cases_and_evaluations_open_per_token(store: EventStore) -> None:
    await _ready(store)
    async with api(store, quotas.Quotas(cases_queued=20, evaluations_open=1)) as c:
        big = await c["a"].post("/api/evaluations", json=_plan("big", 21))
        assert big.status_code == 429 and "quota_cases_queued" in big.json()["detail"]
        first = await c["a"].post("/api/evaluations", json=_plan("first", 2))
        assert first.status_code == 202, first.text
        second = await c["a"].post("/api/evaluations", json=_plan("second", 2))
        assert second.status_code == 429, second.text
        assert "quota_evaluations_open" in second.json()["detail"]
        # The same evaluation again resumes it (no second share); b has its own.
        assert (await c["a"].post("/api/evaluations", json=_plan("first", 2))
                ).json()["resumed"]
        assert (await c["b"].post("/api/evaluations", json=_plan("theirs", 2))
                ).status_code == 202
        assert await _count(store, "evaluation.started") == 2


async def test_a_detached_evaluation_is_held_to_its_ceiling_and_driven_to_its_end(
        store: EventStore, tmp_path: Path) -> None:
    """Posted with max_concurrency 1 and 3 cases: 1 requested at once (main requested all
    3), the service's evaluation driver requests the others as runs finish, one at a time,
    and records the end."""
    await _ready(store)
    async with api(store) as c:
        posted = await c["a"].post("/api/evaluations", json=_plan("held", 3,
                                                                  max_concurrency=1))
    assert posted.status_code == 202 and posted.json()["requested"] == 1, posted.text
    async with serving(store, [LocalRuntime(tmp_path / "c", trust_commands=True)]):
        async def ended_now() -> bool:
            return await _ended(store, "held") is not None

        await eventually(ended_now, seconds=120)
    ended = await _ended(store, "held")
    assert ended is not None and (ended.outcome, ended.scored) == ("complete", 3), ended
    spans = await _container_spans(store)
    assert len(spans) == 3 and most_at_once(spans) == 1, spans


async def test_a_detached_evaluations_budget_is_the_services_to_hold(
        store: EventStore) -> None:
    """The probe: max_concurrency 6, a $0.50 budget, runs of $1 each. Main requested all 6
    at $1 each ($6 possible); now one run, given the $0.50 the budget leaves."""
    await _ready(store)
    async with api(store) as c:
        posted = await c["a"].post("/api/evaluations", json=_plan(
            "thrifty", 6, max_concurrency=6, budget_usd=0.5, run_budget_usd=1.0))
    assert posted.json()["requested"] == 1, posted.text
    budgets = [float(b[0]) for b in await store.pool.fetch(
        "SELECT (data->>'budget_usd')::float FROM props.events WHERE type = 'run.requested'")]
    assert budgets == [0.5]


async def test_one_driver_an_evaluation_held_by_eval_run_is_left_alone(
        store: EventStore) -> None:
    await _ready(store)
    async with api(store) as c:
        await c["a"].post("/api/evaluations", json=_plan("mine", 3, max_concurrency=1))
    reactor = EvaluationDriver(store)
    await _finish_all(store)
    async with leadership.lead(store.dsn, leadership.evaluation("mine"), "eval run"):
        await reactor.look_all()  # held: it requests nothing
        assert await _count(store, "run.requested") == 1
    await reactor.look_all()  # control: free, it requests the next case
    assert await _count(store, "run.requested") == 2


async def _finish_all(store: EventStore) -> None:
    """Every requested run finished as completed with nothing reported (scored)."""
    for row in await store.pool.fetch(
            "SELECT data->>'run_id' FROM props.events WHERE type = 'run.requested'"):
        import uuid

        run_id = uuid.UUID(row[0])
        await store.append(streams.run(run_id), [catalog.RunFinished(run_id=run_id,
                                                                     status="completed")])


async def _ended(store: EventStore, name: str) -> catalog.EvaluationEnded | None:
    for r in await store.read_stream(streams.evaluation(name)):
        if isinstance(r.event, catalog.EvaluationEnded):
            return r.event
    return None


async def _container_spans(store: EventStore) -> list[Any]:
    rows = await store.pool.fetch(
        "SELECT stream_id, type, recorded_at FROM props.events "
        "WHERE type IN ('container.started', 'container.exited') ORDER BY global_position")
    began = {r["stream_id"]: r["recorded_at"] for r in rows if r["type"] == "container.started"}
    return [(began[r["stream_id"]], r["recorded_at"]) for r in rows
            if r["type"] == "container.exited"]


async def _at_once(store: EventStore, posts: int, quota: int) -> list[int]:
    """`posts` requests of one token at once, sent alternately through two apps (two API
    processes: no lock of one process holds the other), with a runs quota of `quota`."""
    _, secret = await tokens.create(store, "a", ("request",))
    apps = [http_app.create_app(store, quotas.Quotas(runs_in_flight=quota)) for _ in "12"]
    clients = [httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://p",
                                 headers={"Authorization": f"Bearer {secret}"})
               for app in apps]
    answers: list[int] = []

    async def post(client: httpx.AsyncClient) -> None:
        answers.append((await client.post("/api/runs/critic", json=RUN)).status_code)

    try:
        async with anyio.create_task_group() as tg:
            for i in range(posts):
                tg.start_soon(post, clients[i % 2])
    finally:
        for c in clients:
            await c.aclose()
    return sorted(answers)


async def test_many_requests_of_one_token_at_once_stay_within_its_quota(
        store: EventStore) -> None:
    """20 requests of one token at once through two API processes, quota 5: exactly 5 pass.
    The check and the append are one transaction holding the token's advisory key."""
    await _ready(store)
    assert await _at_once(store, 20, 5) == [202] * 5 + [429] * 15
    assert await _count(store, "run.requested") == 5


async def test_without_the_requesters_lock_requests_at_once_pass_the_quota(
        store: EventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: the same transaction without the advisory key (check, then append):
    requests at once each check before any of them appended, and more than 5 pass."""
    @asynccontextmanager
    async def unlocked(store: EventStore, requester: str) -> AsyncIterator[StoreTransaction]:
        async with store.transaction() as tx:
            yield tx

    monkeypatch.setattr(quotas, "turn", unlocked)
    await _ready(store)
    answers = await _at_once(store, 20, 5)
    assert answers.count(202) > 5, answers


async def test_every_unfinished_run_of_the_token_counts_in_flight(store: EventStore) -> None:
    """The runs an evaluation of the token requested count in its runs in flight (main
    counted the runs it requested directly alone: 2 more passed)."""
    await _ready(store)
    async with api(store, quotas.Quotas(runs_in_flight=3)) as c:
        posted = await c["a"].post("/api/evaluations", json=_plan("two", 2, max_concurrency=2))
        assert posted.json()["requested"] == 2, posted.text
        over = await c["a"].post("/api/runs/critic", json={**RUN, "count": 2})
        assert over.status_code == 429 and "4 runs in flight" in over.json()["detail"], \
            over.text
        # Control: within the quota, one more passes; b's share is its own.
        assert (await c["a"].post("/api/runs/critic", json=RUN)).status_code == 202
        assert (await c["b"].post("/api/runs/critic", json={**RUN, "count": 3})
                ).status_code == 202


async def test_unfinished_runs_an_import_brought_hold_no_requester_s_share(
        store: EventStore, tmp_path: Path) -> None:
    """A file brings unfinished runs requested by `a` (a name anyone can write): no launcher
    here carries them out, so they would hold a's share of runs in flight for ever. Not
    counted. Negative control: on the code before, a held 2 runs in flight and its next
    request past the quota was refused."""
    await _ready(store)
    brought = []
    for n in range(2):
        run = uuid.uuid4()
        brought.append(hostile_imports._event(f"run-{run}", 1, "run.requested", {
            "run_id": str(run), "agent_type": "critic", "definition": "quick",
            "example": {"snapshot": RUN["snapshot"]}, "model": "m", "timeout_seconds": 60,
            "budget_usd": 0, "requested_by": "a"}, n))
    await hostile_imports.bring(store, tmp_path, brought)
    assert (await quotas.held(store.sql, "a")).runs_in_flight == 0
    async with api(store, quotas.Quotas(runs_in_flight=2)) as c:
        assert (await c["a"].post("/api/runs/critic", json={**RUN, "count": 2})
                ).status_code == 202


async def test_an_older_versions_unfinished_runs_stay_queued(store: EventStore) -> None:
    """A new version of an evaluation leaves the runs of the one before in the queue: they
    count in the token's cases queued (main counted the latest version alone, so each new
    version queued another `max_concurrency` runs past the quota)."""
    await _ready(store)
    async with api(store, quotas.Quotas(cases_queued=4)) as c:
        first = await c["a"].post("/api/evaluations", json=_plan("hop", 3, max_concurrency=3))
        assert first.json()["requested"] == 3, first.text
        hop = await c["a"].post("/api/evaluations?new_version=true", json=_plan("hop", 2))
        assert hop.status_code == 429, hop.text
        assert "5 cases queued" in hop.json()["detail"]
        # The same plan again resumes it: counted once, not refused.
        assert (await c["a"].post("/api/evaluations", json=_plan("hop", 3, max_concurrency=3))
                ).json()["resumed"]
        # Control: once version 1's runs finished, the new version fits.
        await _finish_all(store)
        hop = await c["a"].post("/api/evaluations?new_version=true", json=_plan("hop", 2))
        assert hop.status_code == 202 and hop.json()["version"] == 2, hop.text


async def test_an_evaluation_belongs_to_the_token_that_started_it(store: EventStore) -> None:
    """Another token posting the same name (the same plan, or a new version) is refused 403
    and nothing is written (main resumed it for b, or recorded b's version); its starter
    and the operator's props eval (no token) may."""
    await _ready(store)
    async with api(store) as c:
        assert (await c["a"].post("/api/evaluations", json=_plan("mine", 2))
                ).status_code == 202
        runs = await _count(store, "run.requested")
        for ask in ("/api/evaluations", "/api/evaluations?new_version=true"):
            theirs = await c["b"].post(ask, json=_plan("mine", 3))
            assert theirs.status_code == 403, theirs.text
            assert "started by another requester" in theirs.json()["detail"]
        same = await c["b"].post("/api/evaluations", json=_plan("mine", 2))
        assert same.status_code == 403, same.text
        assert await _count(store, "evaluation.started") == 1
        assert await _count(store, "run.requested") == runs
        # Control: its starter resumes it; the operator records a new version.
        assert (await c["a"].post("/api/evaluations", json=_plan("mine", 2))
                ).json()["resumed"]
    plan = evaluations.Plan.model_validate(_plan("mine", 3))
    ev, resumed = await evaluation_starts.start(store, plan, await evaluations.resolve(store, plan),
                                          new_version=True)
    assert (ev.version, resumed) == (2, False)


async def test_a_new_evaluation_at_the_runs_in_flight_quota_is_refused(
        store: EventStore) -> None:
    """The probe (runs 3, cases 4, evaluations 2): three versions of x, one case each, hold
    3 runs in flight; a direct run is refused, and so is a new evaluation y (main took it:
    4 runs in flight). Control: below the quota, y is accepted."""
    await _ready(store)
    shares = quotas.Quotas(runs_in_flight=3, cases_queued=4, evaluations_open=2)
    async with api(store, shares) as c:
        for v in (1, 2, 3):
            x = await c["a"].post("/api/evaluations?new_version=true",
                                  json=_plan("x", 1, max_concurrency=v))
            assert x.status_code == 202 and x.json()["version"] == v, x.text
        assert (await c["a"].post("/api/runs/critic", json=RUN)).status_code == 429
        y = await c["a"].post("/api/evaluations", json=_plan("y", 1))
        assert y.status_code == 429, y.text
        assert "4 runs in flight" in y.json()["detail"]
        assert "quota_runs_in_flight" in y.json()["detail"] and y.headers["Retry-After"]
        assert await _count(store, "evaluation.started") == 3  # nothing written
        assert await _count(store, "run.requested") == 3
        await _finish_one(store)
        y = await c["a"].post("/api/evaluations", json=_plan("y", 1))
        assert y.status_code == 202 and y.json()["requested"] == 1, y.text


async def test_evaluations_request_no_more_than_the_runs_quota_leaves(
        store: EventStore) -> None:
    """Below the quota, a new evaluation requests what the quota leaves (main: its whole
    max_concurrency, 3 here, for 5 in flight), and the service's driver requests none of its
    cases while the token is at its quota. Control: the driver with the default quota (100)
    requests them."""
    await _ready(store)
    shares = quotas.Quotas(runs_in_flight=3)
    async with api(store, shares) as c:
        two = await c["a"].post("/api/evaluations", json=_plan("two", 2, max_concurrency=2))
        assert two.json()["requested"] == 2, two.text
        three = await c["a"].post("/api/evaluations", json=_plan("three", 3,
                                                                  max_concurrency=3))
        assert three.status_code == 202 and three.json()["requested"] == 1, three.text
    await EvaluationDriver(store, shares=shares).look_all()
    assert await _count(store, "run.requested") == 3
    await EvaluationDriver(store).look_all()
    assert await _count(store, "run.requested") == 5


async def _finish_one(store: EventStore) -> None:
    import uuid

    run_id = uuid.UUID(await store.pool.fetchval(
        "SELECT data->>'run_id' FROM props.events WHERE type = 'run.requested' LIMIT 1"))
    await store.append(streams.run(run_id), [catalog.RunFinished(run_id=run_id,
                                                                 status="completed")])
