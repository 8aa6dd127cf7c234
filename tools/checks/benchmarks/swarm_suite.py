"""The swarm's part of `props bench reactors`, on a real two-node swarm on this machine
(props.tools.checks.swarm.rig: two dockerd of its own, never the machine's).

- swarm_vs_docker_run: a job on the swarm (service created, its task run on the worker, its
  output read through the manager with the end marker checked, the service removed) over
  `docker run` of the same image and command on the worker's own engine (create, start,
  wait, remove); seconds per run, one run at a time.
- swarm_two_nodes_vs_one: an evaluation of runs that wait 2 s each (an LLM-bound critic's
  shape) on the manager alone, then on both nodes; each node holds NODE_SLOTS runs at once,
  so two nodes hold twice as many: the wall time of one over that of two.

Both nodes share this machine's cores, so the second figure says what the launcher and the
swarm add, not what a second machine would bring. The quick suite says NORUN for both: the
swarm takes a minute to come up and down.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
import uuid
from pathlib import Path

import anyio.to_thread

from props.core.domain import catalog, definitions, evaluation_starts, evaluations
from props.core.domain.specimens import specimens
from props.core.log.store import EventStore
from props.reactors import evaluation_driver as driver
from props.reactors.runtimes.container_runtime import ContainerRuntime, ContainerSpec
from props.reactors.runtimes.docker_runtime import DockerRuntime
from props.reactors.runtimes.local_runtime import LocalRuntime
from props.reactors.runtimes.swarm_runtime import SwarmRuntime
from props.tools.bundled import samples
from props.tools.checks.benchmarks.report import Check, Report
from props.tools.checks.swarm import rig
from props.tools.command_line.render import Console

PYTHON = "/usr/bin/python3"  # the critic image's own
TRIVIAL = [PYTHON, "-c", "pass"]
WAITS = [PYTHON, "-c", "import time; time.sleep(2)"]
NODE_SLOTS = 4  # runs one node holds at once in this benchmark
PREFIX = "pxbn"  # its namespaces and bridge: apart from the tests' swarm (pxsw)


async def _per_run(rt: ContainerRuntime, image: str, n: int) -> float:
    """Seconds per run of the trivial command, one at a time (start, wait, remove)."""
    t0 = time.perf_counter()
    for i in range(n):
        spec = ContainerSpec(name=f"props-bench-swarm-{uuid.uuid4().hex[:8]}-{i}",
                             image=image, command=TRIVIAL)
        await rt.start(spec)
        outcome = await rt.wait(spec.name, 120)
        assert outcome is not None and outcome.exit_code == 0, outcome
        await rt.remove(spec.name)
    return (time.perf_counter() - t0) / n


async def _evaluation_seconds(store: EventStore, rt: SwarmRuntime, name: str,
                              epochs: int, home: Path) -> float:
    """Wall seconds of an evaluation of the waiting critic on `rt`, every case scored."""
    found = specimens.load_valid(samples.samples_dir())
    plan = evaluations.Plan(name=name, examples=sorted(s.slug for s in found), epochs=epochs,
                            max_concurrency=100, timeout_seconds=120,
                            critic=[evaluations.Critic(definition="bench-swarm", ref="bench")])
    cases = await evaluations.resolve(store, plan)
    ev, _ = await evaluation_starts.start(store, plan, cases)
    t0 = time.perf_counter()
    driven = await driver.serve_until_done(
        store, ev, [LocalRuntime(home / name, trust_commands=True), rt],
        driver.Stops(wait=900), lambda line: None)
    seconds = time.perf_counter() - t0
    scored = sum(1 for s in driven.states if s.state == "scored")
    if scored != len(cases):
        raise AssertionError(f"{name} ended {driven.outcome} with {scored} of {len(cases)} "
                             f"cases scored: no figure from a run that failed")
    return seconds


async def measure(store: EventStore, quick: bool, report: Report, console: Console) -> None:
    reason = "the quick suite does not bring up a swarm" if quick else rig.missing()
    if reason is not None:
        console.print(f"NORUN swarm_vs_docker_run, swarm_two_nodes_vs_one: {reason}")
        report.checks += [Check("swarm_vs_docker_run", None, "<=", 2.0),
                          Check("swarm_two_nodes_vs_one", None, ">=", 1.6)]
        return
    home = Path(await anyio.to_thread.run_sync(
        lambda: tempfile.mkdtemp(prefix="props-bench-swarm-")))
    console.print("a two-node swarm on this machine ...")
    t0 = time.perf_counter()
    made = await anyio.to_thread.run_sync(rig.up, home / "rig", PREFIX)
    report.figures["swarm_up_s"] = round(time.perf_counter() - t0, 1)
    try:
        await _measure_on(store, made, home, report, console)
    finally:
        await anyio.to_thread.run_sync(made.down)


async def _measure_on(store: EventStore, made: rig.Rig, home: Path, report: Report,
                      console: Console) -> None:
    n = 10
    console.print(f"{n} runs as swarm jobs on the worker, {n} by `docker run` there ...")
    async with DockerRuntime.connect(made.worker) as docker, \
            SwarmRuntime.connect(made.manager,
                                 constraints=[f"node.hostname=={made.worker_host}"]) as swarm:
        bare = await _per_run(docker, made.image, n)
        job = await _per_run(swarm, made.image, n)
    report.figures.update({"swarm_job_s": round(job, 3), "swarm_docker_run_s": round(bare, 3)})
    report.checks.append(Check("swarm_vs_docker_run", job / bare, "<=", 2.0))

    await definitions.push(store, catalog.DefinitionPushed(
        agent_type="critic", name="bench-swarm", tag="bench", runtime="swarm",
        image=made.image, command=WAITS,
        digest="sha256:" + hashlib.sha256(f"{made.image} {WAITS}".encode()).hexdigest()))
    epochs = 8  # 24 cases of the 3 samples: 6 rounds of 4 on one node, 3 of 8 on two
    console.print(f"{epochs * 3} runs of 2 s on one node ({NODE_SLOTS} at once), then on "
                  f"two ({2 * NODE_SLOTS}) ...")
    async with SwarmRuntime.connect(made.manager, constraints=["node.role==manager"],
                                    capacity=NODE_SLOTS) as one_node:
        one = await _evaluation_seconds(store, one_node, "bench-swarm-one", epochs, home)
    async with SwarmRuntime.connect(made.manager, capacity=2 * NODE_SLOTS) as two_nodes:
        two = await _evaluation_seconds(store, two_nodes, "bench-swarm-two", epochs, home)
    report.figures.update({"swarm_one_node_s": round(one, 2), "swarm_two_nodes_s": round(two, 2),
                           "swarm_waiting_runs": epochs * 3})
    report.checks.append(Check("swarm_two_nodes_vs_one", one / two, ">=", 1.6))
