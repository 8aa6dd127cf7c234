"""What a finished run leaves behind, removed: its agent role, its container on every engine
the launcher has, its work folder; and the containers of this database's finished runs that
a crash left (orphans). Every step is a no-op when done, so it is repeated freely: after a
finish, at a sweep, at a launcher's start."""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path

import anyio.to_thread

from props.core.domain import streams
from props.core.log.store import EventStore
from props.reactors.launcher import agent_roles
from props.reactors.launcher.run_specs import container_name, run_of_container
from props.reactors.launcher.run_state import fold_run
from props.reactors.runtimes.container_runtime import (
    DEPLOYMENT_LABEL,
    ContainerRuntime,
    EngineUnreachable,
)

log = logging.getLogger("props.reactors.launcher")


async def clean_up(store: EventStore, runtimes: Iterable[ContainerRuntime], work_dir: Path,
                   deployment: str, run_id: uuid.UUID) -> None:
    await agent_roles.drop(store, run_id)
    for rt in runtimes:
        try:
            await rt.remove(container_name(deployment, run_id))
        except EngineUnreachable:  # its containers are reaped when it is back
            log.warning("run %s: the %s engine does not answer; its container (if any) "
                        "is removed when it is back", run_id, rt.kind)
    await anyio.to_thread.run_sync(
        lambda: shutil.rmtree(work_dir / str(run_id), ignore_errors=True))


async def reap_orphans(store: EventStore, runtimes: Iterable[ContainerRuntime],
                       deployment: str) -> None:
    """Containers of this database's runs that are finished (a crash between exit and
    removal). Containers of other databases on the same engine are not ours to touch."""
    for rt in runtimes:
        try:
            found = await rt.names(DEPLOYMENT_LABEL)
        except Exception as exc:  # an engine away now: its orphans wait for next time
            log.warning("cannot list %s containers to reap orphans (%s)", rt.kind, exc)
            continue
        for name, owner in found.items():
            run_id = run_of_container(name)
            if owner != deployment or run_id is None:
                continue
            state = fold_run(await store.read_stream(streams.run(run_id)))
            if state is None or state.finished:
                try:
                    await rt.remove(name)
                except Exception as exc:  # one that will not go keeps none of the others
                    log.warning("cannot remove the %s container %s of a finished run now "
                                "(%s: %s); the next sweep tries again", rt.kind, name,
                                type(exc).__name__, exc)
