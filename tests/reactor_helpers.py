"""Shared by the reactor tests: agent definitions from code, and waiting for runs."""

from __future__ import annotations

import contextlib
import json
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path

import anyio

from props.core.domain import catalog, definitions, endpoints
from props.core.domain.specimens import specimen_sync, specimens
from props.core.log.store import EventStore
from props.reactors.runtimes.container_runtime import ContainerRuntime
from props.reactors.service import Service
from props.tools.bundled import samples

SNAPSHOT = "csvtool/2025-09-03-00"

# An agent that reports `N` issues (from the SDK), after sleeping `SLEEP` seconds.
QUICK_AGENT = """
import os, time
from props.reactors.agents.sdk import Agent
with Agent.from_environment() as a:
    time.sleep(float(a.task.config.get("sleep", 0)))
    a.prompt("review " + ",".join(a.files()))
    for n in range(int(a.task.config.get("issues", 2))):
        a.issue("csvtool/cli.py", 37 + n, 40 + n, "why")
    a.phase("review")
"""


async def sync_samples(store: EventStore) -> None:
    folder = samples.samples_dir()
    await specimen_sync.sync(store, str(folder), specimens.load_valid(folder))


async def sync_specimen(store: EventStore, folder: Path, slug: str,
                        files: Mapping[str, str | bytes], finding: tuple[str, int],
                        rationale: str = "a find") -> None:
    """A specimen `slug` of `files` under `folder`, its ground truth one finding (a path and
    a line), synced into the log."""
    code = folder / slug / "code"
    for rel, content in files.items():
        (code / rel).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (code / rel).write_bytes(content)
        else:
            (code / rel).write_text(content)
    path, line = finding  # (JSON's strings are TOML's basic strings)
    (folder / slug / "ground_truth.toml").write_text(
        f'[[tp]]\nid = "the-find"\nseverity = "high"\nrationale = {json.dumps(rationale)}\n'
        f'occurrences = [ {{ {json.dumps(path)} = [[{line}, {line}]] }} ]\n')
    await specimen_sync.sync(store, str(folder), specimens.load_valid(folder))


async def push_code(store: EventStore, name: str, code: str, *,
                    config: dict[str, object] | None = None, **limits: object,
                    ) -> catalog.DefinitionPushed:
    command = [sys.executable, "-c", code]
    d = catalog.DefinitionPushed(
        agent_type="critic", name=name, tag="test", runtime="local", image=f"local:{name}",
        command=command, config=config or {},
        digest=definitions.local_digest(command, config or {}),
        limits=catalog.AgentLimits.model_validate(limits))
    await definitions.push(store, d)
    return d


async def register_endpoint(store: EventStore, name: str, base_url: str, *,
                            key_env: str | None = None, **settings: object) -> None:
    """An endpoint the operator registered (the gateway forwards runs' calls to it)."""
    await endpoints.register(store, catalog.EndpointRegistered.model_validate(
        {"name": name, "base_url": base_url, "key_env": key_env, **settings}))


async def eventually(check: Callable[[], Awaitable[bool] | bool], seconds: float = 240) -> None:
    """Wait until `check()` holds (polling: the tests watch the log from outside). `seconds`
    is a ceiling for a test that would otherwise hang, never a deadline a test asserts: a
    loaded 2-core machine runs everything several times slower."""
    with anyio.fail_after(seconds):
        while True:
            result = check()
            if result if isinstance(result, bool) else await result:
                return
            await anyio.sleep(0.05)


async def request(store: EventStore, definition: str, *, count: int = 1,
                  timeout_seconds: float = 300, budget: float = 1.0, ref: str = "latest",
                  model: str = "test-model") -> list[uuid.UUID]:
    ids = []
    for _ in range(count):
        run_id = uuid.uuid4()
        await store.append(f"run-{run_id}", [catalog.RunRequested(
            run_id=run_id, agent_type="critic", definition=definition, definition_ref=ref,
            example=catalog.Example(snapshot=SNAPSHOT), model=model,
            timeout_seconds=timeout_seconds, budget_usd=budget)])
        ids.append(run_id)
    return ids


async def finished(store: EventStore, run_ids: Sequence[uuid.UUID],
                   seconds: float = 240) -> dict[uuid.UUID, catalog.RunFinished]:
    """Wait until every run has finished; its finish event by run."""
    done: dict[uuid.UUID, catalog.RunFinished] = {}

    async def all_done() -> bool:
        for run_id in run_ids:
            if run_id not in done:
                for rec in await store.read_stream(f"run-{run_id}"):
                    if isinstance(rec.event, catalog.RunFinished):
                        done[run_id] = rec.event
        return len(done) == len(run_ids)

    await eventually(all_done, seconds)
    return done


@contextlib.asynccontextmanager
async def serving(store: EventStore, runtimes: list[ContainerRuntime]) -> AsyncIterator[Service]:
    """The launcher, the grader and the projection runner, in this process, for the block."""
    service = Service(store, runtimes, poll_interval=0.1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        try:
            yield service
        finally:
            tg.cancel_scope.cancel()


async def request_reference(store: EventStore, *, count: int = 1) -> list[uuid.UUID]:
    """Runs of the reference critic (pushed as a local command) on the csvtool sample."""
    return await request(store, "reference", count=count, ref="local", model="ref", budget=0)
