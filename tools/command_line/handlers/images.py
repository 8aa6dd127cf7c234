"""What `props definitions build` does: a critic image that carries what it runs, built on
the Docker engine, pushed to the operator's registry and recorded by the digest the registry
answered (props.reactors.runtimes.portable_image says what goes in).

Everything that can be refused is refused first, from the arguments and the files alone:
the push target, the critic's files, the command, the config, the runtime, the base. Only
then is anything built (the engine), pushed (the registry) or recorded (the log), in that
order, so a refusal leaves nothing behind and a failed push records nothing."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
from pathlib import Path

import aiodocker
import anyio.to_thread
import pydantic
from rich.text import Text

from props.core.domain import catalog, definitions, endpoints, image_refs
from props.core.log import errors
from props.core.log.events import describe_validation_error
from props.core.log.store import EventStore
from props.reactors.runtimes import docker_runtime, portable_image, runtime_registry
from props.tools.command_line.handlers import runs

out = runs.out
UNPINNED = "sha256:" + "0" * 64  # the digest until the registry answers it


def say(line: str) -> None:
    """One line as it is: a reference or a digest is never split across lines."""
    out.print(Text(line), soft_wrap=True)


class RuntimeRefused(errors.ConfigurationError):
    """A runtime that runs no image, or none registered: nothing was built."""


@dataclasses.dataclass(frozen=True)
class Base:
    image: str | None = None  # an image on the engine
    tar: Path | None = None  # a root filesystem to import
    make: str | None = None  # the Debian mirror to make the default tar from, when missing


@dataclasses.dataclass(frozen=True)
class Plan:
    target: image_refs.Reference
    critic: portable_image.CriticFiles
    definition: catalog.DefinitionPushed  # its digest and image filled in after the push
    base: Base


async def build_cmd(args: argparse.Namespace, store: EventStore) -> int:
    plan = await _planned(args)
    local = f"{plan.target.name}:{plan.target.tag}"
    async with docker_runtime.DockerRuntime.connect() as rt:
        base = await _base_image(rt.docker, plan.base)
        archive = await anyio.to_thread.run_sync(
            portable_image.context, base, plan.critic, plan.definition.command)
        checked = await portable_image.build(rt.docker, archive, local, _labels(plan))
        say(f"built {local}: {checked}; {len(plan.critic.files)} critic file(s), "
            f"{plan.critic.size:,} bytes; runs {shlex.join(plan.definition.command)}")
        digest = await portable_image.push(rt.docker, local, plan.target)
        say(f"pushed {plan.target.pinned(digest)}")
    definition = plan.definition.model_copy(update={
        "digest": digest, "image": plan.target.pinned(digest)})
    new = await definitions.push(store, definition)
    say(f"{definition.agent_type} {definition.name}:{definition.tag} ({definition.runtime}) "
        f"= {digest}" + ("" if new else " (already recorded)"))
    return 0


async def _planned(args: argparse.Namespace) -> Plan:
    """Every check that needs only the arguments and the files (nothing written)."""
    target = image_refs.push_target(args.push)  # (argparse checked it: this parses it)
    critic = await anyio.to_thread.run_sync(portable_image.critic_files, args.critic)
    command = list(args.command) or critic.default_command()
    if command is None:
        raise portable_image.CriticRefused(
            f"{args.critic} has no {portable_image.DEFAULT_CRITIC}: give the command after "
            f"--, e.g. -- python3 {portable_image.CRITIC_TARGET}/main.py")
    _check_runtime(args.runtime)
    config = runs._config(args.config)
    assert target.tag is not None
    try:
        definition = catalog.DefinitionPushed(
            agent_type=args.agent_type, name=args.name or target.repository.rsplit("/")[-1],
            tag=args.tag or target.tag, digest=UNPINNED, runtime=args.runtime,
            image=str(target), command=command, config=config,
            limits=catalog.AgentLimits(network=args.network, cpus=args.cpus,
                                       memory_mb=args.memory_mb, max_events=args.max_events))
    except pydantic.ValidationError as exc:
        raise errors.InvalidEvent(describe_validation_error("definition.pushed", exc)) from exc
    endpoints.check_config(config)  # (the push checks it again, after the image is out)
    return Plan(target, critic, definition, await anyio.to_thread.run_sync(_base, args.base))


def _check_runtime(name: str) -> None:
    if name == "local":
        raise RuntimeRefused("the local runtime runs a command on this host, not an image: "
                             "props definitions push --local")
    if name not in runtime_registry.names():
        raise RuntimeRefused(f"no runtime named {name!r}; registered: "
                             f"{', '.join(n for n in runtime_registry.names() if n != 'local')}")


def _base(given: str | None) -> Base:
    """The base `--base` names, checked: a root filesystem tar (a path), or an image."""
    if given is None:
        tar = portable_image.ROOTFS_TAR
        if tar.is_file():
            return Base(tar=tar)
        if why := portable_image.rootfs_missing():
            raise portable_image.BaseUnavailable(
                f"no base: {tar} is not there, and {why}; or name one: --base IMAGE (an "
                f"image with python3) or --base FILE.tar (a root filesystem)")
        return Base(tar=tar, make=portable_image.mirror())
    path = Path(given).expanduser()
    if path.is_dir():
        raise portable_image.BaseRefused(f"{path} is a folder: a root filesystem is given "
                                         f"as a tar (tar -C {path} -cf base.tar .)")
    if path.is_file():
        portable_image.check_base_tar(path)
        return Base(tar=path)
    if given.startswith(("/", ".", "~")) or given.endswith(".tar"):
        raise errors.NotFound(f"no file {path}: --base names an image, or a root "
                              f"filesystem as a tar")
    try:
        return Base(image=str(image_refs.parse(given)))
    except ValueError as exc:
        raise portable_image.BaseRefused(f"--base: {exc}") from None


async def _base_image(docker: aiodocker.Docker, base: Base) -> str:
    """The base as an image on the engine: imported from its tar (made first when asked)."""
    if base.image is not None:
        if not await portable_image.has_image(docker, base.image):
            raise portable_image.BaseUnavailable(
                f"image {base.image} is not on the Docker engine: docker pull (or docker "
                f"load) it first, or name another base")
        return base.image
    assert base.tar is not None
    if base.make is not None and not base.tar.is_file():
        say(f"making the base: Debian bookworm's minbase with python3, by debootstrap from "
            f"{base.make} (about 2 minutes, once), kept as {base.tar}")
        await anyio.to_thread.run_sync(portable_image.make_rootfs, base.tar, base.make)
    image = await portable_image.import_base(docker, base.tar)
    say(f"base {image} ({base.tar})")
    return image


def _labels(plan: Plan) -> dict[str, str]:
    """What the registry proxy reads of an image (tools/http/registry.py): its command; and
    which SDK it carries."""
    return {"props.command": json.dumps(plan.definition.command),
            "props.sdk": portable_image.sdk_sha256()}
