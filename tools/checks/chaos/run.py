"""`props chaos` run: load and faults, drain, then the invariants (its parser:
props.tools.command_line.commands.chaos)."""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import anyio
import anyio.abc
import httpx

from props.core.domain import catalog, definitions, streams, tokens
from props.core.domain.specimens import specimen_sync, specimens
from props.core.domain.store import open_store
from props.core.log import stopping
from props.reactors.runtimes import docker_runtime
from props.reactors.runtimes.docker_runtime import DockerRuntime
from props.tools.bundled import samples
from props.tools.checks import hostile_critic, scratch
from props.tools.checks.chaos import own_engine, swarm_worker
from props.tools.checks.chaos.harness import (
    CHAOS_AGENT,
    HOSTILE_EVERY,
    Chaos,
    free_port,
    retry,
    scratch_server,
)
from props.tools.checks.chaos.invariants import (
    Invariant,
    caught_up_watch,
    check,
    drain,
    print_invariants,
)
from props.tools.checks.swarm import rig
from props.tools.command_line.commands.chaos import FAULTS
from props.tools.command_line.render import Console

console = Console(highlight=False, stderr=True)


async def chaos_cmd(args: argparse.Namespace) -> int:
    if args.kill_swarm_worker:
        return await swarm_chaos(args)
    home = Path(tempfile.mkdtemp(prefix="props-chaos-"))
    held = False
    try:
        async with contextlib.AsyncExitStack() as stack:
            why = own_engine.can_start() if args.restart_docker \
                else "not asked for (--restart-docker)"
            engine = None
            if why is None:
                engine = await stack.enter_async_context(own_engine.own_engine(home))
                console.print(f"chaos: an engine of the run's own at {engine.url} (the "
                              "machine's is never restarted)")
            server, server_home = await stack.enter_async_context(scratch_server(home))
            dsn = await stack.enter_async_context(scratch.scratch_database(server, "chaos"))
            store = await stack.enter_async_context(open_store(dsn, max_connections=6))
            chaos = Chaos(store, home, server_home, random.Random(args.seed),
                          engine=engine, engine_why=why or "")
            try:
                invariants = await run(chaos, args)
            finally:  # whatever happened, no replica outlives the run
                with stopping.shield("chaos: stopping the replicas"):
                    await chaos.stop_services()
            if engine is None:
                invariants.append(Invariant("survives docker-restart", None,
                                            f"not injected: {why}"))
        held = all(i.held is not False for i in invariants)
    finally:
        if held:
            shutil.rmtree(home, ignore_errors=True)
        else:  # the services' logs (serve-N.log) say what went wrong
            console.print(f"kept for inspection: {home}")
    print_invariants(chaos, invariants)
    return 0 if held else 1


SWARM_DIR, SWARM_PREFIX = Path("/tmp/sw2n"), "sw2n"  # the recipe's names (../shared/swarm)


async def swarm_chaos(args: argparse.Namespace) -> int:
    """--kill-swarm-worker: its swarm up, the evaluation, the invariants, the swarm down."""
    why = rig.missing()
    if why is not None:
        console.print(f"NORUN: {why}")
        return 69  # EX_UNAVAILABLE
    home = Path(tempfile.mkdtemp(prefix="props-chaos-swarm-"))
    try:
        async with contextlib.AsyncExitStack() as stack:
            server, _ = await stack.enter_async_context(scratch_server(home))
            dsn = await stack.enter_async_context(scratch.scratch_database(server, "chaos"))
            store = await stack.enter_async_context(open_store(dsn, max_connections=6))
            began = time.monotonic()
            made = await anyio.to_thread.run_sync(rig.up, SWARM_DIR, SWARM_PREFIX)
            stack.push_async_callback(anyio.to_thread.run_sync, made.down)
            console.print(f"chaos: a two-node swarm up in {time.monotonic() - began:.1f} s "
                          f"(seed {args.seed}); an evaluation of 20 cases on it")
            failed: list[rig.RigFailed] = []
            try:
                kill, invariants = await swarm_worker.kill_worker_mid_evaluation(
                    store, made, home, random.Random(args.seed), console.print)
            except* rig.RigFailed as group:  # the swarm broke, not props: no verdict
                failed.extend(e for e in group.exceptions if isinstance(e, rig.RigFailed))
            if failed:
                console.print(f"the swarm itself failed: {failed[0]}")
                return 1
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return 0 if swarm_worker.print_run(kill, invariants) else 1


