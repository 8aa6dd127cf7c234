"""`props bench eval`: a whole evaluation against the same containers started by hand.

N cases (quick: 60) of a critic that exits at once (`python -c pass` in the reference image),
at a concurrency of 8, driven as `props eval run` drives them (the plan recorded, every case
requested within the ceiling, the launcher, the grader and the projections serving in this
process, each case's state read until all are scored), beside the same N containers started
by a plain loop that keeps 8 `docker run --rm` in flight (create, start, wait, remove) on the
same engine. The ratio is the evaluation's wall time over the loop's; the per-case overhead
is the difference per case, in milliseconds.
"""

from __future__ import annotations

import math
import sys
import time
import uuid

import anyio

from props.core.domain import definitions, evaluation_starts, evaluations
from props.core.domain.specimens import specimen_sync, specimens
from props.core.domain.store import open_store
from props.reactors import evaluation_driver as driver
from props.reactors.runtimes import docker_runtime
from props.reactors.runtimes.container_runtime import ContainerRuntime, ContainerSpec, Mount
from props.reactors.runtimes.docker_runtime import DockerRuntime
from props.tools.bundled import samples
from props.tools.checks.benchmarks.report import Check, Report
from props.tools.command_line.render import Console

TRIVIAL = [sys.executable, "-c", "pass"]
CONCURRENCY = 8


async def _docker_run_loop(rt: ContainerRuntime, image: str, n: int) -> float:
    """Seconds for `n` bare runs of the trivial command, `CONCURRENCY` in flight."""
    mounts = [Mount(p, p) for p in definitions.host_python_paths()]
    names = iter(range(n))

    async def worker() -> None:
        for i in names:
            spec = ContainerSpec(name=f"props-bench-eval-bare-{uuid.uuid4().hex[:8]}-{i}",
                                 image=image, command=TRIVIAL, mounts=mounts)
            await rt.start(spec)
            outcome = await rt.wait(spec.name, 60)
            assert outcome is not None and outcome.exit_code == 0, outcome
            await rt.remove(spec.name)

    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(CONCURRENCY):
            tg.start_soon(worker)
    return time.perf_counter() - t0


async def run(dsn: str, quick: bool, console: Console) -> Report:
    report = Report("eval", quick)
    wanted = 60 if quick else 200
    if not await docker_runtime.reachable():
        console.print("no Docker engine reachable: eval_vs_docker_run did not run")
        report.checks.append(Check("eval_vs_docker_run", None, "<=", 1.5))
        return report
    async with open_store(dsn, max_connections=8) as store, \
            DockerRuntime.connect() as docker:
        folder = samples.samples_dir()
        found = specimens.load_valid(folder)
        await specimen_sync.sync(store, str(folder), found)
        base = await docker_runtime.build_reference_image(docker)
        await definitions.push(store, base.model_copy(update={
            "name": "bench-eval", "tag": "bench", "command": TRIVIAL}))
        epochs = math.ceil(wanted / len(found))
        plan = evaluations.Plan(
            name="bench-eval", examples=sorted(s.slug for s in found), epochs=epochs,
            max_concurrency=CONCURRENCY, timeout_seconds=60,
            critic=[evaluations.Critic(definition="bench-eval", ref="bench")])
        cases = await evaluations.resolve(store, plan)
        ev, _resumed = await evaluation_starts.start(store, plan, cases)
        # The loop before and after the evaluation, their mean the baseline: the engine's
        # pace drifts over a minute (a ratio of one evaluation to one loop moved 1.40-1.66).
        console.print(f"{len(cases)} containers by a loop of `docker run`, {CONCURRENCY} at "
                      f"once; the evaluation; the loop again ...")
        before = await _docker_run_loop(docker, base.image or "", len(cases))
        t0 = time.perf_counter()
        driven = await driver.serve_until_done(
            store, ev, [docker], driver.Stops(wait=900), lambda line: None)
        through = time.perf_counter() - t0
        bare = (before + await _docker_run_loop(docker, base.image or "", len(cases))) / 2
    scored = sum(1 for s in driven.states if s.state == "scored")
    if scored != len(cases):
        raise AssertionError(f"the evaluation ended {driven.outcome} with {scored} of "
                             f"{len(cases)} cases scored: no figure from a run that failed")
    report.figures.update({"cases": len(cases), "concurrency": CONCURRENCY,
                           "docker_run_loop_s": round(bare, 2), "eval_s": round(through, 2),
                           "per_case_overhead_ms": round((through - bare) / len(cases) * 1000,
                                                         1)})
    report.checks.append(Check("eval_vs_docker_run", through / bare, "<=", 1.5))
    return report
