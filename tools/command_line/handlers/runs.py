"""What `props runs` does: the handlers that the parsers of
`props.tools.command_line.commands.runs` name."""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pydantic
from rich.text import Text

from props.core.domain import baselines, caps, catalog, definitions, run_requests, streams
from props.core.log import errors
from props.core.log.events import describe_validation_error, details
from props.core.log.store import EventStore
from props.core.scoring import registration
from props.projections import run_pages, run_view
from props.projections import status as projection_status
from props.projections.run_tables import RUNS
from props.tools.command_line import arguments, render
from props.tools.command_line.figure_tables import critic_columns, percent
from props.tools.command_line.render import Column, Console, print_table

T = TypeVar("T")


out = Console(highlight=False)
err = Console(highlight=False, stderr=True)


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

    from props.reactors.runtimes import docker_runtime

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
    if args.local:
        _check_local(command, config, args.name or args.image.split(":")[0])
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
    config = _config(args.config)
    if args.grader:
        definition = definitions.reference_local("grader", config)
    elif args.docker:
        from props.reactors.runtimes import docker_runtime

        definitions.check_reference_config(config)
        async with docker_runtime.DockerRuntime.connect() as rt:
            definition = await docker_runtime.build_reference_image(rt)
        definition = definition.model_copy(update={"config": config})
    else:
        definition = definitions.reference_local("critic", config)
    renamed = {k: v for k, v in (("name", args.name), ("tag", args.tag)) if v is not None}
    definition = definition.model_copy(update=renamed)
    new = await definitions.push(store, definition)
    _say_pushed(definition, new)
    return 0


async def baseline_cmd(args: argparse.Namespace, store: EventStore) -> int:
    """The container baseline whenever an engine answers: whatever the tool imports runs
    in a container, far from props' files; a local command only when asked (`--local`) or
    when no engine answers, and then it says so."""
    from props.reactors.runtimes import docker_runtime

    if not args.local and (args.docker or await docker_runtime.reachable()):
        async with docker_runtime.DockerRuntime.connect() as rt:
            definition = await docker_runtime.build_baseline_image(rt, args.tool)
    else:
        definition = baselines.local(args.tool)
        if not args.local:
            out.print(f"no Docker engine answers (DOCKER_HOST, else the local socket): "
                      f"{args.tool} pushed as a local command instead; it runs beside props "
                      "(docs/internals/reactors.md says as whom)")
    new = await definitions.push(store, definition)
    _say_pushed(definition, new)
    return 0


def _check_local(command: list[str], config: dict[str, Any], name: str) -> None:
    """Refuse, at push time, a local command the launcher will never run: one of props' own
    modules by another interpreter than props' (every run would fail as
    untrusted_local_command). Warn of any other command: it runs only under `props serve
    --trust-local-commands`."""
    from props.reactors.runtimes import local_runtime

    if local_runtime.ships(command):
        if command[-1] == definitions.REFERENCE_MODULE:
            definitions.check_reference_config(config)
        return
    module = command[command.index("-m") + 1] if "-m" in command[:-1] else ""
    if module.startswith("props."):
        works = (f"props definitions reference --name {name} --config FILE"
                 if module == definitions.REFERENCE_MODULE else
                 f"props definitions push --local ... -- {sys.executable} -m {module}")
        raise UntrustedCommand(
            f"refused: the local runtime runs props' modules only with props' own interpreter "
            f"({sys.executable}), so every run of this definition would fail as "
            f"untrusted_local_command; push it as: {works}")
    err.print(Text("warning: the local runtime runs this command only under `props serve "
                   "--trust-local-commands` (else each run fails as untrusted_local_command); "
                   "push an agent you did not write as a Docker image"))


class UntrustedCommand(errors.PropsError):
    """A local definition whose every run would fail: nothing was written."""

    exit_code = 65  # EX_DATAERR: the command the user gave


def _say_pushed(definition: catalog.DefinitionPushed, new: bool) -> None:
    out.print(f"{definition.agent_type} {definition.name}:{definition.tag} "
              f"({definition.runtime}) = "
              f"{definition.digest}" + ("" if new else " (already recorded)"))


async def list_definitions_cmd(args: argparse.Namespace, store: EventStore) -> int:
    rows = [{"type": agent_type, "name": d.name, "tag": d.tag, "runtime": d.runtime,
             "digest": d.digest, "image": d.image or " ".join(d.command)}
            for agent_type in ("critic", "grader")
            for d in await definitions.all_pushed(store, agent_type)]
    render.emit(args, rows, [
        Column("type", "type"), Column("name", "name"), Column("tag", "tag"),
        Column("runtime", "runtime"), Column("digest", "digest", lambda d: str(d)[:19]),
        Column("image", "image / command", optional=True)],
        empty="no definitions pushed: `props definitions reference` pushes one")
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