async def run(chaos: Chaos, args: argparse.Namespace) -> list[Invariant]:
    store = chaos.store
    folder = samples.samples_dir()
    found = specimens.load_valid(folder)
    await specimen_sync.sync(store, str(folder), found)
    command = [sys.executable, "-c", CHAOS_AGENT]
    await definitions.push(store, catalog.DefinitionPushed(
        agent_type="critic", name="chaos", tag="chaos", runtime="local", image="local:chaos",
        command=command, digest=definitions.local_digest(command, {})))
    hostile = hostile_critic.command()
    await definitions.push(store, catalog.DefinitionPushed(
        agent_type="critic", name="hostile", tag="chaos", runtime="local",
        image="local:hostile", command=hostile, digest=definitions.local_digest(hostile, {})))
    critics = ["chaos"]
    if await docker_runtime.reachable():  # then every other run is a Docker container
        async with DockerRuntime.connect() as docker:
            image = await docker_runtime.build_reference_image(docker)
        await definitions.push(store, image.model_copy(update={
            "name": "chaos-docker", "tag": "chaos", "command": command}))
        critics.append("chaos-docker")
    slugs = sorted(s.slug for s in found)
    _, chaos.api_token = await tokens.create(store, "chaos", ("request", "read"))
    chaos.api_ports = [free_port(), free_port()]
    chaos.services = [None, None]
    for i in range(2):
        await chaos.start_service(i)
    await chaos.start_spare()
    fault_times = sorted(chaos.rng.uniform(0.1, 0.9) * args.seconds
                         for _ in range(args.faults))
    chosen = FAULTS + (("restart-docker",) if args.restart_docker else ())
    kinds = [chosen[i % len(chosen)] for i in range(args.faults)]
    chaos.rng.shuffle(kinds)
    async with anyio.create_task_group() as tg:
        tg.start_soon(chaos.watch, name="chaos-watch")
        await chaos.start_doomed(tg)
        console.print(f"chaos: {args.runs} runs over {args.seconds:.0f} s, {args.faults} faults "
                      f"(seed {args.seed}), two `props serve` replicas, a spare launcher"
                      f"{' and a doomed one' if chaos.doomed else ''}; critics: "
                      f"{', '.join(critics)}")

        async def load() -> None:
            async with httpx.AsyncClient(timeout=10) as client:
                for n in range(args.runs):
                    critic, snapshot = critics[n % len(critics)], slugs[n % len(slugs)]
                    if n % HOSTILE_EVERY == HOSTILE_EVERY - 1:
                        critic = "hostile"
                    if n % 4 >= 2:  # through the HTTP API
                        chaos.requested.append(await chaos.request_over_http(client, n, {
                            "definition": critic, "ref": "chaos", "snapshot": snapshot,
                            "model": f"m{n % 2}", "timeout_seconds": 60, "budget_usd": 0}))
                    else:
                        run_id = uuid.uuid4()
                        chaos.requested.append(run_id)
                        await retry(lambda run_id=run_id, critic=critic,  # type: ignore[misc]
                                     snapshot=snapshot, n=n: store.append(
                            streams.run(run_id), [catalog.RunRequested(
                                run_id=run_id, agent_type="critic", definition=critic,
                                definition_ref="chaos", model=f"m{n % 2}", timeout_seconds=60,
                                budget_usd=0, example=catalog.Example(snapshot=snapshot),
                                requested_by="props chaos")]))
                    await anyio.sleep(args.seconds / args.runs)

        async def faults() -> None:
            t0 = time.monotonic()
            for at, kind in zip(fault_times, kinds, strict=True):
                await anyio.sleep(max(0.0, at - (time.monotonic() - t0)))
                await chaos.mark_prefix()
                detail = await chaos.inject(kind)
                chaos.faults.append((time.monotonic() - chaos.began, kind, detail))
                console.print(f"  {time.monotonic() - chaos.began:6.1f}s {kind}: {detail}")

        async with anyio.create_task_group() as load_tg:
            load_tg.start_soon(load, name="chaos-load")
            load_tg.start_soon(faults, name="chaos-faults")
        console.print(f"load done after {time.monotonic() - chaos.began:.0f} s; draining ...")
        drained = await drain(chaos, args.drain_seconds)
        await chaos.stop_services()
        await caught_up_watch(chaos)
        tg.cancel_scope.cancel()
    return await check(chaos, drained)


