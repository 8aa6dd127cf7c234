"""What must hold after chaos: every run once, no event lost or doubled, projections equal
to a rebuild, no breach by the hostile critic, no orphan container; printed as a table."""

from __future__ import annotations

import collections
import dataclasses
import uuid
from pathlib import Path

import aiodocker
import anyio
import anyio.abc

from props.core.domain import catalog, streams
from props.core.log import errors
from props.core.log.store import EventStore
from props.projections import engine
from props.projections import status as projection_status
from props.reactors.launcher import run_specs
from props.reactors.runtimes import docker_runtime
from props.reactors.runtimes.container_runtime import LABEL
from props.reactors.runtimes.docker_runtime import DockerRuntime
from props.reactors.runtimes.local_runtime import LocalRuntime
from props.schema import queries
from props.tools.checks import hostile_critic
from props.tools.checks.chaos.harness import DOOMED, NOT_INJECTED, SPARE, Chaos, log_prefix, retry
from props.tools.command_line.render import Console, Table

_Q = queries.load("chaos")

console = Console(highlight=False, stderr=True)


@dataclasses.dataclass
class Invariant:
    name: str
    held: bool | None  # None: not checked (NORUN)
    detail: str

    @property
    def verdict(self) -> str:
        return "NORUN" if self.held is None else ("HELD" if self.held else "BROKEN")


async def drain(chaos: Chaos, seconds: float) -> bool:
    store = chaos.store
    with anyio.move_on_after(seconds):
        while True:
            finished = await retry(lambda: store.sql.fetchval(
                _Q["finished_runs"], [streams.run(r) for r in chaos.requested]))
            pending = await retry(lambda: store.sql.fetchval(_Q["grading_pending"]))
            status = await retry(lambda: projection_status.of(store))
            if finished == len(chaos.requested) and pending == 0 \
                    and not any(s.lag_events for s in status) \
                    and await _left_behind(chaos) == ([], 0):
                return True  # (a container left by a launcher that lost its engine: the
                # others' sweep removes it, so the drain waits for that too)
            await anyio.sleep(0.5)
    return False


RESUME_SECONDS = 10.0


async def _resume_projections(store: EventStore) -> None:
    """A projection runner started once more, the services stopped, resumes from the
    checkpoints committed with the rows: folding on from there must leave what a clean
    rebuild gives. Whether the faults killed a runner that led at a moment where folding
    again shows (an additive table, after events it had folded) is chance; this restart is
    not (a checkpoint written apart from its rows, the negative control's broken build,
    was caught in most runs and missed in one whole-suite run of 12-07). Until the
    projections stand at the log's head, or RESUME_SECONDS: a runner whose checkpoint never
    moves never gets there."""
    runner = engine.Runner(store, poll_interval=0.2)
    with anyio.move_on_after(RESUME_SECONDS):
        async with anyio.create_task_group() as tg:
            tg.start_soon(runner.run, name="chaos-resumed-runner")
            while any(s.lag_events for s in await retry(  # noqa: ASYNC110
                    lambda: projection_status.of(store))):
                await anyio.sleep(0.2)
            tg.cancel_scope.cancel()


async def caught_up_watch(chaos: Chaos) -> None:
    total = await retry(lambda: chaos.store.sql.fetchval(_Q["event_count"]))
    with anyio.move_on_after(30):
        while True:
            if len(chaos.seen) >= total:
                return
            await anyio.sleep(0.1)


