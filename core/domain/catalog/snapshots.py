"""Snapshots of code under review and their ground truth (stream snapshot-<slug>), and the
agents' definitions (stream definition-<agent type>)."""

from __future__ import annotations

from typing import Annotated, Any

import pydantic

from props.core.domain.catalog.parts import (
    REGISTRY,
    ByteCap,
    Digest,
    EventCap,
    FileEntry,
    GroundTruth,
    Name,
    RuntimeName,
    Sha256,
    SnapshotSlug,
    Version,
    _Part,
)
from props.core.domain.vocabulary import AgentType
from props.core.log.events import Event

# -- snapshots (stream snapshot-<slug>) ----------------------------------------------------


@REGISTRY.register
class SnapshotSynced(Event):
    type_name = "snapshot.synced"
    slug: SnapshotSlug
    version: Version
    files: list[FileEntry] = pydantic.Field(max_length=100_000)  # contents: blobs, by sha256
    ground_truth: GroundTruth
    ground_truth_hash: Sha256  # sha256 of the ground truth's canonical JSON
    # the specimen directory it was synced from (retirement is per source)
    source: Annotated[str, pydantic.StringConstraints(max_length=4096)]


@REGISTRY.register
class SnapshotRetired(Event):
    type_name = "snapshot.retired"
    slug: SnapshotSlug
    version: Version  # the last version, which stays readable
    reason: Name


# -- agent definitions (stream definition-<agent type>) --------------------------------------




class AgentLimits(_Part):
    """What a run of a definition may use; the launcher enforces each."""

    network: bool = False  # no network unless the definition asks
    cpus: float = pydantic.Field(default=1.0, gt=0, le=1024, allow_inf_nan=False)
    memory_mb: int = pydantic.Field(default=512, ge=16, le=1024 * 1024)
    # What the agent may report (events; bytes of events and blobs), as the definition asks:
    # the operator's grant decides what its runs get (props.core.domain.caps). None: asks
    # nothing (a push recorded before caps were grants says 2000 and 64 MiB: asked, never
    # in force). The bound is the catalog's proof that a run's sums fit.
    max_events: EventCap | None = None
    max_bytes: ByteCap | None = None


@REGISTRY.register
class DefinitionPushed(Event):
    """An agent image recorded under `name:tag`, by the digest the engine gave it.
    `runtime` "local" means a command run on the host (`image` names it), with the digest
    of what it runs."""

    type_name = "definition.pushed"
    schema_version = 2
    agent_type: AgentType
    name: Name
    tag: Name
    digest: Digest
    runtime: RuntimeName = "docker"
    image: Name | None = None  # the reference it was pushed as
    command: list[Annotated[str, pydantic.StringConstraints(max_length=100_000)]] = \
        pydantic.Field(default_factory=list, max_length=1000)  # empty: the image's own
    config: dict[str, Any] = pydantic.Field(default_factory=dict)  # given to the agent
    limits: AgentLimits = pydantic.Field(default_factory=AgentLimits)
    # Mount the host's Python and props read-only into the container: for the small images
    # `props definitions build-reference` makes with `docker import`, which carry no Python.
    host_python: bool = False


@REGISTRY.upcaster("definition.pushed", 1)
def _definition_v1(data: dict[str, Any]) -> dict[str, Any]:
    return data  # v2 only added fields with defaults
