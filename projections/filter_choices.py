"""What the filters offer (snapshots, file sets, scorers, evaluations: small tables, read per
page) and the scorer a page shows numbers of: one read model, so a filter the viewer offers is
one every reader takes, and a value none offers is refused the same way everywhere."""

from __future__ import annotations

import dataclasses

from props.core.domain import streams
from props.core.log import errors
from props.core.log.store import EventStore
from props.schema import queries


@dataclasses.dataclass(frozen=True)
class Options:
    snapshots: list[str]
    file_sets: list[str]
    scorers: list[str]  # NAME@VERSION, registered
    active: str | None
    evaluations: list[str]


_CHOICES = queries.typed("filter_choices", "choices", Options)


async def load(store: EventStore) -> Options:
    options = await store.sql.row(_CHOICES)
    assert options is not None  # one row, always
    return options


def parse(text: str) -> tuple[str, int]:
    """NAME@VERSION (the log's own rule, streams.parse_ref), or an error the page shows."""
    try:
        return streams.parse_ref(text)
    except ValueError:
        raise errors.UnknownScorer(f"scorer {text[:60]!r} is not NAME@VERSION (e.g. tiered@2)"
                                   ) from None


def ref(scorer: tuple[str, int] | None) -> str | None:
    return f"{scorer[0]}@{scorer[1]}" if scorer else None


def scorer(options: Options, text: str | None) -> tuple[str, int] | None:
    """The scorer `text` names (which must be registered), else the active one, else none."""
    if text:
        if text not in options.scorers:
            raise errors.UnknownScorer(f"no scorer {text[:60]!r} is registered (known: "
                                       f"{', '.join(options.scorers) or 'none'})")
        return parse(text)
    return parse(options.active) if options.active else None


def evaluation(options: Options, name: str | None) -> str | None:
    """The evaluation a filter names (one recorded: NotFound otherwise), or none."""
    if not name:
        return None
    if name not in options.evaluations:
        raise errors.NotFound(f"no evaluation named {name[:60]!r} (known: "
                              f"{', '.join(options.evaluations[:20]) or 'none yet'})")
    return name