async def check(chaos: Chaos, drained: bool) -> list[Invariant]:
    store = chaos.store
    out = [Invariant("drained in time", drained, "every run finished, graded and projected"
                     if drained else "work was left when the drain time ran out")]
    finishes: dict[uuid.UUID, int] = {}
    containers: dict[uuid.UUID, int] = {}
    for run_id in chaos.requested:
        types = [r.type_name for r in await store.read_stream(streams.run(run_id))]
        finishes[run_id] = types.count("run.finished")
        containers[run_id] = types.count("container.started")
    wrong = [r for r, n in finishes.items() if n != 1]
    out.append(Invariant("every run in exactly one terminal state", not wrong,
                         f"{len(chaos.requested)} runs; {len(wrong)} with "
                         f"{sorted({finishes[r] for r in wrong}) or 'no'} finishes"))
    requests = [r.type_name for run_ids in chaos.api_answers.values() for run_id in run_ids
                for r in await store.read_stream(streams.run(run_id))
                if r.type_name == "run.requested"]
    split = [n for n, run_ids in chaos.api_answers.items() if len(run_ids) != 1]
    out.append(Invariant(
        "every API request is one run", bool(chaos.api_answers) and not split
        and len(requests) == len(chaos.api_answers),
        f"{len(chaos.api_answers)} requests over HTTP ({chaos.api_retries} retries after a "
        f"refused or lost answer), {len(requests)} run.requested events, {len(split)} "
        f"requests answered with two runs"))
    doubled = [r for r, n in containers.items() if n > 1]
    out.append(Invariant("no run with two containers", not doubled,
                         f"{len(doubled)} run(s) started more than one container"))
    ungraded = await store.sql.fetchval(_Q["ungraded_issues"])
    issues = await store.sql.fetchval(_Q["reported_issues"])
    out.append(Invariant("every finished run fully graded by the active scorer",
                         ungraded == 0 and issues > 0,
                         f"{issues} issues, {ungraded} without a grade"))
    await _resume_projections(store)
    before = await projection_status.snapshot_rows(store)
    await engine.rebuild(store)
    after = await projection_status.snapshot_rows(store)
    differ = [t for t in before if before[t] != after[t]]
    out.append(Invariant("projections equal a clean rebuild", not differ,
                         f"{sum(len(v) for v in after.values())} rows, a runner resumed "
                         f"once more from their checkpoints; differing: "
                         f"{', '.join(differ) or 'none'}"))
    total = await store.sql.fetchval(_Q["event_count"])
    once = len(chaos.seen) == len(set(chaos.seen)) == total
    out.append(Invariant("the subscriber saw every event once", once,
                         f"{len(chaos.seen)} delivered, {len(set(chaos.seen))} distinct, "
                         f"{total} in the log"))
    changed = []
    for fence, count, digest in chaos.prefixes:
        now_count, now_digest = await log_prefix(store, fence)
        if (now_count, now_digest) != (count, digest):
            changed.append(f"before fence {fence}: {count} rows then, {now_count} now"
                           f"{'' if now_count != count else ', changed'}")
    out.append(Invariant("no event lost or changed", not changed,
                         f"{len(chaos.prefixes)} prefixes of the log (each before the fence "
                         f"of its time) re-hashed; differing: {'; '.join(changed) or 'none'}"))
    out.append(await _taken_over(chaos))
    out.append(await _engine_gone(chaos))
    out.append(await _hostile(chaos))
    out.append(await _orphans(chaos))
    out.append(Invariant("no service process died on its own", not chaos.crashes,
                         "; ".join(c.splitlines()[0] for c in chaos.crashes) or
                         "every exit was a fault's SIGKILL or the final SIGTERM"))
    for crash in chaos.crashes:
        console.print(crash, style="red")
    for fault, why in NOT_INJECTED.items():
        out.append(Invariant(f"survives {fault}", None, f"not injected: {why}"))
    return out


