"""Agent runs as analysts read them: one row per run with its status and closed failure
facts, the issues it reported, and its LLM usage."""

from __future__ import annotations

from decimal import Decimal
from typing import cast

import orjson

from props.core import catalog
from props.core.events import RecordedEvent
from props.projections.base import Projection
from props.projections.ground_truth import WHOLE_SNAPSHOT
from props.projections.tables import Column, Delta, Table

AGENT_RUNS = Table("agent_runs", (
    Column("run_id", "uuid", "key"), Column("agent_type", "text"),
    Column("definition", "text"), Column("definition_ref", "text"),
    Column("digest", "text"), Column("model", "text"), Column("snapshot", "text"),
    Column("files_hash", "text"), Column("status", "text"), Column("exit_code", "integer"),
    Column("failure_phase", "text"), Column("failure_category", "text"),
    Column("failure_retryable", "boolean"), Column("timeout_seconds", "float8"),
    Column("budget_usd", "float8"), Column("requested_at", "timestamptz", "first"),
    Column("started_at", "timestamptz", "first"), Column("finished_at", "timestamptz"),
    Column("tokens_in", "bigint"), Column("tokens_out", "bigint"), Column("cost_usd", "float8"),
))
REPORTED_ISSUES = Table("reported_issues", (
    Column("run_id", "uuid", "key"), Column("issue_id", "text", "key"),
    Column("files", "text[]"), Column("locations", "jsonb"), Column("rationale", "text"),
    Column("severity", "text"), Column("reported_at", "timestamptz"),
))
LLM_USAGE = Table("llm_usage", (
    Column("run_id", "uuid", "key"), Column("requests", "integer", "add"),
    Column("tokens_in", "bigint", "add"), Column("tokens_out", "bigint", "add"),
    Column("cost_usd", "numeric", "add"),  # exact: sums must not depend on batching
))


def requested(delta: Delta, rec: RecordedEvent) -> None:
    e = cast(catalog.RunRequested, rec.event)
    delta.put("agent_runs", run_id=e.run_id, agent_type=e.agent_type, definition=e.definition,
              definition_ref=e.definition_ref, model=e.model, snapshot=e.example.snapshot,
              files_hash=e.example.files_hash or WHOLE_SNAPSHOT, status="requested",
              timeout_seconds=e.timeout_seconds, budget_usd=e.budget_usd,
              requested_at=rec.recorded_at)


def started(delta: Delta, rec: RecordedEvent) -> None:
    e = cast(catalog.RunStarted, rec.event)
    delta.put("agent_runs", run_id=e.run_id, digest=e.digest, status="running",
              started_at=rec.recorded_at)


def container_exited(delta: Delta, rec: RecordedEvent) -> None:
    e = cast(catalog.ContainerExited, rec.event)
    delta.put("agent_runs", run_id=e.run_id, exit_code=e.exit_code)


def finished(delta: Delta, rec: RecordedEvent) -> None:
    e = cast(catalog.RunFinished, rec.event)
    failure = e.failure
    delta.put("agent_runs", run_id=e.run_id, status=e.status, finished_at=rec.recorded_at,
              tokens_in=e.tokens_in, tokens_out=e.tokens_out, cost_usd=e.cost_usd,
              failure_phase=failure.phase if failure else None,
              failure_category=failure.category if failure else None,
              failure_retryable=failure.retryable if failure else None)


def issue(delta: Delta, rec: RecordedEvent) -> None:
    e = cast(catalog.IssueReported, rec.event)
    delta.put("reported_issues", run_id=e.run_id, issue_id=e.issue_id,
              files=sorted({loc.file for loc in e.locations}),
              locations=orjson.dumps([loc.model_dump(mode="json")
                                      for loc in e.locations]).decode(),
              rationale=e.rationale, severity=e.severity, reported_at=rec.recorded_at)


def llm_response(delta: Delta, rec: RecordedEvent) -> None:
    e = cast(catalog.LlmResponded, rec.event)
    delta.put("llm_usage", run_id=e.run_id, requests=1, tokens_in=e.tokens_in,
              tokens_out=e.tokens_out, cost_usd=Decimal(repr(e.cost_usd)))


RUNS = Projection(
    name="runs",
    version=1,
    tables=(AGENT_RUNS, REPORTED_ISSUES, LLM_USAGE),
    folds={"run.requested": requested, "run.started": started,
           "container.exited": container_exited, "run.finished": finished,
           "issue.reported": issue, "llm.responded": llm_response},
)
