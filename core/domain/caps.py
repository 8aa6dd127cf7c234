"""A run's caps: how many events, and how many bytes of events and blobs, its agent may
report before the launcher ends it (`event_cap`).

Caps are the operator's decision, per definition digest, recorded in the grant
(`definition.granted`, core/domain/endpoints.py: `props definitions grant NAME --max-events N
--max-bytes N --ceiling-events N --ceiling-bytes N`), never an image label's or a pushed
definition's: what a definition asks (`props.max-events`) is granted only by the operator's
own push. Without a grant a run gets the defaults below. A plan may set another cap for one
critic (`[[critic]] max_events = N`, carried by its runs' `run.requested`), up to the
ceiling the operator granted that digest (default: the catalog's bound for events, 1 GiB
for bytes); a plan past it is refused where it starts, naming the ceiling.

The defaults were measured (docs/internals/measurements.md, "Caps"): the ruff baseline (E,
F, B, S) over a snapshot of psf/black (`props specimens from-git --fix 3224f36a`: 453 files,
84,343 lines of Python) reports 9,871 issues, 9,873 events and 2,135,220 bytes, about one
event per 8.5 lines and 216 bytes per event; it stopped at the old cap of 2,000 events. The
default of 100,000 events lets a linter eight times that noisy finish on a project of
100,000 lines; 64 MiB holds 100,000 such events three times over.
"""

from __future__ import annotations

import dataclasses

from props.core.domain import catalog

# (declared in vocabulary, which the command line reads without loading the catalog)
from props.core.domain.vocabulary import DEFAULT_CEILING_BYTES as DEFAULT_CEILING_BYTES
from props.core.domain.vocabulary import DEFAULT_CEILING_EVENTS as DEFAULT_CEILING_EVENTS
from props.core.domain.vocabulary import DEFAULT_MAX_BYTES as DEFAULT_MAX_BYTES
from props.core.domain.vocabulary import DEFAULT_MAX_EVENTS as DEFAULT_MAX_EVENTS
from props.core.log import errors


class CapRefused(errors.PropsError):
    """A cap a plan asks for past the ceiling the operator granted its critic."""

    exit_code = 65  # EX_DATAERR


@dataclasses.dataclass(frozen=True)
class Caps:
    """The caps of a run, and the ceilings a plan may raise them to."""

    max_events: int = DEFAULT_MAX_EVENTS
    max_bytes: int = DEFAULT_MAX_BYTES
    ceiling_events: int = DEFAULT_CEILING_EVENTS
    ceiling_bytes: int = DEFAULT_CEILING_BYTES


def granted(grant: catalog.DefinitionGranted | None) -> Caps:
    """The operator's caps for runs of a digest (its grant, else the defaults). A ceiling
    below the cap the grant names (or the default) is the cap."""
    if grant is None:
        return Caps()
    events = grant.max_events or DEFAULT_MAX_EVENTS
    size = grant.max_bytes or DEFAULT_MAX_BYTES
    return Caps(events, size,
                grant.ceiling_events or max(events, DEFAULT_CEILING_EVENTS),
                grant.ceiling_bytes or max(size, DEFAULT_CEILING_BYTES))


def in_force(grant: catalog.DefinitionGranted | None, requested: catalog.RunRequested) -> Caps:
    """The caps a run gets: the requester's (its plan's) where it set one, held to the
    operator's ceiling (a grant lowered since the plan started wins), else the operator's."""
    caps = granted(grant)
    return dataclasses.replace(
        caps,
        max_events=min(requested.max_events or caps.max_events, caps.ceiling_events),
        max_bytes=min(requested.max_bytes or caps.max_bytes, caps.ceiling_bytes))


def check_plan(grant: catalog.DefinitionGranted | None, definition: str,
               max_events: int | None, max_bytes: int | None) -> None:
    """Refuse a plan's cap for `definition` past the operator's ceiling (CapRefused, 65)."""
    caps = granted(grant)
    for key, asked, ceiling, flag in (
            ("max_events", max_events, caps.ceiling_events, "--ceiling-events"),
            ("max_bytes", max_bytes, caps.ceiling_bytes, "--ceiling-bytes")):
        if asked is not None and asked > ceiling:
            raise CapRefused(
                f"critic {definition}: {key} = {asked:,} is over the ceiling of {ceiling:,} "
                f"the operator granted it; ask for at most {ceiling:,}, or the operator "
                f"raises it (props definitions grant {definition} {flag} N)")


def reached(cap: str | None, events: int, caps: Caps) -> catalog.CapReached:
    """The closed fact of the cap a run reached: the one the refused charge would have
    passed (`cap`, as the database recorded it), else (a binding opened before it recorded
    one) the one its count of `events` stands at."""
    if cap is None:
        cap = "max_events" if events >= caps.max_events else "max_bytes"
    if cap == "max_events":
        return catalog.CapReached(cap="max_events", limit=caps.max_events,
                                  ceiling=caps.ceiling_events)
    return catalog.CapReached(cap="max_bytes", limit=caps.max_bytes,
                              ceiling=caps.ceiling_bytes)


def said(failure: catalog.Failure, definition: str | None = None, *,
         short: bool = False) -> str:
    """What an `event_cap` failure says: the cap, and where to raise it (empty for any other
    failure, or one recorded before caps were named). `short`: for a table's column."""
    if failure.category != "event_cap" or failure.cap is None:
        return ""
    cap = failure.cap
    grant = f"props definitions grant {definition or 'NAME'}"
    if cap.limit >= cap.ceiling:
        flag = "--ceiling-" + cap.cap.removeprefix("max_")
        return (f"{cap.cap} = {cap.limit:,} reached, the operator's ceiling"
                + ("" if short else f": the operator raises it ({grant} {flag} N)"))
    if short:
        return (f"{cap.cap} = {cap.limit:,} reached: the plan's [[critic]] {cap.cap} raises "
                f"it, up to {cap.ceiling:,}")
    return (f"{cap.cap} = {cap.limit:,} reached: raise it for this critic in the plan "
            f"([[critic]] {cap.cap} = N, up to the operator's ceiling of {cap.ceiling:,}) or by "
            f"the operator's grant ({grant} --{cap.cap.replace('_', '-')} N)")
