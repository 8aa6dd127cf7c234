"""The critic launcher: a requested run becomes a container, and the container a finished run.

It handles `run.requested` (queue the run) and `run.cancel_requested`. Each run goes through:
resolve the definition (the digest used is recorded in `run.started`), create the run's agent
role, write the example's files to a read-only directory, start the container (named by the
run id: a restarted launcher adopts it), then watch it until it exits, its time runs out, its
budget or caps are exceeded, or it is cancelled, appending what the agent reported as it goes.
Then `container.exited` with the logs (a blob), the role dropped, and `run.finished` with a
status and closed failure facts. Every event the launcher appends has an id derived from the
run, so a launcher killed at any point and restarted appends each one exactly once.

The durable state is the log: at start the launcher resumes every run requested and not
finished. At most `capacity` runs hold a container at once (a finished run's clean-up holds
no slot); the others wait queued (their status stays `requested`), never dropped. Several
launchers share the queue: a run is claimed (`run.claimed`, compare-and-set) by the one that
has a slot first, and a dead launcher's runs are taken over once its lease runs out
(props.reactors.launcher.launchers).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import anyio
import anyio.abc
import anyio.to_thread

from props.core.domain import caps, catalog, definitions, endpoints, streams
from props.core.log import errors, faults
from props.core.log.events import Event, NewEvent, RecordedEvent
from props.core.log.stopping import Stop
from props.core.log.store import EventStore
from props.reactors.gateway import Gateway
from props.reactors.launcher import (
    agent_roles,
    fair_queue,
    grader_runs,
    launchers,
    run_attempts,
    run_cleanup,
    run_specs,
    run_watch,
)
from props.reactors.launcher.run_specs import AgentDatabase, RunSpecs, container_name
from props.reactors.launcher.run_state import RunState, fold_run, lifecycle_id, verdict
from props.reactors.runtimes.container_runtime import (
    ContainerRuntime,
    ContainerSpec,
    EngineUnreachable,
    HoldsImages,
    RunLost,
    StartCut,
    VaryingCapacity,
    holds,
)
from props.schema import queries

log = logging.getLogger(__name__)
FAIL_TRIES = 10  # reads of a run's stream to record its failure while others move it

_Q = queries.load("agents")
SWEEP_SECONDS = 30.0
WATCHDOG_SECONDS = 1.0  # how often agent sessions are checked for overrunning their limits


async def _every(seconds: float, what: str, step: Callable[[], Awaitable[None]]) -> None:
    """Run `step` every `seconds`; a failure is logged and the next round tries again: never
    a reason to stop launching everyone else's runs."""
    while True:
        await anyio.sleep(seconds)
        try:
            await step()
        except Exception as exc:
            log.warning("%s failed (%s: %s); the next round tries again", what,
                        type(exc).__name__, exc)


@dataclasses.dataclass
class LauncherStats:
    launched: int = 0
    adopted: int = 0
    finished: int = 0


