"""A run's caps are the operator's, per definition digest, with a default that lets a real
linter finish on a real project; a plan raises them for one critic, up to the operator's
ceiling; a run that reaches one fails `event_cap` naming it (issue 59, item 6).

The project is generated (CI has no network): files of undefined names, so that the real
ruff baseline reports more issues than the old default cap of 2,000 events let a run report.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from props.core.domain import (
    baselines,
    caps,
    catalog,
    definitions,
    endpoints,
    evaluation_starts,
    evaluations,
    streams,
)
from props.core.log import faults
from props.core.log.store import EventStore
from tests.reactor_helpers import finished, sync_specimen

OLD_DEFAULT = 2000  # the cap every run had before caps were the operator's
SLUG = "generated/2026-12-06-00"
FILES, LINES = 22, 100  # 2,200 lines, each an undefined name: 2,200 findings (F821)


@pytest.fixture
async def project(served: EventStore, tmp_path: Path) -> EventStore:
    files = {f"module_{n:02d}.py": "".join(f"value_{i} = undefined_{i}\n" for i in range(LINES))
             for n in range(FILES)}
    await sync_specimen(served, tmp_path / "specimens", SLUG, files, ("module_00.py", 1),
                        rationale="a name never defined")
    return served


async def _ruff(store: EventStore, name: str, grant: dict[str, int] | None = None,
                ) -> catalog.DefinitionPushed:
    """The real ruff baseline under its own name (and digest: a config key of its own), with
    the operator's grant of caps, if any."""
    real = baselines.local("ruff")
    config = {**real.config, "variant": name}
    d = real.model_copy(update={"name": name, "config": config,
                                "digest": definitions.local_digest(real.command, config)})
    await definitions.push(store, d)
    if grant is not None:
        assert await endpoints.grant(store, catalog.DefinitionGranted(
            agent_type="critic", name=name, digest=d.digest, **grant))
    return d


async def _run(store: EventStore, d: catalog.DefinitionPushed, **caps_asked: int,
               ) -> uuid.UUID:
    """A run of `d` on the generated project, requested by an evaluation's plan."""
    plan = evaluations.Plan(name=f"caps-{d.name}-{caps_asked.get('max_events', 0)}",
                            examples=[SLUG], timeout_seconds=300,
                            run_budget_usd=0, critic=[evaluations.Critic(
                                definition=d.name, ref="local", **caps_asked)])
    cases = await evaluations.resolve(store, plan)
    starting = await evaluation_starts.prepare(store, plan, cases)
    await evaluation_starts.record(store, starting)
    return await evaluations.request(store, starting.evaluation, cases[0], 0)


async def _issues(store: EventStore, run_id: uuid.UUID) -> int:
    return sum(isinstance(r.event, catalog.IssueReported)
               for r in await store.read_stream(streams.run(run_id)))


async def test_a_real_linter_finishes_under_the_default_and_fails_naming_the_old_cap(
        project: EventStore) -> None:
    """Negative control: the same run under the old default (2,000 events, granted as the
    operator's cap) fails `event_cap`, at the cap, naming it and where to raise it; under
    the new default it completes with every finding; the plan's raise for that one critic
    lets the capped definition complete too. On the code before, every run had 2,000 and
    all three failed; with DEFAULT_MAX_EVENTS set back to 2,000 the default run fails here
    (tried)."""
    store = project
    default = await _ruff(store, "ruff-default")
    capped = await _ruff(store, "ruff-old-cap", {"max_events": OLD_DEFAULT})
    runs = {"default": await _run(store, default), "old": await _run(store, capped),
            "raised": await _run(store, capped, max_events=FILES * LINES + 100)}
    done = await finished(store, list(runs.values()), 300)

    assert done[runs["default"]].status == "completed"
    assert await _issues(store, runs["default"]) >= FILES * LINES > OLD_DEFAULT

    failed = done[runs["old"]]
    assert failed.status == "failed" and failed.failure is not None
    assert failed.failure.category == "event_cap" and not failed.failure.retryable
    assert failed.failure.cap == catalog.CapReached(
        cap="max_events", limit=OLD_DEFAULT, ceiling=caps.DEFAULT_CEILING_EVENTS)
    assert await _issues(store, runs["old"]) < OLD_DEFAULT  # cut at the cap
    said = caps.said(failed.failure, "ruff-old-cap")
    assert "max_events = 2,000 reached" in said and "[[critic]] max_events = N" in said
    assert "props definitions grant ruff-old-cap" in said

    assert done[runs["raised"]].status == "completed"  # the plan's raise, for that critic
    assert await _issues(store, runs["raised"]) >= FILES * LINES