async def _taken_over(chaos: Chaos) -> Invariant:
    """The spare launcher, killed for good, holds no unfinished run: each was taken over."""
    if not any(kind == "kill-launcher" and not detail.startswith("NORUN")
               for _, kind, detail in chaos.faults):
        return Invariant("a dead launcher's runs taken over", None,
                         "not injected: no kill-launcher fault in this run")
    taken = lost = 0
    left = []
    for run_id in chaos.requested:
        events = [r.event for r in await chaos.store.read_stream(streams.run(run_id))]
        claims = [e for e in events if isinstance(e, catalog.RunClaimed)]
        finished = [e for e in events if isinstance(e, catalog.RunFinished)]
        if any(c.takes_over == SPARE for c in claims):
            taken += 1
            lost += any(f.failure is not None and f.failure.category == "launcher_lost"
                        for f in finished)
        elif claims and claims[-1].launcher == SPARE and not finished:
            left.append(run_id)
    return Invariant("a dead launcher's runs taken over", not left,
                     f"{taken} run(s) taken over from launcher {SPARE} ({lost} failed as "
                     f"launcher_lost: their containers ran on its own engine); "
                     f"{len(left)} left unfinished")


async def _engine_gone(chaos: Chaos) -> Invariant:
    """The doomed launcher's Docker runs that had not exited when its engine went away all
    fail as engine_unreachable; no other run does (local runs on that launcher included)."""
    name = "an engine gone for good fails its runs only"
    if chaos.gone_at is None:
        return Invariant(name, None, "not injected: no engine-gone fault in this run "
                                     "(or no Docker engine on a Unix socket)")
    theirs, handed, wrong = 0, 0, []
    for run_id in chaos.requested:
        records = await chaos.store.read_stream(streams.run(run_id))
        events = [r.event for r in records]
        claims = [e for e in events if isinstance(e, catalog.RunClaimed)]
        exited_before = any(isinstance(r.event, catalog.ContainerExited)
                            and r.recorded_at < chaos.gone_at for r in records)
        finish = next((e for e in events if isinstance(e, catalog.RunFinished)), None)
        unreachable = finish is not None and finish.failure is not None \
            and finish.failure.category == "engine_unreachable"
        on_it = bool(claims) and claims[-1].launcher == DOOMED and not exited_before \
            and isinstance(events[0], catalog.RunRequested) \
            and events[0].definition == "chaos-docker"
        theirs += on_it
        # In flight on it when it went, then given back and adopted by a launcher whose
        # engine answers (the container lives on the shared engine): not its to fail.
        handed += len(claims) > 1 and any(c.launcher == DOOMED for c in claims[:-1]) \
            and not exited_before and claims[-1].launcher != DOOMED
        if on_it != unreachable:
            ended = "unfinished" if finish is None else \
                finish.failure.category if finish.failure else finish.status
            wrong.append(f"{str(run_id)[:8]} ({'on it' if on_it else 'elsewhere'}: {ended})")
    return Invariant(name, not wrong,
                     f"{theirs} Docker run(s) of launcher {DOOMED} in flight or claimed after "
                     f"its engine went, each failed as engine_unreachable; {handed} given "
                     f"back and finished by another launcher; wrong: "
                     f"{', '.join(wrong[:5]) or 'none'}")


async def _hostile(chaos: Chaos) -> Invariant:
    """Each hostile run ended failed (never completed), and what it reported of its tries
    (when it got that far: a fault may have killed it first) shows no breach."""
    runs = await chaos.store.sql.fetch(
        _Q["hostile_runs"], [streams.run(r) for r in chaos.requested])
    statuses: list[str] = []
    breaches: list[str] = []
    reported = 0
    for row in runs:
        for rec in await chaos.store.read_stream(row["stream_id"]):
            if isinstance(rec.event, catalog.RunFinished):
                statuses.append(rec.event.status)
            elif isinstance(rec.event, catalog.ContainerExited) and rec.event.logs_sha256:
                found = hostile_critic.report_in(
                    await chaos.store.get_blob(rec.event.logs_sha256))
                if found is not None:
                    reported += 1
                    breaches += found["breaches"]
    held = bool(runs) and statuses.count("completed") == 0 and not breaches and reported > 0
    return Invariant("hostile critics fail alone and breach nothing", held,
                     f"{len(runs)} hostile run(s), ended {sorted(set(statuses))}; "
                     f"{reported} reported their tries; breaches: "
                     f"{', '.join(sorted(set(breaches))) or 'none'}")


