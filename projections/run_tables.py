"""Agent runs as analysts read them: one row per run with its status and closed failure
facts (`runs`), the issues it reported (`issues`), and its LLM usage (`usage`), all folded
on the server from row maps."""

from __future__ import annotations

from props.core.domain import catalog
from props.projections.base import Projection
from props.projections.ground_truth import WHOLE_SNAPSHOT
from props.projections.rows import RowMap, field, item
from props.projections.tables import Column, Table

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
    # Which evaluation requested the run, for which of its cases and which attempt (null: no
    # evaluation did), and where the request was recorded (`provenance`): the view
    # `evaluation_runs` picks each case's counted run from these.
    Column("evaluation", "text"), Column("evaluation_version", "integer"),
    Column("case_key", "text"), Column("attempt", "integer"), Column("provenance", "text"),
))
# Each version of each evaluation (`evaluation.started`), with where it was recorded.
EVALUATION_VERSIONS = Table("evaluation_versions", (
    Column("name", "text", "key"), Column("version", "integer", "key"),
    Column("nonce", "uuid", "first"), Column("cases", "integer", "first"),
    Column("provenance", "text", "first"), Column("started_at", "timestamptz", "first"),
))
# An issue reported again (same id) is replaced whole by the newer report.
REPORTED_ISSUES = Table("reported_issues", (
    Column("run_id", "uuid", "key"), Column("issue_id", "text", "key"),
    Column("files", "text[]", "latest"), Column("locations", "jsonb", "latest"),
    Column("rationale", "text", "latest"), Column("severity", "text", "latest"),
    Column("reported_at", "timestamptz", "latest"),
))
# Critic runs that came in from an imported export file, with its signer ('unsigned': none).
IMPORTED_RUNS = Table("imported_runs", (
    Column("run_id", "uuid", "key"), Column("archive_id", "text", "first"),
    Column("signer", "text", "first"),
))
# Runs that must not count, with the reason: every score leaves them out.
EXCLUDED_RUNS = Table("excluded_runs", (
    Column("run_id", "uuid", "key"), Column("reason", "text", "latest"),
    Column("excluded_by", "text", "latest"), Column("excluded_at", "timestamptz", "latest"),
))
LLM_USAGE = Table("llm_usage", (
    Column("run_id", "uuid", "key"), Column("requests", "integer", "add"),
    Column("tokens_in", "bigint", "add"), Column("tokens_out", "bigint", "add"),
    Column("cost_usd", "numeric", "add"),  # exact: sums must not depend on batching
))


# The files an issue points at, sorted by code point as Python's sorted() would.
_ISSUE_FILES = ("ARRAY(SELECT DISTINCT (loc->>'file') COLLATE \"C\" "
                "FROM jsonb_array_elements(data->'locations') loc ORDER BY 1)")

# Where an event was recorded: `here`, or `import:SIGNER` (`import:unsigned`) for one an
# import brought (its metadata's `origin`, which only the importer writes). An evaluation
# counts only requests of its own provenance: an imported run that claims a local
# evaluation never joins it (as props.core.domain.evaluations.runs_of).
_PROVENANCE = ("CASE WHEN metadata ? 'origin' THEN 'import:' || "
               "COALESCE(metadata->'origin'->>'signer', 'unsigned') ELSE 'here' END")


def _by_evaluation(key: str) -> str:
    """`key` of a request's metadata, where an evaluation made the request: its metadata
    names the evaluation and version its `requested_by` (`eval:NAME@VERSION`, validated
    data that only the evaluation driver writes) says. A request the API or the command
    line made names no evaluation, whatever metadata it carries. Metadata is not validated
    (an import brings whatever its file says): a version or attempt that is not a small
    whole number gives no row a value, never a cast that stops the fold for everyone."""
    whole = "'^[0-9]{1,9}$'"
    return ("CASE WHEN data->>'requested_by' = 'eval:' || (metadata->>'evaluation') || '@' "
            f"|| (metadata->>'evaluation_version') AND (metadata->>'evaluation_version') ~ "
            f"{whole} AND coalesce(metadata->>'attempt', '0') ~ {whole} "
            f"THEN metadata->>'{key}' END")


