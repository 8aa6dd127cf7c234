"""`props chaos --kill-swarm-worker`: an evaluation on a real two-node Docker Swarm whose
worker's daemon is SIGKILLed mid-way, then started again while the evaluation goes on.

When the kill comes (how many runs have finished first, at least two running on the worker),
how long the worker stays away and which of two ways it goes are drawn from the seed (or
given): `outlasts` (the node stays away past the runtime's node grace, so its runs are lost
while it is Down) or `returns` (it is back within the grace: its tasks come back ended, those
that finished while the daemon was dead without the tail of their output, which only the
runtime's end marker tells from a whole one). Then the invariants: every case
exactly once in the standing, each with a result; each run lost with the worker failed as
`run_lost` (retryable) and its case run again to a result; nothing reported complete from
partial output (every completed run's recorded output holds the critic's last line, printed
after its sleep, which a task that ended while its daemon was dead can lose); no run executed
twice (one container per run over both engines, the returned worker's included); nothing of
the runs left on the swarm (no service, no tombstone).

The swarm is props.tools.checks.swarm.rig's (two dockerd in network namespaces of this
machine; root), brought up by the command (and down at its end) or given by the caller (the
test's session swarm). The machine's own dockerd is never used.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import aiodocker
import anyio
import anyio.to_thread

from props.core.domain import catalog, definitions, evaluation_starts, evaluations, streams
from props.core.domain.specimens import specimen_sync, specimens
from props.core.log.events import Event
from props.core.log.store import EventStore
from props.projections import evaluation_standing
from props.reactors import evaluation_driver as driver
from props.reactors.runtimes import swarm_runtime
from props.reactors.runtimes.container_runtime import LABEL
from props.reactors.runtimes.local_runtime import LocalRuntime
from props.reactors.runtimes.swarm_runtime import SwarmRuntime
from props.tools.bundled import samples
from props.tools.checks.chaos.invariants import Invariant
from props.tools.checks.swarm import rig
from props.tools.command_line.render import Console, Table

PYTHON = "/usr/bin/python3"  # the rig's critic image's own
LAST_LINE = "reviewed to the end"
# Its last line printed after the sleep: a task that ended while its node's daemon was dead
# comes back with its last output missing (../shared/swarm/README.md, section 4).
CRITIC = f"import time; print('reviewing', flush=True); time.sleep(3); print({LAST_LINE!r})"
# The node grace of each way: `outlasts`: 3 s (the worker is Down ~4 s after its daemon dies,
# heartbeat 1 s); `returns`: longer than the outage (the daemon needs ~11 s to start again,
# as it kills its orphan containers first).
GRACE = {"outlasts": 3.0, "returns": 60.0}
# Seconds before the restart begins; `returns`: past the critic's sleep, so the worker's
# tasks finish while their daemon is dead and their last line goes with it.
AWAY = {"outlasts": (4.0, 10.0), "returns": (4.0, 7.0)}
DOWN_WAIT = 15.0  # at most this long more for the manager to mark the worker Down
# A container counts as busy at the kill only if created at most this long ago: its critic
# has a second or more of its 3 s sleep left (`Created` is in whole seconds, rounded down,
# so the age read is never less than the true one).
YOUNG = 2.0
EXAMPLES = ["csvtool/*", "logparse/*"]  # two snapshots of the bundled samples
EPOCHS = 10  # ... ten times each: 20 cases


@dataclasses.dataclass
class Kill:
    """What the fault did: when (seconds from the start), after how many finished runs,
    how many runs were on the worker then, and how long it stayed away."""

    after_finished: int
    way: str = "outlasts"  # a key of GRACE
    at: float | None = None
    on_worker: int = 0
    away: float = 0.0
    back_at: float | None = None
    # What the launcher's slots were allowed (capacity_now) before the kill, and just
    # before the worker's daemon started again (its node Down by then: less).
    capacity: tuple[int, int] | None = None

    def detail(self) -> str:
        if self.at is None:
            return f"NORUN: the worker was never busy with {self.after_finished} runs finished"
        return (f"worker's dockerd SIGKILLed at +{self.at:.1f} s ({self.after_finished} runs "
                f"finished, {self.on_worker} running on it), started again at "
                f"+{self.back_at or 0:.1f} s; node grace {GRACE[self.way]:.0f} s "
                f"({self.way}); capacity {self.capacity[0] if self.capacity else '?'} -> "
                f"{self.capacity[1] if self.capacity else '?'} while it was away")


async def push_critic(store: EventStore, image: str, name: str = "swarm-chaos",
                      script: str = CRITIC) -> None:
    """A critic of the swarm runtime that runs `script` with the rig's image's python."""
    command = [PYTHON, "-c", script]
    await definitions.push(store, catalog.DefinitionPushed(
        agent_type="critic", name=name, tag="swarm", runtime="swarm", image=image,
        command=command,
        digest="sha256:" + hashlib.sha256(f"{image}\0{command}".encode()).hexdigest()))


async def _finished(store: EventStore, run_ids: list[uuid.UUID]) -> set[uuid.UUID]:
    found = await store.read_streams([streams.run(r) for r in run_ids])
    return {streams.run_id_of(sid) for sid, records in found.items()
            if any(r.type_name == "run.finished" for r in records)}


async def _kill_mid_way(store: EventStore, ev: evaluations.Evaluation,
                        cases: list[evaluations.Case], rt: SwarmRuntime, made: rig.Rig,
                        kill: Kill, began: float) -> None:
    """SIGKILL the worker's daemon once `kill.after_finished` runs have finished and two are
    running on it; start it again `kill.away` seconds later, its node Down by then (the
    evaluation goes on)."""
    first = [ev.run_id(c, 0) for c in cases]
    while True:
        # Asked of the worker's engine, not taken from the runs not yet finished: a run
        # whose container has ended is unfinished for a moment more (its exit noticed, its
        # output read), and a kill then loses nothing (seen once: 2 "running", 0 lost).
        running = await _young_on(made.worker, YOUNG)
        done = await _finished(store, [*first, *running])
        busy = running - done
        if len(done & set(first)) >= kill.after_finished and len(busy) >= 2:
            break
        await anyio.sleep(0.2)
    before = await rt.refresh_capacity()
    await anyio.to_thread.run_sync(made.kill_worker)
    kill.at, kill.on_worker = time.monotonic() - began, len(busy)
    await anyio.sleep(kill.away)
    now = await rt.refresh_capacity()
    with anyio.move_on_after(DOWN_WAIT):  # (the restart waits for the node to be Down)
        while now >= before:
            await anyio.sleep(0.5)
            now = await rt.refresh_capacity()
    kill.capacity = (before, now)
    await anyio.to_thread.run_sync(made.restart_worker)
    kill.back_at = time.monotonic() - began


async def _young_on(engine: str, seconds: float) -> set[uuid.UUID]:
    """The runs whose container on `engine` is running and was created at most `seconds`
    ago (so its critic is still in its sleep, before its last line)."""
    found: set[uuid.UUID] = set()
    try:
        async with aiodocker.Docker(url=engine, api_version=swarm_runtime.API_VERSION) as node:
            with anyio.fail_after(swarm_runtime.CALL_DEADLINE):
                listed = await node.containers.list(filters={"label": [LABEL],
                                                             "status": ["running"]})
    except (aiodocker.DockerError, OSError, TimeoutError):
        return found  # (the worker's engine slow or away: none counted, asked again)
    for c in listed:
        if time.time() - c._container["Created"] <= seconds:
            found.add(uuid.UUID(c._container["Labels"][LABEL]))
    return found


async def executions(made: rig.Rig) -> collections.Counter[str]:
    """Containers either node's engine holds per run (20.10 keeps exited job containers:
    each one is an execution)."""
    count: collections.Counter[str] = collections.Counter()
    for url in (made.manager, made.worker):
        async with aiodocker.Docker(url=url, api_version=swarm_runtime.API_VERSION) as node:
            with anyio.fail_after(swarm_runtime.CALL_DEADLINE):
                for c in await node.containers.list(all=True, filters={"label": [LABEL]}):
                    count[c._container["Labels"][LABEL]] += 1
    return count


async def kill_worker_mid_evaluation(store: EventStore, made: rig.Rig, work_dir: Path,
                                     rng: random.Random, show: Callable[[str], None],
                                     way: str | None = None) -> tuple[Kill, list[Invariant]]:
    """The mode's whole run on `made` (up, its worker's daemon alive) and its invariants;
    `way` (a key of GRACE) drawn from `rng` unless given."""
    found = specimens.load_valid(samples.samples_dir())
    await specimen_sync.sync(store, str(samples.samples_dir()), found)
    await push_critic(store, made.image)
    plan = evaluations.Plan(
        name=f"swarm-chaos-{uuid.uuid4().hex[:8]}", examples=EXAMPLES, epochs=EPOCHS,
        max_concurrency=6, timeout_seconds=120,
        critic=[evaluations.Critic(definition="swarm-chaos", ref="swarm")])
    cases = await evaluations.resolve(store, plan)
    ev, _ = await evaluation_starts.start(store, plan, cases)
    kill = Kill(after_finished=rng.randint(2, 8), way=way or rng.choice(sorted(GRACE)))
    kill.away = rng.uniform(*AWAY[kill.way])
    began = time.monotonic()
    async with SwarmRuntime.connect(made.manager, node_engines=[made.manager, made.worker],
                                    node_grace=GRACE[kill.way]) as rt:
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_kill_mid_way, store, ev, cases, rt, made, kill, began)
                driven = await driver.serve_until_done(
                    store, ev, [LocalRuntime(work_dir / "local", trust_commands=True), rt],
                    driver.Stops(wait=300, retry_failed=2), show)
                tg.cancel_scope.cancel()
        finally:
            if kill.at is not None and kill.back_at is None:  # (the worker's daemon again)
                await anyio.to_thread.run_sync(made.restart_worker)
        show(f"{len(cases)} cases in {time.monotonic() - began:.1f} s ({driven.outcome}); "
             f"tasks seen running per node: {dict(collections.Counter(rt.placed.values()))}")
        return kill, await check(store, ev, made, rt, kill)


async def check(store: EventStore, ev: evaluations.Evaluation, made: rig.Rig,
                rt: SwarmRuntime, kill: Kill) -> list[Invariant]:
    standing = await evaluation_standing.of(store, ev, figures=False)
    keys = [s.case.key for s in standing.states]
    out = [Invariant(
        "every case exactly once in the standing",
        standing.complete and len(set(keys)) == len(keys) and
        standing.counts == {"scored": len(keys)},
        f"{len(keys)} cases, {len(set(keys))} distinct; {standing.counts}")]
    runs = {s.case.key: [ev.run_id(s.case, a) for a in range(s.attempts)]
            for s in standing.states}
    finishes = {r: [e.event for e in await store.read_stream(streams.run(r))
                    if isinstance(e.event, catalog.RunFinished | catalog.ContainerExited)]
                for ids in runs.values() for r in ids}
    out.append(_lost_and_run_again(runs, finishes, kill))
    out.append(await _whole_outputs(store, finishes))
    await anyio.sleep(3)  # (the returned worker kills the lost runs' containers meanwhile)
    ours = {str(r) for r in finishes}
    counted = {run: n for run, n in (await executions(made)).items() if run in ours}
    twice = sorted(run for run, n in counted.items() if n > 1)
    out.append(Invariant("no run executed twice", not twice,
                         f"{len(counted)} runs with a container on either engine; "
                         f"{len(twice)} with more than one"))
    left = sorted(n for n, run in (await rt.names()).items() if run in ours)
    out.append(Invariant("nothing left on the swarm", not left,
                         f"{len(left)} service(s) or tombstone(s) of the runs left"))
    return out


def _lost_and_run_again(runs: dict[str, list[uuid.UUID]],
                        finishes: Mapping[uuid.UUID, Sequence[Event]],
                        kill: Kill) -> Invariant:
    """Every earlier attempt of a case lost with the worker, marked so; the last, a result."""
    lost_mark = catalog.Failure.of("report", "run_lost")  # retryable, as the rule says
    lost, wrong = 0, []
    for key, ids in runs.items():
        for run_id in ids[:-1]:
            ended = [f for f in finishes[run_id] if isinstance(f, catalog.RunFinished)]
            if [(f.status, f.failure) for f in ended] == [("failed", lost_mark)]:
                lost += 1
            else:
                wrong.append(f"{key}: {[(f.status, f.failure) for f in ended]}")
    if kill.at is None:
        return Invariant("lost runs marked run_lost and run again", None, kill.detail())
    return Invariant("lost runs marked run_lost and run again", lost > 0 and not wrong,
                     f"{lost} run(s) lost with the worker, each failed run_lost (retryable) "
                     f"and its case run again; otherwise ended: {'; '.join(wrong) or 'none'}")


async def _whole_outputs(store: EventStore,
                         finishes: Mapping[uuid.UUID, Sequence[Event]]) -> Invariant:
    """A completed run's recorded output ends with its critic's last line."""
    completed, partial = 0, []
    for run_id, events in finishes.items():
        done = [f for f in events if isinstance(f, catalog.RunFinished)]
        if not done or done[-1].status != "completed":
            continue
        completed += 1
        exited = [e for e in events if isinstance(e, catalog.ContainerExited)]
        logs = await store.get_blob(exited[-1].logs_sha256) \
            if exited and exited[-1].logs_sha256 else b""
        if not logs.rstrip().endswith(LAST_LINE.encode()):
            partial.append(str(run_id))
    return Invariant("nothing reported complete from partial output",
                     completed > 0 and not partial,
                     f"{completed} completed run(s), {len(partial)} without their last line")


def print_run(kill: Kill, invariants: list[Invariant]) -> bool:
    """The fault and the invariants as tables; whether every invariant held."""
    out = Console(highlight=False)
    faults = Table("at (s)", "fault", "what happened", title="faults injected")
    faults.add_row(f"{kill.at or 0:.1f}", "kill-swarm-worker", kill.detail())
    out.print(faults)
    table = Table("invariant", "verdict", "detail", title="invariants")
    for i in invariants:
        table.add_row(i.name, i.verdict, i.detail)
    out.print(table)
    held = all(i.held is not False for i in invariants)
    out.print("every invariant held" if held else "AN INVARIANT BROKE")
    return held
