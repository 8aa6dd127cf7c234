"""Agent definitions: push (record an image by its digest) and resolve (`latest` or a digest).

A definition is a `definition.pushed` event in stream `definition-<critic|grader>`. A run asks
for a definition by name and `latest`, a tag or a digest; the launcher resolves it when it
starts the run and records the digest used (`run.started`), so a run is always scored against
what actually ran, not what the name means today.

Docker definitions take their digest from the engine (the image id). Local definitions run a
command on the host; their digest is a sha256 over the command, the config and the source of
the Python module they run, so changing the agent's code changes the digest.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import sys
import tarfile
import uuid
from pathlib import Path
from typing import Any

import orjson

from props.core.domain import catalog, endpoints, streams, vocabulary
from props.core.log import errors
from props.core.log.events import NewEvent
from props.core.log.store import EventStore

_NAMESPACE = uuid.UUID("4f0d3b0e-7f5e-4a3c-9a55-51b2a6f0c1de")
REFERENCE_MODULE = "props.reactors.agents.reference_critic"
REFERENCE_GRADER_MODULE = "props.reactors.agents.reference_grader"
REFERENCE_REPO = "props-reference-critic"


def local_digest(command: list[str], config: dict[str, Any]) -> str:
    h = hashlib.sha256(orjson.dumps({"command": command, "config": config},
                                    option=orjson.OPT_SORT_KEYS))
    if "-m" in command[:-1]:
        spec = importlib.util.find_spec(command[command.index("-m") + 1])
        if spec is not None and spec.origin:
            h.update(Path(spec.origin).read_bytes())
    return "sha256:" + h.hexdigest()


def reference_command(module: str = REFERENCE_MODULE) -> list[str]:
    return [sys.executable, "-m", module]


async def push(store: EventStore, definition: catalog.DefinitionPushed, *,
               actor: str | None = None, override: bool = False,
               outsider: bool = False) -> bool:
    """Record `definition` unless the same name, tag and digest are already recorded (its
    event id derives from them, so the store's idempotent append decides). Returns whether
    it was appended. `override`: an admin moved a recorded tag to this digest (said in the
    event's metadata, with the `actor`). The operator's push grants what the definition asks
    (network, the host's binaries, its endpoint: core/domain/endpoints.py); an `outsider`'s
    (the registry proxy's) is recorded as described and granted nothing (what it asks is
    said in its metadata): its runs fail `not_granted` until the operator grants it. A
    config with a URL or a key is refused (EndpointRefused), nothing written."""
    endpoints.check_config(definition.config)
    event_id = uuid.uuid5(_NAMESPACE, f"{definition.agent_type}:{definition.name}:"
                                      f"{definition.tag}:{definition.digest}")
    metadata: dict[str, object] = {}
    if actor is not None:
        metadata["actor"] = actor
    if override:
        metadata["tag_override"] = True
    if outsider and (asked := endpoints.asks(definition) + endpoints.asked_caps(definition)):
        metadata["asked_grants"] = asked  # described, not granted
    result = await store.append(streams.definition(definition.agent_type),
                                [NewEvent(definition, event_id, metadata)])
    wanted = endpoints.asked(definition)
    if not outsider and endpoints.asks_anything(wanted) and (
            not result.already_stored or await endpoints.grant_of(
                store, definition.agent_type, definition.digest) is None):
        # The operator's push grants what it asks: when new, or when it was recorded before
        # grants existed. Pushing it again changes no grant: one revoked stays revoked.
        await endpoints.grant(store, wanted, actor=actor)
    return not result.already_stored


async def all_pushed(store: EventStore, agent_type: str, *,
                     own: bool = False) -> list[catalog.DefinitionPushed]:
    """Every push of `agent_type`, in order; `own`: this database's pushes only (an import's
    are another database's history)."""
    return [rec.event for rec in await store.read_stream(streams.definition(agent_type))
            if isinstance(rec.event, catalog.DefinitionPushed)
            and not (own and rec.imported)]


async def resolve(store: EventStore, agent_type: str, name: str,
                  ref: str) -> catalog.DefinitionPushed | None:
    """The definition `name` at `ref`: "latest" (the last pushed), a tag, or a digest."""
    found = None
    for d in await all_pushed(store, agent_type):
        if d.name == name and (ref == "latest" or ref in (d.tag, d.digest)):
            found = d  # the last push wins
    return found


# -- the reference critic as a small Docker image ------------------------------------------------

_SYSTEM_DIRS = ("bin", "lib", "lib64", "sbin", "usr")


def reference_rootfs() -> bytes:
    """A root filesystem with nothing but mount points and a user: the host's Python and
    props are mounted read-only into it at run time (`host_python`). Where the host links
    /bin or /lib into /usr, the image links them the same way."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in (*_SYSTEM_DIRS, "etc", "tmp", "proc", "sys", "dev", "run", "example",
                  "root", "work"):
            info = tarfile.TarInfo(d)
            host = Path("/") / d
            if d in _SYSTEM_DIRS and host.is_symlink():
                info.type = tarfile.SYMTYPE
                info.linkname = os.readlink(host)
            else:
                info.type = tarfile.DIRTYPE
                info.mode = 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        passwd = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/tmp:/bin/sh\n"
        info = tarfile.TarInfo("etc/passwd")
        info.size = len(passwd)
        tar.addfile(info, io.BytesIO(passwd))
    return buf.getvalue()


def host_python_paths() -> list[str]:
    """What a `host_python` container mounts read-only: the system's binaries and libraries,
    the interpreter's installation, the virtual environment, and props itself."""
    import props

    paths = [f"/{d}" for d in _SYSTEM_DIRS if os.path.isdir(f"/{d}")
             and not os.path.islink(f"/{d}")]
    paths += [os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, *props.__path__)]
    out: list[str] = []
    for p in sorted(set(paths)):
        if not any(p == o or p.startswith(o.rstrip("/") + "/") for o in out):
            out.append(p)
    return out


def missing_definition(agent_type: str, name: str, ref: str) -> errors.PropsError:
    return errors.PropsError(
        f"no {agent_type} definition {name!r} at {ref!r}: push one first "
        f"(props definitions push --type {agent_type} ...)")


class UnknownCheck(errors.PropsError):
    """A reference critic's config names a check it does not have: nothing was written."""

    exit_code = 65  # EX_DATAERR: a name the user gave


def check_reference_config(config: dict[str, Any]) -> None:
    """Refuse at push time a reference critic config that would fail every run: `checks`
    must be a list of the critic's check names (the only key it reads)."""
    if extra := sorted(set(config) - {"checks"}):  # a misspelt `checks` would run them all
        raise UnknownCheck(f"unknown key(s) {', '.join(map(repr, extra))} in the reference "
                           f"critic's config: it reads `checks` only, a list of: "
                           f"{', '.join(vocabulary.REFERENCE_CHECKS)}")
    checks = config.get("checks", [])
    if not isinstance(checks, list) or not all(isinstance(c, str) for c in checks):
        raise UnknownCheck("the reference critic's config.checks must be a list of check "
                           f"names: {', '.join(vocabulary.REFERENCE_CHECKS)}")
    unknown = sorted(set(checks) - set(vocabulary.REFERENCE_CHECKS))
    if unknown:
        raise UnknownCheck(f"unknown check(s) {', '.join(map(repr, unknown))} in config.checks;"
                           f" the reference critic has: "
                           f"{', '.join(vocabulary.REFERENCE_CHECKS)}")


def reference_local(agent_type: catalog.AgentType = "critic",
                    config: dict[str, Any] | None = None) -> catalog.DefinitionPushed:
    """The reference critic, or the reference grader, as a local command."""
    module = REFERENCE_MODULE if agent_type == "critic" else REFERENCE_GRADER_MODULE
    if agent_type == "critic":
        check_reference_config(config or {})
    command = reference_command(module)
    return catalog.DefinitionPushed(
        agent_type=agent_type, name=f"reference-{agent_type}" if agent_type == "grader"
        else "reference", tag="local", runtime="local", image=f"local:{module}",
        command=command, config=config or {}, digest=local_digest(command, config or {}))