# Three projections, not one: each folds in a transaction of its own, so a rebuild folds the
# three tables (the bulk of the log) on all cores at once.
RUNS = Projection(
    name="runs",
    version=3,  # 2: the evaluation, case and attempt a run stands for; evaluation versions
    # 3: an evaluation version's name is its stream's
    tables=(AGENT_RUNS, EVALUATION_VERSIONS),
    rows=(
        RowMap(catalog.RunRequested, AGENT_RUNS, {
            "run_id": field("run_id"), "agent_type": field("agent_type"),
            "definition": field("definition"), "definition_ref": field("definition_ref"),
            "model": field("model"), "snapshot": field("example", "snapshot"),
            "files_hash": f"COALESCE(data->'example'->>'files_hash', '{WHOLE_SNAPSHOT}')",
            "status": "'requested'", "timeout_seconds": field("timeout_seconds"),
            "budget_usd": field("budget_usd"), "requested_at": "recorded_at",
            "evaluation": _by_evaluation("evaluation"),
            "evaluation_version": _by_evaluation("evaluation_version"),
            "case_key": _by_evaluation("case"), "attempt": _by_evaluation("attempt"),
            "provenance": _PROVENANCE}),
        RowMap(catalog.RunStarted, AGENT_RUNS, {
            "run_id": field("run_id"), "digest": field("digest"), "status": "'running'",
            "started_at": "recorded_at"}),
        RowMap(catalog.ContainerExited, AGENT_RUNS, {
            "run_id": field("run_id"), "exit_code": field("exit_code")}),
        RowMap(catalog.RunFinished, AGENT_RUNS, {
            "run_id": field("run_id"), "status": field("status"), "finished_at": "recorded_at",
            "tokens_in": field("tokens_in"), "tokens_out": field("tokens_out"),
            "cost_usd": field("cost_usd"), "failure_phase": field("failure", "phase"),
            "failure_category": field("failure", "category"),
            "failure_retryable": field("failure", "retryable")}),
        # The evaluation its stream names, not the name its data claims: an import may
        # bring `evaluation.started` into a stream of its own whatever its data says (the
        # props it came from, `props eval show` and the rest read the stream by name), and
        # a version it claims of a local evaluation must never become that one's latest.
        RowMap(catalog.EvaluationStarted, EVALUATION_VERSIONS, {
            "name": f"substring(stream_id from {len('evaluation-') + 1})",
            "version": field("version"), "nonce": field("nonce"),
            "cases": field("cases"), "provenance": _PROVENANCE,
            "started_at": "recorded_at"}, category="evaluation"),
    ),
)
ISSUES = Projection(
    name="issues",
    version=2,  # 2: text keys compare by code point; a report replaces an older one whole
    tables=(REPORTED_ISSUES,),
    rows=(
        RowMap(catalog.IssueReported, REPORTED_ISSUES, {
            "run_id": field("run_id"), "issue_id": field("issue_id"), "files": _ISSUE_FILES,
            "locations": field("locations"), "rationale": field("rationale"),
            "severity": field("severity"), "reported_at": "recorded_at"}),
    ),
)
USAGE = Projection(
    name="usage",
    version=1,
    tables=(LLM_USAGE,),
    rows=(
        RowMap(catalog.LlmResponded, LLM_USAGE, {
            # numeric from the stored decimal text: sums must not depend on batching
            "run_id": field("run_id"), "requests": "1", "tokens_in": field("tokens_in"),
            "tokens_out": field("tokens_out"), "cost_usd": field("cost_usd")}),
    ),
)
IMPORTS = Projection(
    name="imports",
    version=1,  # (reading the `import` streams only changed no row)
    tables=(IMPORTED_RUNS,),
    rows=(
        RowMap(catalog.ArchiveImported, IMPORTED_RUNS, each="runs", columns={
            "run_id": item("run_id"), "archive_id": field("archive_id"),
            "signer": "COALESCE(data->>'signer', 'unsigned')"}, category="import"),
    ),
)
EXCLUSIONS = Projection(
    name="exclusions",
    version=1,
    tables=(EXCLUDED_RUNS,),
    rows=(
        RowMap(catalog.RunExcluded, EXCLUDED_RUNS, {
            "run_id": field("run_id"), "reason": field("reason"),
            "excluded_by": field("excluded_by"), "excluded_at": "recorded_at"}),
    ),
)
