"""The service's own records: events a reactor parked (reactor-<name>), launchers as they
start (launcher-<name>), retention holds
(retention-<run>), imports (import-<archive id>), what an import kept inert
(inert-<archive id>) and the signers whose files this deployment trusts (signers-trusted)."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

import pydantic

from props.core.domain.catalog.parts import (
    REGISTRY,
    Count,
    LauncherName,
    Name,
    RuntimeName,
    Sha256,
    _Part,
)
from props.core.log.events import Event

# -- reactors (stream reactor-<name>) ------------------------------------------------------------


@REGISTRY.register
class EventParked(Event):
    """A reactor gave up on an event (a poison event) and went on; the error is kept here."""

    type_name = "event.parked"
    reactor: Name
    event_id: uuid.UUID
    global_position: int = pydantic.Field(ge=1, le=2**63 - 1)
    error_type: Name
    error_message: Annotated[str, pydantic.StringConstraints(max_length=4000)]
    attempts: int = pydantic.Field(ge=1, le=2**31 - 1)


@REGISTRY.register
class ParkedRetried(Event):
    """A person asked the consumer to take a parked event up again (after an upgrade):
    it is no longer skipped; if it still cannot be handled, it is parked again."""

    type_name = "parked.retried"
    reactor: Name
    event_id: uuid.UUID
    global_position: int = pydantic.Field(ge=1, le=2**63 - 1)
    requested_by: Name | None = None


# -- launchers (stream launcher-<name>) ----------------------------------------------------------


@REGISTRY.register
class LauncherStarted(Event):
    """A launcher came up: its capacity (containers at once), its runtimes and the engine it
    is bound to (an address, never credentials), and the lease after which, its lock lost,
    other launchers take over its runs. Recorded at every start: capacities change."""

    type_name = "launcher.started"
    name: LauncherName
    capacity: int = pydantic.Field(ge=1, le=100_000)
    runtimes: list[RuntimeName]
    engine: Annotated[str, pydantic.StringConstraints(max_length=500)] | None = None
    lease_seconds: float = pydantic.Field(gt=0, le=86_400, allow_inf_nan=False)


# -- retention (stream retention-<run uuid>) ----------------------------------------------------


@REGISTRY.register
class RetentionHeld(Event):
    """Keep a run's events in the hot table: `props archive` skips every partition that holds
    any of them until the hold is released."""

    type_name = "retention.held"
    run_id: uuid.UUID
    reason: Annotated[str, pydantic.StringConstraints(min_length=1, max_length=2000)]
    held_by: Name | None = None


@REGISTRY.register
class RetentionReleased(Event):
    type_name = "retention.released"
    run_id: uuid.UUID
    released_by: Name | None = None


# -- imports (stream import-<archive id>) -------------------------------------------------------


class ImportedRun(_Part):
    run_id: uuid.UUID


@REGISTRY.register
class ArchiveImported(Event):
    """An export file was imported: where it came from (its signer, or none) and the critic
    runs it brought, so that every score can say how much of it rests on imported runs.
    A file that brings many runs is recorded in several parts."""

    type_name = "archive.imported"
    archive_id: Name
    sha256: Sha256
    signer: Annotated[str, pydantic.StringConstraints(pattern=r"^[0-9a-f]{16}$")] | None
    events: Count
    imported: Count
    part: int = pydantic.Field(ge=1, le=2**31 - 1)
    runs: list[ImportedRun] = pydantic.Field(max_length=5000)


@REGISTRY.register
class ImportInert(Event):
    """An event an export file brought that would have acted on this database (a park, an
    exclusion, an activation, an append to a stream or a grade of a run begun here), kept as
    history: in the stream `inert-<archive id>`, as it stood in the file (`event`) with its
    line and why it is inert. The origin's parks, retries, holds and launchers are always
    kept so (`consumers`); what would act on this database's own streams or runs only when
    the operator asked (`props import --inert`). No projection or reactor reads this type."""

    type_name = "import.inert"
    line: int = pydantic.Field(ge=1, le=2**31 - 1)
    reason: Literal["consumers", "own_stream", "own_run", "other_origin", "untrusted"]
    event: dict[str, Any]


# -- the signers this deployment trusts (stream signers-trusted) ---------------------------------

Fingerprint = Annotated[str, pydantic.StringConstraints(pattern=r"^[0-9a-f]{16}$")]


@REGISTRY.register
class SignerTrusted(Event):
    """The operator trusts the key `fingerprint` (`props keys trust NAME.pub`): from now on
    an export file that none of this deployment's trusted keys signed takes no id here
    (props.core.domain.archive.trust)."""

    type_name = "signer.trusted"
    fingerprint: Fingerprint
    name: Name


@REGISTRY.register
class SignerDistrusted(Event):
    """The operator no longer trusts the key `fingerprint` (`props keys distrust`)."""

    type_name = "signer.distrusted"
    fingerprint: Fingerprint


# -- evaluations (stream evaluation-<name>) ------------------------------------------------------

EvaluationName = Annotated[str, pydantic.StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$")]
EvaluationOutcome = Literal["complete", "incomplete", "budget_exhausted", "stopped_on_errors"]


@REGISTRY.register
class EvaluationStarted(Event):
    """An evaluation's plan, as given, and its cases as they were resolved then (each
    critic's digest, each snapshot's version): a blob of JSON, by its sha256. A changed plan
    under the same name is a new version, recorded beside the old."""

    type_name = "evaluation.started"
    name: EvaluationName
    version: int = pydantic.Field(ge=1, le=2**31 - 1)
    plan: dict[str, Any]
    plan_sha256: Sha256  # of the plan and its resolved cases: what "the same plan" means
    cases_sha256: Sha256
    cases: Count
    # Random, drawn when the version is recorded: its runs' ids are uuid5(nonce, case:attempt),
    # so no one (an import) can know them before. None in versions recorded before: their
    # runs' ids derive from the name, version, case and attempt, as they were.
    nonce: uuid.UUID | None = None


@REGISTRY.register
class EvaluationEnded(Event):
    """How a run of `props eval run` left the evaluation: every case in exactly one state."""

    type_name = "evaluation.ended"
    name: EvaluationName
    version: int = pydantic.Field(ge=1, le=2**31 - 1)
    outcome: EvaluationOutcome
    scored: Count
    failed: Count
    excluded: Count
    missing: Count
    cost_usd: float = pydantic.Field(ge=0, le=1e12, allow_inf_nan=False)
