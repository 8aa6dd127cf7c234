"""What `props runs` does: the handlers that the parsers of
`props.tools.commands.runs` name."""

from __future__ import annotations

import argparse
import json
import tomllib
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pydantic

from props.core.domain import baselines, catalog, definitions, run_requests
from props.core.log import errors
from props.core.log.events import RecordedEvent, describe_validation_error, details
from props.core.log.store import EventStore
from props.projections import run_pages
from props.projections import status as projection_status
from props.projections.runs import RUNS
from props.tools import arguments, render
from props.tools.render import Console

T = TypeVar("T")


out = Console(highlight=False)


def _config(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        text = path.read_text()
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (OSError, ValueError, RecursionError) as exc:
        raise errors.ConfigurationError(f"cannot read the config {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise errors.ConfigurationError(f"the config {path} must be an object")
    return data


async def image_digest(image: str) -> str:
    import aiodocker  # only commands that talk to Docker pay for its import (0.2 s)

    from props.reactors import docker_runtime

    async with docker_runtime.DockerRuntime.connect() as rt:
        try:
            info = await rt.docker.images.inspect(image)
        except aiodocker.DockerError as exc:
            raise errors.PropsError(f"image {image} is not on the Docker engine ({exc.message})"
                                    f": build or pull it first") from exc
    return str(info["Id"])


async def push_cmd(args: argparse.Namespace, store: EventStore) -> int:
    config = _config(args.config)
    command = list(args.command)
    if args.local and not command:
        raise errors.PropsError("a --local definition needs its command (after --)")
    digest = definitions.local_digest(command, config) if args.local \
        else await image_digest(args.image)
    try:
        definition = catalog.DefinitionPushed(
            agent_type=args.agent_type, name=args.name or args.image.split(":")[0],
            tag=args.tag, digest=digest, runtime="local" if args.local else "docker",
            image=args.image, command=command, config=config, host_python=args.host_python,
            limits=catalog.AgentLimits(network=args.network, cpus=args.cpus,
                                       memory_mb=args.memory_mb, max_events=args.max_events))
    except pydantic.ValidationError as exc:
        raise errors.InvalidEvent(describe_validation_error("definition.pushed", exc)) from exc
    new = await definitions.push(store, definition)
    out.print(f"{definition.agent_type} {definition.name}:{definition.tag} = {digest}"
              + ("" if new else " (already recorded)"))
    return 0


async def reference_cmd(args: argparse.Namespace, store: EventStore) -> int:
    if args.grader:
        definition = definitions.reference_local("grader")
    elif args.docker:
        from props.reactors import docker_runtime

        async with docker_runtime.DockerRuntime.connect() as rt:
            definition = await docker_runtime.build_reference_image(rt)
    else:
        definition = definitions.reference_local()
    new = await definitions.push(store, definition)
    _say_pushed(definition, new)
    return 0


async def baseline_cmd(args: argparse.Namespace, store: EventStore) -> int:
    if args.docker:
        from props.reactors import docker_runtime

        async with docker_runtime.DockerRuntime.connect() as rt:
            definition = await docker_runtime.build_baseline_image(rt, args.tool)
    else:
        definition = baselines.local(args.tool)
    new = await definitions.push(store, definition)
    _say_pushed(definition, new)
    return 0


def _say_pushed(definition: catalog.DefinitionPushed, new: bool) -> None:
    out.print(f"{definition.agent_type} {definition.name}:{definition.tag} "
              f"({definition.runtime}) = "
              f"{definition.digest}" + ("" if new else " (already recorded)"))


async def list_definitions_cmd(args: argparse.Namespace, store: EventStore) -> int:
    rows = [{"type": agent_type, "name": d.name, "tag": d.tag, "runtime": d.runtime,
             "digest": d.digest, "image": d.image or " ".join(d.command)}
            for agent_type in ("critic", "grader")
            for d in await definitions.all_pushed(store, agent_type)]
    render.emit(args.format, rows, [("type", "type"), ("name", "name"), ("tag", "tag"),
                                    ("runtime", "runtime"), ("digest", "digest"),
                                    ("image", "image / command")],
                empty="no definitions pushed: `props definitions reference` pushes one",
                cells={"digest": lambda d: str(d)[:19]})
    return 0


async def request_cmd(args: argparse.Namespace, store: EventStore) -> int:
    name, _, ref = args.definition.partition("@")
    done = await run_requests.request_critic_runs(store, run_requests.CriticRunRequest(
        definition=name, ref=ref or "latest", snapshot=args.snapshot,
        file_set=args.file_set, model=args.model or name, timeout_seconds=args.timeout,
        budget_usd=args.budget, count=args.count, requested_by="props runs request"))
    from props.reactors import host  # (it imports the Docker client: 0.15 s)

    launching = await host.serving(store, "launcher")
    for run_id in done.run_ids:
        out.print(f"requested run {run_id}")
    # The request is an event: nothing runs until a launcher takes it up.
    out.print("a launcher is running: it takes the runs up now (`props runs list` follows "
              "them)" if launching else "no launcher is running on this database: nothing "
              "happens until `props serve` (or `props serve --only launcher`) is started")
    return 0


RUN_COLUMNS = [("run_id", "run"), ("status", "status"), ("definition", "definition"),
               ("model", "model"), ("snapshot", "snapshot"), ("requested_at", "requested")]


async def list_runs_cmd(args: argparse.Namespace, store: EventStore) -> int:
    found = await run_pages.page(
        store, run_pages.RunFilter(agent_type=None, status=args.status), args.limit)
    [behind] = await projection_status.of(store, [RUNS])  # the table this lists
    rows = [{key: r[key] for key, _header in RUN_COLUMNS} for r in found.rows]
    render.emit(args.format, rows, RUN_COLUMNS,
                empty="no runs" + (f" in status {args.status}" if args.status else ""),
                cells={"run_id": lambda r: str(r)[:arguments.SHORT]})
    if behind.lag_events:
        late = "" if behind.lag_seconds is None else f", {behind.lag_seconds:.0f} s"
        Console(stderr=True).print(
            f"warning: the projections are {behind.lag_events:,} event(s){late} behind the "
            "log: what happened since is not listed yet (`props serve` or `props "
            "projections run` folds it)")
    return 0


async def _records(store: EventStore, args: argparse.Namespace) -> list[RecordedEvent]:
    """The run's events; `args.run_id` (a prefix, maybe) becomes the run's whole id."""
    args.run_id = await arguments.resolve_run(store, args.run_id)
    return await run_requests.events_of(store, args.run_id)


async def show_cmd(args: argparse.Namespace, store: EventStore) -> int:
    records = await _records(store, args)
    rows = [{"version": rec.stream_version, "recorded_at": rec.recorded_at,
             "type": rec.type_name, "data": details(rec.event)} for rec in records]
    render.emit(args.format, rows, TIMELINE_COLUMNS, empty="no events", cells={
        "recorded_at": lambda at: f"{at:%H:%M:%S.%f}"[:-3], "data": _short_json})
    return 0


TIMELINE_COLUMNS = [("version", "#"), ("recorded_at", "time"), ("type", "event"),
                    ("data", "details")]


def _short_json(data: object) -> str:
    text = json.dumps(data, separators=(",", ":"))
    return text[:100] + ("…" if len(text) > 100 else "")


async def _on_run(args: argparse.Namespace, store: EventStore,
                  act: Callable[[EventStore, uuid.UUID], Awaitable[T]]) -> T:
    """`act` on the run `args.run_id` names (a prefix, maybe: it becomes the whole id)."""
    args.run_id = await arguments.resolve_run(store, args.run_id)
    return await act(store, args.run_id)


async def cancel_cmd(args: argparse.Namespace, store: EventStore) -> int:
    asked = await _on_run(args, store, lambda store, run: run_requests.cancel(
        store, run, "props runs cancel"))
    out.print(f"cancel requested for run {args.run_id}" if asked else
              f"run {args.run_id} has already finished: nothing to cancel")
    return 0


async def hold_cmd(args: argparse.Namespace, store: EventStore) -> int:
    await _on_run(args, store, lambda store, run: run_requests.hold(
        store, run, args.reason, "props runs hold"))
    out.print(f"run {args.run_id} is held: props archive keeps its events")
    return 0


async def release_cmd(args: argparse.Namespace, store: EventStore) -> int:
    released = await _on_run(args, store, lambda store, run: run_requests.release(
        store, run, "props runs release"))
    out.print(f"run {args.run_id} is no longer held" if released else
              f"run {args.run_id} is not held: nothing to release")
    return 0