RUN_COLUMNS = [
    Column("run_id", "run", lambda r: str(r)[:arguments.SHORT]),
    Column("status", "status"), Column("snapshot", "snapshot"),
    # Never left out (a run that reported nothing looks like one that found nothing
    # without it); its short header is what lets a demo's rows fit 80 columns with it.
    Column("issues", "issues", justify="right", short="#"),
    Column("located_recall", "located", percent, justify="right"),
    Column("precision", "precision", percent, short="prec.", justify="right"),
    Column("requested_at", "requested", optional=True),
    Column("scorer", "scored by", optional=True)]


async def list_runs_cmd(args: argparse.Namespace, store: EventStore) -> int:
    found = await run_pages.page(store, run_pages.RunFilter(
        agent_type=None, status=args.status, model=args.model, definition=args.definition,
        snapshot=args.snapshot), args.limit)
    [behind] = await projection_status.of(store, [RUNS])  # the table this lists
    run_ids = [r["run_id"] for r in found.rows]
    active = await registration.active_scorer(store)
    scorer = streams.parse_ref(active) if active else None
    scores = await run_pages.scores_of(store, run_ids, scorer) if run_ids and scorer else {}
    issues = await run_pages.issue_counts(store, run_ids) if run_ids else {}
    rows = [{"run_id": r["run_id"], "status": r["status"], "definition": r["definition"],
             "model": r["model"], "snapshot": r["snapshot"], "issues": issues.get(r["run_id"], 0),
             "located_recall": scores.get(r["run_id"], {}).get("recall"),
             "precision": scores.get(r["run_id"], {}).get("precision"),
             "scorer": active if r["run_id"] in scores else None,
             "requested_at": r["requested_at"]}
            for r in found.rows]
    filters = {k: getattr(args, k) for k in ("status", "model", "definition", "snapshot")}
    render.emit(args, rows, [*RUN_COLUMNS[:2], *critic_columns(rows),
                             *RUN_COLUMNS[2:]],
                empty="no runs" + "".join(f" {'in' if k == 'status' else 'of'} {k} {v}"
                                          for k, v in filters.items() if v))
    if args.format == "table" and found.rows:
        Console().print(f"located recall and precision under {active}, the active "
                        f"scorer (- where it has not scored the run)" if scorer else
                        "no scorer is active: no recall or precision (props scorers activate)")
    if behind.lag_events:
        late = "" if behind.lag_seconds is None else f", {behind.lag_seconds:.0f} s"
        Console(stderr=True).print(
            f"warning: the projections are {behind.lag_events:,} event(s){late} behind the "
            "log: what happened since is not listed yet (`props serve` or `props "
            "projections run` folds it)")
    return 0


ISSUES_SHOWN = 10_000  # a run's issues in one `runs show` (the table's title says the total)


async def show_cmd(args: argparse.Namespace, store: EventStore) -> int:
    args.run_id = await arguments.resolve_run(store, args.run_id)
    shown = await run_pages.shown(store, args.run_id, issues=run_pages.IssuesWanted(
        per_page=ISSUES_SHOWN) if args.format != "csv" else None)
    run, found = shown.detail, shown.found
    timeline = [{"version": rec.stream_version, "recorded_at": rec.recorded_at,
                 "type": rec.type_name, "data": details(rec.event)} for rec in run.events]
    if args.format == "csv":  # (one table: the timeline)
        render.emit(args, timeline, TIMELINE_COLUMNS, empty="")
        return 0
    issues = [_issue_row(i, found.scorer) for i in found.issues] if found else []
    if args.format == "json":
        print(orjson.dumps({
            "run": {k: render.plain(v) for k, v in (run.row or {}).items()}, "status":
            run.status, "partial": shown.header["partial"], **shown.figures,
            "issues": issues,
            "not_found": [t.label for t in found.missed] if found else [],
            "events": [{k: render.plain(v) for k, v in e.items()} for e in timeline]}).decode())
        return 0
    console = Console()
    head = run.row or {}
    console.print(Text(f"run {run.run_id}: {run.status}; {head.get('definition', '?')} "
                       f"(model {head.get('model', '?')}) on {head.get('snapshot', '?')}"))
    if _failed_with_output(run.events):
        console.print(Text(f"its container's output: props runs logs {str(run.run_id)[:8]}"))
    if shown.header["partial"]:
        console.print(Text(f"partial: the run ended {run.status}; its issues below are what "
                           f"it reported before it stopped, and no figure counts them"))
    if cap := _cap_reached(run.events, head.get("definition")):
        console.print(Text(cap))
    if found is not None:
        scores = shown.figures
        console.print(Text(
            f"under {found.scorer}: located recall {percent(scores['located_recall'])} "
            f"(by chance "
            f"{percent(scores['chance'])}), precision "
            f"{percent(scores['precision'])}; " + ", ".join(
                f"{n} {k}" for k, n in sorted(found.kinds.items()))
            if found.scorer else "no scorer has graded it"))
        if issues:
            print_table(console, ISSUE_COLUMNS, issues, wide=args.wide,
                        title=f"{found.total} issue(s)")
        if found.missed:
            console.print(Text("not found: " + ", ".join(t.label for t in found.missed)))
    print_table(console, TIMELINE_COLUMNS, _compact(timeline) if issues else timeline,
                wide=args.wide, title="timeline")
    return 0


