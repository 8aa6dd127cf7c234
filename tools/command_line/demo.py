"""`props demo`: from nothing to a scored, re-scored and exported evaluation, on the log.

Migrate; sync the bundled specimens; push the reference critic in two variants (all checks,
and a "lite" one with fewer: two "models") and the ruff baseline; run the bundled plan
(tools/bundled/plans/demo.toml) as an evaluation, as `props eval run` does: the reactors and the
projection runner serve in this process until every case is scored (on Docker when an engine
answers, else as local processes); print the evaluation's report; re-score under overlap@2
and print the comparison; export the log and verify the file. A case's run id derives from
the evaluation and the case, so running the demo again reuses everything.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Sequence
from typing import Any

import anyio
from rich.markup import escape
from rich.progress import Progress

from props.core.domain import baselines, definitions, evaluation_starts, evaluations
from props.core.domain.archive import exports
from props.core.domain.specimens import specimen_sync, specimens
from props.core.domain.store import open_store
from props.core.log import database, embedded, errors, migrate
from props.core.log.store import EventStore
from props.core.scoring import cohorts, comparison, identity, rescoring, scorers, verification
from props.projections import figures
from props.projections import status as projection_status
from props.reactors import evaluation_driver as driver
from props.reactors.runtimes import docker_runtime
from props.reactors.runtimes.container_runtime import ContainerRuntime
from props.reactors.runtimes.docker_runtime import (
    DockerRuntime,
    build_baseline_image,
    build_reference_image,
)
from props.reactors.service import RuntimeChoice, Service, container_runtimes
from props.tools.bundled import samples
from props.tools.command_line import figure_tables, run_warnings
from props.tools.command_line.render import Console

console = Console(highlight=False)

# The reference critic twice: every check, and a "lite" variant with a few. Their names
# double as the "models" of the report.
VARIANTS: dict[str, dict[str, Any]] = {
    "reference": {},
    "reference-lite": {"checks": ["open-without-with", "swallowed-exception",
                                  "mutable-default"]},
}
PLAN = samples.plans_dir() / "demo.toml"
BASELINE = "ruff"  # the static analyzer the report compares the variants with
SCORER, RESCORER = scorers.DEFAULT_SCORER, "overlap@2"  # the default grader, then a re-score
WAIT_SECONDS = 150


async def demo_cmd(args: argparse.Namespace) -> int:
    began = time.perf_counter()
    dsn = database.resolve_dsn()
    console.print(f"database: {database.redact(dsn)}")
    applied = await migrate.migrate_database(dsn)
    console.print(f"schema: {len(applied)} migration(s) applied" if applied
                  else "schema: up to date (reused)")
    choice = await _runtime(args.runtime)
    async with open_store(database.resolve_service_dsn(), max_connections=8) as store, \
            container_runtimes(choice) as runtimes:
        folder = samples.samples_dir()
        found = specimens.load_valid(folder)
        synced = await specimen_sync.sync(store, str(folder), found)
        console.print(f"specimens: {len(found)} sample snapshots, {synced.appended} new "
                      f"version(s) recorded" + ("" if synced.appended else " (reused)"))
        runtime, critics = await _push_critics(store, runtimes)
        plan = evaluations.load_plan(PLAN)
        plan = plan.model_copy(update={"critic": [c for c in plan.critic
                                                  if c.definition in critics]})
        cases = await evaluations.resolve(store, plan)
        # The plan follows what this machine has (Docker or not, the baseline or not): a
        # changed one is the evaluation's next version, never a refusal.
        ev, resumed = await evaluation_starts.start(store, plan, cases, new_version=True)
        console.print(f"evaluation {ev.name} v{ev.version} ({PLAN.name}): {len(cases)} cases, "
                      f"{len(plan.critic)} critics x {len(found)} snapshots x {plan.epochs} "
                      f"epochs ({'resumed' if resumed else 'recorded'}); runtime: {runtime}")
        compared = await _serve_and_score(store, runtimes, ev)
        out = embedded.default_home() / "demo-export.jsonl.zst"
        out.parent.mkdir(parents=True, exist_ok=True)
        total = await store.reader.count()
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("exporting the log", total=total)
            exported = await exports.export(store, exports.Selection(), out,
                                            progress=lambda n: progress.advance(task, n))
        verified = await anyio.to_thread.run_sync(exports.verify, out)
        console.print(f"export: {exported.events} events and {exported.blobs} blobs in "
                      f"{out} ({exported.bytes_out:,} bytes); verified: {verified.events} "
                      f"events, chain and manifest intact")
    console.print(
        f"done in {time.perf_counter() - began:.1f}s\n"
        f"explore: `props eval show {ev.name}`, `props report --eval {ev.name}`, "
        "`props runs list`, `props runs show RUN_ID`, "
        f"`props compare {SCORER} {RESCORER} --all` (every run in the database), "
        "`props events tail --from start --no-follow`, "
        '`psql "$(props db dsn --analyst)"` (the analyst role reads projections only), '
        "`props serve` to keep the reactors running")
    if not compared.complete:
        raise errors.PropsError("the comparison did not account for every run")
    return 0


async def _runtime(choice: RuntimeChoice) -> RuntimeChoice:
    """`auto` decided once, by asking the engine now: Docker when one answers, else local
    processes, said (a configured engine that does not answer would fail every push)."""
    if choice != "auto":
        return choice
    if await docker_runtime.reachable():
        return "docker"
    console.print("runtime: no Docker engine answers (DOCKER_HOST, else the local socket); "
                  "the critics and the baseline run as local processes")
    return "local"


async def _push_critics(store: EventStore, runtimes: Sequence[ContainerRuntime]
                        ) -> tuple[str, list[str]]:
    """The two variants and the ruff baseline, as Docker images when an engine is there,
    else local commands; the runtime and the definitions pushed."""
    docker = next((rt for rt in runtimes if isinstance(rt, DockerRuntime)), None)
    base = (await build_reference_image(docker) if docker
            else definitions.reference_local())
    pushed = 0
    for name, config in VARIANTS.items():
        digest = base.digest if base.runtime == "docker" \
            else definitions.local_digest(base.command, config)
        variant = base.model_copy(update={"name": name, "tag": "demo", "config": config,
                                          "digest": digest})
        pushed += await definitions.push(store, variant)
    console.print(f"definitions: {len(VARIANTS)} critic variants "
                  + (f"({pushed} new)" if pushed else "(reused)"))
    critics = list(VARIANTS)
    try:
        baseline = (await build_baseline_image(docker, BASELINE) if docker
                    else baselines.local(BASELINE))
    except errors.ConfigurationError as exc:  # installed without props[baselines]
        console.print(f"baseline: {exc}; the report compares the two variants only")
        return base.runtime, critics
    # Under the demo's own tag, as the variants: `props definitions baseline ruff` (a newer
    # ruff, or --docker) pushes another digest as `latest`, and the demo's plan must not
    # follow it (a second demo is a no-op).
    baseline = baseline.model_copy(update={"tag": "demo"})
    new = await definitions.push(store, baseline)
    console.print(f"baseline: {BASELINE} {baseline.config['version']} as critic "
                  f"{baseline.name} ({'new' if new else 'reused'})")
    return base.runtime, [*critics, baseline.name]


async def _serve_and_score(store: EventStore, runtimes: Sequence[ContainerRuntime],
                           ev: evaluations.Evaluation) -> comparison.Comparison:
    with Progress(console=console, transient=True) as progress, run_warnings.held() as held:
        task = progress.add_task("critics running, grading", total=None)
        driven = await driver.serve_until_done(
            store, ev, runtimes, driver.Stops(wait=WAIT_SECONDS),
            lambda line: progress.update(task, description=escape(line)))
    for line in held.lines():
        console.print(line)
    left = [s for s in driven.states if s.state not in driver.DONE]
    if left:
        raise errors.PropsError(
            f"evaluation {ev.name}: {len(left)} of {len(driven.states)} case(s) not scored "
            f"({driven.outcome}); `props eval show {ev.name}` says which and why")
    run_ids = [s.run_id for s in driven.states if s.run_id is not None]
    console.print(f"reactors: {len(run_ids)} run(s) finished and graded under "
                  f"{SCORER}, none pending")
    await _verify_scorer(store, ev)
    # The drive's own last events (its ending) folded first: the report reads projections
    # that stand where the log does, and says nothing is behind.
    await projection_status.folded(store)
    # Under the demo's scorer alone: the re-score below adds overlap@2's grades, and a
    # second demo's report would otherwise have twice the rows of the first.
    records, notes = await figures.load(store, *figures.scorer_filter(SCORER),
                                        scope=figures.Scope(evaluation=ev.name))
    figure_tables.print_report(records, notes)
    demo_runs = rescoring.Selection(run_ids=run_ids)  # the demo's runs, none other
    service = Service(store, runtimes, poll_interval=0.2)  # (the re-score's grades fold)
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        console.print(f"re-scoring every run with {RESCORER} (3 lines of tolerance) ...")
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task(f"re-scoring with {RESCORER}", total=None)
            report = await rescoring.rescore(
                store, scorers.scorer(RESCORER), demo_runs,
                selected=lambda n: progress.update(task, total=n),
                progress=lambda n: progress.advance(task, n))
        console.print(f"re-scored {report.graded_runs} run(s): {report.appended} new grade(s)"
                      + ("" if report.appended else " (reused)"))
        await settled(store, run_ids)
        compared = await comparison.compare(store, SCORER, RESCORER, demo_runs)
        figure_tables.print_comparison(compared)
        tg.cancel_scope.cancel()  # the service stops: each part finishes what it has in hand
    return compared


async def _verify_scorer(store: EventStore, ev: evaluations.Evaluation) -> None:
    """The demo's scorer verified on the demo's own cohort and the labelled cases before its
    figures are shown (cheap: a location rule asks no model), as `props scorers verify`
    does; the report then names it verified. A second demo records nothing new."""
    s = scorers.scorer(SCORER)
    cohort = await cohorts.of_evaluation(store, ev.name)
    done = await verification.verify(store, s, s, cohort,
                                     verification.Labels.load(samples.cases_dir()))
    e = done.event
    labels = f"{e.labels.agreed}/{e.labels.issues} right" if e.labels else "not measured"
    console.print(f"verified: {SCORER} (identity {identity.short(e.identity_hash)}) on "
                  f"evaluation {ev.name}: {e.status}, {e.candidates} issue(s) replayed, "
                  f"labelled cases {labels} (`props scorers verify` for a new scorer)")


async def settled(store: EventStore, run_ids: list[uuid.UUID]) -> None:
    """Until every run is finished and graded, and the projections show it."""
    with anyio.fail_after(WAIT_SECONDS):
        while not await projection_status.settled(store, run_ids):  # noqa: ASYNC110 (tables)
            await anyio.sleep(0.2)