async def _left_behind(chaos: Chaos) -> tuple[list[tuple[str, str]], int]:
    """The containers (runtime and name, local and Docker) and agent roles of this run's
    runs that exist."""
    ours = {str(r) for r in chaos.requested}
    local = LocalRuntime(chaos.home / "runs" / "local-containers", trust_commands=True)
    left = [(local.kind, n) for n, v in (await local.names(LABEL)).items() if v in ours]
    if await docker_runtime.reachable():
        async with DockerRuntime.connect() as docker:
            left += [(docker.kind, n) for n, v in (await docker.names(LABEL)).items()
                     if v in ours]
    roles = await retry(lambda: chaos.store.sql.fetchval(
        _Q["roles_left"], list(chaos.requested)))
    return left, int(roles)


async def _orphans(chaos: Chaos) -> Invariant:
    left, roles = await _left_behind(chaos)
    detail = f"{len(left)} container(s), {roles} role(s) left behind"
    runs = []
    for kind, name in left[:3]:  # what their runs' logs say, for whoever reads the table
        run_id = str(run_specs.run_of_container(name))
        runs.append(run_id)
        types = [r.type_name for r in await chaos.store.read_stream(f"run-{run_id}")]
        detail += (f"; {run_id[:8]} ({kind}{await _engine_state(kind, name)}): "
                   f"{' > '.join(t.split('.')[-1] for t in types[-4:])}")
    counts, lines = await anyio.to_thread.run_sync(_log_lines, chaos.home, runs)
    for run_id in runs:
        console.print(f"what the services' logs say of run {run_id} ({counts[run_id]} "
                      "line(s)):", *lines[run_id], sep="\n")
    return Invariant("no orphan container or agent role", not left and roles == 0, detail)


async def _engine_state(kind: str, name: str) -> str:
    """What the Docker engine says of a container left behind (its status, its error)."""
    if kind != DockerRuntime.kind:
        return ""
    try:
        async with DockerRuntime.connect() as docker:
            try:  # (inside: connect() says any error of its block is an engine not reached)
                state = (await docker.docker.containers.get(name))._container["State"]
            except aiodocker.DockerError as exc:
                return f", inspect failed: {exc.message}"
    except errors.StoreUnavailable as exc:
        return f", {exc}"
    status, code = state.get("Status"), state.get("ExitCode")
    error = (state.get("Error") or "")[:200]  # (the engine's words: bounded in the table)
    return f", {status} {code} {error}".rstrip()


def _log_lines(home: Path, run_ids: list[str], most: int = 12,
               ) -> tuple[collections.Counter[str], dict[str, collections.deque[str]]]:
    """The services' log lines that name each run: how many, and the last `most` (the folder
    is kept, but a CI log is all a reader of a failure elsewhere has). Each log is read
    once, a line at a time: a long run's logs are not held in memory."""
    counts: collections.Counter[str] = collections.Counter()
    last = {r: collections.deque[str](maxlen=most) for r in run_ids}
    for log in sorted(home.glob("*.log")):
        with log.open(errors="replace") as lines:
            for line in lines:
                for run_id in run_ids:
                    if run_id in line:
                        counts[run_id] += 1
                        last[run_id].append(f"{log.name}: {line.rstrip()[:300]}")
    return counts, last


def print_invariants(chaos: Chaos, invariants: list[Invariant]) -> None:
    out = Console(highlight=False)
    faults = Table("at (s)", "fault", "what happened", title="faults injected")
    for at, kind, detail in chaos.faults:
        faults.add_row(f"{at:.1f}", kind, detail)
    out.print(faults)
    table = Table("invariant", "verdict", "detail", title="invariants")
    for i in invariants:
        table.add_row(i.name, i.verdict, i.detail)
    out.print(table)
    events = len(set(chaos.seen))
    out.print(f"{len(chaos.requested)} runs, {events} events, {len(chaos.faults)} faults; "
              + ("every invariant held" if all(i.held is not False for i in invariants)
                 else "AN INVARIANT BROKE"))