def _cap_reached(events: list[Any], definition: str | None) -> str:
    """What the run's event_cap failure says of its cap, if it ended so."""
    return next((caps.said(r.event.failure, definition) for r in events
                 if isinstance(r.event, catalog.RunFinished) and r.event.failure), "")


def _failed_with_output(events: list[Any]) -> bool:
    """Whether the run finished other than completed, a container of it having left output
    (`props runs logs` prints it). From the log: the projections may not have folded it."""
    return any(isinstance(r.event, catalog.RunFinished) and r.event.status != "completed"
               for r in events) and any(
        isinstance(r.event, catalog.ContainerExited) and r.event.logs_sha256 for r in events)


async def logs_cmd(args: argparse.Namespace, store: EventStore) -> int:
    run_id = await arguments.resolve_run(store, args.run_id)
    events = await store.read_stream(streams.run(run_id))
    if not any(isinstance(r.event, catalog.ContainerExited) for r in events):
        raise errors.NotFound(f"run {run_id} has no container output: none of its containers "
                              f"has exited (props runs show {str(run_id)[:8]})")
    text = await run_view.logs(store, events)
    if not text:
        err.print(f"run {run_id}: its container wrote nothing")
        return 0
    lines = text.splitlines()
    if args.tail is not None:
        lines = lines[-args.tail:]
    # Written as it is, never through rich: a `[b]` in a critic's output is text, not markup.
    sys.stdout.write("".join(render.safe(line) + "\n" for line in lines))
    return 0


def _compact(timeline: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The timeline with each run of consecutive `issue.reported` events as one row: the
    issues table above holds them (9 issues took 60 of 99 lines at 80 columns)."""
    out: list[dict[str, Any]] = []
    for row in timeline:
        last = out[-1] if out else None
        if row["type"] == "issue.reported" and last is not None \
                and last["type"] == "issue.reported":
            last["ids"].append(str(row["data"].get("issue_id")))
            last["last_version"] = row["version"]
            continue
        if row["type"] == "issue.reported":
            row = {**row, "ids": [str(row["data"].get("issue_id"))],
                   "last_version": row["version"]}
        out.append(row)
    for row in out:
        if "ids" in row:
            ids = row.pop("ids")
            first, last = row["version"], row.pop("last_version")
            row["version"] = first if first == last else f"{first}-{last}"
            named = " ".join(ids) if len(ids) <= 12 else f"{ids[0]} ... {ids[-1]}"
            row["data"] = {"issues": f"{len(ids)}: {named} (each in the table above)"}
    return out


def _issue_row(issue: run_view.Issue, scorer: str | None) -> dict[str, Any]:
    grade = next((g for g in issue.grades if g.scorer == scorer), None)
    return {"issue_id": issue.issue_id,
            "where": " ".join(f"{e.file}:{e.ranges.replace(', ', ',')}" for e in issue.excerpts),
            "kind": grade.kind if grade else "ungraded", "match": grade.match if grade else "-",
            "grade": grade.grade if grade else None, "severity": issue.severity,
            "rationale": issue.rationale}


ISSUE_COLUMNS = [
    Column("issue_id", "issue"), Column("where", "where", prose=True),
    Column("match", "match"),
    Column("grade", "grade", lambda g: "-" if g is None else f"{g:g}", justify="right",
           optional=True),
    Column("severity", "severity", optional=True),
    Column("rationale", "rationale", prose=True, optional=True)]
TIMELINE_COLUMNS = [
    Column("version", "#", lambda v: str(v), justify="right"),
    Column("recorded_at", "time", lambda at: f"{at:%H:%M:%S.%f}"[:-3]),
    Column("type", "event"),
    Column("data", "details", lambda d: _details(d), prose=True)]
_DIGEST = re.compile(r"\b((?:sha256:)?[0-9a-f]{12})[0-9a-f]{28,}\b")


def _details(data: dict[str, Any]) -> str:
    """An event's fields for people: `key=value`, a digest as its first 12 hex digits (as
    git shortens a commit; --format json has them whole)."""
    return _DIGEST.sub(r"\1", " ".join(
        f"{k}={v if isinstance(v, str) else json.dumps(v, separators=(', ', ': '))}"
        for k, v in data.items()))


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
