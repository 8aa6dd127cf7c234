"""Located and confirmed: which of a location rule's finds someone who read the claim agreed
with, beside the report's figures.

A location rule (overlap, tiered) finds a TP occurrence when an issue points at its lines:
that is a *candidate*, `located`. It is *confirmed* when a judge (an LLM judge or panel:
a scorer that is not deterministic) or a person (`props review`, the `human` scorer) said
that the issue describes that defect, *rejected* when they said otherwise, and
*unconfirmed* while nobody has looked. Every figure says which it counts: `located_recall`
counts what the rule located, `confirmed_recall` the confirmed only (none, "unreviewed",
while nobody has said anything of a row's candidates: never 0%), and the counts add up
(located = confirmed + rejected + unconfirmed). The rows of a judge itself (or of the
human scorer) have none of these: their finds are claims already read.

Per run, the view `run_confirmations` (schema/sql/projection_views.sql) counts them; the
report sums it (`confirmation` in schema/sql/report.sql), `props eval show` reads it per
case. While no judge or person has graded anything it is not read at all: everything
located is unconfirmed, and the figures say that nobody can have looked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from props.core.log import database
from props.core.scoring import intervals, scorers
from props.schema import queries

_Q = queries.load("report")
# A report row's fields, in this order (the CSV's last columns).
# `reviewed`: whether a judge or a person has said anything of the row's candidates; while
# none has (and some were located), confirmed recall is none, never 0%: it is unreviewed.
FIELDS = ["located", "confirmed", "rejected", "unconfirmed", "confirmed_recall",
          "confirmed_recall_low", "confirmed_recall_high", "reviewed"]
Key = tuple[str, str, str, int]  # model, definition, scorer name, scorer version
# A report row's definition as the report names it, by (model, definition, digest):
# with its digest where the name ran several (props.projections.figures.split_digests).
Labels = dict[tuple[str, str, str | None], str]
Example = tuple[str | None, str | None]  # snapshot, files hash


@dataclasses.dataclass(frozen=True)
class Confirmations:
    """What the judges and people said of one report's located finds."""

    judges: list[str]  # NAME@VERSION of every scorer that can confirm (`human@1` too)
    deterministic: dict[tuple[str, int], bool]  # each registered scorer: a location rule?
    whole: dict[Key, tuple[int, int]]  # (confirmed, rejected) per row
    examples: dict[Key, dict[Example, int]]  # confirmed per example of a row
    # judges whose bytes no verification passed: their answers are kept, never counted
    unverified: list[str] = dataclasses.field(default_factory=list)

    def of(self, key: Key, located: float, examples: Sequence[tuple[Example, float]],
           ) -> dict[str, Any]:
        """The row `key`'s confirmation fields: `located` occurrences (its recall's
        numerator), and the examples' (example, expected) for the interval."""
        if not self.deterministic.get(key[2:], True):  # a judge's own row, or a person's
            return dict.fromkeys(FIELDS)
        _, rejected = self.whole.get(key, (0, 0))
        mine = self.examples.get(key, {})
        return fields(located, rejected, [(mine.get(ex, 0), e) for ex, e in examples])


def fields(located: float, rejected: int, examples: Sequence[tuple[float, float]],
           ) -> dict[str, Any]:
    """A row's confirmation fields from its `located` and `rejected` counts and, per example,
    (confirmed, expected): the clusters of confirmed recall's interval."""
    confirmed = int(sum(c for c, _ in examples))
    expected = sum(e for _, e in examples)
    reviewed = bool(confirmed or rejected or not located)
    low, high = intervals.ratio_interval(list(examples)) if reviewed else (None, None)
    return {"located": int(located), "confirmed": confirmed, "rejected": rejected,
            "unconfirmed": int(located) - confirmed - rejected,
            "confirmed_recall": confirmed / expected if expected and reviewed else None,
            "confirmed_recall_low": low, "confirmed_recall_high": high, "reviewed": reviewed}


async def judges(conn: database.Connection, schema: str) -> list[str]:
    """The scorers that read claims (judges, and `human@1` once a person gave a verdict),
    as NAME@VERSION: with none, nobody can have confirmed anything (the view is not read)."""
    return sorted(f"{r['name']}@{r['version']}" for r in await conn.fetch(
        _Q["registered_scorers"].replace("{schema}", schema)) if not r["deterministic"])


async def reviewers(conn: database.Connection, schema: str, runs: Sequence[Any] | None,
                    ) -> tuple[list[str], list[str]]:
    """Of the judges and people, those that confirmed something in these runs (None: any),
    and those that graded any of their issues (confirmed or rejected): "confirmed by" names
    the first only, never a judge that graded nothing."""
    found = await conn.fetch(_Q["reviewers"].replace("{schema}", schema),
                             None if runs is None else list(runs))
    return [r["scorer"] for r in found if r["confirmed"]], [r["scorer"] for r in found]


async def load(conn: database.Connection, schema: str, name: str | None, version: int | None,
               scoped: tuple[Any, ...], labels: Labels) -> Confirmations:
    """The report's confirmations, in the caller's transaction (its settings: the reading,
    imported runs left out or not) over the projections in `schema`; `scoped`: the
    report's model, definition, snapshot and runs; `labels`: its rows' definitions."""
    def q(sql: str) -> str:
        return sql.replace("{schema}", schema)

    deterministic = {(r["name"], r["version"]): r["deterministic"]
                     for r in await conn.fetch(q(_Q["registered_scorers"]))}
    judges = sorted(f"{n}@{v}" for (n, v), det in deterministic.items() if not det)
    whole: dict[Key, tuple[int, int]] = {}
    examples: dict[Key, dict[Example, int]] = {}
    if judges:  # else nobody can have looked: the query would find nothing
        for r in await conn.fetch(q(_Q["confirmation"]), name, version, *scoped):
            label = labels.get((r["model"], r["definition"], r["digest"]), r["definition"])
            key = (r["model"], label, r["scorer_name"], r["scorer_version"])
            if r["whole"]:
                whole[key] = (int(r["confirmed"]), int(r["rejected"]))
            else:
                examples.setdefault(key, {})[(r["snapshot"], r["files_hash"])] = \
                    int(r["confirmed"])
    verified = {(r["name"], r["version"])
                for r in await conn.fetch(q(_Q["verified_judges"]))} if judges else set()
    unverified = sorted(f"{n}@{v}" for (n, v), det in deterministic.items()
                        if not det and n != scorers.HUMAN_NAME and (n, v) not in verified)
    return Confirmations(judges, deterministic, whole, examples, unverified)
