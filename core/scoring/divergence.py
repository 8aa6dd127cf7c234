"""A verification's divergence report, read from the log as it was recorded: the outcome
(`scorer.verified`, in the candidate's stream), and each run's issues in their buckets with
the judge's recorded answers (`verification.bucketed`, `verification.replayed`, in
`verification-<id>`). Nothing is replayed or asked here: the viewer's page and `props scorers
verifications` show what the verification measured (props.core.scoring.verification).
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime

from props.core.domain import catalog, streams
from props.core.log import errors
from props.core.log.store import EventStore
from props.core.scoring import verification
from props.schema import queries

_Q = queries.load("verification")
ANSWER_CHARS = 4000  # of one recorded answer, as shown


@dataclasses.dataclass(frozen=True)
class Recorded:
    verified: catalog.ScorerVerified
    recorded_at: datetime


@dataclasses.dataclass(frozen=True)
class RunBuckets:
    run_id: uuid.UUID
    issues: list[catalog.IssueBucketed]
    answers: list[str]  # the candidate model's recorded answers on this run (bounded text)


@dataclasses.dataclass(frozen=True)
class Report:
    verified: catalog.ScorerVerified
    recorded_at: datetime
    runs: list[RunBuckets]

    def buckets(self) -> dict[str, list[tuple[uuid.UUID, catalog.IssueBucketed]]]:
        """Every issue by bucket (the verification's order of buckets), with its run."""
        out: dict[str, list[tuple[uuid.UUID, catalog.IssueBucketed]]] = {
            b: [] for b in verification.BUCKETS}
        for run in self.runs:
            for issue in run.issues:
                out[issue.bucket].append((run.run_id, issue))
        return out


async def recorded(store: EventStore) -> list[Recorded]:
    """Every verification's last outcome, newest first."""
    last: dict[uuid.UUID, Recorded] = {}
    for row in await store.sql.fetch(_Q["verified_streams"]):
        for rec in await store.read_stream(row["stream_id"]):
            if isinstance(rec.event, catalog.ScorerVerified):
                last[rec.event.verification_id] = Recorded(rec.event, rec.recorded_at)
    return sorted(last.values(), key=lambda r: r.recorded_at, reverse=True)


async def report(store: EventStore, verification_id: uuid.UUID) -> Report:
    found = [r for r in await recorded(store) if r.verified.verification_id == verification_id]
    if not found:
        raise errors.NotFound(f"no verification {verification_id} (props scorers verify "
                              f"records one)")
    bucketed: dict[uuid.UUID, list[catalog.IssueBucketed]] = {}
    answered: dict[uuid.UUID, list[str]] = {}
    for rec in await store.read_stream(streams.verification(verification_id)):
        if isinstance(rec.event, catalog.VerificationBucketed):
            bucketed[rec.event.run_id] = rec.event.issues  # the last one counts
        elif isinstance(rec.event, catalog.VerificationReplayed):
            answered[rec.event.run_id] = rec.event.answers
    # Every answer shown, in one round trip (a cohort is many runs).
    texts = await store.get_blobs(sorted({sha for shas in answered.values() for sha in shas}))

    def answer(sha256: str) -> str:
        found = texts.get(sha256)
        return f"(answer {sha256[:12]} is not in this database)" if found is None \
            else found.decode("utf-8", "replace")[:ANSWER_CHARS]

    runs = [RunBuckets(run_id, issues, [answer(sha) for sha in answered.get(run_id, [])])
            for run_id, issues in sorted(bucketed.items(), key=lambda kv: str(kv[0]))]
    return Report(found[0].verified, found[0].recorded_at, runs)