async def test_a_plan_past_the_operators_ceiling_is_refused_before_anything_is_recorded(
        project: EventStore) -> None:
    """The operator's ceiling bounds a plan's raise: past it, the plan is refused (65) naming
    the ceiling and the grant that raises it, and no evaluation is recorded. The control: at
    the ceiling, it resolves."""
    store = project
    d = await _ruff(store, "ruff-ceiling", {"max_events": 100, "ceiling_events": 500})
    plan = evaluations.Plan(name="over", examples=[SLUG], critic=[evaluations.Critic(
        definition=d.name, ref="local", max_events=501)])
    with pytest.raises(evaluations.PlanError, match="over the ceiling of 500") as refused:
        await evaluations.resolve(store, plan)
    assert refused.value.exit_code == 65
    assert "--ceiling-events" in str(refused.value)
    assert await evaluations.names(store) == []
    at = plan.model_copy(update={"critic": [evaluations.Critic(
        definition=d.name, ref="local", max_events=500)]})
    [case] = await evaluations.resolve(store, at)
    assert case.max_events == 500


def test_caps_in_force_are_the_grants_and_the_plans_within_the_ceiling() -> None:
    req = catalog.RunRequested(
        run_id=uuid.uuid4(), agent_type="critic", definition="d",
        example=catalog.Example(snapshot=SLUG), model="m", timeout_seconds=1, budget_usd=0)
    grant = catalog.DefinitionGranted(agent_type="critic", name="d", digest="sha256:" + "0" * 64,
                                      max_events=10, ceiling_events=50)
    assert caps.in_force(None, req) == caps.Caps()
    assert caps.in_force(grant, req).max_events == 10
    assert caps.in_force(grant, req.model_copy(update={"max_events": 40})).max_events == 40
    # a grant lowered after the plan started wins: the ceiling holds at launch too
    assert caps.in_force(grant, req.model_copy(update={"max_events": 90})).max_events == 50
    with pytest.raises(ValueError, match="over ceiling_events"):
        catalog.DefinitionGranted(agent_type="critic", name="d", digest=grant.digest,
                                  max_events=60, ceiling_events=50)


def test_event_cap_is_a_refusal_never_retried_as_is() -> None:
    """The one retry rule: the same cap ends the same run the same way."""
    verdict = faults.decide("event_cap", "report")
    assert verdict.kind == "refusal" and not verdict.retryable


def test_a_plan_without_caps_is_the_plan_it_was() -> None:
    """A plan recorded before caps existed hashes the same now (its resume is not refused as
    changed); one with a cap is another plan."""
    plan = evaluations.Plan(name="p", examples=["x/*"], critic=[evaluations.Critic(
        definition="d")])
    case = evaluations.Case("d", "sha256:" + "0" * 64, "d", SLUG, 1, None, None, 1)
    before = (b'{"cases":[{"definition":"d","digest":"sha256:' + b"0" * 64
              + b'","epoch":1,"file_set":null,"files_hash":null,"model":"d","snapshot":"'
              + SLUG.encode() + b'","snapshot_version":1}],"plan":{"budget_usd":null,'
              b'"critic":[{"definition":"d","model":null,"ref":"latest"}],"epochs":1,'
              b'"examples":["x/*"],"max_concurrency":4,"name":"p","run_budget_usd":1.0,'
              b'"timeout_seconds":600.0}}')
    assert evaluations.canonical(plan, [case]) == before
    raised = plan.model_copy(update={"critic": [evaluations.Critic(definition="d",
                                                                   max_events=5)]})
    assert evaluations.canonical(raised, [case]) != before


async def test_an_image_label_asks_for_a_cap_and_only_the_operator_gives_it(
        store: EventStore) -> None:
    """`props.max-events` on an image pushed through the registry proxy is asked (kept in the
    push's metadata) and never in force: its runs get the defaults. The control: the
    operator's own push of the same description grants it."""
    from props.tools.http import registry

    pushed = registry.definition_from_labels(
        "critic", "outsider", "v1", "reg/critic/outsider",
        {"props.command": '["python3", "-m", "x"]', "props.max-events": "500000"})
    assert pushed.limits.max_events == 500_000  # described
    outsider = pushed.model_copy(update={"digest": "sha256:" + "1" * 64})
    await definitions.push(store, outsider, actor="token:pusher", outsider=True)
    [record] = await store.read_stream(streams.definition("critic"))
    assert record.metadata["asked_grants"] == ["max-events 500000"]
    grant = await endpoints.grant_of(store, "critic", outsider.digest)
    assert grant is None and caps.granted(grant).max_events == caps.DEFAULT_MAX_EVENTS

    own = pushed.model_copy(update={"name": "own", "digest": "sha256:" + "2" * 64})
    await definitions.push(store, own, actor="cli")
    grant = await endpoints.grant_of(store, "critic", own.digest)
    assert grant is not None and caps.granted(grant).max_events == 500_000
    # a grant of nothing puts the caps back to the defaults (the last grant wins)
    assert await endpoints.grant(store, catalog.DefinitionGranted(
        agent_type="critic", name="own", digest=own.digest))
    assert caps.granted(await endpoints.grant_of(store, "critic", own.digest)) == caps.Caps()