class Launcher:
    types: tuple[str, ...] = ("run.requested", "run.cancel_requested", "run.released")

    def __init__(self, store: EventStore, runtimes: Sequence[ContainerRuntime],
                 work_dir: Path, *, max_concurrent: int = 8,
                 name: str = launchers.DEFAULT_NAME, engine: str | None = None,
                 lease_seconds: float = launchers.LEASE_SECONDS,
                 agent_database: AgentDatabase | None = None,
                 engine_wait: float = run_attempts.ENGINE_WAIT_SECONDS,
                 stop: Stop | None = None) -> None:
        self.launcher = name
        self.stop = stop or Stop()
        self.stop.carriers.append(self._in_flight)
        self.name = launchers.reactor_name(name)  # the reactor: its lock and checkpoint
        self.engine = engine
        self.leases = launchers.Leases(store, name, lease_seconds)
        self._taking_over: dict[uuid.UUID, str] = {}  # run -> the launcher it is taken from
        self.store = store
        self.runtimes = {rt.kind: rt for rt in runtimes}
        self.work_dir = work_dir
        self.capacity = max(1, min([max_concurrent, *(rt.capacity() for rt in runtimes)]))
        self.stats = LauncherStats()
        varying = [rt for rt in runtimes if isinstance(rt, VaryingCapacity)]
        self._slots = fair_queue.FairSlots(  # in turn, not first come
            self.capacity, (lambda: min(rt.capacity_now() for rt in varying))
            if varying else None)
        self.tickets = fair_queue.Tickets(store)
        self._known: set[uuid.UUID] = set()  # runs queued or running in this process
        self._cancelled: set[uuid.UUID] = set()
        self._tg: anyio.abc.TaskGroup | None = None
        self.gateway = Gateway(store, work_dir / "gateway", name)
        self.specs = RunSpecs(store, work_dir, self.gateway, agent_database)
        self.engine_wait = engine_wait  # seconds a run waits for an engine that is away
        self.deployment = ""  # which database's containers are ours (start() sets it)

    def _in_flight(self) -> list[str]:
        """The runs this launcher holds as it stops: the next launcher takes them over."""
        if not self._known:
            return []
        return [f"{len(self._known)} run(s) in flight on launcher {self.launcher}, taken over "
                f"by the next launcher once its lease ({self.leases.lease_seconds:g} s) runs out: "
                + ", ".join(str(r)[:8] for r in sorted(self._known))]

    # -- the Reactor protocol ---------------------------------------------------------------

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        self.deployment = await run_specs.deployment_of(self.store)
        await tg.start(self.gateway.serve, name="props-model-gateway")
        if (short := await agent_roles.connections_short(self.store, self.capacity)):
            log.warning("%s", short)
        await agent_roles.reap(self.store)
        await self._reap_orphans()
        await launchers.announce(self.store, catalog.LauncherStarted(
            name=self.launcher, capacity=self.capacity, runtimes=sorted(self.runtimes),
            engine=self.engine, lease_seconds=self.leases.lease_seconds))
        await self._resume_unfinished()
        tg.start_soon(_every, SWEEP_SECONDS, "launcher sweep", self._sweep,
                      name="props-launcher-sweep")
        tg.start_soon(_every, max(0.5, self.leases.lease_seconds / 4), "lease check",
                      self._take_over, name="props-launcher-leases")
        tg.start_soon(_every, WATCHDOG_SECONDS, "agent watchdog", self._watchdog,
                      name="props-launcher-agent-watchdog")

    async def _resume_unfinished(self) -> None:
        for row in await self.store.sql.fetch(_Q["unfinished_runs"]):
            self._queue(streams.run_id_of(row["stream_id"]))

    async def _sweep(self) -> None:
        """Take up again every unfinished run not in hand (a run let go after repeated
        transient failures, an engine away for minutes, is not left behind), drop the
        roles of finished runs whose clean-up a lost connection cut short, and remove the
        containers of finished runs from this launcher's engines (another launcher's run
        that failed because that launcher lost its way to the same engine leaves one)."""
        await self._resume_unfinished()
        await agent_roles.reap(self.store)
        await self._reap_orphans()

    async def _take_over(self) -> None:
        """Queue the runs of launchers whose lease ran out: each is claimed from them (by
        this launcher or another that checks too) when a slot is free."""
        for name, runs in (await self.leases.expired()).items():
            log.warning("launcher %s is gone (no lock for %.0f s): taking over its %d "
                        "unfinished run(s)", name, self.leases.lease_seconds, len(runs))
            for run_id in runs:
                self._taking_over[run_id] = name
                self._queue(run_id)

    async def _watchdog(self) -> None:
        """End agent sessions that overrun their statement or transaction limits: an agent
        may SET its role's timeouts away, and a transaction it held open would stall the
        visibility fence of every reader."""
        if ended := await agent_roles.end_overruns(self.store):
            log.warning("ended %d agent session(s) that overran their limits", ended)

    async def handle(self, rec: RecordedEvent) -> None:
        e = rec.event
        if isinstance(e, catalog.RunRequested):
            self._queue(e.run_id)
        elif isinstance(e, catalog.RunCancelRequested):
            self._cancelled.add(e.run_id)
            self._queue(e.run_id)  # a run not seen yet (or finished) is settled by _run
        elif isinstance(e, catalog.RunReleased) and e.launcher != self.launcher:
            self._queue(e.run_id)  # another launcher's engine is away: this one may take it

    # -- running ----------------------------------------------------------------------------

    def _queue(self, run_id: uuid.UUID) -> None:
        if run_id in self._known:
            return
        assert self._tg is not None, "start() first"
        self._known.add(run_id)
        self._tg.start_soon(self._run_guarded, run_id,
                            name=container_name(self.deployment, run_id))

    async def _reap_orphans(self) -> None:
        await run_cleanup.reap_orphans(self.store, self.runtimes.values(), self.deployment)

    async def _run_guarded(self, run_id: uuid.UUID) -> None:
        """Carry the run out under the launcher's retry policy (run_attempts)."""
        async def fail(exc: BaseException, category: str | None) -> None:
            await self._fail_run(run_id, exc, category=category)

        try:
            try:
                ticket = await self.tickets.of(run_id)
            except Exception as exc:  # (the database away: queued as nobody's, not lost)
                log.warning("run %s: cannot read whose it is (%s); queued as nobody's",
                            run_id, type(exc).__name__)
                ticket = fair_queue.Ticket("")
            slot = self._slots.slot(ticket)
            await run_attempts.carry_out(
                run_id, lambda: self._run(run_id, slot), slot, fail,
                lambda: self.engine_wait,
                lambda: launchers.release(self.store, run_id, self.launcher))
        finally:
            self._known.discard(run_id)

    async def _append(self, run_id: uuid.UUID, what: str, event: Event,
                      state: RunState, expected_version: int | None = None) -> None:
        event_id = lifecycle_id(run_id, what)
        if event_id in state.stored:
            return
        await self.store.append(streams.run(run_id), [NewEvent(event, event_id,
                                                           {"actor": "launcher"})],
                                expected_version=expected_version)
        state.stored.add(event_id)

    async def _finish(self, state: RunState, status: catalog.TerminalStatus,
                      failure: catalog.Failure | None = None, *,
                      unless_moved: bool = False) -> None:
        """The run's end recorded; `unless_moved`: only if its stream is still where
        `state` read it (ConcurrencyConflict otherwise), for a launcher that no longer
        holds its claim."""
        run_id = state.requested.run_id
        t = state.totals
        await self._append(run_id, "finished", catalog.RunFinished(
            run_id=run_id, status=status, failure=failure, tokens_in=t.tokens_in,
            tokens_out=t.tokens_out, cost_usd=t.cost_usd), state,
            state.version if unless_moved else None)
        self.stats.finished += 1

    async def _run(self, run_id: uuid.UUID, slot: fair_queue.Slot | None = None) -> None:
        """One attempt at the run, from where its stream says it stands: settled, claimed,
        contained and watched, then finished and cleaned up. `slot` (the one it runs
        under) is handed on once the run is finished: its clean-up (the container removed,
        the role dropped) holds no slot another run is waiting for."""
        records = await self.store.read_stream(streams.run(run_id))
        state = fold_run(records)
        if state is None or records[0].imported:
            return  # (an imported run is another database's history: never carried out here)
        if state.finished:
            # Finished, perhaps by an attempt that failed while cleaning up (the engine went
            # away): make sure nothing of it is left. Every step is a no-op when done.
            if slot is not None:
                slot.give_back()
            await self._clean_up(run_id)
            return
        if state.cancel_requested and not state.container_started:
            await self._finish(state, "cancelled")
            return
        if state.claim is None and not await self._fits(state):
            return
        claimed = await self._claim(state)
        if claimed is None:
            return
        launchable = await self._launchable(claimed)
        if launchable is None:
            return
        exited = await self._exited(claimed, *launchable)
        binding = await agent_roles.binding(self.store, run_id)
        if claimed.totals.malformed:  # the reason quotes the agent: the log, not an event
            log.warning("run %s reported something malformed: %s", run_id,
                        claimed.totals.malformed)
        # (the caps the binding was opened with: a grant changed since does not move them)
        capped = None if binding is None or not binding.over_cap else caps.reached(
            binding.cap_reached, binding.events, dataclasses.replace(
                claimed.caps, max_events=binding.max_events, max_bytes=binding.max_bytes))
        status, failure = verdict(claimed, exited, claimed.requested, capped)
        # A stop arriving now waits for these few steps (to its deadline): a finished run
        # keeps nothing.
        with self.stop.shielded(f"finishing run {run_id}", at_most=60):
            await self._finish(claimed, status, failure)
            if slot is not None:
                slot.give_back()
            await self._clean_up(run_id)

    async def _claim(self, state: RunState) -> RunState | None:
        """The run claimed by this launcher (None: another's, alive, or finished meanwhile);
        one taken over whose container this launcher cannot reach is given up (dropping
        the run's role cuts it off the log), never started a second time."""
        run_id = state.requested.run_id
        taken_from = state.claim if state.claim != self.launcher else None
        claimed = await launchers.claim(self.store, state, self.launcher,
                                        self._taking_over.get(run_id))
        if claimed is None:
            return None
        self._taking_over.pop(run_id, None)
        if taken_from is not None and claimed.container_started and \
                not await holds(self.runtimes.values(),
                                container_name(self.deployment, run_id)):
            await self._finish(claimed, "failed", catalog.Failure.of("run", "launcher_lost"))
            await self._clean_up(run_id)
            return None
        return claimed

    async def _fits(self, state: RunState) -> bool:
        """Whether this launcher can launch the run, asked before it claims it: a runtime of
        its definition's kind whose engine holds (or can pull) its image. A run it cannot
        launch is left to the other launchers alive (a Podman launcher beside Docker's never
        takes Docker's runs); with none, it is claimed and failed saying why, not left
        waiting for nobody."""
        req = state.requested
        found = await definitions.resolve(self.store, req.agent_type, req.definition,
                                          req.definition_ref)
        why = None if found is None else await self._cannot_launch(found)
        if why is None:  # (a missing definition is failed, as such, once claimed)
            return True
        others = [o.name for o in await launchers.status(self.store)
                  if o.alive and o.name != self.launcher]
        if others:
            log.info("run %s: %s on launcher %s; left to %s", req.run_id, why, self.launcher,
                     ", ".join(others))
            return False
        claimed = await self._claim(state)
        if claimed is not None:
            await self._finish(claimed, "failed", catalog.Failure.of("launch", why))
            await self._clean_up(req.run_id)
        return False

    async def _cannot_launch(self, definition: catalog.DefinitionPushed) -> str | None:
        """Why this launcher cannot launch `definition` (a failure category), or None."""
        rt = self.runtimes.get(definition.runtime)
        if rt is None:
            return "runtime_unavailable"
        image = definition.image or definition.digest
        try:
            if isinstance(rt, HoldsImages) and not await rt.has_image(image):
                return "image_missing"
        except EngineUnreachable:  # not a "no": the attempt waits for the engine, as for any
            return None
        return None

    async def _launchable(self, state: RunState,
                          ) -> tuple[catalog.DefinitionPushed, ContainerRuntime] | None:
        """The run's definition and the runtime it runs on (None: the run is failed)."""
        definition = await self._definition(state)
        if definition is None:
            await self._finish(state, "failed",
                               catalog.Failure.of("launch", "definition_missing"))
            return None
        granted = await endpoints.grant_of(self.store, definition.agent_type, definition.digest)
        if endpoints.ungranted(definition, granted):  # described, never granted: said so
            await self._finish(state, "failed", catalog.Failure.of("launch", "not_granted"))
            await self._clean_up(state.requested.run_id)
            return None
        definition = endpoints.as_granted(definition, granted)  # what its runs get
        state.caps = caps.in_force(granted, state.requested)
        rt = self.runtimes.get(definition.runtime)
        if rt is None:  # e.g. an image definition, and this launcher has no Docker engine
            await self._finish(state, "failed",
                               catalog.Failure.of("launch", "runtime_unavailable"))
            await self._clean_up(state.requested.run_id)
            return None
        return definition, rt

    async def _exited(self, state: RunState, definition: catalog.DefinitionPushed,
                      rt: ContainerRuntime) -> catalog.ContainerExited:
        """The container's end as recorded: waited for (started or adopted, and watched)
        unless an earlier attempt recorded it; then what the agent reported last drained."""
        run_id = state.requested.run_id
        if state.container_exited is not None:
            state.grading = await grader_runs.task_of_run(self.store, definition,
                                                          state.requested)
            await agent_roles.drain(self.store, run_id, state.stored, state.totals,
                                    state.grading)
            return state.container_exited
        await self._contain(state, definition, rt)
        outcome, killed_for = await run_watch.watch(self.store, rt, state, self._cancelled,
                                                   self.deployment)
        logs = await rt.logs(container_name(self.deployment, run_id))
        started = state.started_at or state.requested_at
        exited = catalog.ContainerExited(
            run_id=run_id, exit_code=outcome.exit_code, oom_killed=outcome.oom_killed,
            killed_for=killed_for,
            logs_sha256=await self.store.put_blob(logs) if logs else None,
            duration_seconds=max(0.0, (datetime.now(UTC) - started).total_seconds()))
        await self._append(run_id, "container.exited", exited, state)
        return exited

    async def _clean_up(self, run_id: uuid.UUID) -> None:
        self.gateway.retire(run_id)
        await run_cleanup.clean_up(self.store, self.runtimes.values(), self.work_dir,
                                   self.deployment, run_id)

    async def _fail_run(self, run_id: uuid.UUID, exc: BaseException, *,
                        category: str | None = None) -> None:
        """A run that cannot succeed by retrying (no image, no snapshot, a refused append):
        it fails with the error's category (`faults.category_of`: its class's name unless it
        says one) or `category`, never its message (it may hold secrets or the agent's
        words); retryable as the retry rule says. Whatever goes wrong here stays with this
        run: the launcher goes on with the others, and the sweep takes this one up again."""
        try:
            for _ in range(FAIL_TRIES):
                state = fold_run(await self.store.read_stream(streams.run(run_id)))
                if state is None or state.finished or \
                        state.claim not in (None, self.launcher):
                    return  # (released, and another launcher's now)
                phase = "report" if state.container_started else "launch"
                # Compare-and-set: a run this launcher gave back may be claimed by another
                # between the read and the append (chaos seed 10: failed engine_unreachable
                # here after a launcher whose engine answers had claimed it).
                try:
                    await self._finish(state, "failed", catalog.Failure.of(
                        phase, category or faults.category_of(exc)), unless_moved=True)
                    break
                except errors.ConcurrencyConflict:
                    continue  # (read again: whose it is now decides)
            else:
                log.error("run %s: its stream moved %d times as its failure was recorded; "
                          "the sweep tries again", run_id, FAIL_TRIES)
                return
            await self._clean_up(run_id)  # a container may exist already
        except Exception as second:
            log.error("run %s: could not record its failure (%s: %s); the sweep tries again",
                      run_id, type(second).__name__, second)

    async def _definition(self, state: RunState) -> catalog.DefinitionPushed | None:
        req = state.requested
        ref = state.started.digest if state.started else req.definition_ref
        found = await definitions.resolve(self.store, req.agent_type, req.definition, ref)
        if found is not None and state.started is None:
            await self._append(req.run_id, "started", catalog.RunStarted(
                run_id=req.run_id, digest=found.digest), state)
            # Within milliseconds of the recorded time, which a restart reads instead.
            state.started_at = datetime.now(UTC)
        return found

    async def _contain(self, state: RunState, definition: catalog.DefinitionPushed,
                       rt: ContainerRuntime) -> None:
        """Start the run's container, or adopt the one an earlier attempt started (by
        name: starting it again is a no-op)."""
        run_id = state.requested.run_id
        credentials = await agent_roles.create(self.store, run_id, state.caps,
                                               state.requested.agent_type)
        spec = await self.specs.spec(state, definition, credentials, rt, self.deployment)
        try:
            container_id = await rt.start(spec)
        except StartCut as cut:
            container_id = await self._start_again(run_id, rt, spec, cut)
        if state.container_started:
            self.stats.adopted += 1
            return
        self.stats.launched += 1
        await self._append(run_id, "container.started", catalog.ContainerStarted(
            run_id=run_id, runtime=rt.kind,
            container_name=container_name(self.deployment, run_id),
            container_id=container_id), state)

    async def _start_again(self, run_id: uuid.UUID, rt: ContainerRuntime,
                           spec: ContainerSpec, cut: StartCut) -> str:
        """The run's container made again after its engine's restart cut a start of it:
        removed first (whatever of it may have run is gone with it), then started anew only
        if its agent recorded nothing and called no model through the gateway; else the run
        is lost (run_lost, retryable), never carried out twice."""
        await rt.remove(spec.name)
        binding = await agent_roles.binding(self.store, run_id)
        called = await self.store.read_stream(streams.gateway(run_id), limit=1)
        if called or (binding is not None and (binding.events or binding.bytes)):
            raise RunLost(f"run {run_id}: {cut}; its agent had recorded "
                          f"{0 if binding is None else binding.events} event(s)"
                          f"{' and called a model' if called else ''}: not started again"
                          ) from cut
        log.warning("run %s: %s; removed it and starting it anew (its agent recorded "
                    "nothing and called no model)", run_id, cut)
        return await rt.start(spec)
